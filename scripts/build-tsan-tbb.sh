#!/usr/bin/env bash
# Builds oneTBB's libtbb with ThreadSanitizer from Debian's source package of the installed libtbb-dev version, for
# the TSan test programs (tests/hardening.cmake: ctest runs them with LD_LIBRARY_PATH=<dir>/lib, so they load this
# libtbb.so.12 instead of Debian's). Debian's libtbb is not instrumented: TSan does not see the synchronization of
# oneTBB's scheduler and reports ~900 false races per executor test program; with this build it sees all of it.
# Usage: scripts/build-tsan-tbb.sh <dir>   (idempotent: does nothing when <dir>/lib/libtbb.so.12 exists for the
#                                            installed version)
# The source comes through apt-get with a private deb-src list and state directory under <dir> (the system's apt
# configuration is not touched); only libtbb is built (no tbbmalloc, no tests), one job, a few minutes.
set -euo pipefail
dir=$(realpath -m "$1")
version=$(dpkg-query -W -f='${Version}' libtbb-dev)
stamp="$dir/lib/.version"
if [[ -f "$dir/lib/libtbb.so.12" && -f "$stamp" && "$(cat "$stamp")" == "$version" ]]; then
  echo "build-tsan-tbb: $dir/lib/libtbb.so.12 (oneTBB $version, TSan) is up to date"; exit 0
fi
mkdir -p "$dir/apt/lists/partial" "$dir/src"
cat > "$dir/apt/sources.list" <<LIST
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-updates main
deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bookworm-security main
LIST
apt_opts=(-o "Dir::Etc::SourceList=$dir/apt/sources.list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$dir/apt/lists" -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
apt-get "${apt_opts[@]}" update -qq
rm -rf "$dir/src/onetbb"
(cd "$dir/src" && apt-get "${apt_opts[@]}" source --download-only -qq "onetbb=$version" &&
 dpkg-source -x --no-check onetbb_*.dsc onetbb >/dev/null)
# (g++ warns -Wtsan that TSan does not model atomic_thread_fence, which oneTBB's concurrent_monitor uses: into the
# log, like the rest of the build output.)
if ! { cmake -S "$dir/src/onetbb" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release -DTBB_TEST=OFF -DTBBMALLOC_BUILD=OFF \
         -DTBB_STRICT=OFF -DTBB_ENABLE_IPO=OFF -DTBB_SANITIZE=thread -DCMAKE_CXX_COMPILER=g++ &&
       cmake --build "$dir/build" --target tbb -j1; } >"$dir/build.log" 2>&1; then
  tail -30 "$dir/build.log"; echo "build-tsan-tbb: building oneTBB failed (log: $dir/build.log)"; exit 1
fi
mkdir -p "$dir/lib"
cp -a "$(dirname "$(find "$dir/build" -name 'libtbb.so.12*' -type f | head -1)")"/libtbb.so.12* "$dir/lib/"
echo "$version" > "$stamp"
echo "build-tsan-tbb: built $dir/lib/libtbb.so.12 (oneTBB $version, -fsanitize=thread)"
