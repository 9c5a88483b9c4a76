#!/usr/bin/python3
"""Golden outputs of LLaMA-style causal multi-head self-attention with RoPE, from torch.autograd.

Run with Debian's interpreter (python3-torch, python3-numpy):   /usr/bin/python3 tests/golden/make_causal_self_attention.py
Last run with torch 1.13.0a0 and numpy 1.24.2 (Debian 12). Writes tests/golden/causal_self_attention/<case>/*.npy,
read by tests/unit/test_causal_self_attention.cpp.

The same math as include/pipeprop/layers/causal_self_attention.hpp, written independently with torch ops:
  q, k, v = x W_q^T, x W_k^T, x W_v^T                       x [b, L, D], W_* [D, D] (no biases)
  per head (head_dim d = D / H): RoPE with HALF-SPLIT pairs ("rotate_half", GPT-NeoX / Hugging Face LLaMA):
      rope(t) = t cos + rotate_half(t) sin,  rotate_half(t) = [-t[d/2:], t[:d/2]],
      angle[m, i] = m base^(-2 i / d) for i < d/2 (repeated for the second half)
  scores = q k^T / sqrt(d), masked_fill(j > i, -inf), softmax over j; context = P v; y = context W_o^T
Autograd gives dx and dW for the upstream gradient dy (the objective sum(dy * y)).

Per case, in float64: w.npy [4, D, D] (W_q, W_k, W_v, W_o), x.npy [b, L, D], dy.npy [b, L, D], and the results
y.npy [b, L, D], dx.npy [b, L, D], dw.npy [4, D, D]. In float32: y_f32.npy, dx_f32.npy, dw_f32.npy, computed by the
same torch code in float32 from w, x, dy rounded to float32 (the C++ test rounds the float64 inputs the same way).
The RoPE cos / sin tables are computed in float64 and rounded to the working type, as the C++ layer does.
Seeds: torch.manual_seed(20240611 + case index); x, dy ~ U(-1, 1), W ~ U(-2.5 / sqrt(D), 2.5 / sqrt(D)) (scores of
order 1, so the softmax rows are neither uniform nor one-hot).
"""
import math
import os

import numpy as np
import torch

# name, L (tokens), D (features), H (heads), b (micro-batch), RoPE base
CASES = [
    ("l7_d12_h3_b3", 7, 12, 3, 3, 10000),
    ("l1_d6_h1_b1", 1, 6, 1, 1, 10000),
    ("l7_d6_h1_b1_base500000", 7, 6, 1, 1, 500000),
    ("l1_d12_h3_b3", 1, 12, 3, 3, 10000),
    ("l19_d16_h2_b2", 19, 16, 2, 2, 10000),
    ("l37_d8_h2_b2", 37, 8, 2, 2, 10000),  # L > causal_tile (32): two row tiles, the second one partial
]


def rope_tables(L, d, base, dtype):
    inv_freq = 1.0 / (float(base) ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
    angles = torch.arange(L, dtype=torch.float64)[:, None] * inv_freq[None, :]  # [L, d/2]
    angles = torch.cat([angles, angles], dim=-1)  # [L, d]
    return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)


def rotate_half(t):
    h = t.shape[-1] // 2
    return torch.cat([-t[..., h:], t[..., :h]], dim=-1)


def attention(x, wq, wk, wv, wo, H, base):
    b, L, D = x.shape
    d = D // H
    cos, sin = rope_tables(L, d, base, x.dtype)

    def heads(t):  # [b, L, D] -> [b, H, L, d]
        return t.reshape(b, L, H, d).transpose(1, 2)

    q, k, v = heads(x @ wq.T), heads(x @ wk.T), heads(x @ wv.T)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    scores = q @ k.transpose(-1, -2) / math.sqrt(d)
    future = torch.triu(torch.ones(L, L, dtype=torch.bool), diagonal=1)
    p = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    context = (p @ v).transpose(1, 2).reshape(b, L, D)
    return context @ wo.T


def run(w, x, dy, H, base, dtype):
    ws = [torch.tensor(w[i], dtype=dtype, requires_grad=True) for i in range(4)]
    xt = torch.tensor(x, dtype=dtype, requires_grad=True)
    y = attention(xt, *ws, H, base)
    y.backward(torch.tensor(dy, dtype=dtype))
    dw = np.stack([t.grad.numpy() for t in ws])
    return y.detach().numpy(), xt.grad.numpy(), dw


def main():
    out_root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "causal_self_attention")
    for index, (name, L, D, H, b, base) in enumerate(CASES):
        torch.manual_seed(20240611 + index)
        bound = 2.5 / math.sqrt(D)
        w = ((torch.rand(4, D, D, dtype=torch.float64) * 2 - 1) * bound).numpy()
        x = (torch.rand(b, L, D, dtype=torch.float64) * 2 - 1).numpy()
        dy = (torch.rand(b, L, D, dtype=torch.float64) * 2 - 1).numpy()
        out = os.path.join(out_root, name)
        os.makedirs(out, exist_ok=True)
        y, dx, dw = run(w, x, dy, H, base, torch.float64)
        for key, a in (("w", w), ("x", x), ("dy", dy), ("y", y), ("dx", dx), ("dw", dw)):
            np.save(os.path.join(out, key + ".npy"), a.astype(np.float64))
        f32 = [a.astype(np.float32) for a in (w, x, dy)]
        y, dx, dw = run(*f32, H, base, torch.float32)
        for key, a in (("y_f32", y), ("dx_f32", dx), ("dw_f32", dw)):
            np.save(os.path.join(out, key + ".npy"), a.astype(np.float32))
        print(name, "L", L, "D", D, "H", H, "b", b, "base", base, "|y|max", float(np.abs(y).max()))
    print("torch", torch.__version__, "numpy", np.__version__)


if __name__ == "__main__":
    main()
