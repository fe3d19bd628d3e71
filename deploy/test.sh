#!/usr/bin/env bash
# Installs what is missing, builds, runs every test with ctest, then the unit tests of the code
# that reads hostile input under AddressSanitizer and UBSan (deploy/sanitize.sh --quick), then
# each fuzz target for a bounded time (deploy/fuzz.sh, HETPS_FUZZ_SECONDS each, default 15).
# Each phase says how long it took (CI has 30 minutes on 2 cores for all of them).
set -euo pipefail
cd "$(dirname "$0")/.."

phase() {  # phase NAME COMMAND...
  local name="$1" start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s (total $SECONDS s)"
}

phase install ./deploy/install_deps.sh --tests
phase build ./deploy/build.sh
phase ctest bash -c 'cd build && ctest --output-on-failure -j "$(nproc)" --timeout 300'
phase sanitize ./deploy/sanitize.sh --quick
phase fuzz ./deploy/fuzz.sh "${HETPS_FUZZ_SECONDS:-15}"
