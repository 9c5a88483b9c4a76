#!/usr/bin/env bash
# PB with its two stages in 2 MPI processes against one process with 2 lanes (bench/mpi/mpi_pipeline.cpp), in one
# run, alternating rounds; prints the load average and the CPU flags first.
# Usage: bench/mpi_pipeline.sh [build-dir] [samples per round] [rounds] [extra mpirun options, e.g. --hostfile F]
# The build dir is configured here if needed: -DPIPEPROP_BUILD_BENCH=ON -DPIPEPROP_WITH_MPI=ON, Release (-O3).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-bench-mpi}
samples=${2:-3000}
rounds=${3:-5}
shift $(( $# < 3 ? $# : 3 ))
if [[ ! -x "$build/bench/mpi_pipeline" ]]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_BENCH=ON -DPIPEPROP_WITH_MPI=ON \
        -DPIPEPROP_BUILD_TESTS=OFF -DPIPEPROP_BUILD_EXAMPLES=OFF > /dev/null
  cmake --build "$build" --target mpi_pipeline -j"$(nproc)"
fi
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "cpu: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; flags: $(grep -o -w -E 'avx512f|avx2|fma' /proc/cpuinfo | sort -u | tr '\n' ' ')"
root=(); [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
# --bind-to none: the one-process run needs both cores for its 2 lanes (mpirun binds each rank to one core by default).
OPENBLAS_NUM_THREADS=1 mpirun "${root[@]}" --oversubscribe --bind-to none -np 2 "$@" "$build/bench/mpi_pipeline" "$samples" "$rounds"
