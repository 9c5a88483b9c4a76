#!/usr/bin/python3
"""Reference outputs of torch.autograd for the transformer leaves (tests/unit/test_transformer_layers.cpp).

Run by hand with Debian's interpreter (python3-torch 1.13, python3-numpy), from the repository root:

    /usr/bin/python3 tests/golden/make_transformer_layers.py

It writes tests/golden/transformer_layers/<case>/<name>_<f64|f32>.npy. For every case the inputs, weights and the
upstream gradient dy are drawn in float64 from numpy.random.default_rng(seed of the case); the float32 files hold
the same values rounded to float32. torch then runs the computation in that dtype, the objective is sum(y * dy), and
the script saves y, the input gradient dx (not for token ids) and every parameter gradient (grad_<name>).
Parameter files are per torch tensor (weight, bias, ...); the C++ test assembles pipeprop's parameter block from them
(weights, then bias, row-major), so the block layout is checked too.

Cases (b = 3 samples of L = 7 tokens, D = 12 features; odd sizes on purpose):
  embedding  nn.Embedding(11, 12), ids [3, 7] with repeated ids (a token repeated within a sample and across samples)
  linear     nn.Linear(12, 5) with bias on [3, 7, 12]                 (pipeprop::token_linear<5>)
  lm_head    nn.Linear(12, 11, bias=False) on [3, 7, 12]              (pipeprop::token_linear<11, false>)
  rms_norm   x * rsqrt(mean(x^2, -1) + 1e-5) * scale, scale [12]      (pipeprop::rms_norm<>; torch 1.13 has no RMSNorm)
  swiglu     w_down(silu(w_gate(x)) * w_up(x)), Linear without bias, hidden 20   (pipeprop::swiglu<20>)
Last run with torch 1.13.0a0, numpy 1.24.2 (written to transformer_layers/VERSIONS.txt).
"""
import os

import numpy as np
import torch
import torch.nn.functional as F

B, L, D, VOCAB, OUT, HIDDEN, EPS = 3, 7, 12, 11, 5, 20, 1e-5
HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "transformer_layers")
DTYPES = {"f64": (np.float64, torch.float64), "f32": (np.float32, torch.float32)}


def save(case, name, suffix, array):
    os.makedirs(os.path.join(HERE, case), exist_ok=True)
    np.save(os.path.join(HERE, case, f"{name}_{suffix}.npy"), np.ascontiguousarray(array))


def load_into(module_parameter, value):
    with torch.no_grad():
        module_parameter.copy_(torch.from_numpy(value))


def run_case(case, seed, make, build):
    """make(rng) -> dict of float64 arrays ("x" or "ids", parameters by name, "dy");
    build(values, torch dtype) -> (forward function of the input, dict name -> torch parameter)."""
    values = make(np.random.default_rng(seed))
    for suffix, (np_type, torch_type) in DTYPES.items():
        typed = {name: v.astype(np_type) for name, v in values.items()}
        for name, v in typed.items():
            save(case, name, suffix, v)
        forward, parameters = build(typed, torch_type)
        if "ids" in typed:
            x = torch.from_numpy(typed["ids"]).long()
        else:
            x = torch.from_numpy(typed["x"]).requires_grad_(True)
        y = forward(x)
        assert y.dtype == torch_type
        (y * torch.from_numpy(typed["dy"])).sum().backward()
        save(case, "y", suffix, y.detach().numpy())
        if x.requires_grad:
            save(case, "dx", suffix, x.grad.numpy())
        for name, p in parameters.items():
            save(case, "grad_" + name, suffix, p.grad.numpy())


def embedding_values(rng):
    ids = rng.integers(0, VOCAB, size=(B, L)).astype(np.float64)
    ids[0, 2] = ids[0, 5] = 4  # a token repeated within a sample
    ids[2, 0] = 4              # and across samples
    return {"ids": ids, "table": rng.uniform(-1, 1, (VOCAB, D)), "dy": rng.uniform(-1, 1, (B, L, D))}


def embedding(v, dtype):
    emb = torch.nn.Embedding(VOCAB, D).to(dtype)
    load_into(emb.weight, v["table"])
    return emb, {"table": emb.weight}


def linear_values(out_features, bias):
    def make(rng):
        v = {"x": rng.uniform(-1, 1, (B, L, D)), "weight": rng.uniform(-0.5, 0.5, (out_features, D))}
        if bias:
            v["bias"] = rng.uniform(-0.5, 0.5, (out_features,))
        v["dy"] = rng.uniform(-1, 1, (B, L, out_features))
        return v
    return make


def linear(v, dtype):
    lin = torch.nn.Linear(D, v["weight"].shape[0], bias="bias" in v).to(dtype)
    load_into(lin.weight, v["weight"])
    parameters = {"weight": lin.weight}
    if "bias" in v:
        load_into(lin.bias, v["bias"])
        parameters["bias"] = lin.bias
    return lin, parameters


def rms_norm_values(rng):
    return {"x": rng.uniform(-1, 1, (B, L, D)), "scale": rng.uniform(0.5, 1.5, (D,)),
            "dy": rng.uniform(-1, 1, (B, L, D))}


def rms_norm(v, dtype):
    scale = torch.nn.Parameter(torch.from_numpy(v["scale"]).clone())

    def forward(x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * scale
    return forward, {"scale": scale}


def swiglu_values(rng):
    return {"x": rng.uniform(-1, 1, (B, L, D)), "w_gate": rng.uniform(-0.5, 0.5, (HIDDEN, D)),
            "w_up": rng.uniform(-0.5, 0.5, (HIDDEN, D)), "w_down": rng.uniform(-0.5, 0.5, (D, HIDDEN)),
            "dy": rng.uniform(-1, 1, (B, L, D))}


def swiglu(v, dtype):
    gate = torch.nn.Linear(D, HIDDEN, bias=False).to(dtype)
    up = torch.nn.Linear(D, HIDDEN, bias=False).to(dtype)
    down = torch.nn.Linear(HIDDEN, D, bias=False).to(dtype)
    for module, name in ((gate, "w_gate"), (up, "w_up"), (down, "w_down")):
        load_into(module.weight, v[name])

    def forward(x):
        return down(F.silu(gate(x)) * up(x))
    return forward, {"w_gate": gate.weight, "w_up": up.weight, "w_down": down.weight}


def main():
    torch.set_num_threads(1)
    run_case("embedding", 11, embedding_values, embedding)
    run_case("linear", 12, linear_values(OUT, True), linear)
    run_case("lm_head", 13, linear_values(VOCAB, False), linear)
    run_case("rms_norm", 14, rms_norm_values, rms_norm)
    run_case("swiglu", 15, swiglu_values, swiglu)
    with open(os.path.join(HERE, "VERSIONS.txt"), "w") as f:
        f.write(f"torch {torch.__version__}, numpy {np.__version__}\n")


if __name__ == "__main__":
    main()
