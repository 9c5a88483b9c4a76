#!/usr/bin/python3
"""Markdown ratio tables from pipeprop's benchmark output (standard library only).

  ratios.py side-by-side RESULTS   RESULTS: lines "result impl=... precision=... batch=... samples_per_s=... ..." from
                                   bench/side_by_side_train and bench/torch_side_by_side.py, several rounds; prints
                                   per batch size the medians of samples/s (CPU time; the wall-clock ratio too),
                                   their ratio, and the losses after the run.
  ratios.py pairs JSON --base B --other O [--filter REGEX]
                                   JSON: Google Benchmark output (--benchmark_out_format=json, with repetitions);
                                   benchmarks named <key>/<variant>; prints per key the median GFLOP/s (or samples/s)
                                   of both variants and other / base. Medians are over repetitions, CPU time based.
"""
import argparse
import json
import re
import statistics
import sys
from collections import defaultdict


def parse_results(path):
    runs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("result "):
                continue
            fields = dict(item.split("=", 1) for item in line.split()[1:])
            runs.append(fields)
    return runs


def side_by_side(path):
    runs = parse_results(path)
    if not runs:
        sys.exit(f"ratios.py: no result lines in {path}")
    groups = defaultdict(list)
    for r in runs:
        groups[(r.get("precision", "float"), int(r["batch"]), r["impl"])].append(r)
    print("| precision | b | samples | pipeprop samples/s | PyTorch samples/s | pipeprop / PyTorch | "
          "same, wall clock | last-batch loss pipeprop / PyTorch (rel. diff) | "
          "eval loss pipeprop / PyTorch (rel. diff) |")
    print("|---|---|---|---|---|---|---|---|---|")
    keys = sorted({(p, b) for (p, b, _) in groups}, key=lambda k: (k[0] != "float", k[1]))
    for precision, batch in keys:
        ours, theirs = groups.get((precision, batch, "pipeprop")), groups.get((precision, batch, "torch"))
        if not ours or not theirs:
            continue
        rate_ours = statistics.median(float(r["cpu_samples_per_s"]) for r in ours)
        rate_theirs = statistics.median(float(r["cpu_samples_per_s"]) for r in theirs)
        wall_ratio = (statistics.median(float(r["samples_per_s"]) for r in ours) /
                      statistics.median(float(r["samples_per_s"]) for r in theirs))
        # Losses do not depend on the round (both sides are deterministic): take the first round's.
        cells = []
        for key in ("last_loss", "eval_loss"):
            a, b = float(ours[0][key]), float(theirs[0][key])
            cells.append(f"{a:.6g} / {b:.6g} ({abs(a - b) / abs(b):.1e})")
        print(f"| {precision} | {batch} | {ours[0]['samples']} | {rate_ours:.0f} | {rate_theirs:.0f} | "
              f"**{rate_ours / rate_theirs:.2f}x** | {wall_ratio:.2f}x | {cells[0]} | {cells[1]} |")
    rounds = max(len(v) for v in groups.values())
    print(f"\n(samples/s from CPU time of the training loop, medians over up to {rounds} interleaved rounds; "
          "losses from round 1)")
    # Rounding check: each float32 run against the float64 run of the same side (same data, same math).
    for batch in sorted({b for (p, b, _) in groups if p == "double"}):
        notes = []
        for impl in ("pipeprop", "torch"):
            f, d = groups.get(("float", batch, impl)), groups.get(("double", batch, impl))
            if f and d:
                a, b = float(f[0]["last_loss"]), float(d[0]["last_loss"])
                notes.append(f"{impl} {abs(a - b) / abs(b):.1e}")
        if notes:
            print(f"\nb = {batch}: last-batch loss of the float32 run vs the float64 run, relative: " + ", ".join(notes))


def natural_key(text):
    """Sort key that orders embedded numbers by value (b1 before b32, 09_dense before 11_dense)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text)]


def pairs(path, base, other, pattern):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    values = defaultdict(list)  # (key, variant) -> [rate per repetition]
    metric_name = {}
    for bench in data["benchmarks"]:
        if bench.get("run_type") != "iteration":
            continue
        name = bench.get("run_name", bench["name"])
        key, _, variant = name.rpartition("/")
        if variant not in (base, other) or (pattern and not re.search(pattern, key)):
            continue
        if "GFLOP/s" in bench:
            values[(key, variant)].append(bench["GFLOP/s"])
            metric_name[key] = "GFLOP/s"
        else:
            values[(key, variant)].append(bench["items_per_second"])
            metric_name[key] = "samples/s"
    keys = sorted({k for (k, v) in values if (k, base) in values and (k, other) in values}, key=natural_key)
    if not keys:
        sys.exit(f"ratios.py: no benchmark pairs {base} / {other} in {path}")
    print(f"| benchmark | {base} | {other} | {other} / {base} |")
    print("|---|---|---|---|")
    for key in keys:
        b = statistics.median(values[(key, base)])
        o = statistics.median(values[(key, other)])
        unit = metric_name[key]
        print(f"| {key} | {b:.1f} {unit} | {o:.1f} {unit} | **{o / b:.2f}** |")
    reps = max(len(v) for v in values.values())
    print(f"\n(medians over {reps} repetitions, CPU time)")


def main():
    parser = argparse.ArgumentParser(description="ratio tables from pipeprop benchmark output")
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("side-by-side")
    s.add_argument("results")
    p = sub.add_parser("pairs")
    p.add_argument("json")
    p.add_argument("--base", required=True)
    p.add_argument("--other", required=True)
    p.add_argument("--filter", default="")
    args = parser.parse_args()
    if args.command == "side-by-side":
        side_by_side(args.results)
    else:
        pairs(args.json, args.base, args.other, args.filter)


if __name__ == "__main__":
    main()
