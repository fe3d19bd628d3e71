#!/usr/bin/env bash
# Configures (once) and builds hetps into build/; incremental and fast when nothing changed.
# CUDA kernels are built when nvcc exists (/usr/local/cuda/bin/nvcc or on PATH).
# Usage: deploy/build.sh [TARGET...] (default: everything, tests included)
set -euo pipefail
cd "$(dirname "$0")/.."

build_type="${HETPS_BUILD_TYPE:-Release}"
# Unity files of up to 16 sources: a fresh build parses each heavy header once per unity file
# instead of once per source (about a quarter less CPU: CI's budget, the quickstart's first
# run). HETPS_UNITY_BUILD=OFF configures a tree for editing, where a change recompiles one file.
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
    -DCMAKE_UNITY_BUILD="${HETPS_UNITY_BUILD:-ON}" -DCMAKE_UNITY_BUILD_BATCH_SIZE=16
fi
ninja -C build "$@"
