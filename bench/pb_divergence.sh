#!/usr/bin/env bash
# bench/pb_divergence.sh: where and when fine-grained PB blows up at depth. Short runs of the depth study's recipe
# (bench/pb_depth_study.sh: lr 0.05 and momentum 0.9 at B = 32 scaled to b = 1, warm-up over the first 6000 samples,
# cosine over 3 x 60000; --stages layer, sequential executor) with the per-stage weight and velocity norms logged
# every 50 samples (--log-stage-norms), each stopped after a time limit (SIGTERM: the program stops cleanly) or at
# the first NaN loss (the program exits 1 naming the micro-batch). The table (bench/stage_norms_table.py) says which
# stage's weights grew first and how far; docs/results.md reads it.
#
# Usage: bench/pb_divergence.sh PROGRAM OUT [SECONDS] [RUN...]
#   PROGRAM  pipeprop_train built with the networks of the runs (resnet56, resnet56-on, resnet110)
#   OUT      directory for RUN.metrics.jsonl, RUN.out and table.md
#   SECONDS  time limit per run (default 300)
#   RUN      network:norm:mitigation:seed, e.g. resnet56:gn:sc_lwp:1 (default: the set of docs/results.md)
# Two runs at a time; peak RSS per run in RUN.out (GNU time).
set -euo pipefail
cd "$(dirname "$0")/.."
program=${1:?usage: $0 PROGRAM OUT [SECONDS] [RUN...]}
out=${2:?usage: $0 PROGRAM OUT [SECONDS] [RUN...]}
seconds=${3:-300}
shift $(($# < 3 ? $# : 3))
runs=("$@")
if ((${#runs[@]} == 0)); then
  runs=(resnet56:gn:none:1 resnet56:gn:sc_lwp:1 resnet56:gn:sc:1 resnet56:gn:lwp:1 resnet56:gn:lwp_wd:1
        resnet56:gn:none:2 resnet56:gn:sc_lwp:2 resnet56:gn:sc:2 resnet56:gn:lwp:2 resnet56:gn:pipemare:1
        resnet56:on:none:1 resnet56:on:sc_lwp:1 resnet110:gn:none:1 resnet110:gn:sc_lwp:1 resnet110:gn:lwp:1)
fi
mkdir -p "$out"
run_one() {
  IFS=: read -r network norm mitigation seed <<<"$1"
  local name="$network-$norm-$mitigation-seed$seed"
  /usr/bin/time -f "peak_rss_kb %M wall_s %e" timeout "$seconds" "$program" --mode pb --network "$network" \
    --norm "$norm" --mitigation "$mitigation" --seed "$seed" --stages layer --executor sequential --batch 1 \
    --reference-batch 32 --lr 0.05 --momentum 0.9 --epochs 3 --max-samples 60000 --lr-schedule cosine \
    --warmup 0.1 --max-test-samples 100 --progress none --log-every 50 --log-stage-norms \
    --data /usr/share/datasets/fashion-mnist --metrics "$out/$name.metrics.jsonl" >"$out/$name.out" 2>&1 || true
  echo "pb_divergence: $name done"
}
rm -f "$out"/*.metrics.jsonl
for ((i = 0; i < ${#runs[@]}; i += 2)); do
  run_one "${runs[i]}" &
  if ((i + 1 < ${#runs[@]})); then run_one "${runs[i + 1]}" & fi
  wait
done
files=()
for r in "${runs[@]}"; do
  IFS=: read -r network norm mitigation seed <<<"$r"
  files+=("$out/$network-$norm-$mitigation-seed$seed.metrics.jsonl")
done
/usr/bin/python3 bench/stage_norms_table.py "${files[@]}" | tee "$out/table.md"
