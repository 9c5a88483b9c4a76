#!/usr/bin/env bash
# Long fuzz runs (CI runs only the short fixed-seed ctests, label fuzz).
# Usage: scripts/fuzz.sh [build-dir] [inputs per target] [option command lines] [seed]
#        (defaults: build, 100000, 100000, 1; JOBS=<n> build jobs, default nproc)
#  1. builds the libFuzzer targets (tests/fuzz, clang) into <build>/fuzz, with and without ASan;
#  2. for fuzz_idx, fuzz_cifar10, fuzz_checkpoint: <inputs> inputs with the UBSan-only build (~6x faster), corpus
#     <build>/fuzz/long-<target>/corpus (kept: a later run continues from it), then every input of that corpus once
#     through the ASan + UBSan build;
#  3. <option command lines> mutated command lines (tests/fuzz/fuzz_options.cpp) on the main program built with
#     ASan + UBSan (pipeprop_train_asan), 2 at a time.
# Limits as in CI (tests/fuzz/run_fuzzer.cmake): inputs <= 16 KiB, no allocation over 64 MiB, RSS < 2 GiB, 10 s per
# input. Prints one line per stage; exits non-zero on the first finding (libFuzzer prints the input and saves it as
# <build>/fuzz/long-<target>/crash-* / oom-* / timeout-*).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
runs=${2:-100000}
option_runs=${3:-100000}
seed=${4:-1}
jobs=${JOBS:-$(nproc)}  # build jobs
scripts/install-deps.sh >/dev/null
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_TESTS=ON -DPIPEPROP_BUILD_EXAMPLES=ON >/dev/null
cmake --build "$build" -j"$jobs" --target fuzz_options pipeprop_train_asan >/dev/null
cmake -S tests/fuzz -B "$build/fuzz" -DCMAKE_CXX_COMPILER=clang++-14 -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build/fuzz" -j"$jobs" --target fuzz_idx fuzz_cifar10 fuzz_checkpoint fuzz_idx_ubsan \
  fuzz_cifar10_ubsan fuzz_checkpoint_ubsan >/dev/null
limits=(-max_len=16384 -malloc_limit_mb=64 -rss_limit_mb=2048 -timeout=10)
for t in idx cifar10 checkpoint; do
  work="$build/fuzz/long-$t"
  mkdir -p "$work/corpus"
  start=$(date +%s)
  log="$work/fuzz.log"
  if ! "$build/fuzz/fuzz_${t}_ubsan" -seed="$seed" -runs="$runs" "${limits[@]}" -print_final_stats=1 \
       -artifact_prefix="$work/" "$work/corpus" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    tail -40 "$log"; echo "fuzz.sh: fuzz_$t: FINDING (log $log)"; exit 1
  fi
  explore=$(( $(date +%s) - start ))
  units=$(find "$work/corpus" -type f | wc -l)
  rate=$(grep -m1 'average_exec_per_sec' "$log" | awk '{print $2}')
  start=$(date +%s)
  if ! "$build/fuzz/fuzz_$t" -runs=0 "${limits[@]}" -artifact_prefix="$work/" "$work/corpus" \
       "tests/fuzz/corpus/$t" >"$work/replay.log" 2>&1; then
    tail -40 "$work/replay.log"; echo "fuzz.sh: fuzz_$t (ASan replay): FINDING (log $work/replay.log)"; exit 1
  fi
  echo "fuzz.sh: fuzz_$t: $runs inputs (seed $seed, UBSan build, $rate exec/s, ${explore} s), no finding;" \
       "its corpus of $units inputs replayed under ASan + UBSan in $(( $(date +%s) - start )) s, no finding"
done
"$build/tests/fuzz_options" --program "$build/tests/pipeprop_train_asan" --asan --runs "$option_runs" \
  --seed "$seed" --jobs 2 --corpus tests/fuzz/corpus/options --failures "$build/fuzz/options-failures"
