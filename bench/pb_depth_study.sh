#!/usr/bin/env bash
# bench/pb_depth_study.sh: the depth study's runs (the PB paper's claim at depth, trained to the end), one study per
# depth, resumable: the same command continues a study that was stopped (a killed session), over several sessions.
#
# The recipe, the same for SGD B = 32 and every PB variant (no re-tuning for PB): lr 0.05, momentum 0.9 at B = 32;
# PB at b = 1 with --reference-batch 32 (lr and momentum scaled by the rules of pb-semantics.md §4: lr 5.14e-5,
# momentum 0.99671); cosine decay to 0 over the whole run (--lr-schedule cosine: horizon --epochs x --max-samples
# samples); linear warm-up over the first 6000 samples (--warmup 0.1: in epochs of the 60000-sample epoch; the
# schedule is in samples, so the same for B = 32 and b = 1): the ResNet-56 SGD runs without warm-up blew up in their
# first 1000 samples (interval loss 6.4, bench/results/resnet56-gn); 6000 samples are ~20 momentum time constants
# (1 / (1 - m) = 10 steps = 320 samples at B = 32, 304 samples at b = 1) and ~27 times ResNet-110's largest delay
# (218), for 1% of a 10-epoch run and 3% of a 3-epoch one.
# Fashion-MNIST, group norm, PB with --stages layer (every conv its own stage) and the sequential executor; epochs of
# the whole 60000 training images (a checkpoint after each: at most one epoch per run is lost to a kill). ResNet-20,
# two runs side by side on the shared 2-core host (load average 4-8, 2026-12-03): SGD B = 32 95-186 samples/s, PB
# b = 1 (none) 84-157 samples/s, so 5-12 minutes an epoch, plus 16 s (SGD) / 50 s (PB) of evaluation on the 10000 test
# images; ResNet-56 PB about 103 samples/s on a quiet host: ~10 minutes an epoch.
#   resnet20: 10 epochs;  resnet56: 3 epochs;  resnet110: 2 epochs (delay 218 at the first stage).
# Runs, in this order (seed 1 of each main variant first, so that a first comparison exists early), --jobs at once:
#   sgd32, none, sc_lwp with seeds 1, 2, 3; then sc, lwp, stash, pipemare with seed 1 (resnet110: seeds 1 and 2 of
#   sgd32, none and sc_lwp only).
# Results: bench/results/<network>-gn-depth/ (bench/pb_fidelity.sh's layout: runs/ the finished runs, unfinished/ and
# checkpoints/ not committed). The program: build-study-r20 / build-study-r56 (-O3, that one network type, as
# scripts/main-job.sh builds it), built here with -j1 when missing.
#
# --runs "VARIANT:SEED ...": run these instead of the list below (a session's share; finished runs are skipped).
# Usage: bench/pb_depth_study.sh resnet20|resnet56|resnet110 [--jobs J] [--program PATH] [--runs LIST] [--background]
#        bench/pb_depth_study.sh resnet20|resnet56|resnet110 --collect   (the table and figure of the finished runs)
#        bench/pb_depth_study.sh resnet20|resnet56|resnet110 --stop      (SIGTERM to a --background study)
# --background: start the study detached (bench/study_background.sh: nice 19, output appended to OUT/driver.log, its
# process group in OUT/driver.pid) and return; the command that starts a study also resumes it. A stopped or killed
# study loses at most the current epoch of each running run.
# Exit: 0 every run finished, 3 some unfinished (run the same command again), 1 or 2 an error.
set -euo pipefail
cd "$(dirname "$0")/.."

network=${1:-}
[[ $network == resnet20 || $network == resnet56 || $network == resnet110 ]] ||
  { echo "usage: $0 resnet20|resnet56|resnet110 [--jobs J] [--program PATH] [--collect]" >&2; exit 2; }
shift
jobs=2 program="" only_runs="" args=("$@")
while (($#)); do
  case "$1" in
    --background | --stop | --collect) shift ;;  # study_modes below
    --jobs) jobs=$2; shift 2 ;;
    --program) program=$2; shift 2 ;;
    --runs) only_runs=$2; shift 2 ;;
    *) echo "pb_depth_study: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
case $network in
  resnet20) epochs=10 ;;
  resnet56) epochs=3 ;;
  resnet110) epochs=2 ;;
esac
out=bench/results/$network-gn-depth
title="$network (gn), Fashion-MNIST, $epochs x 60000 samples, warm-up 6000 + cosine; PB: --stages layer, b = 1"
source bench/study_background.sh
study_modes "$out" "$network" "$title" "$0" "${args[@]}"  # --background, --stop, --collect

build=build-study-r${network#resnet}
if [[ -z "$program" ]]; then
  program=$build/examples/pipeprop_train
  if [[ ! -x $program ]]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_TRAIN_NETWORKS="$network" >/dev/null
    nice -n 19 cmake --build "$build" --target pipeprop_train -j1
  fi
fi

runs="sgd32:1 none:1 sc_lwp:1 sgd32:2 none:2 sc_lwp:2 sgd32:3 none:3 sc_lwp:3 sc:1 lwp:1 stash:1 pipemare:1"
[[ $network == resnet110 ]] && runs="sgd32:1 none:1 sc_lwp:1 sgd32:2 none:2 sc_lwp:2"
[[ -n $only_runs ]] && runs=$only_runs
exec nice -n 19 bench/pb_fidelity.sh --program "$program" --network "$network" --norm gn --epochs "$epochs" \
  --samples 60000 --lr 0.05 --momentum 0.9 --jobs "$jobs" --out "$out" --runs "$runs" -- --warmup 0.1
