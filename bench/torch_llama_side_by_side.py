#!/usr/bin/python3
"""PyTorch side of the llama-tiny side-by-side comparison with pipeprop (bench/side_by_side.sh, section llama-tiny).

Trains llama-tiny (pipeprop/models/llama_tiny.hpp) in PyTorch (CPU, one thread) on exactly what
bench/llama_side_by_side_train exported with --export DIR: the same initial parameters (parameters.txt lists every
tensor, <node name>.<tensor>.npy holds it, in pipeprop's layout, which is torch's: [out, in] for every projection),
the same token sequences in the same order (x.npy, targets.npy [N, 64] int32), the same validation sequences
(eval_x.npy, eval_targets.npy) and the same hyperparameters (hyperparameters.txt: batch, lr, beta1, beta2, eps,
weight_decay, precision): the whole training step (forward, backward, torch.optim.AdamW) per batch of b sequences.
Prints one line in the format of llama_side_by_side_train:
  result impl=torch network=llama-tiny precision=<float|double> batch=<b> samples=<N> seconds=<s> samples_per_s=<r>
         cpu_seconds=<s> cpu_samples_per_s=<r> lr=<lr> weight_decay=<lambda> first_loss=<first batch's loss>
         last_loss=<last batch's loss, before its update> eval_loss=<mean token loss on the validation sequences>
seconds is wall clock, cpu_seconds the process's CPU time (time.process_time) over the training loop.

The model is the math of pipeprop's layers, as the golden tests write it in torch (tests/golden/
make_transformer_layers.py: RMSNorm x * rsqrt(mean(x^2, -1) + 1e-5) * scale, SwiGLU w_down(silu(w_gate x) * w_up x);
make_causal_self_attention.py: half-split RoPE with rotate_half, scores / sqrt(d), causal masked softmax), written
as a PyTorch user would for speed: q, k, v as ONE nn.Linear(64, 192) and gate, up as ONE nn.Linear(64, 344) (the
exported w_q, w_k, w_v and w_gate, w_up are copied into their row blocks; the same function and the same AdamW
update, which is element-wise), the RoPE tables (float64, rounded to the run's type, as pipeprop does) and the causal
mask computed once. torch 1.13 has neither nn.RMSNorm nor scaled_dot_product_attention. AdamW: torch.optim.AdamW
with its defaults otherwise (foreach=False in 1.13; --foreach to try the multi-tensor form).

Run with Debian's interpreter (python3-torch, python3-numpy; scripts/install-deps.sh --with-torch):
  /usr/bin/python3 bench/torch_llama_side_by_side.py --data DIR [--foreach]
"""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

SEQ, VOCAB, WIDTH, HEADS, HIDDEN, BLOCKS, EPS, ROPE_BASE = 64, 256, 64, 4, 172, 2, 1e-5, 10000


class RmsNorm(nn.Module):
    """pipeprop::rms_norm<> (eps 1e-5): x * rsqrt(mean(x^2, -1) + eps) * scale."""

    def __init__(self, dim):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.scale


def rotate_half(t):
    h = t.shape[-1] // 2
    return torch.cat([-t[..., h:], t[..., :h]], dim=-1)


