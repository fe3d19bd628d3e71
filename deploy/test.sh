#!/usr/bin/env bash
# Installs what is missing, builds, runs every test with ctest, then the unit tests of the code
# that reads hostile input under AddressSanitizer and UBSan (deploy/sanitize.sh --quick), then
# each fuzz target for a bounded time (deploy/fuzz.sh, HETPS_FUZZ_SECONDS each, default 3).
# Each phase says how long it took (CI has 30 minutes on 2 cores for all of them); the test-only
# packages install while the build compiles, and the sanitizer build overlaps ctest at idle
# priority, so their phases show only what was left of them.
set -euo pipefail
cd "$(dirname "$0")/.."

phase() {  # phase NAME COMMAND...
  local name="$1" start=$SECONDS
  shift
  "$@"
  echo "test.sh: $name took $((SECONDS - start)) s (total $SECONDS s)"
}

phase install ./deploy/install_deps.sh
# What only the tests need (PyTorch, Chromium, Slurm, Prometheus, clang for the sanitized tree:
# about 600 MiB from a fresh machine) is fetched and installed while the build compiles: apt
# waits on the network and the disk, the compiler on the CPU. The build needs none of it.
mkdir -p build
./deploy/install_deps.sh --tests >build/install-tests.log 2>&1 &
test_packages=$!
phase build ./deploy/build.sh
installed() {
  wait "$test_packages" || { cat build/install-tests.log; return 1; }
}
phase "test packages (after the build)" installed

# While ctest runs, the sanitizer tree compiles on the CPU time the tests leave idle (they wait
# on sockets, timers and each other for about 40% of it): SCHED_IDLE runs it only when no test
# wants a core, so it cannot slow one down. Its output goes to a log; deploy/sanitize.sh builds
# whatever is left (and shows any error) afterwards.
./deploy/sanitize.sh --configure-clang
idle=(nice -n 19)
if chrt --idle 0 true 2>/dev/null; then idle=(chrt --idle 0); fi
"${idle[@]}" ninja -C build-fuzz >build-fuzz/idle-build.log 2>&1 &
idle_build=$!
trap 'kill "$idle_build" 2>/dev/null || true' EXIT
phase ctest bash -c 'cd build && ctest --output-on-failure -j "$(nproc)" --timeout 300'
sanitize() {
  wait "$idle_build" || true  # alone now, it runs at full speed
  ./deploy/sanitize.sh --quick
}
phase sanitize sanitize
phase fuzz ./deploy/fuzz.sh "${HETPS_FUZZ_SECONDS:-3}"
