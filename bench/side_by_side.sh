#!/usr/bin/env bash
# Builds pipeprop's benchmarks and runs the whole speed comparison of issues 6 and 16 in one command, printing
# markdown tables of ratios (the numbers of bench/README.md):
#   1. side by side with PyTorch (python3-torch, /usr/bin/python3) and libtorch (libtorch-dev, PyTorch's C++
#      frontend: bench/libtorch/libtorch_side_by_side.cpp) in the same run: the small CNN and ResNet-20 (group norm)
#      trained on the same data, from the same initial weights, with the same hyperparameters, each side on one
#      thread, at b = 1 and b = 32 (float32, several interleaved rounds, medians), plus one float64 run of each side
#      per network and b (the same-math check: the three must report the same losses to ~1e-10); with this core's
#      fp32 peak (measured before and after), what the project's speed targets ask of it: each side's GFLOP/s and the
#      highest ratio a step of the same multiply-adds could reach against PyTorch and libtorch;
#   2. llama-tiny's whole training step (forward, backward-p1, backward-p2, AdamW; pipeprop/models/llama_tiny.hpp)
#      side by side with PyTorch and libtorch in the same way: bench/llama_side_by_side_train.cpp,
#      bench/torch_llama_side_by_side.py, bench/libtorch/libtorch_llama_side_by_side.cpp on the same initial weights
#      and the same stream of fortunes sequences (64 tokens each; a sample is a sequence), one thread, b = 1 and b = 8
#      sequences, float32 rounds plus one float64 run per b (same-math check, first / last / eval loss to 1e-9);
#   3. layers_bench: conv2d and dense layers vs OpenBLAS sgemm at the GEMM-equivalent shapes, and the training step;
#   4. gemm_choice: OpenBLAS sgemm vs pipeprop's xsimd GEMM at the layers' GEMM shapes.
# Usage: bench/side_by_side.sh [--quick] [--rounds R] [--build-dir DIR] [--data DIR] [--text DIR] [--no-cnn]
#                              [--no-llama] [--no-gbench] [--cpu N]
#   --cpu N: run every timed program (all three sides, the peak, the Google Benchmark programs) on CPU N only
#   (taskset -c N): on a host whose cores run at different speeds (a shared virtual machine), the sides then cannot
#   land on different cores.
#   --quick: fewer samples, one round, fewer repetitions (a smoke run: about 2 minutes after the build); the default
#   (3 rounds) takes 5-6 minutes after the build on 2 cores (--rounds 5: 6.5) plus about 2 for llama-tiny, the
#   build of its six programs 4-5. --no-cnn, --no-llama, --no-gbench leave out section 1, 2, or 3 and 4.
# A build for -march=x86-64-v3 (PIPEPROP_ARCH in the build directory's CMakeCache.txt) is compared on the AVX2 path:
# PyTorch and libtorch are capped at AVX2 too (ONEDNN_MAX_CPU_ISA=AVX2 for oneDNN's convolutions, ATEN_CPU_CAPABILITY=avx2
# for ATen's kernels), which otherwise pick AVX-512 at run time where the CPU has it; the header line says so.
# Prints the load average (uptime) and the CPU's model and flags (lscpu: avx2, avx512f, fma) first. Installs what it
# needs first (scripts/install-deps.sh --with-torch). Run on a quiet machine: the ratios are medians (samples/s from
# CPU time), but other load on the cores still moves them.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-bench
data=/usr/share/datasets/fashion-mnist
rounds=3
# Training samples per network and b (float32 runs and the float64 check use the same ones): about 0.5-8 s per side.
cnn_b1=2000
cnn_b32=3200        # 100 steps at b = 32
resnet20_b1=500
resnet20_b32=960    # 30 steps at b = 32
# llama-tiny, sequences per b (float32 and float64 alike). The float64 runs of pipeprop and PyTorch drift apart by
# about 10x per 50 AdamW steps at b = 1 (1.4e-16 after 100 steps, 1.4e-10 after 400): many more steps would fail the
# 1e-9 gate although the sides compute the same function.
llama_b1=400        # 400 steps
llama_b8=800        # 100 steps
text=/usr/share/games/fortunes
cnn=1
llama=1
reps=10
gbench=1
pin=()
while (($#)); do
  case "$1" in
    --quick) rounds=1; cnn_b1=500; resnet20_b1=100; resnet20_b32=320; llama_b1=100; llama_b8=160; reps=3; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --data) data=$2; shift 2 ;;
    --text) text=$2; shift 2 ;;
    --no-cnn) cnn=0; shift ;;
    --no-llama) llama=0; shift ;;
    --no-gbench) gbench=0; shift ;;
    --cpu) [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "side_by_side.sh: --cpu needs a CPU number" >&2; exit 2; }
           pin=(taskset -c "$2"); shift 2 ;;
    *) echo "side_by_side.sh: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done

