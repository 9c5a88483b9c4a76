#!/usr/bin/env python3
"""bench/stage_norms_table.py: where a PB run blows up, from the per-stage norms of its metrics file.

Reads metrics files written with pipeprop_train --metrics F --log-every N --log-stage-norms (interval lines with
stage_weight_norm and stage_velocity_norm, one value per stage, null once not finite) and prints one Markdown row per
run: the samples it reached, the loss of micro-batch that became NaN (from the run's .out file next to it, when the
program reported one), the first interval line where a stage's weight norm exceeded twice its first logged value
(samples, stage, learning rate), the three stages whose norm grew most by the last line with finite norms, and the
mean interval loss
of the last 1000 samples. The last stage (the classifier, D = 0, no normalization after it) is left out of the
growth columns: its weights grow in ordinary training.

Usage: bench/stage_norms_table.py RUN.metrics.jsonl[.gz]... > table.md
"""
import gzip
import json
import math
import pathlib
import re
import sys


def finite(x):
    return x if x is not None and math.isfinite(x) else math.inf


def row(path):
    with (gzip.open(path, "rt") if str(path).endswith(".gz") else open(path)) as f:
        lines = [json.loads(t) for t in f if '"interval":true' in t]
    lines = [x for x in lines if "stage_weight_norm" in x]
    name = pathlib.Path(path).name.removesuffix(".gz").removesuffix(".metrics.jsonl").removesuffix(".jsonl")
    if not lines:
        return f"| {name} | - | - | - | - | - |"
    first = lines[0]["stage_weight_norm"]
    stages = len(first) - 1  # the classifier left out
    onset = "-"
    for x in lines:
        w = [finite(v) for v in x["stage_weight_norm"]]
        doubled = [s for s in range(stages) if w[s] > 2 * first[s]]
        if doubled:
            s0 = doubled[0]
            what = "not finite" if math.isinf(w[s0]) else f"{w[s0] / first[s0]:.3g}x"
            onset = f"{x['samples']}: stage {s0}, {what} (lr {x['lr']:.2g})"
            break
    # growth by the last line whose norms are all finite (a NaN run's weights are NaN after it)
    ok = [x for x in lines if all(v is not None and math.isfinite(v) for v in x["stage_weight_norm"])]
    w = [finite(v) for v in (ok or lines)[-1]["stage_weight_norm"]]
    growth = sorted(((w[s] / first[s], s) for s in range(stages)), reverse=True)[:3]
    grown = ", ".join(f"{s}: {g:.3g}x" if math.isfinite(g) else f"{s}: inf" for g, s in growth)
    losses = [x["train_loss"] for x in lines if x["samples"] > lines[-1]["samples"] - 1000 and x["train_loss"]]
    loss = f"{sum(losses) / len(losses):.3f}" if losses else "-"
    nan = "-"
    out = pathlib.Path(str(path).removesuffix(".gz").replace(".metrics.jsonl", ".out"))
    if out.exists():
        m = re.search(r"the loss of micro-batch (\d+) became NaN \(\d+ samples pushed, learning rate ([0-9.e-]+)\)",
                      out.read_text(errors="replace"))
        if m:
            nan = f"{m.group(1)} (lr {float(m.group(2)):.2g})"
    return f"| {name} | {lines[-1]['samples']} | {nan} | {onset} | {grown} | {loss} |"


def main():
    print("| run | samples reached | loss NaN at micro-batch | first stage norm > 2x | largest growth (stage: factor) "
          "| mean loss, last 1000 |")
    print("|---|---|---|---|---|---|")
    for path in sys.argv[1:]:
        print(row(path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
