#!/usr/bin/env bash
# Builds hetps and makes its Debian package(s) with cpack: the one way a package is made, run by
# the image's build stage (deploy/docker/Dockerfile) and by InstallTest (tests/install_test.sh)
# on CI's build tree. It builds every target, never a list: whatever an install rule names (the
# Python module, the dashboard, a daemon added later) is built before cpack looks for it.
# A BUILD_DIR that is not configured yet is configured for a package: Release, no tests, no
# CUDA (the image has no nvcc), plus any CMAKE_ARGS given.
# Usage: deploy/package.sh BUILD_DIR OUT_DIR [CMAKE_ARG...]   (prints the path of each .deb)
set -euo pipefail
usage() { sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in --help | -h) usage; exit 0 ;; esac
[ $# -ge 2 ] || { usage >&2; exit 2; }
src=$(cd "$(dirname "$0")/.." && pwd)
build=$1
out=$2
shift 2
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
    -DHETPS_WITH_CUDA=OFF "$@" >/dev/null
fi
ninja -C "$build" >/dev/null
mkdir -p "$out"
cpack -G DEB -B "$out" --config "$build/CPackConfig.cmake" >/dev/null
rm -rf "$out/_CPack_Packages"
ls "$out"/*.deb
