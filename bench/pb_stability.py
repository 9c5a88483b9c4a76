#!/usr/bin/env python3
"""bench/pb_stability.py: how far each PB mitigation widens the stable step size of a delayed stage, on the PB
paper's model problem (a one-dimensional quadratic, PB-paper section 5), with the update rules of
docs/pb-semantics.md section 3.

A stage with delay D trains f(w) = lambda w^2 / 2 with momentum m and learning rate eta; the gradient applied at
update k was computed in the forward of a micro-batch that saw the weights after k - D updates (or their LWP
prediction). The iteration is linear, so it is stable exactly when the spectral radius of its companion matrix is
below 1. The script finds, for each mitigation, the largest stable eta * lambda by bisection on that radius, and
reports it as the dimensionless constant

    c = eta_eff * lambda_max * D,      eta_eff = eta / (1 - m)  (the step a constant gradient settles to)

For plain PB with m near 1, c is near 1: a stage is stable while lambda < 1 / (eta_eff D). A mitigation's factor
over plain PB at the same D and m is how much larger a curvature (or learning rate) it tolerates.

Mitigations (docs/pb-semantics.md section 3): none; sc (spike compensation: w -= eta (a v + b g), a = m^D,
b = (1 - m^D) / (1 - m)); lwp (velocity form: the forward sees w - eta T v, T = D); lwp_wd (weight-difference form:
w + T (w(k) - w(k-1))); sc_lwp (sc with the velocity form, pipeprop's --mitigation sc_lwp); sc_lwp_wd (sc with the
weight-difference form).

Second table: spike compensation's factor on the mean squared weight step that uncorrelated gradient noise causes
(noise_factor). For a weight followed by a normalization (scale-invariant: the gradient is orthogonal to w), every
step lengthens w, |w|^2 growing by the squared step, so this factor multiplies the rate at which noise grows the
weights' norm.

Usage: bench/pb_stability.py [--delays 2,38,110,218] [--momenta 0.9,0.99671] [--markdown FILE]
       bench/pb_stability.py --self-test   (ctest pb_stability_model)
Needs numpy (Debian: python3-numpy, for /usr/bin/python3).
"""
import argparse
import sys

import numpy as np

METHODS = ("none", "sc", "lwp", "lwp_wd", "sc_lwp", "sc_lwp_wd")


def companion(method, delay, m, step):
    """The matrix advancing (w_t .. w_{t-D-1}, u_t .. u_{t-D}) by one update, u = eta v, step = eta lambda."""
    n_w, n_u = delay + 2, delay + 1
    n = n_w + n_u
    a = m ** delay
    b = (1 - m ** delay) / (1 - m) if m < 1 else float(delay)
    spike = method.startswith("sc")
    velocity_form = method in ("lwp", "sc_lwp")
    difference_form = method in ("lwp_wd", "sc_lwp_wd")
    # eta g = step * w_hat, w_hat the forward's weights of the micro-batch applied now (D updates ago)
    g = np.zeros(n)
    g[delay] = step
    if velocity_form:  # w_hat = w - eta T v
        g[n_w + delay] -= step * delay
    if difference_form:  # w_hat = w + T (w(k) - w(k-1))
        g[delay] += step * delay
        g[delay + 1] -= step * delay
    u_next = g.copy()
    u_next[n_w] += m  # u <- m u + eta g
    w_next = np.zeros(n)
    w_next[0] = 1.0
    w_next -= a * u_next + b * g if spike else u_next
    mat = np.zeros((n, n))
    mat[0] = w_next
    mat[n_w] = u_next
    for i in range(1, n_w):
        mat[i, i - 1] = 1.0
    for i in range(1, n_u):
        mat[n_w + i, n_w + i - 1] = 1.0
    return mat


def spectral_radius(method, delay, m, step):
    return float(np.max(np.abs(np.linalg.eigvals(companion(method, delay, m, step)))))


def max_stable_step(method, delay, m):
    """The largest eta lambda below which the iteration is stable (the first crossing of radius 1, bisected)."""
    stable = None
    for step in np.logspace(-9, 1, 31):  # factor 2.15 apart, then bisection
        if spectral_radius(method, delay, m, step) >= 1.0:
            break
        stable = step
    else:
        return float("inf")
    if stable is None:
        return 0.0
    lo, hi = stable, step
    for _ in range(30):  # to a relative 1e-9
        mid = (lo * hi) ** 0.5
        if spectral_radius(method, delay, m, mid) < 1.0:
            lo = mid
        else:
            hi = mid
    return lo


