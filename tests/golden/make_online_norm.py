#!/usr/bin/python3
"""Golden files for pipeprop::online_norm (tests/unit/test_online_norm.cpp).

An independent float64 numpy implementation of Online Normalization (Chiley et al., NeurIPS 2019, arXiv 1905.05894)
written from the equations in docs/online-norm.md, followed by the affine transform gamma * yhat + beta and
activation clamping at +-K (zero gradient where clipped). Run with Debian's numpy (python3-numpy 1.24.2):

    /usr/bin/python3 tests/golden/make_online_norm.py

It writes tests/golden/online_norm/<case>/<array>.npy. Every case is a stream of K micro-batches of b samples each;
micro-batch k is one forward followed by one backward (backward-p1 and backward-p2) with parameters w_k, and the
state carries over to micro-batch k + 1. Arrays ([K, b, *shape] unless noted; C = channels = shape[0]):
    x, dy            inputs and upstream gradients
    gamma, beta      [K, C] the parameters of each micro-batch
    y, dx            outputs and input gradients (backward-p1)
    dgamma, dbeta    [K, C] parameter gradients of each micro-batch alone (backward-p2)
    state_forward    [K, 4, C] (m, v, u, g_acc) after the forward of micro-batch k
    state_backward   [K, 4, C] (m, v, u, g_acc) after its backward
    y_infer          evaluation output of x[k] with the frozen state from before micro-batch k
    config           [5] int64: a_f numerator, a_f denominator, a_b numerator, a_b denominator, clamp value K
    clipped          [] int64: number of outputs clipped to +-K over the stream
Seeds, shapes and decays are in CASES below; the initial state is m = 0, v = 1, u = 0, g_acc = 0.
"""
import os

import numpy as np

EPS = 1e-5


def moments(xc):
    """Per-channel mean and biased variance of one sample xc [C, S]."""
    mu = xc.sum(axis=1) / xc.shape[1]
    var = ((xc - mu[:, None]) ** 2).sum(axis=1) / xc.shape[1]
    return mu, var


