#!/usr/bin/env python3
"""bench/fidelity_table.py: the table of a bench/pb_fidelity.sh study directory.

Reads OUT/runs/<variant>-seed<k>.{status,out,metrics.jsonl} and writes OUT/table.md and OUT/table.json: per variant
the number of seeds, the mean and sample standard deviation of the final test accuracy and of the last epoch's mean
training loss, the difference of the mean accuracy to SGD at B = 32 (variant sgd32, in points), and the mean wall
time of one run. A run that exited non-zero (a diverging run exits 1) counts as diverged and is left out of the
means. Prints the markdown table. Standard library only.

Runs of a text network (--network llama-tiny or llama-4x128, whose result line has validation_loss) get their own table: per variant
the mean, min and max over seeds of the validation loss per byte and of the validation perplexity, the mean final
training loss, the difference of the mean validation loss to the reference of the same optimizer (adamw for the
AdamW rows, sgd for the momentum-SGD rows) and the mean wall time of one run.

Usage: bench/fidelity_table.py OUT
"""
import json
import pathlib
import statistics
import sys

ORDER = ["sgd32", "sgd128", "adamw", "sgd", "sgd1", "adamw1", "none", "sc", "lwp", "lwp_wd", "sc_lwp", "stash", "pipemare",
         "adamw_none", "adamw_stash", "adamw_pipemare", "adamw_lwp_opt", "adamw_nesterov", "adamw_2bw"]
LABEL = {
    "sgd32": "SGD, B = 32",
    "sgd128": "SGD, B = 128 (scaled)",
    "none": "PB, b = 1",
    "sc": "PB + SC",
    "lwp": "PB + LWP (velocity)",
    "lwp_wd": "PB + LWP (weight difference)",
    "sc_lwp": "PB + SC + LWP",
    "stash": "PB + weight stashing",
    "pipemare": "PB + PipeMare",
    "adamw": "AdamW, batch B",
    "sgd": "momentum SGD, batch B",
    "sgd1": "momentum SGD, batch 1 (scaled, no delay)",
    "adamw1": "AdamW, batch 1 (scaled, no delay)",
    "adamw_none": "PB AdamW, b = 1",
    "adamw_stash": "PB AdamW + weight stashing",
    "adamw_pipemare": "PB AdamW + PipeMare",
    "adamw_lwp_opt": "PB AdamW + optimizer-aware weight prediction",
    "adamw_nesterov": "PB NAdamW look-ahead + weight stashing",
    "adamw_2bw": "PB AdamW, PipeDream-2BW (40 micro-batches per update)",
}


