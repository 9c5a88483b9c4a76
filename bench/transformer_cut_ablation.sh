#!/usr/bin/env bash
# bench/transformer_cut_ablation.sh: how much of PB's gap on llama-4x128 is its delays. The transformer study's PB
# runs (bench/transformer_study.sh: --stages fine, 19 stages, delays 36 ... 0) repeated with coarser cuts of the same
# model, so that the model, the data, the recipe and the seed stay and only the stage delays D_s = 2 (S - 1 - s)
# change:
#   fine      --stages fine                              19 stages, D_0 = 36 (the study's own cut)
#   tiny      --stages 3,7,11,15,19,23,27,31,33,34       11 stages, D_0 = 20 (llama-tiny's delays under its fine cut:
#                                                        each stage a norm with the attention or SwiGLU after it)
#   block     --stages 7,15,23,31                        5 stages, D_0 = 8 (about one block per stage)
# Each run: AdamW scaled to b = 1 with the study's recipe (3 epochs of 36000 sequences, warm-up 1800, cosine), one
# policy (--mitigation: none or nesterov), seed 1 unless SEED is set; one core each, --jobs of them at once.
# Runs already finished (OUT/<run>.out holds the result line) are skipped; an unfinished one resumes from its
# checkpoint (saved after every epoch and on SIGTERM). OUT: bench/results/llama-4x128-cut-ablation/.
# Usage: bench/transformer_cut_ablation.sh PROGRAM [--jobs J] "POLICY:CUT ..."   (e.g. "nesterov:tiny none:tiny")
# Table: the last line of each OUT/<run>.out (the program's JSON result, validation_loss per byte).
set -euo pipefail
cd "$(dirname "$0")/.."
program=${1:?usage: $0 PROGRAM [--jobs J] \"POLICY:CUT ...\"}
shift
jobs=1
if [[ ${1:-} == --jobs ]]; then jobs=$2; shift 2; fi
runs=${1:?usage: $0 PROGRAM [--jobs J] \"POLICY:CUT ...\"}
seed=${SEED:-1}
out=bench/results/llama-4x128-cut-ablation
mkdir -p "$out/checkpoints"
stages_of() {
  case $1 in
    fine) echo fine ;;
    tiny) echo 3,7,11,15,19,23,27,31,33,34 ;;
    block) echo 7,15,23,31 ;;
    *) echo "transformer_cut_ablation: unknown cut '$1' (fine, tiny, block)" >&2; exit 2 ;;
  esac
}
{
  echo "# $(date -u +%Y-%m-%dT%H:%M:%SZ) $(hostname): $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores;" \
    "load $(cut -d' ' -f1-3 /proc/loadavg); git $(git rev-parse --short HEAD); $program" \
    "sha256 $(sha256sum "$program" | cut -c1-16); runs: $runs; seed $seed"
} | tee -a "$out/ablation.txt" >&2
run_one() {  # policy cut
  local name=$1-$2-seed$seed ckpt=$out/checkpoints/$1-$2-seed$seed resume=() rc=0
  if [[ -f $out/$name.out ]] && grep -q '"validation_loss"' "$out/$name.out"; then return; fi
  [[ -f $ckpt/manifest.txt ]] && resume=(--checkpoint-in "$ckpt")
  local argv=("$program" --mode pb --stages "$(stages_of "$2")" --executor sequential --batch 1 --optimizer adamw
    --mitigation "$1" --lr 0.001060660172 --beta1 0.9869162814 --beta2 0.9987444968 --network llama-4x128 --epochs 3
    --max-samples 36000 --max-test-samples 4096 --lr-schedule cosine --progress none --data /usr/share/games/fortunes
    --log-every 1000 --warmup 0.05 --seed "$seed" --metrics "$out/$name.metrics.jsonl" --checkpoint-out "$ckpt")
  echo "${argv[*]} ${resume[*]}" >>"$out/$name.cmd"
  OPENBLAS_NUM_THREADS=1 nice -n 19 "${argv[@]}" "${resume[@]}" >"$out/$name.out" 2>>"$out/$name.log" || rc=$?
  echo "transformer_cut_ablation: $name exit $rc $(sed -n 's/.*"validation_loss":\([0-9.]*\).*/validation loss \1/p' \
    "$out/$name.out")" | tee -a "$out/ablation.txt" >&2
}
running=0
for r in $runs; do
  run_one "${r%%:*}" "${r#*:}" &
  running=$((running + 1))
  if ((running >= jobs)); then wait -n || true; running=$((running - 1)); fi
done
wait || true
