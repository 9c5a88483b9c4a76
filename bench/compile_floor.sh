#!/usr/bin/env bash
# bench/compile_floor.sh: what compiling a small user program costs, and how much of it is the floor that the
# library's dependencies set before any pipeprop code is compiled. Compiles, with the command a Release build uses
# for the examples (GCC, -O2 -march=native, the project's warnings), each of:
#   - the program at -O2 (what a user pays), at -O0 (front end and code generation without the optimizer) and with
#     -fsyntax-only (the front end alone: headers parsed, templates instantiated);
#   - a unit that includes the program's pipeprop headers and nothing else;
#   - a unit that includes only the external headers those pipeprop headers need (the C++ standard library headers,
#     oneTBB's flow graph, xsimd, Boost.Mp11, zlib), and the same without oneTBB and without xsimd.
# Each is compiled --runs times in turn; prints CPU seconds (user + sys) and peak RSS (MB) of every run, the load
# average and the CPU flags. GCC's front end keeps what it parses: a unit's peak memory cannot go below what its
# headers take.
#
# Usage: bench/compile_floor.sh [--program FILE (default examples/readme_example.cpp)] [--runs N (default 2)]
#                               [--cxx COMPILER (default c++)]
set -euo pipefail
cd "$(dirname "$0")/.."

program=examples/readme_example.cpp
runs=2
cxx=c++
while (($#)); do
  case "$1" in
    --program) program=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --cxx) cxx=$2; shift 2 ;;
    *) echo "compile_floor.sh: unknown argument $1 (--program FILE, --runs N, --cxx COMPILER)" >&2; exit 2 ;;
  esac
done
[[ -f $program ]] || { echo "compile_floor.sh: $program: no such file" >&2; exit 2; }
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "compile_floor.sh: --runs needs a positive integer, not '$runs'" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-DBOOST_ALL_NO_LIB -I examples -I include -DNDEBUG -ffp-contract=off -Wall -Wextra -Wno-unused-parameter
       -Wno-maybe-uninitialized -march=native -std=gnu++20)

# The program's own #include lines, and the external headers its pipeprop headers reach.
grep -E '^#include <pipeprop/' "$program" >"$work/headers.cpp"
echo 'int main() {}' >>"$work/headers.cpp"
# Headers included by pipeprop headers directly (depth 2 below the unit), named as the library names them.
"$cxx" "${flags[@]}" -fsyntax-only -H "$work/headers.cpp" 2>&1 >/dev/null |
  awk '/^\.+ include\/pipeprop\// { depth = length($1); inlib = 1; next }
       /^\.+ / { if (length($1) == depth + 1 && inlib) print $2; if (length($1) <= depth) inlib = 0 }' |
  sort -u >"$work/external_paths.txt"
: >"$work/external.cpp"
while read -r path; do
  name=$(sed -E 's#^.*/include/(c\+\+/[0-9]+/|x86_64-linux-gnu/)?##' <<<"$path")
  echo "#include <$name>" >>"$work/external.cpp"
done <"$work/external_paths.txt"
echo 'int main() {}' >>"$work/external.cpp"
grep -v -E 'oneapi/tbb|tbb/' "$work/external.cpp" >"$work/external_no_tbb.cpp"
grep -v -E 'xsimd/' "$work/external.cpp" >"$work/external_no_xsimd.cpp"
cp "$program" "$work/program.cpp"

measure() {  # $1 label, $2 source, the rest extra flags
  local label=$1 source=$2
  shift 2
  /usr/bin/time -f '%U %S %M' -o "$work/time" "$cxx" "${flags[@]}" "$@" -c "$source" -o "$work/out.o"
  awk -v l="$label" '{ printf "%-44s %6.2f CPU-s %6d MB\n", l, $1 + $2, $3 / 1024 }' "$work/time"
}

cpu_flags=$(lscpu | sed -n 's/^Flags:[[:space:]]*//p' | tr ' ' '\n' | grep -x -E 'avx2|avx512f|fma' | tr '\n' ' ')
echo "compile_floor.sh at $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null ||
  echo ' (with uncommitted changes)'), $(date '+%Y-%m-%d %H:%M %Z'); $("$cxx" --version | head -1)"
echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p'), $(nproc --all) cores; flags: ${cpu_flags:-none}"
echo "load average: $(uptime | sed 's/.*load average: //')"
echo "program: $program; external headers reached: $(grep -c include "$work/external.cpp")"
for ((r = 1; r <= runs; r++)); do
  echo "round $r of $runs"
  measure "program -O2" "$work/program.cpp" -O2
  measure "program -O0" "$work/program.cpp" -O0
  measure "program -fsyntax-only" "$work/program.cpp" -O2 -fsyntax-only
  measure "its pipeprop headers alone, -O2" "$work/headers.cpp" -O2
  measure "their external headers alone, -O2" "$work/external.cpp" -O2
  measure "  the same without oneTBB" "$work/external_no_tbb.cpp" -O2
  measure "  the same without xsimd" "$work/external_no_xsimd.cpp" -O2
done
echo "load average: $(uptime | sed 's/.*load average: //')"
