#!/usr/bin/env bash
# Configures (once) and builds hetps into build/; incremental and fast when nothing changed.
# CUDA kernels are built when nvcc exists (/usr/local/cuda/bin/nvcc or on PATH).
# Usage: deploy/build.sh [TARGET...] (default: everything, tests included)
set -euo pipefail
cd "$(dirname "$0")/.."

build_type="${HETPS_BUILD_TYPE:-Release}"
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type"
fi
ninja -C build "$@"
