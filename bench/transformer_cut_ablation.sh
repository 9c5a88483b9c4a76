#!/usr/bin/env bash
# bench/transformer_cut_ablation.sh: how much of PB's gap on llama-4x128 is its delays. The transformer study's PB
# runs (bench/transformer_study.sh: --stages fine, 19 stages, delays 36 ... 0) repeated with coarser cuts of the same
# model, so that the model, the data, the recipe and the seed stay and only the stage delays D_s = 2 (S - 1 - s)
# change:
#   fine      --stages fine                              19 stages, D_0 = 36 (the study's own cut)
#   tiny      --stages 3,7,11,15,19,23,27,31,33,34       11 stages, D_0 = 20 (llama-tiny's delays under its fine cut:
#                                                        each stage a norm with the attention or SwiGLU after it)
#   block     --stages 7,15,23,31                        5 stages, D_0 = 8 (about one block per stage)
# The runs are bench/pb_fidelity.sh's (the study's options and resumption) with --stages CUT, one study per cut in
# bench/results/llama-4x128-cut-<cut>/ (runs/, table.md); the cuts one after another, --jobs runs of a cut at once,
# one core each.
# Usage: bench/transformer_cut_ablation.sh PROGRAM [--jobs J] "CUT:VARIANT:SEED ..."
#        (e.g. "tiny:adamw_nesterov:1 tiny:adamw_nesterov:2 block:adamw_nesterov:1"; variants as in pb_fidelity.sh)
# The first runs (2026-12-04, nesterov at the tiny cut seeds 1-2 and the block cut seed 1) were made by an earlier
# form of this script with the same pipeprop_train options; their files are in bench/results/llama-4x128-cut-ablation/.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: $0 PROGRAM [--jobs J] \"CUT:VARIANT:SEED ...\""
program=${1:?$usage}
shift
jobs=1
if [[ ${1:-} == --jobs ]]; then jobs=$2; shift 2; fi
runs=${1:?$usage}
stages_of() {
  case $1 in
    fine) echo fine ;;
    tiny) echo 3,7,11,15,19,23,27,31,33,34 ;;
    block) echo 7,15,23,31 ;;
    *) echo "transformer_cut_ablation: unknown cut '$1' (fine, tiny, block)" >&2; return 2 ;;
  esac
}
declare -A of_cut=()  # cut -> "VARIANT:SEED ..."
for r in $runs; do
  stages_of "${r%%:*}" >/dev/null
  of_cut[${r%%:*}]+="${r#*:} "
done
for cut in "${!of_cut[@]}"; do  # one pb_fidelity study per cut (its out directory is locked while it runs)
  bench/pb_fidelity.sh --program "$program" --network llama-4x128 --stages "$(stages_of "$cut")" --epochs 3 \
    --samples 36000 --test-samples 4096 --batch 8 --jobs "$jobs" --out "bench/results/llama-4x128-cut-$cut" \
    --runs "${of_cut[$cut]% }" --no-plots -- --warmup 0.05
done
