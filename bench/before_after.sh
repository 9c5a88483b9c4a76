#!/usr/bin/env bash
# bench/before_after.sh: pipeprop's training speed in two builds (two commits, or one commit built two ways), run in
# turn on the same machine, so that slow drifts of a shared host fall on both sides alike. It runs pipeprop's side
# of bench/side_by_side.sh (side_by_side_train: the small CNN and ResNet-20 at b = 1 and b = 32;
# llama_side_by_side_train: llama-tiny at b = 1 and b = 8 sequences; samples/s from CPU time) and the runs of
# bench/pb_executors.sh (the main job's PB pipeline, ResNet-20 --stages layer, SC + LWP, b = 1, sequential and
# concurrent executor; pb_samples_per_second), each configuration once per build per round, the order of the two
# builds swapped every round. Prints, per configuration, the median samples/s of each build, the ratio after /
# before and whether it is within the tolerance (default 3%, --tolerance), and the runs' last losses (the same
# losses mean the same arithmetic). Prints the load average and the CPU flags first and the load average last.
#
# Usage: bench/before_after.sh BEFORE_BUILD AFTER_BUILD [--rounds R (default 5)] [--tolerance PERCENT (default 3)]
#                              [--data DIR] [--text DIR] [--no-pb] [--no-llama]
# Each build directory must hold bench/side_by_side_train, bench/llama_side_by_side_train (unless --no-llama) and
# examples/pipeprop_train (unless --no-pb) built with ResNet-20 (e.g. cmake -DCMAKE_BUILD_TYPE=Release
# -DPIPEPROP_BUILD_BENCH=ON -DPIPEPROP_TRAIN_NETWORKS=resnet20, then those three targets). Exit status: 0 when every
# configuration is within the tolerance or faster, 1 when one is slower, 2 for bad arguments.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '12,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
(($# >= 2)) || usage
before=$1
after=$2
shift 2
rounds=5
tolerance=3
data=/usr/share/datasets/fashion-mnist
text=/usr/share/games/fortunes
pb=1
llama=1
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --tolerance) tolerance=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --text) text=$2; shift 2 ;;
    --no-pb) pb=0; shift ;;
    --no-llama) llama=0; shift ;;
    *) echo "before_after.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "before_after.sh: --rounds must be a positive number, got '$rounds'" >&2; exit 2; }
[[ $tolerance =~ ^[0-9]+(\.[0-9]+)?$ ]] ||
  { echo "before_after.sh: --tolerance must be a number of percent, got '$tolerance'" >&2; exit 2; }
for b in "$before" "$after"; do
  needed=("$b/bench/side_by_side_train")
  ((llama)) && needed+=("$b/bench/llama_side_by_side_train")
  ((pb)) && needed+=("$b/examples/pipeprop_train")
  for p in "${needed[@]}"; do
    [[ -x $p ]] || { echo "before_after.sh: $p is missing (build it first; see the usage)" >&2; exit 2; }
  done
done

cores=$(nproc)  # before OMP_NUM_THREADS=1, which nproc honours
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
# name | program (relative to a build directory) | options | the field holding samples/s | the field holding the loss
configs=(
  "cnn b=1|bench/side_by_side_train|--network cnn --batch 1 --samples 2000 --data $data|cpu_samples_per_s|last_loss"
  "cnn b=32|bench/side_by_side_train|--network cnn --batch 32 --samples 3200 --data $data|cpu_samples_per_s|last_loss"
  "resnet20 b=1|bench/side_by_side_train|--network resnet20 --batch 1 --samples 500 --data $data|cpu_samples_per_s|last_loss"
  "resnet20 b=32|bench/side_by_side_train|--network resnet20 --batch 32 --samples 960 --data $data|cpu_samples_per_s|last_loss"
)
if ((llama)); then
  configs+=("llama-tiny b=1|bench/llama_side_by_side_train|--batch 1 --samples 400 --text $text|cpu_samples_per_s|last_loss"
            "llama-tiny b=8|bench/llama_side_by_side_train|--batch 8 --samples 800 --text $text|cpu_samples_per_s|last_loss")
fi
if ((pb)); then
  pb_options="--mode pb --network resnet20 --norm gn --stages layer --mitigation sc_lwp --batch 1 --reference-batch 32"
  pb_options+=" --lr 0.05 --momentum 0.9 --max-samples 4000 --max-test-samples 1000 --progress none --data $data"
  configs+=("pb sequential|examples/pipeprop_train|$pb_options --executor sequential|pb_samples_per_second|test_loss"
            "pb concurrent|examples/pipeprop_train|$pb_options --executor concurrent|pb_samples_per_second|test_loss")
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# A field's value from "key=value" (the side-by-side programs) or "key":value (the main program's JSON line).
field() { sed -n -e "s/.*[ ]$2=\([^ ]*\).*/\1/p" -e "s/.*\"$2\":\"\{0,1\}\([^,\"}]*\).*/\1/p" "$1" | tail -n 1; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $cores cores"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'); flags: $(grep -o -w -E 'avx2|avx512f|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "before: $before ($(git -C "$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$before/CMakeCache.txt")" rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "after:  $after ($(git -C "$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$after/CMakeCache.txt")" rev-parse --short HEAD 2>/dev/null || echo '?'))"
for ((r = 1; r <= rounds; r++)); do
  for i in "${!configs[@]}"; do
    IFS='|' read -r name program options rate_key loss_key <<<"${configs[$i]}"
    order=(before after)
    ((r % 2)) || order=(after before)
    for side in "${order[@]}"; do
      dir=${!side}
      out="$work/$i.$side.$r"
      # shellcheck disable=SC2086  # options are words
      if ! "$dir/$program" $options >"$out" 2>"$out.err"; then
        echo "before_after.sh: $name failed in $dir:" >&2
        head -n 3 "$out.err" >&2
        exit 1
      fi
      printf 'round %d %-15s %-6s %10.1f samples/s  loss %s\n' "$r" "$name" "$side" "$(field "$out" "$rate_key")" \
        "$(field "$out" "$loss_key")"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { sort -g | awk '{ v[NR] = $1 } END { printf "%.1f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo
echo "| configuration | before samples/s | after samples/s | after / before | within ${tolerance}% or faster | same loss |"
echo "|---|---|---|---|---|---|"
slower=0
for i in "${!configs[@]}"; do
  IFS='|' read -r name program options rate_key loss_key <<<"${configs[$i]}"
  for side in before after; do
    declare "m_$side=$(for ((r = 1; r <= rounds; r++)); do field "$work/$i.$side.$r" "$rate_key"; done | median)"
    declare "l_$side=$(field "$work/$i.$side.1" "$loss_key")"
  done
  ratio=$(awk -v a="$m_after" -v b="$m_before" 'BEGIN { printf "%.3f", a / b }')
  ok=$(awk -v q="$ratio" -v t="$tolerance" 'BEGIN { print (q >= 1 - t / 100 ? "yes" : "no") }')
  [[ $ok == yes ]] || slower=1
  same=$([[ "$l_before" == "$l_after" ]] && echo yes || echo "no ($l_before / $l_after)")
  echo "| $name | $m_before | $m_after | $ratio | $ok | $same |"
done
exit "$slower"
