#!/usr/bin/python3
"""Reference per-token cross-entropy from torch.nn.functional.cross_entropy for tests/unit/test_token_cross_entropy.cpp.

Run with Debian's interpreter from the repository root:  /usr/bin/python3 tests/golden/make_token_cross_entropy.py
(python3-torch 1.13.0a0, python3-numpy 1.24.2 when these files were made). For each case <c> writes into
tests/golden/token_cross_entropy/:

  <c>_logits_f64.npy  float64 [b, L, V]  logits (N(0, 3^2): peaked and flat rows)
  <c>_targets.npy     int32   [b, L]     targets (every other one is the token's arg-max logit); some are the
                                         case's ignore index
  <c>_loss_f64.npy    float64 [1]        F.cross_entropy(logits.reshape(b*L, V), targets.reshape(b*L),
                                         ignore_index=..., reduction='mean')
  <c>_grad_f64.npy    float64 [b, L, V]  its gradient with respect to the logits (torch.autograd)
  <c>_correct.npy     int32   [1]        non-ignored tokens whose arg-max logit (numpy argmax: first maximum) is
                                         the target
  and _f32 versions of logits, loss and grad (the same logits rounded to float32, computed by torch in float32).

Cases (seed numpy.random.default_rng(2024 + case number)):
  odd     b = 2, L = 5, V = 37, ignore_index = -100, 3 ignored tokens
  single  b = 3, L = 1, V = 11, ignore_index = -100, 1 ignored token
  pad0    b = 2, L = 3, V = 13, ignore_index = 0 (a padding token id inside the vocabulary), 2 ignored tokens
"""
import os

import numpy as np
import torch

CASES = [("odd", 2, 5, 37, -100, 3), ("single", 3, 1, 11, -100, 1), ("pad0", 2, 3, 13, 0, 2)]
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "token_cross_entropy")
os.makedirs(here, exist_ok=True)

for k, (name, b, L, V, ignore, n_ignored) in enumerate(CASES):
    rng = np.random.default_rng(2024 + k)
    logits = rng.standard_normal((b, L, V)) * 3.0
    low = 1 if ignore == 0 else 0  # real targets never equal the ignore index
    targets = rng.integers(low, V, size=(b, L)).astype(np.int32)
    flat = targets.reshape(-1)
    best = np.argmax(logits, axis=2).reshape(-1)
    hit = (np.arange(b * L) % 2 == 0) & (best != ignore)  # every other token's target is its arg-max (accuracy)
    flat[hit] = best[hit]
    flat[rng.choice(b * L, size=n_ignored, replace=False)] = ignore
    keep = targets != ignore
    correct = int(np.sum((np.argmax(logits, axis=2) == targets) & keep))
    np.save(os.path.join(here, f"{name}_targets.npy"), targets)
    np.save(os.path.join(here, f"{name}_correct.npy"), np.array([correct], dtype=np.int32))
    for dtype, suffix in ((torch.float64, "f64"), (torch.float32, "f32")):
        z = torch.tensor(logits, dtype=dtype, requires_grad=True)
        loss = torch.nn.functional.cross_entropy(z.reshape(b * L, V), torch.tensor(targets, dtype=torch.int64)
                                                 .reshape(b * L), ignore_index=ignore, reduction="mean")
        loss.backward()
        npt = np.float64 if suffix == "f64" else np.float32
        np.save(os.path.join(here, f"{name}_logits_{suffix}.npy"), z.detach().numpy().astype(npt))
        np.save(os.path.join(here, f"{name}_loss_{suffix}.npy"), np.array([loss.item()], dtype=npt))
        np.save(os.path.join(here, f"{name}_grad_{suffix}.npy"), z.grad.numpy().astype(npt))
    print(name, "b", b, "L", L, "V", V, "ignore", ignore, "tokens", int(keep.sum()), "correct", correct)
print("make_token_cross_entropy: torch", torch.__version__, "numpy", np.__version__, "->", here)
