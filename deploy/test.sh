#!/usr/bin/env bash
# Installs what is missing, builds, runs every test with ctest, then the unit tests of the code
# that reads hostile input under AddressSanitizer and UBSan (deploy/sanitize.sh --quick), then
# each fuzz target for a bounded time (deploy/fuzz.sh, HETPS_FUZZ_SECONDS each, default 15).
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/install_deps.sh --tests
./deploy/build.sh
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 300)
./deploy/sanitize.sh --quick
./deploy/fuzz.sh "${HETPS_FUZZ_SECONDS:-15}"
