#!/usr/bin/env bash
# Installs everything pipeprop needs on Debian 12 (idempotent: already-installed packages are left alone).
# clang-14 + libclang-rt-14-dev: libFuzzer and the sanitizer runtimes of the fuzz targets (tests/fuzz).
# libopenmpi-dev + openmpi-bin: stages in several processes (include/pipeprop/mpi, tests/mpi; -DPIPEPROP_WITH_MPI=ON).
# doxygen: the API reference (scripts/build-api-docs.sh and its ctest doc_api_reference).
# python3-numpy: the PB stability model's check (bench/pb_stability.py, ctest pb_stability_model).
# Usage: scripts/install-deps.sh [--with-libtorch] [--with-torch] [--with-plots]   (--with-libtorch: also libtorch-dev,
# for the libtorch embedding example and its tests (scripts/test.sh asks for it); --with-torch: also python3-torch
# and libtorch-dev for bench/'s side-by-side comparisons with PyTorch and libtorch; the library itself needs
# neither; --with-plots: python3-matplotlib for bench/plot_fidelity.py)
set -euo pipefail
packages=(
  build-essential cmake
  libxtensor-dev libxsimd-dev xtl-dev libtbb-dev libboost-dev catch2
  libopenblas-dev zlib1g-dev libcli11-dev libfmt-dev libbenchmark-dev
  clang-14 libclang-rt-14-dev
  libopenmpi-dev openmpi-bin
  doxygen python3-numpy
  dataset-fashion-mnist fortunes
)
for option in "$@"; do
  case "$option" in
    --with-libtorch) packages+=(libtorch-dev) ;;
    --with-torch) packages+=(python3-torch python3-numpy libtorch-dev) ;;
    --with-plots) packages+=(python3-matplotlib) ;;
    *) echo "install-deps: unknown option '$option' (--with-libtorch, --with-torch, --with-plots)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo_cmd=""; [[ $(id -u) -ne 0 ]] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq
  $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "install-deps: all ${#packages[@]} packages present"
