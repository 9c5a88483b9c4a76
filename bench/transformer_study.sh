#!/usr/bin/env bash
# bench/transformer_study.sh: the transformer study (PB at micro-batch size 1 on LLaMA-like decoders, every
# mitigation policy for AdamW and for momentum SGD, against AdamW at B = 8), one study per model, resumable: the same
# command continues a study that was stopped (a killed session), over several sessions.
#
# Models: llama-tiny (2 blocks of width 64, --stages fine: 11 stages, delays 20 ... 0) and llama-4x128 (4 blocks of
# width 128: 19 stages, delays 36 ... 0), pipeprop/models/llama_tiny.hpp. Data: Debian's fortunes, 64-byte
# sequences (36000 of 36156 training sequences an epoch, 4096 validation sequences: every 10th fortune).
# The recipe, the same for every run (no re-tuning for PB): 3 epochs; linear warm-up over the first 1800 sequences
# (--warmup 0.05) and cosine decay to 0 over the whole run; AdamW lr 3e-3, betas 0.9 / 0.99 at B = 8, scaled to b = 1
# (lr x sqrt(1/8), betas to the power 1/8) and, for PipeDream-2BW's 40-micro-batch updates, to B = 40 by the same
# rule; momentum SGD lr 0.05, momentum 0.9 at B = 8, scaled to b = 1 by docs/pb-semantics.md §4 (bench/pb_fidelity.sh
# has every variant's options). Validation loss per byte (nats) and its perplexity after every epoch.
# Runs, in this order (seed 1 of every variant first, so that a first comparison exists early), --jobs at once:
#   adamw (B = 8), adamw_none, adamw_lwp_opt, adamw_nesterov, adamw_stash, adamw_2bw, adamw1 (b = 1, no delay),
#   sgd (B = 8), none, sc_lwp, each with seeds 1, 2, 3.
# Results: bench/results/<model>-study/ (bench/pb_fidelity.sh's layout: runs/ the finished runs, unfinished/ and
# checkpoints/ not committed). The program: build-study-llama (a Release build, -O3, of both models), built with -j1 when
# missing.
#
# --runs "VARIANT:SEED ...": run these instead (a session's share of the study; finished runs are skipped either way).
# Usage: bench/transformer_study.sh llama-tiny|llama-4x128 [--jobs J] [--program PATH] [--runs LIST] [--background]
#        bench/transformer_study.sh llama-tiny|llama-4x128 --collect   (the table and figure of the finished runs)
#        bench/transformer_study.sh llama-tiny|llama-4x128 --stop      (SIGTERM to a --background study)
# --background: start the study detached (bench/study_background.sh) and return; the same command resumes it.
# Exit: 0 every run finished, 3 some unfinished (run the same command again), 1 or 2 an error.
set -euo pipefail
cd "$(dirname "$0")/.."

network=${1:-}
[[ $network == llama-tiny || $network == llama-4x128 ]] ||
  { echo "usage: $0 llama-tiny|llama-4x128 [--jobs J] [--program PATH] [--background|--collect|--stop]" >&2; exit 2; }
shift
jobs=1 program="" only_runs="" args=("$@")
while (($#)); do
  case "$1" in
    --background | --stop | --collect) shift ;;  # study_modes below
    --jobs) jobs=$2; shift 2 ;;
    --program) program=$2; shift 2 ;;
    --runs) only_runs=$2; shift 2 ;;
    *) echo "transformer_study: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
out=bench/results/$network-study
title="$network, fortunes, 3 x 36000 sequences, warm-up 1800 + cosine; PB: --stages fine, b = 1"
source bench/study_background.sh
study_modes "$out" "$network" "$title" "$0" "${args[@]}"  # --background, --stop, --collect

if [[ -z "$program" ]]; then
  program=build-study-llama/examples/pipeprop_train
  if [[ ! -x $program ]]; then
    cmake -S . -B build-study-llama -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_TRAIN_NETWORKS="llama-tiny;llama-4x128" \
      >/dev/null
    nice -n 19 cmake --build build-study-llama --target pipeprop_train -j1
  fi
fi

runs=""
for seed in 1 2 3; do
  for v in adamw adamw_none adamw_lwp_opt adamw_nesterov adamw_stash adamw_2bw adamw1 sgd none sc_lwp; do
    runs+="$v:$seed "
  done
done
[[ -n $only_runs ]] && runs=$only_runs
exec nice -n 19 bench/pb_fidelity.sh --program "$program" --network "$network" --epochs 3 --samples 36000 \
  --test-samples 4096 --batch 8 --jobs "$jobs" --out "$out" --runs "${runs% }" -- --warmup 0.05
