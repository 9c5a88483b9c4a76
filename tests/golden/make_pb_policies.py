#!/usr/bin/python3
"""Reference PB runs of the mitigation policies for adaptive optimizers, for tests/unit/test_pb_adaptive_policies.cpp.

Run with Debian's interpreter from the repository root:  /usr/bin/python3 tests/golden/make_pb_policies.py
(python3-numpy 1.24.2 when these files were made). numpy only, float64, written from docs/pb-semantics.md §1-3,
not from the library's code.

The model: 3 inputs -> dense 4 -> relu -> dense 4 -> relu -> dense 2, softmax cross-entropy, mean over the b = 2
samples of a micro-batch. A dense layer's parameters are W [out, in] row-major, then the bias [out] (the library's
parameter block layout); P = 46. Stages: layers [0, 2), [2, 4), [4, 5): S = 3, delays D = 4, 2, 0.
The sequential equivalent of PB (§1), no drain: for micro-batch n, every stage s runs its forward with the weights of
the state after k_s = max(0, n - D_s) updates (or the prediction made from that state), the backward with the
current weights (or the forward's, when the policy stashes), then every stage applies update n.

Writes into tests/golden/pb_policies/:
  w0.npy          float64 [46]      initial parameter block
  x.npy           float64 [100, 3]  inputs of the 50 micro-batches (micro-batch n: rows 2n, 2n + 1)
  y.npy           int32   [100]     labels (0 or 1)
  hyper_<kind>.npy  float64 [50, 3]  learning rate, momentum, weight decay of micro-batch n (kind: adamw, sgd)
  <case>_losses.npy   float64 [50]      mean loss of micro-batch n
  <case>_weights.npy  float64 [50, 46]  the parameter block after update n
Cases: lwp_opt_adamw, lwp_opt_sgd, nesterov_adamw, nesterov_sgd (betas, eps and NAdam's momentum decay: the
constants below), pipedream_2bw_adamw, pipedream_2bw_sgd (PipeDream-2BW, arXiv 2006.09503 §3.1, with ACCUMULATION
micro-batches per update: every stage's forward and backward of the micro-batches of batch g = n // ACCUMULATION use
the version W(g - 1), W(-1) = W(0); the gradient is summed over the batch and its mean applied once at the batch's
last micro-batch, with that micro-batch's hyperparameters).
Seed: numpy.random.default_rng(20250502).
"""
import os

import numpy as np

N_MB, B = 50, 2
LAYERS = [(3, 4), None, (4, 4), None, (4, 2)]  # dense (in, out) or relu
STAGES = [(0, 2), (2, 4), (4, 5)]
S = len(STAGES)
DELAYS = [2 * (S - 1 - s) for s in range(S)]
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8
NADAM_BETA1, PSI = 0.99, 0.004
ACCUMULATION = 4  # PipeDream-2BW: micro-batches per update (>= the largest delay, 4)

rng = np.random.default_rng(20250502)


def offsets():
    off, out = 0, []
    for layer in LAYERS:
        out.append(off)
        if layer is not None:
            off += layer[0] * layer[1] + layer[1]
    return out, off


OFF, P = offsets()
w0 = rng.uniform(-0.8, 0.8, P)
x = rng.uniform(-1.0, 1.0, (N_MB * B, 3))
y = (((x[:, 0] + 0.5 * x[:, 1] - 0.3 * x[:, 2]) > 0.0) != (rng.uniform(size=N_MB * B) < 0.1)).astype(np.int32)


def hyper(adaptive):
    h = np.zeros((N_MB, 3))
    for n in range(N_MB):
        if adaptive:
            h[n] = [0.02 if n < 20 else 0.01, 0.0, 0.05 if n < 30 else 0.02]
        else:
            h[n] = [0.1 if n < 20 else 0.05, 0.9 if n < 25 else 0.8, 0.01]
    return h


def stage_slice(s):
    b, e = STAGES[s]
    lo = OFF[b]
    hi = OFF[e] if e < len(LAYERS) else P
    return slice(lo, hi)


