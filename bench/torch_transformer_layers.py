#!/usr/bin/python3
"""PyTorch half of bench/transformer_layers.sh: token_linear and rms_norm forward / backward-p1 / backward-p2 in
PyTorch (CPU, float32, one thread) at the shapes of bench/transformer_layers_bench.cpp, side by side with that
program's Google Benchmark JSON (--gbench FILE), printed as a markdown table of per-call times and ratios.

Shapes: per sample [L, D] = [64, 256], b = 1 and 8. token_linear = nn.Linear(256, 768, bias=False), lm_head =
nn.Linear(256, 1000, bias=False), rms_norm = x * rsqrt(mean(x^2, -1) + 1e-5) * scale (torch 1.13 has no RMSNorm
module). The forward is timed under torch.no_grad(); backward-p1 is torch.autograd.grad of y w.r.t. the input only and
backward-p2 w.r.t. the parameters only (the split of 2BP), each on a graph built once before the timing
(retain_graph=True), so only the backward kernels and autograd's dispatch are timed.
Run with Debian's interpreter: /usr/bin/python3 bench/torch_transformer_layers.py --gbench layers.json
"""
import argparse
import json
import statistics
import time

import torch

L, D, EPS = 64, 256, 1e-5


def make_linear(out_features):
    def make(b):
        lin = torch.nn.Linear(D, out_features, bias=False)
        return lin, [lin.weight], (b, L, out_features)
    return make


class RmsNorm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(D))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.scale


def make_rms(b):
    m = RmsNorm()
    return m, [m.scale], (b, L, D)


LAYERS = {"token_linear": make_linear(768), "lm_head": make_linear(1000), "rms_norm": make_rms}


def time_call(fn, min_time=0.05, repeats=7):
    """Median over `repeats` rounds of the mean seconds per call, each round at least min_time long."""
    fn()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - t0 >= min_time / 4:
            break
        n *= 2
    per_call = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        per_call.append((time.perf_counter() - t0) / n)
    return statistics.median(per_call)


def torch_times():
    torch.manual_seed(0)
    times = {}
    for name, make in LAYERS.items():
        for b in (1, 8):
            module, params, out_shape = make(b)
            x = torch.rand(b, L, D) * 2 - 1
            xg = x.clone().requires_grad_(True)
            dy = torch.rand(out_shape) * 2 - 1
            y = module(xg)

            def fwd():
                with torch.no_grad():
                    module(x)

            def p1():
                torch.autograd.grad(y, [xg], dy, retain_graph=True)

            def p2():
                torch.autograd.grad(y, params, dy, retain_graph=True)

            for p, fn in (("fwd", fwd), ("p1", p1), ("p2", p2)):
                times[f"{name}/b{b}/{p}"] = time_call(fn)
    return times


def gbench_times(path):
    """Median real time (seconds) per benchmark name from Google Benchmark JSON (repetitions aggregated, or single)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    unit = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    runs = {}
    for bm in data["benchmarks"]:
        if bm.get("run_type") == "aggregate":
            continue
        runs.setdefault(bm["run_name"], []).append(bm["real_time"] * unit[bm["time_unit"]])
    return {name: statistics.median(v) for name, v in runs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gbench", required=True, help="JSON of bench/transformer_layers_bench")
    args = parser.parse_args()
    torch.set_num_threads(1)
    ours = gbench_times(args.gbench)
    theirs = torch_times()
    print(f"## token_linear and rms_norm vs PyTorch {torch.__version__} (float32, 1 thread, [L, D] = [{L}, {D}])")
    print()
    print("| layer / b / pass | pipeprop us | torch us | torch / pipeprop |")
    print("|---|---:|---:|---:|")
    for name, t in theirs.items():
        if name not in ours:
            print(f"| {name} | missing | {t * 1e6:.1f} | |")
            continue
        print(f"| {name} | {ours[name] * 1e6:.1f} | {t * 1e6:.1f} | {t / ours[name]:.2f} |")
    print()
    print("(ratio > 1: pipeprop is faster; medians of repeated timings; other load on the cores moves them)")


if __name__ == "__main__":
    main()
