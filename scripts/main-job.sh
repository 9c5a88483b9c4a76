#!/usr/bin/env bash
# The main job of README.md, on a fresh Debian 12 machine: install the dependencies, build the main program
# (examples/pipeprop_train.cpp) in build/, and train.
#
# Current job (issue 4): the small CNN on Fashion-MNIST with fine-grained Pipelined Backpropagation (--mode pb,
# one stage per parametric layer: 6 stages, delays 10,8,...,0), micro-batch b = 1, spike compensation + linear
# weight prediction, hyperparameters scaled from the SGD job's B = 32, lr 0.05, momentum 0.9 (to lr 5.14e-5,
# momentum 0.99671), cosine learning-rate decay over the 1 epoch, concurrent (TBB flow graph) executor. Required:
# test_accuracy >= 0.88, i.e. within one point of the SGD reference with the same schedule (--mode sgd --batch 32
# --lr 0.05 --momentum 0.9 --lr-schedule cosine --epochs 1: 0.8903 with seed 1; bench/pb_accuracy.sh compares the
# two over seeds). Without the decay both runs end at a noisy point: the test accuracy of either moves by about one
# point from one 2000-sample stretch to the next, so a single constant-rate run cannot resolve a 1-point gap. The
# last stdout line is the program's JSON result; per-epoch metrics and the final checkpoint go to build/main-job/.
# To change the job, edit the JOB and REQUIRED_ACCURACY lines below.
#
# Usage: scripts/main-job.sh [more pipeprop_train options, appended to JOB]
# Environment: PIPEPROP_BUILD_DIR (default: build).
set -euo pipefail
cd "$(dirname "$0")/.."

JOB=(--mode pb --network cnn --stages fine --mitigation sc_lwp --batch 1 --reference-batch 32 --lr 0.05 --momentum 0.9
     --lr-schedule cosine --epochs 1)
REQUIRED_ACCURACY=0.88

scripts/install-deps.sh
build=${PIPEPROP_BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target pipeprop_train -j"$(nproc)"

out="$build/main-job"
mkdir -p "$out"
"$build/examples/pipeprop_train" "${JOB[@]}" --data /usr/share/datasets/fashion-mnist \
  --metrics "$out/metrics.jsonl" --checkpoint-out "$out/checkpoint" "$@" | tee "$out/result.json"

# The requirement, checked on the result line (messages on stderr so the JSON stays the last stdout line).
accuracy=$(tail -n 1 "$out/result.json" | sed -n 's/.*"test_accuracy":\([0-9.eE+-]*\).*/\1/p')
if awk -v a="${accuracy:-0}" -v r="$REQUIRED_ACCURACY" 'BEGIN { exit !(a >= r) }'; then
  echo "main-job: test_accuracy ${accuracy} >= ${REQUIRED_ACCURACY}" >&2
else
  echo "main-job: test_accuracy ${accuracy:-missing} is below the required ${REQUIRED_ACCURACY}" >&2
  exit 1
fi
