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
# The build is portable by default: -march=x86-64-v3 (CMake PIPEPROP_ARCH; AVX2 + FMA, which every x86-64 CPU since
# Intel Haswell and AMD Zen runs), not -march=native, so the job prints the same bits (train_loss, test_loss,
# test_accuracy) on every such host with the same Debian 12 packages, and docs/results.md quotes that build's
# figures. OpenBLAS, which picks its kernels by CPU at run time, is pinned to its AVX2 + FMA kernels
# (OPENBLAS_CORETYPE=Haswell unless set) for the same reason; ResNet-20's products are all small enough for
# pipeprop's own kernels, so this only matters for an edited job. A -march=native build is faster on a newer CPU
# (AVX-512) but rounds differently, so its figures are its host's own (docs/getting-started.md, "Instruction set").
#
# Usage: scripts/main-job.sh [more pipeprop_train options, appended to JOB]
# Environment:
#   PIPEPROP_ARCH       x86-64-v3 (default), native, x86-64-v2 or none: the -march of the build (CMakeLists.txt).
#                       Fails before building when this CPU cannot run x86-64-v3 (no AVX2 or FMA: use native).
#   PIPEPROP_BUILD_DIR  default build-main-job for x86-64-v3, build-main-job-<arch> otherwise; configured with
#                       PIPEPROP_TRAIN_NETWORKS=NETWORK_TYPE, the one network type the job trains, so the -O3 build
#                       takes minutes instead of half an hour (build/ keeps every network).
#   OPENBLAS_CORETYPE   default Haswell (see above).
set -euo pipefail
cd "$(dirname "$0")/.."

JOB=(--mode pb --network resnet20 --norm gn --stages layer --mitigation sc_lwp --batch 1 --reference-batch 32
     --lr 0.05 --momentum 0.9 --lr-schedule cosine --epochs 3 --max-samples 8000 --seed 1)
REQUIRED_ACCURACY=0.7663
NETWORK_TYPE=resnet20  # train::network_type_key of the job's --network and --norm (with 1x28x28 data)

arch=${PIPEPROP_ARCH:-x86-64-v3}
case "$arch" in
  x86-64-v2 | x86-64-v3 | x86-64-v4)
    # glibc's loader lists the x86-64 levels this CPU supports ("x86-64-v3 (supported, searched)").
    loader=/lib64/ld-linux-x86-64.so.2
    if [[ ! -x "$loader" ]]; then
      echo "main-job: PIPEPROP_ARCH=$arch is an x86-64 instruction set, and this machine ($(uname -m)) has no" \
           "x86-64 loader ($loader): run with PIPEPROP_ARCH=native" >&2
      exit 1
    fi
    levels=$("$loader" --help)  # captured first: grep -q closing the pipe early must not fail the check
    if ! grep -q "^ *$arch (supported" <<<"$levels"; then
      echo "main-job: this CPU cannot run a -march=$arch build ($loader --help does not list $arch as supported;" \
           "x86-64-v3 needs AVX2 and FMA): run with PIPEPROP_ARCH=native (its figures are this host's own)" >&2
      exit 1
    fi ;;
  native | none) ;;
  *) echo "main-job: PIPEPROP_ARCH=$arch: expected x86-64-v3, native, x86-64-v2, x86-64-v4 or none" >&2; exit 1 ;;
esac
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-Haswell}

scripts/install-deps.sh
default_build=build-main-job
[[ "$arch" == x86-64-v3 ]] || default_build=build-main-job-$arch
build=${PIPEPROP_BUILD_DIR:-$default_build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_TRAIN_NETWORKS="$NETWORK_TYPE" \
  -DPIPEPROP_ARCH="$arch" >/dev/null
cmake --build "$build" --target pipeprop_train -j"$(nproc)"
# Which build on which host: the figures are reproducible per build (-march), not per host.
model=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1)
echo "main-job: built with -march=$arch (PIPEPROP_ARCH), OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE;" \
     "CPU: ${model:-unknown}" >&2

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
