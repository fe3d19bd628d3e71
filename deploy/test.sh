#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/install_deps.sh --tests
./deploy/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" --timeout 300
