#!/usr/bin/env bash
# Runs the tests under AddressSanitizer (with LeakSanitizer) and UndefinedBehaviorSanitizer.
#
#   deploy/sanitize.sh --quick   the unit tests of the code that reads what arrives from the
#                                network, from files and from the command line (common/: wire,
#                                codecs, auth, specs, shard map; cli/: launch arguments, hosts,
#                                ctl, fed, health), built by clang 14 into build-fuzz/ beside the
#                                fuzz targets (deploy/fuzz.sh). deploy/test.sh runs this.
#   deploy/sanitize.sh           the whole tree built by g++ with the sanitizers into build-asan/
#                                (build type Sanitize: -O1, asserts on), then the whole suite but
#                                the tests tests/unsanitized.txt lists (each line says why); the
#                                daemons the tests start are sanitized too.
#   deploy/sanitize.sh --configure-clang   only configures build-fuzz/ (deploy/fuzz.sh uses it).
#
# Every process writes its sanitizer reports to build-*/sanitizer-reports/ (a test that does not
# look at a daemon's exit status still cannot hide its report); the run fails if a test fails or
# any report was written, and prints the reports. Needs what deploy/install_deps.sh --tests
# installs.
set -euo pipefail
cd "$(dirname "$0")/.."

# Unity files of up to 16 sources: this tree has no precompiled header, and each file would parse
# the same heavy headers again (a fresh build takes about 45% less CPU).
configure_clang() {
  CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DHETPS_FUZZ=ON -DHETPS_WITH_CUDA=OFF -DBUILD_TESTING=ON -DCMAKE_UNITY_BUILD=ON \
    -DCMAKE_UNITY_BUILD_BATCH_SIZE=16 >/dev/null
}

mode="${1:-all}"
case "$mode" in
  --configure-clang)
    configure_clang
    exit 0
    ;;
  --quick)
    dir=build-fuzz
    configure_clang
    ninja -C "$dir"
    # It checks that the role binaries exist in the bin dir, which this tree does not build.
    exclude=(-E '^HostsTest\.CheckHostsNamesTheHostAndTheMissingBinary$')
    ;;
  all)
    dir=build-asan
    if [ ! -f "$dir/build.ninja" ]; then
      cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Sanitize -DHETPS_SANITIZE=ON \
        -DHETPS_WITH_CUDA=OFF >/dev/null
    fi
    ninja -C "$dir"
    # tests/unsanitized.txt: "REGEX  # why" per line; '#' lines are comments.
    pattern=$(sed -e 's/#.*//' -e 's/[[:space:]]*$//' tests/unsanitized.txt | grep -v '^$' |
      paste -sd'|')
    exclude=(-E "$pattern")
    ;;
  *)
    echo "usage: deploy/sanitize.sh [--quick | --configure-clang]" >&2
    exit 2
    ;;
esac

reports="$PWD/$dir/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="log_path=$reports/asan:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1"
export UBSAN_OPTIONS="log_path=$reports/ubsan:print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="log_path=$reports/lsan"

status=0
(cd "$dir" && ctest --output-on-failure -j "$(nproc)" --timeout 300 "${exclude[@]}") || status=1
found=$(find "$reports" -type f | sort)
if [ -n "$found" ]; then
  echo "sanitize: $(echo "$found" | wc -l) sanitizer report(s):"
  for f in $found; do
    echo "--- $f"
    head -40 "$f"
  done
  status=1
fi
if [ "$status" -ne 0 ]; then
  echo "sanitize: FAILED ($mode)"
  exit 1
fi
echo "sanitize: every test passed under AddressSanitizer and UBSan, no report ($mode)"
