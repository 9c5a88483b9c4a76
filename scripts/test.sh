#!/usr/bin/env bash
# README's test command (and exactly what .ci/run runs): install the Debian packages, configure, build the
# library's tests, examples, consumer projects and compile-fail cases, and run every test with ctest. libtorch-dev is
# installed too, so that the libtorch embedding example (examples/libtorch) is built and its tests run.
# Usage: scripts/test.sh [build-dir]   (default: build-tests; the main job builds in build/, -O3)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-tests}
jobs=$(nproc)
scripts/install-deps.sh --with-libtorch
# The TSan build of oneTBB (tests/hardening.cmake) depends only on the installed libtbb-dev version: keep it in a
# per-user cache outside the build tree, built once per machine and version (a few minutes), not once per clone.
tsan_tbb=${PIPEPROP_TSAN_TBB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeprop/tsan-tbb}
# -O2 (Debian's own level for packages) instead of CMake's Release -O3: about a fifth less compile time. The
# arithmetic is the same bits at both levels: the targets build with -ffp-contract=off and without -ffast-math, so
# the compiler neither fuses nor reassociates floating-point operations. The baseline-architecture variants keep
# -O3 and the sanitizer variants have their own levels (tests/hardening.cmake); the main job and the benchmarks
# build -O3 in their own trees.
# The main program compiles the network types its tests train (the default set less ResNet-32, -44 and -110 on
# 1x28x28, whose layer types and code are ResNet-20's and ResNet-56's: about 5 CPU-minutes).
ci_networks="mlp;cnn;cnn32;cnn-on;llama-tiny;resnet20;resnet20-on;resnet20-cifar;resnet20-on-cifar;resnet56"
ci_networks+=";resnet56-on;resnet56-cifar"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      -DPIPEPROP_BUILD_TESTS=ON -DPIPEPROP_BUILD_EXAMPLES=ON -DPIPEPROP_TSAN_TBB_DIR="$tsan_tbb" \
      -DPIPEPROP_WITH_MPI=ON "-DPIPEPROP_TRAIN_NETWORKS=$ci_networks"
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
