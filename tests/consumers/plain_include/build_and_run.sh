#!/bin/sh
# Consumer "project" without CMake: compile one .cpp against the umbrella header with the include directory and the
# dependency flags only, then run it. Usage: build_and_run.sh <c++ compiler> <pipeprop include dir> <source> <out dir>
# The flags are what a user of a plain Makefile writes: C++20, pipeprop's include dir (xtensor, xsimd, TBB, Boost
# and cblas.h are in the system include path on Debian 12), -ffp-contract=off (what the CMake target adds, for
# bit-identical executors) and the libraries BLAS (OpenBLAS), TBB and zlib.
set -eu
cxx=$1 include_dir=$2 source=$3 out_dir=$4
mkdir -p "$out_dir"
"$cxx" -std=c++20 -O1 -ffp-contract=off -I"$include_dir" "$source" -o "$out_dir/consumer_plain_include" -lopenblas -ltbb -lz -pthread
"$out_dir/consumer_plain_include"
