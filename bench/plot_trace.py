#!/usr/bin/python3
"""bench/plot_trace.py: a Chrome trace of sync::write_chrome_trace_file (e.g. two_stage_bp --trace-dir) as a PNG
Gantt chart: one panel per track (measured, predicted), one row per stage, each op a bar coloured by its optimizer
step (so ops of consecutive steps that overlap in time show as two colours in the same column) and labelled with
its kind (F, B, W, BW, U). Usage: bench/plot_trace.py TRACE.json OUT.png [--title TEXT]
(needs python3-matplotlib: scripts/install-deps.sh --with-plots)."""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--title", default="")
    a = ap.parse_args()
    with open(a.trace) as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e["name"] == "process_name"}
    tracks = sorted(names)
    fig, axes = plt.subplots(len(tracks), 1, figsize=(12, 1.2 + 1.1 * len(tracks) * 2), squeeze=False)
    colours = plt.get_cmap("tab10")
    for ax, pid in zip(axes[:, 0], tracks):
        ops = [e for e in events if e.get("ph") == "X" and e["pid"] == pid]
        first_step = min(e["args"]["step"] for e in ops)
        stages = sorted({e["tid"] for e in ops})
        for e in ops:
            step = e["args"]["step"] - first_step
            ax.barh(e["tid"], e["dur"] / 1e3, left=e["ts"] / 1e3, height=0.8, color=colours(step % 10),
                    edgecolor="black", linewidth=0.3)
            if e["dur"] / 1e3 > 0.02 * max(x["ts"] + x["dur"] for x in ops) / 1e3:
                ax.text((e["ts"] + e["dur"] / 2) / 1e3, e["tid"], e["cat"], ha="center", va="center", fontsize=6)
        ax.set_yticks(stages)
        ax.set_yticklabels([f"stage {s}" for s in stages])
        ax.invert_yaxis()
        ax.set_xlabel("ms")
        ax.set_title(f"{names[pid]} (colour: optimizer step)", fontsize=9)
    if a.title:
        fig.suptitle(a.title, fontsize=10)
    fig.tight_layout()
    fig.savefig(a.out, dpi=110)


if __name__ == "__main__":
    main()