scripts/install-deps.sh --with-torch >&2   # idempotent: installs only what is missing (python3-torch, libtorch-dev)
python=/usr/bin/python3
if ! "$python" -c "import torch, numpy" 2>/dev/null; then
  echo "side_by_side.sh: $python cannot import torch and numpy after scripts/install-deps.sh --with-torch" >&2
  exit 2
fi

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_BENCH=ON >/dev/null
if ! grep -q '^Torch_DIR:PATH=/' "$build/CMakeCache.txt"; then
  echo "side_by_side.sh: CMake did not find libtorch (libtorch-dev) for $build (Torch_DIR in its CMakeCache.txt);" \
       "bench/libtorch.cmake builds libtorch_side_by_side only when find_package(Torch) succeeds" >&2
  exit 2
fi
targets=(side_by_side_train)  # --peak for every section
((cnn)) && targets+=(libtorch_side_by_side)
((llama)) && targets+=(llama_side_by_side_train libtorch_llama_side_by_side)
((gbench)) && targets+=(layers_bench gemm_choice)
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

flags=$(lscpu | sed -n 's/^Flags:[[:space:]]*//p' | tr ' ' '\n' | grep -x -E 'avx2|avx512f|fma' | tr '\n' ' ')
echo "side_by_side.sh at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null ||
  echo ' (with uncommitted changes)'), $(date '+%Y-%m-%d %H:%M %Z')"
