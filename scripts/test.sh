#!/usr/bin/env bash
# README's test command (and exactly what .ci/run runs): install the Debian packages, configure, build the
# library's tests, examples, consumer projects and compile-fail cases, and run every test with ctest.
# Usage: scripts/test.sh [build-dir]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=$(nproc)
scripts/install-deps.sh
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_TESTS=ON -DPIPEPROP_BUILD_EXAMPLES=ON
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs"
