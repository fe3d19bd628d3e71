#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) with clang, AddressSanitizer and UndefinedBehaviorSanitizer
# into build-fuzz/, writes their seed corpora (real messages and files), and runs each target for
# SECONDS (default 20). Fails, naming the target and keeping its crashing input under
# build-fuzz/findings/, on a crash, a sanitizer report, a leak or an input that takes longer than
# 10 s. Needs clang-14, libclang-rt-14-dev and libfuzzer-14-dev (deploy/install_deps.sh --tests).
# Usage: deploy/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-20}"
if [ ! -f build-fuzz/build.ninja ]; then
  ./deploy/sanitize.sh --configure-clang
fi
ninja -C build-fuzz fuzz_targets

corpus=build-fuzz/corpus
findings=build-fuzz/findings
mkdir -p "$corpus" "$findings"
build-fuzz/bin/hetps-fuzz-seeds "$corpus"
targets=(codec_decode_fuzz spec_fuzz wire_fuzz idx_fuzz status_json_fuzz launch_args_fuzz
  log_record_fuzz checkpoint_file_fuzz)
failed=()
for t in "${targets[@]}"; do
  mkdir -p "$findings/$t"
  log="$findings/$t.log"
  echo "fuzz: $t for ${seconds} s ($(ls "$corpus/$t" | wc -l) inputs in its corpus)"
  if build-fuzz/bin/"$t" -seed=1 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 -artifact_prefix="$findings/$t/" \
      "$corpus/$t" >"$log" 2>&1; then
    { grep -E "^stat::number_of_executed_units|^stat::new_units_added" "$log" || true; } |
      sed "s/^/fuzz: $t: /"
  else
    echo "fuzz: FAILED: $t (its log: $log; the input: $(ls "$findings/$t" | head -1))"
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -10 || true
    failed+=("$t")
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}"
  exit 1
fi
echo "fuzz: all ${#targets[@]} targets ran ${seconds} s each without a failure"
