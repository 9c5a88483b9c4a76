#!/usr/bin/python3
"""causal_self_attention: pipeprop (bench/attention_bench) vs PyTorch autograd, forward / p1 / p2, one thread.

Shape (fixed in bench/attention_bench.cpp): L = 128 tokens, D = 256 features, 4 heads of 64, RoPE base 10000, float32,
micro-batch b = 1 and b = 8. PyTorch runs the same math as tests/golden/make_causal_self_attention.py (imported from
there: hand-written half-split RoPE and masked softmax, the form the golden test checks):
  fwd    y = attention(x, W_q, W_k, W_v, W_o) with the autograd graph recorded (a training forward)
  p1     torch.autograd.grad(y, x, dy)            (input gradient only; autograd skips the weight GEMMs)
  p2     torch.autograd.grad(y, [W_q..W_o], dy)   (weight gradients only; it too goes through the attention backward)
  p1+p2  torch.autograd.grad(y, [x, W_q..W_o], dy) (PyTorch's fused backward; pipeprop runs p1 then p2)
Times are CPU time per call, medians over repetitions (Google Benchmark's median aggregate for pipeprop).
Prints a markdown table; the ratio is PyTorch time / pipeprop time (> 1: pipeprop is faster). Set OPENBLAS_CORETYPE
as for bench/side_by_side.sh (bench/README.md): at b = 8 the projections are large enough for gemm.hpp to use
OpenBLAS, which without it may pick slow generic kernels on a virtual CPU (both sides use the same OpenBLAS).

Run from the repository root with Debian's interpreter, after building the benchmark:
  cmake -S . -B build-bench -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_BENCH=ON
  cmake --build build-bench --target attention_bench -j1
  /usr/bin/python3 bench/attention_side_by_side.py [--bench build-bench/bench/attention_bench] [--repetitions 5]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
from make_causal_self_attention import attention  # noqa: E402

SEQ, MODEL, HEADS, BASE = 128, 256, 4, 10000
BATCHES = (1, 8)
PASSES = ("fwd", "p1", "p2", "p1+p2")


def pipeprop_times(bench, repetitions):
    """Median CPU seconds per call of every attention/b<b>/<pass> benchmark."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    out = subprocess.run([bench, "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
                          "--benchmark_min_time=0.2", "--benchmark_enable_random_interleaving=true"],
                         check=True, capture_output=True, text=True, env=env).stdout
    scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
    times = {}
    for entry in json.loads(out)["benchmarks"]:
        if entry.get("aggregate_name") == "median":
            times[entry["run_name"]] = entry["cpu_time"] * scale[entry["time_unit"]]
    return times


def torch_times(b, repetitions, min_time=0.2):
    torch.manual_seed(0)
    bound = (3.0 / MODEL) ** 0.5
    ws = [((torch.rand(MODEL, MODEL) * 2 - 1) * bound).requires_grad_() for _ in range(4)]
    x = (torch.rand(b, SEQ, MODEL) * 2 - 1).requires_grad_()
    dy = torch.rand(b, SEQ, MODEL) * 2 - 1
    y = attention(x, *ws, HEADS, BASE)
    runs = {
        "fwd": lambda: attention(x, *ws, HEADS, BASE),
        "p1": lambda: torch.autograd.grad(y, [x], dy, retain_graph=True),
        "p2": lambda: torch.autograd.grad(y, ws, dy, retain_graph=True),
        "p1+p2": lambda: torch.autograd.grad(y, [x] + ws, dy, retain_graph=True),
    }
    times = {}
    for name, run in runs.items():
        run()  # warm-up
        samples = []
        for _ in range(repetitions):
            calls, start = 0, time.process_time()
            while True:
                run()
                calls += 1
                elapsed = time.process_time() - start
                if elapsed >= min_time:
                    break
            samples.append(elapsed / calls)
        times[f"attention/b{b}/{name}"] = statistics.median(samples)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", default="build-bench/bench/attention_bench")
    parser.add_argument("--repetitions", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ours = pipeprop_times(args.bench, args.repetitions)
    theirs = {}
    for b in BATCHES:
        theirs.update(torch_times(b, args.repetitions))
    print(f"## causal_self_attention, L {SEQ}, D {MODEL}, {HEADS} heads, float32, 1 thread: pipeprop vs PyTorch "
          f"{torch.__version__}\n")
    print("| b | pass | pipeprop ms | PyTorch ms | PyTorch / pipeprop |")
    print("|---|---|---|---|---|")
    for b in BATCHES:
        for p in PASSES:
            key = f"attention/b{b}/{p}"
            a, t = ours[key], theirs[key]
            print(f"| {b} | {p} | {a * 1e3:.3f} | {t * 1e3:.3f} | **{t / a:.2f}x** |")
    print(f"\n(CPU time per call, medians over {args.repetitions} repetitions; "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}; load average "
          f"{' '.join(open('/proc/loadavg').read().split()[:3])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
