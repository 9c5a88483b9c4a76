#!/usr/bin/env bash
# The test command of README.md: configure, build (tests, examples, consumer projects, compile-fail cases) and
# run every test with ctest. Usage: scripts/test.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=$(nproc)
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_TESTS=ON -DPIPEPROP_BUILD_EXAMPLES=ON
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
