#!/usr/bin/env bash
# token_linear and rms_norm forward / backward-p1 / backward-p2 vs PyTorch at the same shapes, one thread each, in one
# run: builds bench/transformer_layers_bench (Google Benchmark), runs it, then bench/torch_transformer_layers.py with
# Debian's /usr/bin/python3 (python3-torch), which prints the markdown table of times and torch / pipeprop ratios.
# Usage: bench/transformer_layers.sh [--build-dir DIR] [--reps N]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-bench
reps=5
while (($#)); do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    *) echo "transformer_layers.sh: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done
python=/usr/bin/python3
if ! "$python" -c "import torch" 2>/dev/null; then
  echo "transformer_layers.sh: $python cannot import torch (scripts/install-deps.sh --with-torch)" >&2
  exit 2
fi
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_BENCH=ON >/dev/null
cmake --build "$build" -j1 --target transformer_layers_bench >/dev/null
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
json="$build/transformer_layers_bench.json"
"$build/bench/transformer_layers_bench" --benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true \
  --benchmark_min_time=0.05 --benchmark_out_format=json --benchmark_out="$json" >/dev/null
"$python" bench/torch_transformer_layers.py --gbench "$json"
echo
echo "($(nproc --all) cores; load average $(cut -d' ' -f1-3 /proc/loadavg))"
