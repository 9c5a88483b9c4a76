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
# -O2 (Debian's own level for packages) instead of CMake's Release -O3: about a fifth less compile time, which keeps
# CI within its budget on 2 cores. The arithmetic is the same bits at both levels: the targets build with
# -ffp-contract=off and without -ffast-math, so the compiler neither fuses nor reassociates floating-point
# operations. The baseline-architecture variants keep -O3 (tests/hardening.cmake); the main job and the
# benchmarks build -O3 in their own trees.
# The unit test programs and the main program at -O1 (their ctest runs are short; the same bits as -O3, see above:
# the main program's results at -O1 and -O3 are compared in bench/README.md), and the executor tests not under ASan
# (tests/hardening.cmake: under TSan and on the baseline architecture).
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" \
      -DPIPEPROP_BUILD_TESTS=ON -DPIPEPROP_BUILD_EXAMPLES=ON -DPIPEPROP_TSAN_TBB_DIR="$tsan_tbb" \
      -DPIPEPROP_UNIT_TEST_FLAGS=-O1 -DPIPEPROP_TRAIN_FLAGS=-O1 -DPIPEPROP_ASAN_EXECUTOR_TESTS=OFF \
      -DPIPEPROP_WITH_MPI=ON
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