def last_json(path):
    lines = [l for l in path.read_text().splitlines() if l.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def final_train_loss(result, base):
    """The result's train_loss; a run resumed from its last epoch's checkpoint (killed after the final save) trains
    nothing more and reports null: then the last epoch line of its metrics file."""
    if result.get("train_loss") is not None:
        return result["train_loss"]
    path = pathlib.Path(base + ".metrics.jsonl")
    epochs = [json.loads(l) for l in path.read_text().splitlines() if l.startswith("{")] if path.exists() else []
    epochs = [e for e in epochs if not e.get("interval")]
    return epochs[-1]["train_loss"] if epochs else None


def mean_std(xs):
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def main(out):
    out = pathlib.Path(out)
    rows = {}
    header = None
    for status_path in sorted((out / "runs").glob("*.status")):
        st = json.loads(status_path.read_text())
        base = str(status_path)[: -len(".status")]
        r = rows.setdefault(st["variant"], {"acc": [], "loss": [], "wall": [], "diverged": 0, "seeds": []})
        r["seeds"].append(st["seed"])
        r["wall"].append(st["wall_seconds"])
        result = last_json(pathlib.Path(base + ".out")) if st["exit"] == 0 else None
        if result is None:
            r["diverged"] += 1
            continue
        header = header or result
        if "validation_loss" in result:
            r.setdefault("val", []).append(result["validation_loss"])
            r.setdefault("ppl", []).append(result["validation_perplexity"])
            r["loss"].append(final_train_loss(result, base))
            continue
        r["acc"].append(result["test_accuracy"])
        r["loss"].append(final_train_loss(result, base))
        r.setdefault("stages", result.get("stages"))
        r.setdefault("delays", result.get("delays"))
    if not rows:
        sys.exit(f"fidelity_table: no runs under {out / 'runs'}")
    if header is not None and "validation_loss" in header:
        return text_table(out, rows)
    ref, _ = mean_std(rows.get("sgd32", {}).get("acc", []))
    table = []
    for v in sorted(rows, key=lambda v: ORDER.index(v) if v in ORDER else len(ORDER)):
        r = rows[v]
        acc, acc_sd = mean_std(r["acc"])
        loss, loss_sd = mean_std(r["loss"])
        table.append({
            "variant": v,
            "label": LABEL.get(v, v),
            "seeds": sorted(r["seeds"]),
            "runs": len(r["seeds"]),
            "diverged": r["diverged"],
            "test_accuracy_mean": acc,
            "test_accuracy_std": acc_sd,
            "train_loss_mean": loss,
            "train_loss_std": loss_sd,
            "minus_sgd32_points": None if acc is None or ref is None else 100.0 * (acc - ref),
            "wall_seconds_mean": statistics.fmean(r["wall"]),
            "stages": r.get("stages"),
        })
    write_tables(out, table, [
        "| variant | runs (diverged) | test accuracy, mean (std) | final train loss, mean (std) | minus SGD B = 32, points | s per run |",
        "|---|---|---|---|---|---|",
    ], lambda t: (
        f"| {t['label']} | {t['runs']} ({t['diverged']}) | {f(t['test_accuracy_mean'], '.4f')} "
        f"({f(t['test_accuracy_std'], '.4f')}) | {f(t['train_loss_mean'], '.4f')} ({f(t['train_loss_std'], '.4f')}) "
        f"| {f(t['minus_sgd32_points'], '+.2f')} | {t['wall_seconds_mean']:.0f} |"))


def f(x, fmt):
    """x formatted, or "-" for a missing value."""
    return "-" if x is None else format(x, fmt)


def write_tables(out, table, header, row):
    """Writes OUT/table.json (study.txt's lines and the rows) and OUT/table.md (the header lines, then row(t) for
    every row t) and prints the markdown."""
    study = (out / "study.txt").read_text() if (out / "study.txt").exists() else ""
    (out / "table.json").write_text(json.dumps({"study": study.splitlines(), "rows": table}, indent=1) + "\n")
    text = "\n".join(header + [row(t) for t in table]) + "\n"
    (out / "table.md").write_text(text)
    print(text, end="")


def text_table(out, rows):
    """The table of a text network's study (the module's second paragraph)."""
    def stats(xs):
        return (statistics.fmean(xs), min(xs), max(xs)) if xs else (None, None, None)

    ref = {g: stats(rows.get(g, {}).get("val", []))[0] for g in ("adamw", "sgd")}
    table = []
    for v in sorted(rows, key=lambda v: ORDER.index(v) if v in ORDER else len(ORDER)):
        r = rows[v]
        val, ppl = stats(r.get("val", [])), stats(r.get("ppl", []))
        base = ref["adamw" if v.startswith("adamw") else "sgd"]
        table.append({
            "variant": v, "label": LABEL.get(v, v), "seeds": sorted(r["seeds"]), "runs": len(r["seeds"]),
            "diverged": r["diverged"],
            "validation_loss_mean": val[0], "validation_loss_min": val[1], "validation_loss_max": val[2],
            "validation_perplexity_mean": ppl[0], "validation_perplexity_min": ppl[1],
            "validation_perplexity_max": ppl[2],
            "train_loss_mean": stats(r["loss"])[0],
            "minus_reference": None if val[0] is None or base is None else val[0] - base,
            "wall_seconds_mean": statistics.fmean(r["wall"]),
        })
    write_tables(out, table, [
        "| variant | runs (diverged) | validation loss per byte, mean [min, max] | perplexity, mean [min, max] "
        "| final train loss, mean | minus reference, loss | s per run |",
        "|---|---|---|---|---|---|---|",
    ], lambda t: (
        f"| {t['label']} | {t['runs']} ({t['diverged']}) | {f(t['validation_loss_mean'], '.4f')} "
        f"[{f(t['validation_loss_min'], '.4f')}, {f(t['validation_loss_max'], '.4f')}] "
        f"| {f(t['validation_perplexity_mean'], '.3f')} [{f(t['validation_perplexity_min'], '.3f')}, "
        f"{f(t['validation_perplexity_max'], '.3f')}] | {f(t['train_loss_mean'], '.4f')} "
        f"| {f(t['minus_reference'], '+.4f')} | {t['wall_seconds_mean']:.0f} |"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