def run_case(name, shape, b, steps, af, ab, clamp, seed, x_loc, x_scale, gamma_loc, gamma_scale):
    rng = np.random.default_rng(seed)
    C = shape[0]
    S = int(np.prod(shape[1:])) if len(shape) > 1 else 1
    af_v = af[0] / af[1]
    ab_v = ab[0] / ab[1]
    one_m_af = (af[1] - af[0]) / af[1]
    one_m_ab = (ab[1] - ab[0]) / ab[1]

    loc = x_loc * np.linspace(-1.0, 1.0, C)[:, None]  # a different mean per channel
    x = rng.normal(size=(steps, b, C, S)) * x_scale + loc
    dy = rng.normal(size=(steps, b, C, S)) + 0.3
    gamma = gamma_loc + gamma_scale * rng.uniform(-1.0, 1.0, size=(steps, C))
    beta = 0.5 * rng.uniform(-1.0, 1.0, size=(steps, C))

    m = np.zeros(C)
    v = np.ones(C)
    u = np.zeros(C)
    g_acc = np.zeros(C)

    y = np.zeros_like(x)
    dx = np.zeros_like(x)
    y_infer = np.zeros_like(x)
    dgamma = np.zeros((steps, C))
    dbeta = np.zeros((steps, C))
    state_forward = np.zeros((steps, 4, C))
    state_backward = np.zeros((steps, 4, C))
    clipped = 0
    closest = np.inf  # distance of an unclipped |z| to K: the C++ mask must not depend on rounding

    for k in range(steps):
        # Evaluation with the frozen statistics from before this micro-batch.
        zi = gamma[k][:, None] * ((x[k] - m[:, None]) / np.sqrt(v + EPS)[:, None]) + beta[k][:, None]
        y_infer[k] = np.clip(zi, -clamp, clamp)

        # Forward: each sample with the statistics from before it, then the update.
        yhat = np.zeros((b, C, S))
        scale = np.zeros((b, C))
        for i in range(b):
            mu, var = moments(x[k, i])
            scale[i] = np.sqrt(v + EPS)
            yhat[i] = (x[k, i] - m[:, None]) / scale[i][:, None]
            delta = mu - m
            v = af_v * v + one_m_af * var + af_v * one_m_af * delta**2
            m = m + one_m_af * delta
        z = gamma[k][None, :, None] * yhat + beta[k][None, :, None]
        y[k] = np.clip(z, -clamp, clamp)
        inside = np.abs(z) < clamp
        clipped += int((~inside).sum())
        closest = min(closest, float(np.min(np.abs(np.abs(z) - clamp))))
        state_forward[k] = np.stack([m, v, u, g_acc])

        # Backward: clamp, affine, then the control process per sample in order.
        dz = dy[k] * inside
        dgamma[k] = (dz * yhat).sum(axis=(0, 2))
        dbeta[k] = dz.sum(axis=(0, 2))
        dyhat = gamma[k][None, :, None] * dz
        for i in range(b):
            t = dyhat[i] - one_m_ab * g_acc[:, None] * yhat[i]  # 11a
            g_acc = g_acc + (t * yhat[i]).mean(axis=1)  # 11b
            t = t / scale[i][:, None]
            dx[k, i] = t - one_m_ab * u[:, None]  # 12a
            u = u + dx[k, i].mean(axis=1)  # 12b
        state_backward[k] = np.stack([m, v, u, g_acc])

    assert closest > 1e-9, f"{name}: an output lies within {closest} of the clamp value; pick another seed"
    full = (steps, b) + tuple(shape)
    out = {
        "x": x.reshape(full),
        "dy": dy.reshape(full),
        "gamma": gamma,
        "beta": beta,
        "y": y.reshape(full),
        "dx": dx.reshape(full),
        "y_infer": y_infer.reshape(full),
        "dgamma": dgamma,
        "dbeta": dbeta,
        "state_forward": state_forward,
        "state_backward": state_backward,
        "config": np.array([af[0], af[1], ab[0], ab[1], clamp], dtype=np.int64),
        "clipped": np.array(clipped, dtype=np.int64),
    }
    directory = os.path.join(os.path.dirname(os.path.abspath(__file__)), "online_norm", name)
    os.makedirs(directory, exist_ok=True)
    for key, arr in out.items():
        np.save(os.path.join(directory, key + ".npy"), arr)
    print(f"{name}: shape {shape}, b = {b}, {steps} micro-batches, a_f = {af[0]}/{af[1]}, a_b = {ab[0]}/{ab[1]}, "
          f"clipped {clipped} of {y.size}")


DEFAULT_AF = (1023, 1024)
DEFAULT_AB = (127, 128)
FAST_AF = (3, 4)  # statistics that move a lot within a few micro-batches
FAST_AB = (1, 2)

CASES = [
    # name, shape, b, steps, a_f, a_b, clamp, seed, x_loc, x_scale, gamma_loc, gamma_scale
    ("conv_b1", (3, 5, 4), 1, 6, DEFAULT_AF, DEFAULT_AB, 5, 101, 1.0, 1.5, 1.0, 0.3),
    ("conv_b3", (3, 5, 4), 3, 4, DEFAULT_AF, DEFAULT_AB, 5, 102, 1.0, 1.5, 1.0, 0.3),
    ("dense_b1", (7,), 1, 6, DEFAULT_AF, DEFAULT_AB, 5, 103, 1.0, 1.5, 1.0, 0.3),
    ("dense_b3", (7,), 3, 4, DEFAULT_AF, DEFAULT_AB, 5, 104, 1.0, 1.5, 1.0, 0.3),
    ("conv_b3_fast_clamped", (3, 5, 4), 3, 5, FAST_AF, FAST_AB, 5, 105, 2.0, 3.0, 2.5, 0.5),
    ("dense_b3_fast_clamped", (7,), 3, 5, FAST_AF, FAST_AB, 5, 106, 2.0, 3.0, 2.5, 0.5),
]

if __name__ == "__main__":
    print(f"numpy {np.__version__}")
    for case in CASES:
        run_case(*case)
