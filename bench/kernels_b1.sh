#!/usr/bin/env bash
# bench/kernels_b1.sh: the b = 1 kernel measurements in one command, printed as markdown tables (the
# numbers of bench/README.md, section "Kernels at b = 1"):
#   1. gemm_choice: pipeprop's xsimd GEMM (what kernels::gemm runs) against OpenBLAS sgemm at the layers' GEMM
#      shapes (small CNN, ResNet-20) and, for the b = 1 dense products, against the level-2 calls they are
#      (cblas_sgemv forward and p1, cblas_sger p2);
#   2. layers_bench: conv2d and dense layers at b = 1 (small CNN and ResNet-20's distinct layers) against sgemm at the
#      GEMM-equivalent shape and, for dense, against sgemv / sger;
#   3. roofline: one core's peak, the b = 1 training step of both networks against it, and the nodes that lose most.
# Each for the -march=native build and the -march=x86-64-v3 (AVX2 + FMA) build of the same programs
# (bench/CMakeLists.txt); OpenBLAS with the environment's OPENBLAS_CORETYPE (this machine: Haswell, AVX2 kernels)
# and, for the native build, also with OPENBLAS_CORETYPE unset (OpenBLAS picks its kernels for this CPU).
# Usage: bench/kernels_b1.sh [--build-dir DIR] [--reps N] [--quick]
#   --quick: 3 repetitions and a short roofline (a smoke run); the default takes about 6 minutes on 2 cores.
# Run on a quiet machine: the load average is printed before and after every program.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build-bench
reps=5
quick=0
while (($#)); do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --quick) quick=1; reps=3; shift ;;
    *) echo "kernels_b1.sh: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done

cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPIPEPROP_BUILD_BENCH=ON >/dev/null
variants=("")
if grep -q '^PIPEPROP_BENCH_X86_64_V3:BOOL=ON' "$build/CMakeCache.txt"; then variants+=("_x86_64_v3"); fi
targets=()
for v in "${variants[@]}"; do targets+=("gemm_choice$v" "layers_bench$v" "roofline$v"); done
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >/dev/null

python=/usr/bin/python3
work="$build/kernels_b1"
mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
env_coretype=${OPENBLAS_CORETYPE:-}
load() { echo "(load average $(cut -d' ' -f1-3 /proc/loadavg))"; }

echo "# Kernels at b = 1"
echo
echo "date: $(date '+%Y-%m-%d %H:%M %Z'); commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- include bench || echo ' + uncommitted changes')"
echo "cpu: $(lscpu | sed -n "s/^Model name: *//p"), $(nproc --all) cores; flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512vl' /proc/cpuinfo | sort -u | tr '\n' ' ')"
echo "compiler: $(c++ --version | head -n 1); OPENBLAS_CORETYPE in the environment: ${env_coretype:-unset}"
echo "start $(load)"

gb_args=(--benchmark_repetitions="$reps" --benchmark_enable_random_interleaving=true --benchmark_min_time=0.05
         --benchmark_out_format=json)
core_of() { "$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["context"].get("openblas_core", "?"))' "$1"; }

for v in "${variants[@]}"; do
  march=native
  [[ "$v" == "_x86_64_v3" ]] && march=x86-64-v3
  coretypes=("env")
  [[ -z "$v" && -n "$env_coretype" ]] && coretypes+=("unset")
  for ct in "${coretypes[@]}"; do
    run=(env)
    [[ "$ct" == "unset" ]] && run=(env -u OPENBLAS_CORETYPE)
    tag="${march}_${ct}"
    "${run[@]}" "$build/bench/gemm_choice$v" "${gb_args[@]}" --benchmark_filter='b1_|conv[12]_|res_' \
      --benchmark_out="$work/gemm_$tag.json" >/dev/null 2>&1
    "${run[@]}" "$build/bench/layers_bench$v" "${gb_args[@]}" --benchmark_filter='b1/' \
      --benchmark_out="$work/layers_$tag.json" >/dev/null 2>&1
    core=$(core_of "$work/gemm_$tag.json")
    echo
    echo "## -march=$march, OpenBLAS core $core (OPENBLAS_CORETYPE ${ct/env/${env_coretype:-unset}}) $(load)"
    echo
    echo "### GEMM kernels: pipeprop xsimd / OpenBLAS sgemm (GFLOP/s ratio > 1: pipeprop faster)"
    echo
    "$python" bench/ratios.py pairs "$work/gemm_$tag.json" --base blas --other xsimd
    echo
    echo "### b = 1 dense products: pipeprop xsimd / OpenBLAS sgemv, sger"
    echo
    "$python" bench/ratios.py pairs "$work/gemm_$tag.json" --base blas2 --other xsimd
    echo
    echo "### layers at b = 1: layer / sgemm at the GEMM-equivalent shape (target >= 0.6 for conv2d)"
    echo
    "$python" bench/ratios.py pairs "$work/layers_$tag.json" --base sgemm --other layer
    echo
    echo "### dense layers at b = 1: layer / sgemv, sger (target >= 1)"
    echo
    "$python" bench/ratios.py pairs "$work/layers_$tag.json" --base blas2 --other layer
  done
  echo
  roofline_args=()
  ((quick)) && roofline_args+=(--quick)
  "$build/bench/roofline$v" "${roofline_args[@]}"
done
echo
echo "end $(load)"
