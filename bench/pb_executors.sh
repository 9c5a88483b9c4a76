#!/usr/bin/env bash
# bench/pb_executors.sh: the same Pipelined Backpropagation training run with the sequential reference executor and
# with the concurrent (oneTBB flow graph) executor, side by side: samples/s of each (measured inside the pipeline:
# pb_samples_per_second of the JSON result, i.e. push/drain time, no data loading or evaluation), the ratio
# concurrent / sequential, and each stage's busy time and utilization as the program reports them. Both runs
# produce bit-identical weights (the tests check it); the script checks that every run ends with the same test
# accuracy and loss. Extra options replace the defaults they name (e.g. --max-samples 3000).
#
# Usage: bench/pb_executors.sh [--compete] [build-dir (default build)] [repeats (default 5)] [extra pipeprop_train
#        options]
# Default run: the main job's PB pipeline (scripts/main-job.sh: ResNet-20 with group norm, --stages layer: 20
# stages, delays 38 ... 0, b = 1, --mitigation sc_lwp, hyperparameters scaled from B = 32, lr 0.05, momentum 0.9)
# on --max-samples 4000 of Fashion-MNIST. build-main-job (the main job's build, ResNet-20 only) compiles fastest.
# --compete: a CPU-bound process pinned to core 1 (taskset) runs during every run of both executors (another
# program on the machine). The concurrent runs' load adaptation and lane rebalancing lines are printed; with --compete
# also the verdict
# whether the concurrent executor stays within 5% of the sequential one.
# Each executor runs `repeats` times (alternating); the best run of each and the median of the per-round ratios
# (back-to-back runs, so slow drifts of a shared machine cancel) are reported.
# Before and after the runs it prints the cores' cache-line round trip (bench/core_round_trip.cpp): the concurrent
# executor moves stages and activations between cores, so its speed-up depends on that (see bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
compete=0
if [[ ${1:-} == --compete ]]; then
  compete=1
  shift
fi
build=${1:-build}
repeats=${2:-5}
shift $(( $# >= 2 ? 2 : $# ))
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target pipeprop_train -j"$(nproc)" >/dev/null

if ! [[ $repeats =~ ^[1-9][0-9]*$ ]]; then
  echo "pb_executors: repeats must be a positive number, got '$repeats'" >&2
  exit 2
fi
source bench/merge_options.sh
defaults=(--mode pb --network resnet20 --norm gn --stages layer --mitigation sc_lwp --batch 1 --reference-batch 32
          --lr 0.05 --momentum 0.9 --max-samples 4000 --max-test-samples 1000 --progress log
          --data /usr/share/datasets/fashion-mnist)
merge_options args "${defaults[@]}" -- "$@"  # extra options replace the defaults they name
work=$(mktemp -d)
competitor=
trap 'if [[ -n "$competitor" ]]; then kill "$competitor" 2>/dev/null || true; fi; rm -rf "$work"' EXIT
if ((compete)); then
  if (( $(nproc) < 2 )) || ! command -v taskset >/dev/null; then
    echo "pb_executors: --compete needs 2 or more cores and taskset (util-linux)" >&2
    exit 2
  fi
  taskset -c 1 sh -c 'while :; do :; done' &
  competitor=$!
  echo "competing process: pid $competitor, a CPU-bound loop pinned to core 1, running during every run"
fi

# The machine state the ratio depends on: how fast one core sees what the other wrote (bench/core_round_trip.cpp).
machine_state() {
  if [[ -x "$work/core_round_trip" ]] && (( $(nproc) >= 2 )); then "$work/core_round_trip" 0 1 || true; fi
}
c++ -O2 -std=c++20 -pthread bench/core_round_trip.cpp -o "$work/core_round_trip" 2>/dev/null ||
  echo "pb_executors: could not build bench/core_round_trip.cpp; machine state not shown" >&2

field() { sed -n "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" "$1" | tail -n 1; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores (other processes take cores from the pipeline's threads)"
machine_state
declare -A best best_run
ratios=()
for ((r = 1; r <= repeats; r++)); do
  declare -A this_round=()
  for ex in sequential concurrent; do
    out="$work/$ex.$r"
    if ! OPENBLAS_NUM_THREADS=1 "$build/examples/pipeprop_train" "${args[@]}" --executor "$ex" >"$out.json" \
      2>"$out.log"; then
      echo "pb_executors: the $ex run failed:" >&2
      sed -n '/./{p;q}' "$out.log" >&2  # its first message line (a bad option is followed by the whole --help)
      exit 1
    fi
    sps=$(field "$out.json" pb_samples_per_second)
    printf 'run %d %-10s %10.1f samples/s\n' "$r" "$ex" "$sps"
    this_round[$ex]=$sps
    if [[ -z "${best[$ex]:-}" ]] || awk -v a="$sps" -v b="${best[$ex]}" 'BEGIN { exit !(a > b) }'; then
      best[$ex]=$sps
      best_run[$ex]=$out
    fi
  done
  ratios+=("$(awk -v c="${this_round[concurrent]}" -v s="${this_round[sequential]}" 'BEGIN { printf "%.3f", c / s }')")
done

echo
for ex in sequential concurrent; do
  out=${best_run[$ex]}
  printf '%-10s best %10.1f samples/s   test_accuracy %s  test_loss %s\n' "$ex" "${best[$ex]}" \
    "$(field "$out.json" test_accuracy)" "$(field "$out.json" test_loss)"
  grep -E '^pb: stage .* busy' "$out.log" | sed 's/^/    /'
done
for ((r = 1; r <= repeats; r++)); do  # what the concurrent runs' load adaptation and lane rebalancing did
  grep -E '^pb: (load adaptation|lane rebalancing)' "$work/concurrent.$r.log" | sed "s/^/    round $r: /" || true
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
machine_state
echo "per-round ratios (concurrent / sequential, back-to-back runs): ${ratios[*]}"
printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END {
  m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
  printf "median per-round ratio: %.3f\n", m }'
if ((compete)); then
  printf '%s\n' "${ratios[@]}" | sort -n | awk '{ v[NR] = $1 } END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "with the competing process: concurrent within 5%% of sequential (median ratio >= 0.95): %s\n",
      (m >= 0.95 ? "yes" : "no") }'
fi
awk -v c="${best[concurrent]}" -v s="${best[sequential]}" \
  'BEGIN { printf "ratio concurrent / sequential (best of each): %.3f  (%s cores on this machine)\n", c / s, "'"$(nproc)"'" }'
# Every run of either executor must end with the same test accuracy and loss (the runs are bit-identical).
first=$work/sequential.1.json
for out in "$work"/*.json; do
  for key in test_accuracy test_loss; do
    if [[ "$(field "$out" $key)" != "$(field "$first" $key)" ]]; then
      echo "pb_executors: $(basename "$out" .json) ended with $key $(field "$out" $key), sequential.1 with" \
        "$(field "$first" $key): the executors must give identical results" >&2
      exit 1
    fi
  done
done
echo "all $((2 * repeats)) runs: test_accuracy $(field "$first" test_accuracy), test_loss $(field "$first" test_loss)"
