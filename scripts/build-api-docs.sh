#!/usr/bin/env bash
# Builds the API reference (HTML) from the public headers with Doxygen (docs/Doxyfile; Debian's `doxygen`, installed
# by scripts/install-deps.sh) and fails when Doxygen prints any warning: a public entity without a doc comment, a
# broken \ref or \copydoc, a parameter documented under a wrong name, a dead link between the Markdown pages.
# Prints every warning (file:line: text, paths relative to the repository) and exits 1 if there is one, 0 otherwise;
# 2 when doxygen is missing. The ctest doc_api_reference runs it.
# Usage: scripts/build-api-docs.sh [out-dir]   (default: build/api-docs; open out-dir/html/index.html)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-build/api-docs}
[[ $out = /* ]] || out=$PWD/$out
if ! command -v doxygen >/dev/null; then
  echo "build-api-docs: doxygen not found (scripts/install-deps.sh installs it)" >&2
  exit 2
fi
mkdir -p "$out"
log=$out/doxygen-warnings.txt
# Every path in docs/Doxyfile is relative to the repository root; the output directory is the only override.
cd "$root"
status=0
{ cat docs/Doxyfile; echo "OUTPUT_DIRECTORY = $out"; } | doxygen - >/dev/null 2>"$log" || status=$?
# Doxygen's messages name files by absolute path: make them relative to the repository.
sed -i "s|$root/||g" "$log"
count=$(grep -c . "$log" || true)
if ((status)); then
  cat "$log" >&2
  echo "build-api-docs: doxygen failed (exit status $status)" >&2
  exit 1
fi
if ((count)); then
  cat "$log" >&2
  echo "build-api-docs: $count Doxygen warning(s) (listed above; also in $log)" >&2
  exit 1
fi
echo "build-api-docs: no warnings; the reference is $out/html/index.html"
