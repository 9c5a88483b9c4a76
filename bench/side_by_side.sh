#!/usr/bin/env bash
# Builds pipeprop's benchmarks and runs the whole speed comparison of issue 6 in one command, printing markdown tables
# of ratios (the numbers of bench/README.md):
#   1. side by side with PyTorch (python3-torch, /usr/bin/python3): the small CNN trained on the same data, from the
#      same initial weights, with the same hyperparameters, both single-threaded, at b = 1 and b = 32 (float32,
#      several interleaved rounds, medians), plus one float64 run of each side at b = 32 (same-math check);
#   2. layers_bench: conv2d and dense layers vs OpenBLAS sgemm at the GEMM-equivalent shapes, and the training step;
#   3. gemm_choice: OpenBLAS sgemm vs pipeprop's xsimd GEMM at the layers' GEMM shapes.
# Usage: bench/side_by_side.sh [--quick] [--rounds R] [--build-dir DIR] [--data DIR] [--no-gbench]
#   --quick: fewer samples and repetitions (a smoke run); the default takes 5-8 minutes on 2 cores.
# Installs what it needs first (scripts/install-deps.sh --with-torch). Run on a quiet machine: the ratios are medians
# (samples/s from CPU time), but other load on the cores still moves them.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-bench
data=/usr/share/datasets/fashion-mnist
rounds=3
samples_b1=2000
samples_b32=3200   # 100 steps at b = 32
reps=10
gbench=1
while (($#)); do
  case "$1" in
    --quick) rounds=1; samples_b1=500; reps=3; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --no-gbench) gbench=0; shift ;;
    *) echo "side_by_side.sh: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh --with-torch >&2   # idempotent: installs only what is missing (python3-torch, ...)
python=/usr/bin/python3
if ! "$python" -c "import torch, numpy" 2>/dev/null; then
  echo "side_by_side.sh: $python cannot import torch and numpy after scripts/install-deps.sh --with-torch" >&2
  exit 2
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j"$(nproc)" --target side_by_side_train layers_bench gemm_choice >/dev/null

work="$build/side_by_side"
mkdir -p "$work"
results="$work/results.txt"
: >"$results"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
train="$build/bench/side_by_side_train"

# Export once per configuration (initial weights, inputs, labels, hyperparameters), then interleave the two sides.
"$train" --data "$data" --batch 1 --samples "$samples_b1" --export "$work/b1" >/dev/null
"$train" --data "$data" --batch 32 --samples "$samples_b32" --export "$work/b32" >/dev/null
for ((r = 1; r <= rounds; r++)); do
  echo "side_by_side.sh: round $r of $rounds" >&2
  "$train" --data "$data" --batch 1 --samples "$samples_b1" | tee -a "$results" >&2
  "$python" bench/torch_side_by_side.py --data "$work/b1" | tee -a "$results" >&2
  "$train" --data "$data" --batch 32 --samples "$samples_b32" | tee -a "$results" >&2
  "$python" bench/torch_side_by_side.py --data "$work/b32" | tee -a "$results" >&2
done
"$train" --data "$data" --batch 32 --samples "$samples_b32" --precision double --export "$work/b32_double" \
  | tee -a "$results" >&2
"$python" bench/torch_side_by_side.py --data "$work/b32_double" | tee -a "$results" >&2

echo
echo "## pipeprop vs PyTorch $("$python" -c 'import torch; print(torch.__version__)') (1 thread each)"
echo
"$python" bench/ratios.py side-by-side "$results"

if ((gbench)); then
  gb_args=(--benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true
           --benchmark_min_time=0.05 --benchmark_out_format=json)
  echo "side_by_side.sh: layers_bench ($reps repetitions)" >&2
  "$build/bench/layers_bench" "${gb_args[@]}" --benchmark_out="$work/layers_bench.json" >/dev/null
  echo "side_by_side.sh: gemm_choice ($reps repetitions)" >&2
  "$build/bench/gemm_choice" "${gb_args[@]}" --benchmark_out="$work/gemm_choice.json" >/dev/null
  echo
  echo "## conv2d and dense layers vs OpenBLAS sgemm at the GEMM-equivalent shape (GFLOP/s)"
  echo
  "$python" bench/ratios.py pairs "$work/layers_bench.json" --base sgemm --other layer
  echo
  echo "## GEMM: OpenBLAS sgemm vs pipeprop xsimd kernel at the layers' shapes (GFLOP/s)"
  echo
  "$python" bench/ratios.py pairs "$work/gemm_choice.json" --base blas --other xsimd
fi
echo
echo "(OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}, OPENBLAS_L2_SIZE=${OPENBLAS_L2_SIZE:-unset}; $(nproc --all) cores;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg))"