def dense_parts(w, i):
    fin, fout = LAYERS[i]
    o = OFF[i]
    return w[o:o + fin * fout].reshape(fout, fin), w[o + fin * fout:o + fin * fout + fout]


def forward(w, s, a):
    """Stage s on input a [b, in] with the full block w: the inputs of its layers and its output."""
    inputs = []
    for i in range(*STAGES[s]):
        inputs.append(a)
        if LAYERS[i] is None:
            a = np.maximum(a, 0.0)
        else:
            W, bias = dense_parts(w, i)
            a = a @ W.T + bias
    return inputs, a


def backward(w, s, inputs, dy, grad):
    """Stage s backward with weights w (input gradient) and the forward's stashed inputs; adds into grad."""
    layers = list(range(*STAGES[s]))
    for j in reversed(range(len(layers))):
        i, a = layers[j], inputs[j]
        if LAYERS[i] is None:
            dy = dy * (a > 0.0)
        else:
            fin, fout = LAYERS[i]
            W, _ = dense_parts(w, i)
            o = OFF[i]
            grad[o:o + fin * fout] += (dy.T @ a).reshape(-1)
            grad[o + fin * fout:o + fin * fout + fout] += dy.sum(axis=0)
            dy = dy @ W
    return dy


def loss_and_gradient(z, labels):
    z = z - z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    loss = -np.log(p[np.arange(len(labels)), labels]).mean()
    d = p.copy()
    d[np.arange(len(labels)), labels] -= 1.0
    return loss, d / len(labels)


class stage_optimizer:
    """One stage's optimizer state and update, and the prediction of its forward weights."""

    def __init__(self, kind, nesterov, delay, predict):
        self.kind, self.nesterov, self.delay, self.predict = kind, nesterov, delay, predict
        self.m = None
        self.v = None
        self.t = 0
        self.last_lr = 0.0
        self.last_wd = 0.0
        self.product = 1.0  # NAdam: mu_1 ... mu_t

    def step(self, w, g, lr, momentum, wd):
        if self.m is None:
            self.m, self.v = np.zeros_like(w), np.zeros_like(w)
        self.t += 1
        t = self.t
        if self.kind == "sgd":
            g = g + wd * w                      # L2
            self.m = momentum * self.m + g       # velocity
            if self.nesterov:                    # PyTorch's Nesterov momentum
                w = w - lr * (g + momentum * self.m)
            else:
                w = w - lr * self.m
        elif self.nesterov:                      # NAdam, decoupled weight decay
            mu = NADAM_BETA1 * (1.0 - 0.5 * 0.96 ** (t * PSI))
            mu_next = NADAM_BETA1 * (1.0 - 0.5 * 0.96 ** ((t + 1) * PSI))
            self.product *= mu
            w = w * (1.0 - lr * wd)
            self.m = NADAM_BETA1 * self.m + (1.0 - NADAM_BETA1) * g
            self.v = BETA2 * self.v + (1.0 - BETA2) * g * g
            d = np.sqrt(self.v / (1.0 - BETA2 ** t)) + EPS
            w = w - lr * (1.0 - mu) / (1.0 - self.product) * g / d \
                  - lr * mu_next / (1.0 - self.product * mu_next) * self.m / d
        else:                                    # AdamW
            w = w * (1.0 - lr * wd)
            self.m = BETA1 * self.m + (1.0 - BETA1) * g
            self.v = BETA2 * self.v + (1.0 - BETA2) * g * g
            m_hat, v_hat = self.m / (1.0 - BETA1 ** t), self.v / (1.0 - BETA2 ** t)
            w = w - lr * m_hat / (np.sqrt(v_hat) + EPS)
        self.last_lr, self.last_wd = lr, wd
        return w

    def forward_weights(self, w):
        """The forward weights of the current state: w, or the optimizer-aware prediction D updates ahead."""
        T = float(self.delay)
        if not self.predict or T == 0.0 or self.t == 0:
            return w.copy()
        if self.kind == "sgd":
            return w - self.last_lr * T * self.m
        m_hat, v_hat = self.m / (1.0 - BETA1 ** self.t), self.v / (1.0 - BETA2 ** self.t)
        return w - self.last_lr * T * (m_hat / (np.sqrt(v_hat) + EPS) + self.last_wd * w)


