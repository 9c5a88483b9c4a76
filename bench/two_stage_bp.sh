#!/usr/bin/env bash
# bench/two_stage_bp.sh: 2-stage backpropagation on and off, measured side by side for GPipe, 1F1B, ZB-H1 and ZB-H2
# with p = 2 stages and m in {2, 4, 8} micro-batches, next to the schedule simulator's predictions (measured and
# predicted samples/s, with/without ratios), plus the predictions for p = 4 and p = 8. Prints markdown tables
# (bench/two_stage_bp.md explains them; docs/results.md quotes them).
# With --7b as the first option it runs bench/two_stage_bp_7b instead: per-op costs of one LLaMA-7B transformer block
# (and its embedding and LM head) measured here, and the simulator's 2BP predictions for 4 and 8 stages.
#
# Usage: bench/two_stage_bp.sh [build-dir (default build)] [options of the two_stage_bp program]
#        bench/two_stage_bp.sh [build-dir] --7b [options of the two_stage_bp_7b program]
#   e.g. bench/two_stage_bp.sh build --network mlp --batch 256 --micro-batches 2,4,8 --rounds 15
#        bench/two_stage_bp.sh build --network llama-tiny --batch 64 --micro-batches 2,4,8 --rounds 15
#        bench/two_stage_bp.sh build --7b --length 512 --rounds 3            (about 10 minutes on 2 cores)
# The machine may be shared: the script prints the load average before and after, and with
# TWO_STAGE_BP_WAIT=minutes it first waits (up to that long) for the 1-minute load average to drop below 1.5.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
if [[ $# -gt 0 && "$1" != --* ]]; then build=$1; shift; fi
program=two_stage_bp
if [[ $# -gt 0 && "$1" == --7b ]]; then program=two_stage_bp_7b; shift; fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_BENCH=ON >/dev/null
cmake --build "$build" --target "$program" -j"$(nproc)" >/dev/null

wait_minutes=${TWO_STAGE_BP_WAIT:-0}
deadline=$((SECONDS + 60 * wait_minutes))
while ((SECONDS < deadline)) && awk '{ exit !($1 >= 1.5) }' /proc/loadavg; do sleep 10; done
cpu=$(lscpu | sed -n 's/^Model name: *//p')
echo "machine: $(nproc) cores, $cpu, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
OPENBLAS_NUM_THREADS=1 "$build/bench/$program" "$@"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
