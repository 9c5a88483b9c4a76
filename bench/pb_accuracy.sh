#!/usr/bin/env bash
# bench/pb_accuracy.sh: PB at micro-batch size 1 against batched SGD, over several seeds (the PB paper's accuracy claim,
# PB-paper = Kosson et al., arXiv 2003.11666, §5: fine-grained PB at b = 1 with SC + LWP matches SGD).
#
# For every seed it runs, with the same data, network, epochs and learning-rate schedule:
#   sgd: --mode sgd --batch 32 --lr 0.05 --momentum 0.9                     (the reference)
#   pb:  --mode pb --stages fine --batch 1 --mitigation sc_lwp --reference-batch 32 --lr 0.05 --momentum 0.9
#        (6 stages, delays 10,8,6,4,2,0; lr and momentum scaled from B = 32 to b = 1 by docs/pb-semantics.md §4)
# and prints each test accuracy, the per-seed difference pb - sgd, the mean and sample standard deviation of both,
# and the largest per-seed gap. Both runs are deterministic for a given build and machine (the concurrent PB
# executor is bit-identical to the sequential reference), so the spread is seed-to-seed, not run-to-run.
#
# Usage: bench/pb_accuracy.sh [build-dir (default build)] [seeds (default "1 2 3 4 5")] [more pipeprop_train options,
#        which replace the defaults they name]
# Default schedule: --lr-schedule cosine (the main job's); pass --lr-schedule constant to compare without decay
# (then the end point of a 1-epoch run moves by about +-1 point from one 2000-sample stretch to the next, for both).
# Time: about 30-40 s per seed on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
seeds=${2:-1 2 3 4 5}
shift $(( $# >= 2 ? 2 : $# ))
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$build" --target pipeprop_train -j"$(nproc)" >/dev/null
log=$(mktemp)
trap 'rm -f "$log"' EXIT

source bench/merge_options.sh
common=(--network cnn --epochs 1 --lr 0.05 --momentum 0.9 --lr-schedule cosine --progress none
        --data /usr/share/datasets/fashion-mnist)
# Extra options replace the defaults they name (e.g. --lr-schedule constant, --epochs 2); --seed is set per run.
merge_options sgd --mode sgd --batch 32 "${common[@]}" -- "$@"
merge_options pb --mode pb --stages fine --batch 1 --mitigation sc_lwp --reference-batch 32 "${common[@]}" -- "$@"

accuracy() {  # prints the test_accuracy of the JSON result line; fails loudly when the run fails
  local line
  if ! line=$(OPENBLAS_NUM_THREADS=1 "$build/examples/pipeprop_train" "$@" 2>"$log" | tail -n 1) ||
    ! sed -n 's/.*"test_accuracy":\([0-9.eE+-]*\).*/\1/p' <<<"$line" | grep .; then
    echo "pb_accuracy: pipeprop_train $* failed; its messages:" >&2
    sed -n '/./{p;q}' "$log" >&2  # its first message line (a bad option is followed by the whole --help)
    return 1
  fi
}

printf '%-6s %10s %10s %10s\n' seed sgd pb pb-sgd
results=()
for seed in $seeds; do
  a=$(accuracy "${sgd[@]}" --seed "$seed")
  b=$(accuracy "${pb[@]}" --seed "$seed")
  results+=("$a $b")
  awk -v s="$seed" -v a="$a" -v b="$b" 'BEGIN { printf "%-6s %10.4f %10.4f %+10.4f\n", s, a, b, b - a }'
done
printf '%s\n' "${results[@]}" | awk '
  { a[NR] = $1; b[NR] = $2; sa += $1; sb += $2; d = $2 - $1; if (NR == 1 || d < worst) worst = d
    if (NR == 1 || d > best) best = d }
  END {
    n = NR; ma = sa / n; mb = sb / n
    for (i = 1; i <= n; ++i) { va += (a[i] - ma) ^ 2; vb += (b[i] - mb) ^ 2 }
    sda = n > 1 ? sqrt(va / (n - 1)) : 0; sdb = n > 1 ? sqrt(vb / (n - 1)) : 0
    if (n > 1) printf "mean   %10.4f %10.4f %+10.4f   (std %.4f / %.4f over %d seeds)\n", ma, mb, mb - ma, sda, sdb, n
    else printf "mean   %10.4f %10.4f %+10.4f   (one seed: no spread)\n", ma, mb, mb - ma
    printf "per-seed pb - sgd from %+.4f to %+.4f\n", worst, best
  }'
