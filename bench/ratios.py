#!/usr/bin/python3
"""Markdown ratio tables from pipeprop's benchmark output (standard library only).

  ratios.py side-by-side RESULTS   RESULTS: lines "result impl=... network=... precision=... batch=...
                                   samples_per_s=... ..." from bench/side_by_side_train (impl=pipeprop),
                                   bench/torch_side_by_side.py (torch) and bench/libtorch/libtorch_side_by_side
                                   (libtorch), several rounds; prints per network and batch size the medians of
                                   samples/s (CPU time; the wall-clock ratios too), pipeprop / PyTorch and pipeprop /
                                   libtorch, and the losses after the run with their relative differences; exits
                                   with 3 when a float64 loss of PyTorch or libtorch differs from pipeprop's by more
                                   than --tolerance (relative, default 1e-9): the same-math check (last-batch
                                   and eval loss, and the first batch's loss where the lines carry first_loss, as
                                   bench/llama_side_by_side_train's do). With
                                   "peak peak_gflops=..." lines (side_by_side_train --peak) and the result lines'
                                   flop_per_sample, also what the speed targets ask of this core: each side's
                                   GFLOP/s, the GFLOP/s pipeprop would need for the target ratio against each
                                   other side, and the highest ratio any direct-convolution step could reach
                                   (this core's peak / the other side's GFLOP/s).
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


def parse_results(path, kind="result"):
    """The key=value fields of every line of `path` that starts with `kind` ("result" or "peak")."""
    runs = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith(kind + " "):
                continue
            fields = dict(item.split("=", 1) for item in line.split()[1:])
            runs.append(fields)
    return runs


def median(rs, key):
    """Median of field `key` over the runs rs (one per round)."""
    return statistics.median(float(r[key]) for r in rs)


def target_ratio(batch, network="cnn"):
    """The project's speed target for pipeprop / PyTorch and pipeprop / libtorch samples/s at micro-batch size b:
    the small CNN 5x at b = 1 and 2.5x at b = 32; ResNet-20 4x at b = 1 and 1.2x at b = 32; llama-tiny's training
    step 3x at b = 1 and 1.5x at b = 8."""
    if network == "llama-tiny":
        return 3.0 if batch == 1 else 1.5
    if network == "resnet20":
        return 4.0 if batch == 1 else 1.2
    return 5.0 if batch == 1 else 2.5


def ceilings(groups, others, networks, peaks):
    """Prints what the targets ask of this core: GFLOP/s = samples/s (CPU time, median) x FLOP per sample of the
    step (from the layer types, bench/step_cost.hpp: the multiply-adds of direct, GEMM-shaped convolutions)."""
    peak = max(float(p["peak_gflops"]) for p in peaks)
    arch = peaks[0].get("xsimd_arch", "?")
    print(f"### What the targets ask of this core (float32; peak {peak:.1f} GFLOP/s, FMA loop, xsimd {arch}, best "
          f"of {len(peaks)} measurements in this run)\n")
    print("| network | b | MFLOP per sample | pipeprop GFLOP/s (% of peak) | " +
          "".join(f"{name} GFLOP/s (% of peak) | " for _, name in others) + "target | " +
          "".join(f"pipeprop needs vs {name} (% of peak) | " for _, name in others) +
          "".join(f"highest ratio vs {name} at the peak | " for _, name in others) + "target within the peak |")
    print("|---" * (6 + 3 * len(others)) + "|")
    for network in networks:
        for batch in sorted({b for (n, p, b, _) in groups if n == network and p == "float"}):
            ours = groups.get((network, "float", batch, "pipeprop"))
            if not ours or "flop_per_sample" not in ours[0]:
                continue
            flop = float(ours[0]["flop_per_sample"])
            mine = median(ours, "cpu_samples_per_s") * flop / 1e9
            theirs = [groups.get((network, "float", batch, impl)) for impl, _ in others]
            given = [median(t, "cpu_samples_per_s") * flop / 1e9 if t else None for t in theirs]
            target = target_ratio(batch, network)
            cells = [f"{g:.1f} ({100 * g / peak:.0f}%)" if g else "-" for g in given]
            needs = [f"{target * g:.1f} ({100 * target * g / peak:.0f}%)" if g else "-" for g in given]
            highest = [f"{peak / g:.2f}x" if g else "-" for g in given]
            within = all(target * g <= peak for g in given if g) if any(given) else None
            print(f"| {network} | {batch} | {flop / 1e6:.2f} | {mine:.1f} ({100 * mine / peak:.0f}%) | " +
                  " | ".join(cells) + f" | {target:g}x | " + " | ".join(needs) + " | " + " | ".join(highest) +
                  f" | {'-' if within is None else 'yes' if within else 'NO: above the peak'} |")
    print("\n(A target above the peak cannot be met by any step that does these multiply-adds on one core of this "
          "host; only fewer multiply-adds, e.g. Winograd or FFT convolutions, could. pipeprop's 3x3 convolutions with "
          "8+ channels run Winograd F(2x2, 3x3) or F(4x4, 3x3): its GFLOP/s here are direct-equivalent, the direct "
          "convolutions' FLOP over its time, and may exceed the peak.)")
    targets = sorted({(n, b) for (n, p, b, _) in groups if p == "float"})
    print("(targets: " + ", ".join(f"{n} b = {b} {target_ratio(b, n):g}x" for n, b in targets) + ")")


OTHERS = (("torch", "PyTorch"), ("libtorch", "libtorch"))  # impl field -> name in the tables


def side_by_side(path, tolerance):
    """Prints the tables; returns False when a float64 run of another side differs from pipeprop's by more than
    `tolerance` (relative, last-batch or eval loss): the same-math check failed."""
    runs = parse_results(path)
    if not runs:
        sys.exit(f"ratios.py: no result lines in {path}")
    groups = defaultdict(list)  # (network, precision, batch, impl) -> runs (one per round)
    for r in runs:
        groups[(r.get("network", "cnn"), r.get("precision", "float"), int(r["batch"]), r["impl"])].append(r)
    networks = sorted({k[0] for k in groups}, key=lambda n: (n != "cnn", n))
    others = [(impl, name) for impl, name in OTHERS if any(k[3] == impl for k in groups)]

    for network in networks:
        print(f"### {network}\n")
        print("| precision | b | samples | pipeprop samples/s | " +
              "".join(f"{name} samples/s | " for _, name in others) +
              "".join(f"pipeprop / {name} | " for _, name in others) +
              "same, wall clock | last-batch loss pipeprop (rel. diff " + ", ".join(n for _, n in others) + ") | "
              "eval loss pipeprop (rel. diff " + ", ".join(n for _, n in others) + ") |")
        print("|---" * (7 + 2 * len(others)) + "|")
        keys = sorted({(p, b) for (n, p, b, _) in groups if n == network}, key=lambda k: (k[0] != "float", k[1]))
        for precision, batch in keys:
            ours = groups.get((network, precision, batch, "pipeprop"))
            if not ours:
                continue
            rate = median(ours, "cpu_samples_per_s")
            theirs = [groups.get((network, precision, batch, impl)) for impl, _ in others]
            rates = [f"{median(t, 'cpu_samples_per_s'):.0f}" if t else "-" for t in theirs]
            # Bold: a float32 ratio that meets the project's target, compared before rounding (1.4999 is not 1.5).
            target = target_ratio(batch, network) if precision == "float" else None
            ratios = []
            for t in theirs:
                if not t:
                    ratios.append("-")
                    continue
                r = rate / median(t, "cpu_samples_per_s")
                ratios.append(f"**{r:.2f}x**" if target is not None and r >= target else f"{r:.2f}x")
            walls = [f"{median(ours, 'samples_per_s') / median(t, 'samples_per_s'):.2f}x" if t else "-"
                     for t in theirs]
            # Losses do not depend on the round (every side is deterministic): take the first round's.
            cells = []
            for key in ("last_loss", "eval_loss"):
                a = float(ours[0][key])
                diffs = [f"{abs(a - float(t[0][key])) / abs(float(t[0][key])):.1e}" if t else "-" for t in theirs]
                cells.append(f"{a:.10g} ({', '.join(diffs)})")
            print(f"| {precision} | {batch} | {ours[0]['samples']} | {rate:.0f} | " + " | ".join(rates + ratios) +
                  f" | {', '.join(walls)} | {cells[0]} | {cells[1]} |")
        print()
    rounds = max(len(v) for v in groups.values())
    print(f"(samples/s from CPU time of the training loop, medians over up to {rounds} interleaved rounds; "
          "wall-clock ratios in the order of the ratio columns; bold: a float32 ratio at or above the target; losses "
          "from round 1; rel. diff: |pipeprop - other| / |other|)\n")
    peaks = parse_results(path, "peak")
    if peaks:
        ceilings(groups, others, networks, peaks)
    # Rounding check: each float32 run against the float64 run of the same side on the same samples.
    for network in networks:
        for batch in sorted({b for (n, p, b, _) in groups if n == network and p == "double"}):
            notes = []
            for impl in ["pipeprop"] + [i for i, _ in others]:
                f = groups.get((network, "float", batch, impl))
                d = groups.get((network, "double", batch, impl))
                if f and d and f[0]["samples"] == d[0]["samples"]:
                    a, b = float(f[0]["last_loss"]), float(d[0]["last_loss"])
                    notes.append(f"{impl} {abs(a - b) / abs(b):.1e}")
            if notes:
                print(f"\n{network}, b = {batch}: last-batch loss of the float32 run vs the float64 run, relative: " +
                      ", ".join(notes))
    # Same-math verdict: every float64 loss of every other side against pipeprop's (the first batch's too where the
    # result lines carry it: llama-tiny's).
    worst, compared = 0.0, 0
    first_notes = defaultdict(list)  # (network, batch) -> ["impl diff", ...]
    for (network, precision, batch, impl), rs in sorted(groups.items()):
        ours = groups.get((network, precision, batch, "pipeprop"))
        if precision != "double" or impl == "pipeprop" or not ours:
            continue
        for key in ("first_loss", "last_loss", "eval_loss"):
            if key not in ours[0] or key not in rs[0]:
                continue
            a, b = float(ours[0][key]), float(rs[0][key])
            diff = abs(a - b) / abs(b)
            worst = max(worst, diff)
            compared += 1
            if key == "first_loss":
                first_notes[(network, batch, a)].append(f"{impl} {diff:.1e}")
    for (network, batch, a), notes in sorted(first_notes.items()):
        print(f"\n{network}, b = {batch}, float64: first-batch loss (before any update) {a:.17g}, relative "
              "difference: " + ", ".join(notes))
    if compared:
        ok = worst <= tolerance
        print(f"\nfloat64 same-math check: largest relative loss difference to pipeprop {worst:.1e} over {compared} "
              f"losses (tolerance {tolerance:.0e}): {'passed' if ok else 'FAILED'}")
        return ok
    return True


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
    s.add_argument("--tolerance", type=float, default=1e-9,
                   help="largest relative float64 loss difference the same-math check accepts (exit 3 above it)")
    p = sub.add_parser("pairs")
    p.add_argument("json")
    p.add_argument("--base", required=True)
    p.add_argument("--other", required=True)
    p.add_argument("--filter", default="")
    args = parser.parse_args()
    if args.command == "side-by-side":
        if not side_by_side(args.results, args.tolerance):
            sys.exit(3)
    else:
        pairs(args.json, args.base, args.other, args.filter)


if __name__ == "__main__":
    main()
