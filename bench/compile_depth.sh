#!/usr/bin/env bash
# bench/compile_depth.sh: what depth costs to compile. Compiles bench/compile_depth.cpp (a fine-grained PB pipeline of
# a ResNet, sc_lwp, both executors) at each depth given (default 20 and 110) with the project's flags at -O2, prints
# each compile's CPU seconds (user + sys, which load does not change) and peak memory, the ratio to the first depth,
# and runs each program (it trains 8 samples with both executors and checks they agree bit for bit).
# Usage: bench/compile_depth.sh [depth ...]    (each 6N + 2: 20 32 44 56 110 ...)
set -euo pipefail
cd "$(dirname "$0")/.."
depths=("$@")
((${#depths[@]})) || depths=(20 110)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# PIPEPROP_INCLUDE: other include directories to compile against (e.g. an older checkout's, for a before / after).
flags=(-std=gnu++20 -O2 -DNDEBUG -ffp-contract=off -march=native ${PIPEPROP_INCLUDE:+-I$PIPEPROP_INCLUDE} -Iinclude
       -DBOOST_ALL_NO_LIB)
echo "# bench/compile_depth.sh $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD), $(c++ --version | head -1)"
echo "# host: $(lscpu | sed -n 's/^Model name: *//p'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
first=""
for d in "${depths[@]}"; do
  /usr/bin/time -f "%U %S %M" -o "$out/time" c++ "${flags[@]}" -DPIPEPROP_RESNET_DEPTH="$d" bench/compile_depth.cpp \
    -o "$out/resnet$d" -ltbb -lopenblas
  read -r user sys rss <"$out/time"
  cpu=$(awk -v u="$user" -v s="$sys" 'BEGIN { printf "%.1f", u + s }')
  [[ -n "$first" ]] || first=$cpu
  ratio=$(awk -v c="$cpu" -v f="$first" 'BEGIN { printf "%.2f", c / f }')
  run=$("$out/resnet$d")
  echo "ResNet-$d: compile ${cpu} CPU-s (x${ratio} of ResNet-${depths[0]}), peak $((rss / 1024)) MB; run: $run"
done
