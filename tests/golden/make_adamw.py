#!/usr/bin/python3
"""Reference AdamW trajectories from torch.optim.AdamW for tests/unit/test_adamw.cpp.

Run with Debian's interpreter from the repository root:  /usr/bin/python3 tests/golden/make_adamw.py
(python3-torch 1.13.0a0, python3-numpy 1.24.2 when these files were made). Writes into tests/golden/adamw/:

  config.npy            float64 [4]      beta1, beta2, eps, weight_decay
  lr.npy                float64 [10]     learning rate of step t = 1..10 (set on the param group before each step)
  w0_f64.npy            float64 [37]     initial weights (|w| in [0.5, 2], random sign: relative errors are meaningful)
  grads_f64.npy         float64 [10, 37] gradient of step t (element 5 is 0 at every step: the eps path)
  weights_f64.npy       float64 [10, 37] weights after step t
  w0_f32.npy, grads_f32.npy, weights_f32.npy: the same run in float32 (inputs are the float64 ones rounded)

37 parameters: several xsimd batches plus a scalar tail for every vector width up to AVX-512.
torch.optim.AdamW with foreach=False (the single-tensor path, torch/optim/adamw.py _single_tensor_adamw),
amsgrad=False, maximize=False. Seed: numpy.random.default_rng(20190101).
"""
import os

import numpy as np
import torch

N, STEPS = 37, 10
BETA1, BETA2, EPS, WD = 0.9, 0.999, 1e-8, 0.1

rng = np.random.default_rng(20190101)
w0 = rng.uniform(0.5, 2.0, N) * rng.choice([-1.0, 1.0], N)
# Gradients of mixed scales (1e-3 .. 10) so that the ratio m_hat / sqrt(v_hat) varies.
scales = 10.0 ** rng.uniform(-3, 1, N)
grads = rng.standard_normal((STEPS, N)) * scales
grads[:, 5] = 0.0
lr = 1e-2 * (1.0 + 0.25 * np.arange(STEPS)) ** -1  # a decaying schedule: the per-step lr matters


def run(dtype):
    p = torch.nn.Parameter(torch.tensor(w0, dtype=dtype))
    opt = torch.optim.AdamW([p], lr=float(lr[0]), betas=(BETA1, BETA2), eps=EPS, weight_decay=WD,
                            amsgrad=False, foreach=False)
    out = []
    for t in range(STEPS):
        opt.param_groups[0]["lr"] = float(lr[t])
        p.grad = torch.tensor(grads[t], dtype=dtype)
        opt.step()
        out.append(p.detach().clone().numpy())
    return np.stack(out)


here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "adamw")
os.makedirs(here, exist_ok=True)
np.save(os.path.join(here, "config.npy"), np.array([BETA1, BETA2, EPS, WD], dtype=np.float64))
np.save(os.path.join(here, "lr.npy"), lr.astype(np.float64))
np.save(os.path.join(here, "w0_f64.npy"), w0.astype(np.float64))
np.save(os.path.join(here, "grads_f64.npy"), grads.astype(np.float64))
np.save(os.path.join(here, "weights_f64.npy"), run(torch.float64).astype(np.float64))
np.save(os.path.join(here, "w0_f32.npy"), w0.astype(np.float32))
np.save(os.path.join(here, "grads_f32.npy"), grads.astype(np.float32))
np.save(os.path.join(here, "weights_f32.npy"), run(torch.float32).astype(np.float32))
print("make_adamw: torch", torch.__version__, "numpy", np.__version__, "->", here)
