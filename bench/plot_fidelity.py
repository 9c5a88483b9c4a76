#!/usr/bin/python3
"""bench/plot_fidelity.py: figures of a bench/pb_fidelity.sh study from the runs' --metrics JSON lines.

For a study directory OUT (runs/<variant>-seed<k>.metrics.jsonl) it draws two panels into one PNG: the training
loss against samples (the --log-every interval lines) and the test accuracy against samples (one point per epoch;
for a text network, --network llama-tiny or llama-4x128, the validation loss per byte), one curve per variant: the mean over the seeds, with a band from the lowest to the highest seed. Debian's
python3-matplotlib (hence /usr/bin/python3).

Usage: bench/plot_fidelity.py OUT PNG [--title TEXT] [--variants "sgd32 none sc_lwp"]
"""
import argparse
import collections
import json
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ORDER = ["sgd32", "sgd128", "adamw", "sgd", "sgd1", "adamw1", "none", "sc", "lwp", "lwp_wd", "sc_lwp", "stash", "pipemare",
         "adamw_none", "adamw_stash", "adamw_pipemare"]
LABEL = {"sgd32": "SGD B=32", "sgd128": "SGD B=128", "adamw": "AdamW B", "sgd": "SGD B", "sgd1": "SGD b=1", "adamw1": "AdamW b=1", "none": "PB", "sc": "PB+SC",
         "lwp": "PB+LWP", "lwp_wd": "PB+LWP (w. diff.)", "sc_lwp": "PB+SC+LWP", "stash": "PB+stash",
         "pipemare": "PB+PipeMare", "adamw_none": "PB AdamW", "adamw_stash": "PB AdamW+stash",
         "adamw_pipemare": "PB AdamW+PipeMare"}
EVAL = "test accuracy"  # or, once a run of a text network is read, "validation loss per byte"


def read_runs(out):
    """{variant: [(interval points [(samples, loss)], epoch points [(samples, accuracy or validation loss)])]} of the
    finished runs."""
    global EVAL
    runs = collections.defaultdict(list)
    for path in sorted((out / "runs").glob("*.metrics.jsonl")):
        variant = path.name.rsplit("-seed", 1)[0]
        status_path = path.with_name(path.name.replace(".metrics.jsonl", ".status"))
        if not status_path.exists():  # still running
            continue
        status = json.loads(status_path.read_text())
        interval, epochs = [], []
        for line in path.read_text().splitlines():
            m = json.loads(line)
            if m.get("interval"):
                interval.append((m["samples"], m["train_loss"]))
            elif "test_accuracy" in m:
                epochs.append((m["samples"], m["test_accuracy"]))
            elif "validation_loss" in m:
                epochs.append((m["samples"], m["validation_loss"]))
                EVAL = "validation loss per byte"
        if status["exit"] == 0 and interval:
            runs[variant].append((interval, epochs))
    return runs


def band(curves):
    """Mean, min and max over curves sampled at the same x (the shortest curve's length)."""
    n = min(len(c) for c in curves)
    xs = [curves[0][i][0] for i in range(n)]
    ys = [[c[i][1] for c in curves] for i in range(n)]
    return xs, [sum(y) / len(y) for y in ys], [min(y) for y in ys], [max(y) for y in ys]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("png")
    ap.add_argument("--title", default="")
    ap.add_argument("--variants", default="")
    a = ap.parse_args()
    runs = read_runs(pathlib.Path(a.out))
    chosen = a.variants.split() or [v for v in ORDER if v in runs] + sorted(v for v in runs if v not in ORDER)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for v in chosen:
        if v not in runs:
            continue
        style = "--" if v.startswith("sgd") or v == "adamw" else "-"
        xs, mean, lo, hi = band([r[0] for r in runs[v]])
        line, = left.plot(xs, mean, style, label=f"{LABEL.get(v, v)} ({len(runs[v])})", linewidth=1.2)
        left.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
        xs, mean, lo, hi = band([r[1] for r in runs[v]])
        right.plot(xs, mean, style + "o", color=line.get_color(), label=LABEL.get(v, v), markersize=3)
        right.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.15)
    left.set_xlabel("training samples")
    left.set_ylabel("training loss (mean per --log-every interval)")
    left.set_yscale("log")
    left.legend(fontsize=7, title="variant (seeds)", title_fontsize=7)
    right.set_xlabel("training samples")
    right.set_ylabel(EVAL)
    right.legend(fontsize=7)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(a.title or a.out, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"plot_fidelity: wrote {a.png}")


if __name__ == "__main__":
    main()