echo "load average: $(uptime | sed 's/.*load average: //')"
echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc --all) cores; flags: ${flags:-none of avx2 avx512f fma}"
((${#pin[@]})) && echo "every timed program pinned to CPU ${pin[2]} (taskset -c ${pin[2]})"
arch=$(sed -n 's/^PIPEPROP_ARCH:[A-Z]*=//p' "$build/CMakeCache.txt")
if [[ $arch == x86-64-v3 ]]; then
  export ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2
  echo "pipeprop built for -march=x86-64-v3: PyTorch and libtorch capped at AVX2 (ONEDNN_MAX_CPU_ISA=AVX2," \
       "ATEN_CPU_CAPABILITY=avx2)"
else
  echo "pipeprop built for -march=${arch:-native}"
fi

work="$build/side_by_side"
mkdir -p "$work"
results="$work/results.txt"
: >"$results"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
train="$build/bench/side_by_side_train"
libtorch="$build/bench/libtorch_side_by_side"
same_math=0
torch_versions="PyTorch $("$python" -c 'import torch; print(torch.__version__)') and libtorch \
$(dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null)"

# Runs the three sides on one exported configuration: $1 = export directory, the rest = side_by_side_train options.
three_sides() {
  local dir=$1; shift
  "${pin[@]}" "$train" --data "$data" "$@" | tee -a "$results" >&2
  "${pin[@]}" "$python" bench/torch_side_by_side.py --data "$dir" | tee -a "$results" >&2
  "${pin[@]}" "$libtorch" --data "$dir" | tee -a "$results" >&2
}

# Section 1: the small CNN and ResNet-20.
if ((cnn)); then
  # Export once per configuration (initial weights, inputs, labels, hyperparameters), then interleave the three sides.
  configurations=()
  for network in cnn resnet20; do
    for b in 1 32; do
      samples_var="${network}_b${b}"
      configurations+=("$network $b ${!samples_var}")
    done
  done
  for c in "${configurations[@]}"; do
    read -r network b samples <<<"$c"
    for precision in float double; do
      "$train" --data "$data" --network "$network" --batch "$b" --samples "$samples" --precision "$precision" \
        --export "$work/$network-b$b-$precision" >/dev/null
    done
  done
  # This core's fp32 peak before and after the timed runs (ratios.py takes the best): what the targets ask of it.
  "${pin[@]}" "$train" --peak | tee -a "$results" >&2
  for ((r = 1; r <= rounds; r++)); do
    echo "side_by_side.sh: round $r of $rounds" >&2
    for c in "${configurations[@]}"; do
      read -r network b samples <<<"$c"
      three_sides "$work/$network-b$b-float" --network "$network" --batch "$b" --samples "$samples"
    done
  done
  "${pin[@]}" "$train" --peak | tee -a "$results" >&2
  echo "side_by_side.sh: float64 same-math check" >&2
  for c in "${configurations[@]}"; do
    read -r network b samples <<<"$c"
    three_sides "$work/$network-b$b-double" --network "$network" --batch "$b" --samples "$samples" --precision double
  done

  echo
  echo "## pipeprop vs $torch_versions (1 thread each)"
  echo
  "$python" bench/ratios.py side-by-side "$results" || same_math=$?
  echo
fi

# Section 2: llama-tiny's training step, the same way (its own export directories and results file).
if ((llama)); then
  llama_results="$work/results_llama.txt"
  : >"$llama_results"
  llama_train="$build/bench/llama_side_by_side_train"
  llama_libtorch="$build/bench/libtorch_llama_side_by_side"
  llama_three_sides() {  # $1 = export directory, the rest = llama_side_by_side_train options
    local dir=$1; shift
    "${pin[@]}" "$llama_train" --text "$text" "$@" | tee -a "$llama_results" >&2
    "${pin[@]}" "$python" bench/torch_llama_side_by_side.py --data "$dir" | tee -a "$llama_results" >&2
    "${pin[@]}" "$llama_libtorch" --data "$dir" | tee -a "$llama_results" >&2
  }
  llama_configurations=("1 $llama_b1" "8 $llama_b8")
  for c in "${llama_configurations[@]}"; do
    read -r b samples <<<"$c"
    for precision in float double; do
      "$llama_train" --text "$text" --batch "$b" --samples "$samples" --precision "$precision" \
        --export "$work/llama-tiny-b$b-$precision" >/dev/null
    done
  done
  "${pin[@]}" "$train" --peak | tee -a "$llama_results" >&2
  for ((r = 1; r <= rounds; r++)); do
    echo "side_by_side.sh: llama-tiny round $r of $rounds" >&2
    for c in "${llama_configurations[@]}"; do
      read -r b samples <<<"$c"
      llama_three_sides "$work/llama-tiny-b$b-float" --batch "$b" --samples "$samples"
    done
  done
  "${pin[@]}" "$train" --peak | tee -a "$llama_results" >&2
  echo "side_by_side.sh: llama-tiny float64 same-math check" >&2
  for c in "${llama_configurations[@]}"; do
    read -r b samples <<<"$c"
    llama_three_sides "$work/llama-tiny-b$b-double" --batch "$b" --samples "$samples" --precision double
  done
  echo
  echo "## llama-tiny's training step (forward, backward, AdamW): pipeprop vs $torch_versions (1 thread each;" \
       "a sample is a sequence of 64 tokens)"
  echo
  llama_same_math=0
  "$python" bench/ratios.py side-by-side "$llama_results" || llama_same_math=$?
  ((llama_same_math)) && same_math=$llama_same_math
  echo
fi

if ((gbench)); then
  gb_args=(--benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true
           --benchmark_min_time=0.05 --benchmark_out_format=json)
  echo "side_by_side.sh: layers_bench ($reps repetitions)" >&2
  "${pin[@]}" "$build/bench/layers_bench" "${gb_args[@]}" --benchmark_out="$work/layers_bench.json" >/dev/null
  echo "side_by_side.sh: gemm_choice ($reps repetitions)" >&2
  "${pin[@]}" "$build/bench/gemm_choice" "${gb_args[@]}" --benchmark_out="$work/gemm_choice.json" >/dev/null
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
if ((same_math)); then
  echo "side_by_side.sh: the float64 same-math check failed (ratios.py exit $same_math): the sides do not compute" \
       "the same function, so the speed ratios above compare different work" >&2
  exit 1
fi