def run_2bw(kind):
    h = hyper(kind == "adamw")
    w = w0.copy()
    opts = [stage_optimizer(kind, False, DELAYS[s], False) for s in range(S)]
    versions = [w0.copy()]  # versions[j]: the block after j updates
    accumulated = np.zeros(P)
    losses, weights = [], []
    for n in range(N_MB):
        lr, momentum, wd = h[n]
        g_batch = n // ACCUMULATION
        fw = versions[max(0, g_batch - 1)]
        stash, a = [], x[B * n:B * (n + 1)]
        for s in range(S):
            inputs, a = forward(fw, s, a)
            stash.append(inputs)
        loss, dy = loss_and_gradient(a, y[B * n:B * (n + 1)])
        for s in reversed(range(S)):
            dy = backward(fw, s, stash[s], dy, accumulated)
        if n % ACCUMULATION == ACCUMULATION - 1:
            for s in range(S):
                sl = stage_slice(s)
                w[sl] = opts[s].step(w[sl], accumulated[sl] / ACCUMULATION, lr, momentum, wd)
            accumulated[:] = 0.0
            versions.append(w.copy())
        losses.append(loss)
        weights.append(w.copy())
    return h, np.array(losses), np.stack(weights)


def run(kind, policy):
    if policy == "pipedream_2bw":
        return run_2bw(kind)
    h = hyper(kind == "adamw")
    nesterov, predict = policy == "nesterov", policy == "lwp_opt"
    w = w0.copy()
    opts = [stage_optimizer(kind, nesterov, DELAYS[s], predict) for s in range(S)]
    history = [[None] * (N_MB + 1) for _ in range(S)]  # forward weights of stage s's state after k updates
    for s in range(S):
        history[s][0] = opts[s].forward_weights(w[stage_slice(s)])
    losses, weights = [], []
    for n in range(N_MB):
        lr, momentum, wd = h[n]
        used, stash = [], []
        a = x[B * n:B * (n + 1)]
        for s in range(S):
            k = max(0, n - DELAYS[s])
            fw = w.copy()
            fw[stage_slice(s)] = history[s][k]
            inputs, a = forward(fw, s, a)
            used.append(fw)
            stash.append(inputs)
        loss, dy = loss_and_gradient(a, y[B * n:B * (n + 1)])
        grads = []
        for s in reversed(range(S)):
            g = np.zeros(P)
            bw = used[s] if nesterov else w  # the Nesterov policy stashes the forward's weights
            dy = backward(bw, s, stash[s], dy, g)
            grads.append((s, g))
        for s, g in grads:
            sl = stage_slice(s)
            w[sl] = opts[s].step(w[sl], g[sl], lr, momentum, wd)
            history[s][n + 1] = opts[s].forward_weights(w[sl])
        losses.append(loss)
        weights.append(w.copy())
    return h, np.array(losses), np.stack(weights)


here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pb_policies")
os.makedirs(here, exist_ok=True)
np.save(os.path.join(here, "w0.npy"), w0)
np.save(os.path.join(here, "x.npy"), x)
np.save(os.path.join(here, "y.npy"), y)
for kind in ("adamw", "sgd"):
    for policy in ("lwp_opt", "nesterov", "pipedream_2bw"):
        h, losses, weights = run(kind, policy)
        np.save(os.path.join(here, "hyper_" + kind + ".npy"), h)
        np.save(os.path.join(here, policy + "_" + kind + "_losses.npy"), losses)
        np.save(os.path.join(here, policy + "_" + kind + "_weights.npy"), weights)
        print(policy, kind, "loss first/last", losses[0], losses[-1])
print("make_pb_policies: numpy", np.__version__, "->", here)