def noise_factor(delay, m):
    """Spike compensation's factor on the mean squared weight step that uncorrelated gradient noise causes, over plain
    momentum: a gradient moves the weights by eta (a + b) g at once and by eta a m^j g at the j-th update after it
    (plain momentum: eta m^j g, j >= 0); for independent gradients the squared steps add:
    ((a + b)^2 + a^2 m^2 / (1 - m^2)) / (1 / (1 - m^2))."""
    a = m ** delay
    b = (1 - m ** delay) / (1 - m)
    return (1 - m * m) * (a + b) ** 2 + a * a * m * m


def simulate(method, delay, m, step, updates):
    """|w| after `updates` updates of the stage from w = 1, v = 0, stepped one update at a time from the rules of
    docs/pb-semantics.md section 3 (an implementation independent of companion(); eta = 1, lambda = step)."""
    a = m ** delay
    b = (1 - m ** delay) / (1 - m)
    w_hist, v_hist = [1.0], [0.0]  # w(k), v(k) for k = 0 .. n; before update 0 both are the initial values
    for k in range(updates):
        j = max(k - delay, 0)  # the forward of the gradient applied now saw the state after j updates
        w_fwd = w_hist[j]
        if method in ("lwp", "sc_lwp"):
            w_fwd = w_hist[j] - delay * v_hist[j]
        elif method in ("lwp_wd", "sc_lwp_wd"):
            w_fwd = w_hist[j] + delay * (w_hist[j] - (w_hist[j - 1] if j > 0 else w_hist[0]))
        g = step * w_fwd
        v = m * v_hist[-1] + g
        w = w_hist[-1] - (a * v + b * g if method.startswith("sc") else v)
        w_hist.append(w)
        v_hist.append(v)
        if abs(w) > 1e30:
            break
    return abs(w_hist[-1])


def self_test():
    """Checks of the model (ctest pb_stability_model); exit 1 with the failed check."""
    failures = []
    for m in (0.5, 0.9):  # no delay: every method is heavy-ball, stable exactly for eta lambda < 2 (1 + m)
        for k in METHODS:
            got = max_stable_step(k, 0, m)
            if abs(got / (2 * (1 + m)) - 1) > 1e-6:
                failures.append(f"D = 0, m = {m}, {k}: {got}, expected {2 * (1 + m)}")
    for d in (2, 7):  # the two LWP forms are one rule under plain momentum
        if abs(max_stable_step("lwp", d, 0.9) / max_stable_step("lwp_wd", d, 0.9) - 1) > 1e-9:
            failures.append(f"D = {d}: lwp and lwp_wd differ")
    for d in (38, 110):  # plain PB near m = 1: eta lambda_max about (1 - m) / D
        c = max_stable_step("none", d, 0.99671) / (1 - 0.99671) * d
        if not 0.9 < c < 1.2:
            failures.append(f"D = {d}: plain PB's c = {c}, expected about 1")
    for k in METHODS:  # the companion matrix's bound against stepping the rules one update at a time
        for d, m in ((3, 0.9), (6, 0.99)):
            bound = max_stable_step(k, d, m)
            below, above = simulate(k, d, m, 0.7 * bound, 20000), simulate(k, d, m, 1.3 * bound, 20000)
            if not (below < 1e-2 and above > 1e2):
                failures.append(f"{k}, D = {d}, m = {m}: |w| {below:.3g} at 0.7x the bound, {above:.3g} at 1.3x")
    for f in failures:
        print("pb_stability self-test: " + f, file=sys.stderr)
    print(f"pb_stability self-test: {'failed' if failures else 'passed'}")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delays", default="2,38,110,218")
    ap.add_argument("--momenta", default="0.9,0.99671")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--self-test", action="store_true", help="check the model (exit 1 on a failed check)")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    delays = [int(x) for x in args.delays.split(",")]
    momenta = [float(x) for x in args.momenta.split(",")]
    lines = ["| m | D | " + " | ".join(METHODS) + " |", "|---|---|" + "---|" * len(METHODS)]
    for m in momenta:
        for d in delays:
            steps = {k: max_stable_step(k, d, m) for k in METHODS}
            c = {k: steps[k] / (1 - m) * d for k in METHODS}
            cells = [f"{c['none']:.3f}"] + [f"{c[k]:.3f} ({steps[k] / steps['none']:.2f}x)" for k in METHODS[1:]]
            lines.append(f"| {m:g} | {d} | " + " | ".join(cells) + " |")
    lines += ["", "| m | D | spike compensation's noise factor |", "|---|---|---|"]
    lines += [f"| {m:g} | {d} | {noise_factor(d, m):.1f} |" for m in momenta for d in delays]
    text = "\n".join(lines)
    print("c = eta / (1 - m) * lambda_max * D per mitigation; in brackets: the factor over plain PB (none)")
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
