#!/usr/bin/env bash
# The main job of README.md, on a fresh Debian 12 machine: install the dependencies, build the main program
# (examples/pipeprop_train.cpp) in build-main-job/, and train.
#
# Current job: ResNet-20 (1x28x28, group norm) on Fashion-MNIST with the PB paper's fine-grained pipeline
# (--stages layer: every conv its own stage with its norm and relu, 20 stages, delays 38, 36, ..., 0), micro-batch
# b = 1, spike compensation + linear weight prediction, hyperparameters scaled from SGD's B = 32, lr 0.05, momentum
# 0.9 (to lr 5.14e-5, momentum 0.99671), 3 epochs of 8000 samples (each a fresh permutation of the 60000 training
# images) with cosine learning-rate decay over the 24000 samples, concurrent (TBB flow graph) executor, seed 1: the
# seed-1 PB + SC + LWP row of bench/pb_fidelity.sh's ResNet-20 study, which runs the sequential executor (the same
# bits). Required: test_accuracy >= REQUIRED_ACCURACY, one point below the SGD reference with the same network,
# normalization, samples and schedule (--mode sgd --network resnet20 --batch 32 --lr 0.05 --momentum 0.9
# --lr-schedule cosine --epochs 3 --max-samples 8000, seed 1: 0.7763; docs/results.md "Pipelined Backpropagation at depth"
# has the study over seeds). A few minutes of training on 2 cores, after a build of the one network. The last
# stdout line is the program's JSON result (network, norm, stages, delays, test_accuracy); per-epoch metrics and the
# final checkpoint go to build-main-job/main-job/.
# To change the job, edit the JOB, NETWORK_TYPE and REQUIRED_ACCURACY lines below.
#
# Usage: scripts/main-job.sh [more pipeprop_train options, appended to JOB]
# Environment: PIPEPROP_BUILD_DIR (default: build-main-job; configured with PIPEPROP_TRAIN_NETWORKS=NETWORK_TYPE, the
# one network type the job trains, so the -O3 build takes minutes instead of half an hour; build/ keeps every network).
set -euo pipefail
cd "$(dirname "$0")/.."

JOB=(--mode pb --network resnet20 --norm gn --stages layer --mitigation sc_lwp --batch 1 --reference-batch 32
     --lr 0.05 --momentum 0.9 --lr-schedule cosine --epochs 3 --max-samples 8000 --seed 1)
REQUIRED_ACCURACY=0.7663
NETWORK_TYPE=resnet20  # train::network_type_key of the job's --network and --norm (with 1x28x28 data)

scripts/install-deps.sh
build=${PIPEPROP_BUILD_DIR:-build-main-job}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_TRAIN_NETWORKS="$NETWORK_TYPE" >/dev/null
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