class Attention(nn.Module):
    """pipeprop::causal_self_attention<4>: [q | k | v] = x W_qkv^T, half-split RoPE on q and k, causal softmax of
    q k^T / sqrt(d), context W_o^T; no biases."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        d = self.head_dim
        inv_freq = 1.0 / (float(ROPE_BASE) ** (torch.arange(0, d, 2, dtype=torch.float64) / d))
        angles = torch.arange(SEQ, dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)  # [L, d]
        self.register_buffer("cos", torch.cos(angles), persistent=False)  # float64; .to(dtype) rounds them
        self.register_buffer("sin", torch.sin(angles), persistent=False)
        self.register_buffer("future", torch.triu(torch.ones(SEQ, SEQ, dtype=torch.bool), diagonal=1),
                             persistent=False)

    def forward(self, x):
        b, L, D = x.shape
        q, k, v = self.qkv(x).view(b, L, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)  # [b, H, L, d] each
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.head_dim)
        p = torch.softmax(scores.masked_fill(self.future, float("-inf")), dim=-1)
        return self.o((p @ v).transpose(1, 2).reshape(b, L, D))


class SwiGlu(nn.Module):
    """pipeprop::swiglu<172>: w_down(silu(w_gate x) * w_up x); gate and up as one Linear (rows: gate, then up)."""

    def __init__(self, dim, hidden):
        super().__init__()
        self.hidden = hidden
        self.gate_up = nn.Linear(dim, 2 * hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        g, u = self.gate_up(x).split(self.hidden, dim=-1)
        return self.down(F.silu(g) * u)


class Block(nn.Module):
    """pipeprop::prenorm_transformer_block<4, 172>: h = x + attention(norm(x)); y = h + swiglu(norm(h))."""

    def __init__(self):
        super().__init__()
        self.attention_norm = RmsNorm(WIDTH)
        self.attention = Attention(WIDTH, HEADS)
        self.ffn_norm = RmsNorm(WIDTH)
        self.ffn = SwiGlu(WIDTH, HIDDEN)

    def forward(self, x):
        h = x + self.attention(self.attention_norm(x))
        return h + self.ffn(self.ffn_norm(h))


class LlamaTiny(nn.Module):
    """pipeprop::models::llama_tiny: embedding 256 x 64, 2 blocks, RMSNorm, LM head 64 -> 256 without bias."""

    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(BLOCKS))
        self.norm = RmsNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)

    def forward(self, ids):
        x = self.embedding(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def parameter_map(model):
    """pipeprop's (node, tensor) -> (torch parameter, first row, rows): where each exported tensor goes. Node names
    as layer_stack::node_names of llama_tiny: layer_00 the embedding, layer_0{1,2} the blocks (body_00: the
    attention residual, body_01: the SwiGLU residual; inside each body_00 is the norm, body_01 the layer),
    layer_03 the final norm, layer_04 the LM head."""
    m = {("layer_00", "table"): (model.embedding.weight, 0, VOCAB)}
    for i, block in enumerate(model.blocks):
        node = f"layer_{i + 1:02d}"
        m[(f"{node}.body_00.body_00", "scale")] = (block.attention_norm.scale, 0, WIDTH)
        for j, name in enumerate(("w_q", "w_k", "w_v")):
            m[(f"{node}.body_00.body_01", name)] = (block.attention.qkv.weight, j * WIDTH, WIDTH)
        m[(f"{node}.body_00.body_01", "w_o")] = (block.attention.o.weight, 0, WIDTH)
        m[(f"{node}.body_01.body_00", "scale")] = (block.ffn_norm.scale, 0, WIDTH)
        m[(f"{node}.body_01.body_01", "w_gate")] = (block.ffn.gate_up.weight, 0, HIDDEN)
        m[(f"{node}.body_01.body_01", "w_up")] = (block.ffn.gate_up.weight, HIDDEN, HIDDEN)
        m[(f"{node}.body_01.body_01", "w_down")] = (block.ffn.down.weight, 0, WIDTH)
    m[(f"layer_{BLOCKS + 1:02d}", "scale")] = (model.norm.scale, 0, WIDTH)
    m[(f"layer_{BLOCKS + 2:02d}", "weight")] = (model.head.weight, 0, VOCAB)
    return m


def load_parameters(model, directory, dtype):
    """Copies every tensor parameters.txt lists into its place; fails (exit message) on a missing file or tensor, a
    shape or precision mismatch, or a model parameter (row block) the export does not cover."""
    targets = parameter_map(model)
    loaded = set()
    with open(os.path.join(directory, "parameters.txt"), encoding="ascii") as f, torch.no_grad():
        for line in f:
            node, tensor, *dims = line.split()
            path = os.path.join(directory, f"{node}.{tensor}.npy")
            try:
                value = torch.from_numpy(np.load(path))
            except OSError as e:
                sys.exit(f"torch_llama_side_by_side: cannot read {path}: {e}")
            if (node, tensor) not in targets:
                sys.exit(f"torch_llama_side_by_side: {path}: the model has no place for {node} {tensor}")
            parameter, first, rows = targets[(node, tensor)]
            target = parameter[first:first + rows]
            expected = tuple(int(d) for d in dims)
            if tuple(value.shape) != expected or expected != tuple(target.shape):
                sys.exit(f"torch_llama_side_by_side: {path} has shape {tuple(value.shape)} (parameters.txt: "
                         f"{expected}), its place in the model is {tuple(target.shape)}")
            if value.dtype != dtype:
                sys.exit(f"torch_llama_side_by_side: {path} holds {value.dtype}, the run is in {dtype}")
            target.copy_(value)
            loaded.add((node, tensor))
    missing = sorted(set(targets) - loaded)
    if missing:
        sys.exit(f"torch_llama_side_by_side: parameters.txt of {directory} does not cover "
                 f"{', '.join(' '.join(k) for k in missing)}")
    covered = {id(p) for p, _, _ in targets.values()}
    if any(id(p) not in covered for p in model.parameters()):
        sys.exit("torch_llama_side_by_side: a model parameter has no exported tensor")


def read_hyperparameters(directory):
    values = {}
    with open(os.path.join(directory, "hyperparameters.txt"), encoding="ascii") as f:
        for line in f:
            key, value = line.split()
            values[key] = value
    return values


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="directory written by llama_side_by_side_train --export")
    parser.add_argument("--foreach", action="store_true", help="torch.optim.AdamW(foreach=True)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(0)
    hp = read_hyperparameters(args.data)
    if hp.get("network") != "llama-tiny" or hp.get("precision") not in ("float", "double"):
        sys.exit(f"torch_llama_side_by_side: {args.data} is not a llama-tiny export (network {hp.get('network')}, "
                 f"precision {hp.get('precision')})")
    batch, lr, weight_decay = int(hp["batch"]), float(hp["lr"]), float(hp["weight_decay"])
    betas, eps, precision = (float(hp["beta1"]), float(hp["beta2"])), float(hp["eps"]), hp["precision"]

    def load_ids(name):
        return torch.from_numpy(np.load(os.path.join(args.data, name)).astype(np.int64))

    x, targets = load_ids("x.npy"), load_ids("targets.npy")
    eval_x, eval_targets = load_ids("eval_x.npy"), load_ids("eval_targets.npy")
    samples = x.shape[0]
    if samples % batch != 0 or x.shape != targets.shape or x.shape[1] != SEQ:
        sys.exit(f"torch_llama_side_by_side: x.npy {tuple(x.shape)} / targets.npy {tuple(targets.shape)} are not "
                 f"[N, {SEQ}] with N a multiple of the batch size {batch}")

    dtype = torch.float64 if precision == "double" else torch.float32
    model = LlamaTiny().to(dtype)
    load_parameters(model, args.data, dtype)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                  foreach=True if args.foreach else None)

    first_loss = last_loss = 0.0
    start = time.perf_counter()
    cpu_start = time.process_time()
    for first in range(0, samples, batch):
        optimizer.zero_grad(set_to_none=True)
        logits = model(x[first:first + batch])
        loss = F.cross_entropy(logits.view(-1, VOCAB), targets[first:first + batch].reshape(-1))  # mean over tokens
        loss.backward()
        optimizer.step()
        last_loss = loss.item()
        if first == 0:
            first_loss = last_loss
    cpu_seconds = time.process_time() - cpu_start
    seconds = time.perf_counter() - start

    with torch.no_grad():
        eval_loss = F.cross_entropy(model(eval_x).view(-1, VOCAB), eval_targets.reshape(-1)).item()
    print(f"result impl=torch network=llama-tiny precision={precision} batch={batch} samples={samples} "
          f"seconds={seconds:.6f} samples_per_s={samples / seconds:.2f} cpu_seconds={cpu_seconds:.6f} "
          f"cpu_samples_per_s={samples / cpu_seconds:.2f} lr={lr:.9g} weight_decay={weight_decay:.9g} "
          f"first_loss={first_loss:.17g} last_loss={last_loss:.17g} eval_loss={eval_loss:.17g}"
          + (" adamw=foreach" if args.foreach else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
