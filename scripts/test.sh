#!/usr/bin/env bash
# README's test command (and exactly what .ci/run runs): install the Debian packages, configure, build the
# library's tests, examples, consumer projects and compile-fail cases, and run every test with ctest.
# Usage: scripts/test.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=$(nproc)
scripts/install-deps.sh
# The TSan build of oneTBB (tests/hardening.cmake) depends only on the installed libtbb-dev version: keep it in a
# per-user cache outside the build tree, built once per machine and version (a few minutes), not once per clone.
tsan_tbb=${PIPEPROP_TSAN_TBB_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeprop/tsan-tbb}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_TESTS=ON -DPIPEPROP_BUILD_EXAMPLES=ON \
      -DPIPEPROP_TSAN_TBB_DIR="$tsan_tbb"
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
