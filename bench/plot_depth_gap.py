#!/usr/bin/python3
"""bench/plot_depth_gap.py: the depth study's delay-to-gap curve (bench/pb_depth_study.sh).

For each depth study directory given (bench/results/resnet<D>-gn-depth), reads the finished runs
(runs/<variant>-seed<k>.status and .out: the exit code and the program's JSON result line) and plots, per PB
variant, the final test accuracy minus SGD's (B = 32, the mean over its seeds), in points, against the first stage's
delay D_0 = 2 (S - 1) (the "delays" of the result line): the mean over the variant's seeds as a line, the minimum and
maximum over seeds as a band. A run that exited non-zero (a diverging run exits 1) is counted and drawn as a cross at
the bottom of the axes; runs not finished yet are left out. Prints the points as a table (depth, delay, variant,
seeds, mean / min / max gap, diverged).

Usage: bench/plot_depth_gap.py OUT.png DIR [DIR ...]
Needs matplotlib (Debian's python3-matplotlib, for /usr/bin/python3).
"""
import json
import pathlib
import re
import statistics
import sys

VARIANTS = {"none": "PB, b = 1", "sc_lwp": "PB + SC + LWP", "sc": "PB + SC", "lwp": "PB + LWP",
            "stash": "PB + weight stashing", "pipemare": "PB + PipeMare"}


def finished_runs(directory):
    """{variant: [(seed, exit code, result dict or None)]} of the finished runs of one study directory."""
    runs = {}
    for status_file in sorted((directory / "runs").glob("*.status")):
        status = json.loads(status_file.read_text())
        result = None
        out = status_file.with_suffix(".out")
        if out.exists():
            lines = [l for l in out.read_text().splitlines() if l.startswith("{")]
            result = json.loads(lines[-1]) if lines else None
        runs.setdefault(status["variant"], []).append((status["seed"], status["exit"], result))
    return runs


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    out_png = pathlib.Path(argv[1])
    points = {}  # variant -> [(delay, mean, min, max, network, seeds, diverged)]
    all_diverged = {}  # variant -> [(delay, runs)] where every finished run diverged
    rows = []
    for d in argv[2:]:
        directory = pathlib.Path(d)
        runs = finished_runs(directory)
        sgd = [r["test_accuracy"] for _, code, r in runs.get("sgd32", []) if code == 0 and r]
        if not sgd:
            print(f"plot_depth_gap: {directory}: no finished SGD run, skipped", file=sys.stderr)
            continue
        sgd_mean = statistics.mean(sgd)
        # D_0 of the study's cut, from any finished PB run (a variant whose runs all diverged has no result line).
        any_delays = [r["delays"] for v, done in runs.items() if v != "sgd32" for _, code, r in done
                      if code == 0 and r and r.get("delays")]
        study_delay = int(any_delays[0].split(",")[0]) if any_delays else None
        if study_delay is None:  # no PB run finished: ResNet-N cut per weight layer has N stages, D_0 = 2 (N - 1)
            for cmd in sorted((directory / "runs").glob("*.cmd")):
                m = re.search(r"--network resnet(\d+)\b.*--stages layer|--stages layer.*--network resnet(\d+)\b",
                              cmd.read_text())
                if m:
                    study_delay = 2 * (int(m.group(1) or m.group(2)) - 1)
                    break
        for variant, label in VARIANTS.items():
            done = runs.get(variant, [])
            good = [r for _, code, r in done if code == 0 and r]
            diverged = sum(1 for _, code, _ in done if code != 0)
            if not good and not diverged:
                continue
            delay = study_delay
            network = good[0]["network"] if good else directory.name.removesuffix("-gn-depth")
            if not good or delay is None:  # every run diverged: a table row and a cross, no point
                rows.append((network, delay if delay is not None else -1, variant, 0, float("nan"), float("nan"),
                             float("nan"), diverged, len(sgd)))
                if delay is not None:
                    all_diverged.setdefault(variant, []).append((delay, diverged))
                continue
            gaps = [100.0 * (r["test_accuracy"] - sgd_mean) for r in good]
            entry = (delay, statistics.mean(gaps), min(gaps), max(gaps), network, len(good), diverged)
            points.setdefault(variant, []).append(entry)
            rows.append((network, delay, variant, len(good), entry[1], entry[2], entry[3], diverged, len(sgd)))
    print("| network | D_0 | variant | seeds | mean gap (points) | min | max | diverged | SGD seeds |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, delay, v, k, mean, lo, hi, div, ks in sorted(rows, key=lambda r: (r[1], r[2])):
        print(f"| {n} | {delay} | {VARIANTS[v]} | {k} | {mean:+.2f} | {lo:+.2f} | {hi:+.2f} | {div} | {ks} |")

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9.0, 4.4))
    colors = {}  # variant -> its line's color
    for variant, entries in points.items():
        entries.sort()
        x = [e[0] for e in entries]
        line, = ax.plot(x, [e[1] for e in entries], marker="o", label=VARIANTS[variant])
        colors[variant] = line.get_color()
        ax.fill_between(x, [e[2] for e in entries], [e[3] for e in entries], alpha=0.2, color=line.get_color())
        ax.errorbar(x, [e[1] for e in entries], yerr=[[e[1] - e[2] for e in entries], [e[3] - e[1] for e in entries]],
                    fmt="none", capsize=4, color=line.get_color())
        for e in entries:
            if e[6]:
                ax.annotate(f"{e[6]} diverged", (e[0], e[2]), textcoords="offset points", xytext=(4, -12),
                            fontsize=7, color=line.get_color())
    bottom = min([ax.get_ylim()[0], -1.0]) - 0.6  # below every point
    for k, (variant, entries) in enumerate(all_diverged.items()):
        for delay, count in entries:
            y = bottom + 0.15 * (k + 1)
            ax.plot([delay], [y], marker="x", markersize=9, linestyle="none", color=colors.get(variant, "black"),
                    label=f"{VARIANTS[variant]}: every finished run diverged" if delay == entries[0][0] else None)
            ax.annotate(f"{count} diverged", (delay, y), textcoords="offset points", xytext=(6, -3), fontsize=7,
                        color=colors.get(variant, "black"))
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.axhline(-0.3, color="grey", linewidth=0.8, linestyle="--", label="0.3 points below SGD")
    ax.set_xlim(0, 230)
    ax.set_xticks([38, 110, 218])  # ResNet-20, -56, -110 with every conv its own stage
    ax.set_xlabel("delay of the first stage D_0 (micro-batches): ResNet-20, -56, -110")
    ax.set_ylabel("test accuracy minus SGD B = 32 (points)")
    ax.set_title("Fashion-MNIST, ResNet (group norm), PB at b = 1, --stages layer", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: no point hidden
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out_png, dpi=120)
    print(f"plot_depth_gap: {out_png}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
