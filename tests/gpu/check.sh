#!/usr/bin/env bash
# Every check that needs an NVIDIA GPU, in one go: the CUDA comparisons (none may skip), the
# same under compute-sanitizer, the whole test suite, the GPU codecs' bandwidth against the
# device's own copy bandwidth, training on the GPU against the CPU path, and CUDA tensors
# through the Python module and hetps.torch (the module built for the host's Python first when
# the build came in a bundle).
#
#   tests/gpu/check.sh BUILD_DIR OUT_DIR [STAGE...]
#
# Stages (default: all, in this order): info cuda sanitizer suite codec train python. Each stage's
# full output goes to OUT_DIR/<stage>.log, benchmark JSON lines to OUT_DIR/<stage>.jsonl; a
# table of what passed is printed last. Exits non-zero when a stage failed.
# Environment (not HETPS_*, which the daemons read as flags): GPU_CHECK_SANITIZER_TOOLS
# (default: memcheck racecheck synccheck initcheck), GPU_CHECK_SANITIZER_TIMEOUT (seconds per
# run, default 600), GPU_CHECK_CTEST_EXCLUDE (a ctest -E regex for tests the machine cannot
# run, e.g. ones that need packages it lacks), GPU_CHECK_MODELS (train stage; mlp cnn),
# GPU_CHECK_PYTHON (python stage: the interpreter with PyTorch; python3).
set -uo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR OUT_DIR [info|cuda|sanitizer|suite|codec|train|python ...]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$2
shift 2
stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(info cuda sanitizer suite codec train python)
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
out=$(cd "$out" && pwd)
bin=$build/bin
tests=$build/tests
summary=()
failed=0

note() {  # stage, verdict, detail
  summary+=("$(printf '%-10s %-5s %s' "$1" "$2" "$3")")
  [ "$2" = ok ] || failed=1
}

# Runs a gtest binary; fails when any test failed or skipped (a GPU check must not skip here).
gtest_no_skip() {  # log, binary, args...
  local log=$1
  shift
  "$@" >>"$log" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then return $rc; fi
  if grep -q '^\[  SKIPPED \]' "$log"; then
    echo "a test skipped on a GPU machine" >>"$log"
    return 1
  fi
}

stage_info() {
  {
    nvidia-smi -L
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem \
      --format=csv
    nproc
    command -v compute-sanitizer
  } >"$out/info.log" 2>&1
  note info ok "$(nvidia-smi -L 2>/dev/null | head -1)"
}

stage_cuda() {
  local log=$out/cuda.log
  : >"$log"
  if gtest_no_skip "$log" "$tests/gpu_codec_test" --gtest_filter='-*UnavailableWithoutAGpu*' &&
    gtest_no_skip "$log" "$tests/model_test" --gtest_filter='ModelTest.Cuda*:ModelTest.DeviceChoice' &&
    gtest_no_skip "$log" "$tests/train_test" --gtest_filter='TrainTest.Cuda*'; then
    note cuda ok "$(grep -c '^\[       OK \]' "$log") CUDA comparisons passed, none skipped"
  else
    note cuda FAIL "see cuda.log"
  fi
}

stage_sanitizer() {
  local log=$out/sanitizer.log
  : >"$log"
  local ok=1
  for tool in ${GPU_CHECK_SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}; do
    for t in "gpu_codec_test --gtest_filter=-*UnavailableWithoutAGpu*" \
      "model_test --gtest_filter=ModelTest.Cuda*"; do
      echo "=== $tool $t" >>"$log"
      # shellcheck disable=SC2086
      if ! timeout "${GPU_CHECK_SANITIZER_TIMEOUT:-600}" compute-sanitizer --tool "$tool" --error-exitcode 97 \
        --print-limit 20 $tests/$t >>"$log" 2>&1; then
        ok=0
        echo "=== FAILED: $tool $t" >>"$log"
      fi
    done
  done
  if [ $ok = 1 ]; then
    note sanitizer ok "${GPU_CHECK_SANITIZER_TOOLS:-memcheck racecheck synccheck initcheck}: no errors"
  else
    note sanitizer FAIL "$(grep -c '^=== FAILED' "$log") runs failed, see sanitizer.log"
  fi
}

stage_suite() {
  local log=$out/suite.log
  (cd "$build" && ctest -j "$(nproc)" --timeout 300 --output-on-failure \
    ${GPU_CHECK_CTEST_EXCLUDE:+-E "$GPU_CHECK_CTEST_EXCLUDE"}) >"$log" 2>&1
  local rc=$?
  local line
  line=$(grep -E 'tests passed|tests failed' "$log" | tail -1)
  if [ $rc = 0 ] && ! grep -q 'Not Run\|\*\*\*Skipped' "$log"; then
    note suite ok "$line"
  else
    note suite FAIL "$line; skipped: $(grep -c '\*\*\*Skipped' "$log")"
  fi
}

stage_codec() {
  local log=$out/codec.log json=$out/codec.jsonl
  : >"$log"
  : >"$json"
  local ok=1
  for n in 16777216 268435456; do
    for codec in none fp16 topk:density=0.01 randomk:density=0.01 qsgd:levels=16 onebit efsign \
      terngrad dgc:density=0.01; do
      if ! "$bin/hetps-bench" codec --device gpu --codec "$codec" --elements "$n" \
        --seconds 0.5 >>"$json" 2>>"$log"; then
        ok=0
        echo "FAILED: $codec $n" >>"$log"
      fi
    done
  done
  if [ $ok = 1 ]; then note codec ok "$(wc -l <"$json") measurements"; else note codec FAIL "see codec.log"; fi
}

stage_train() {
  local log=$out/train.log json=$out/train.jsonl
  : >"$log"
  : >"$json"
  local ok=1
  # No straggler: samples/s and step shares of the device against the CPU path.
  local common=(--workers 4 --iterations 1500 --target 0.85 --straggler_slowdown 1)
  for model in ${GPU_CHECK_MODELS:-mlp cnn}; do
    for device in cpu cuda; do
      "$bin/hetps-bench" train --model "$model" --device "$device" "${common[@]}" \
        >>"$json" 2>>"$log" || ok=0
    done
  done
  for codec in topk:density=0.01,ef=1 dgc:density=0.01; do
    for device in cpu cuda; do
      "$bin/hetps-bench" train --model mlp --device "$device" "${common[@]}" \
        --codec "$codec" >>"$json" 2>>"$log" || ok=0
    done
  done
  if [ $ok = 1 ]; then note train ok "$(wc -l <"$json") runs"; else note train FAIL "see train.log"; fi
}

stage_python() {
  local log=$out/python.log json=$out/python.jsonl py=${GPU_CHECK_PYTHON:-python3}
  : >"$log"
  : >"$json"
  if [ -d "$build/bundle-kit" ]; then
    if ! "$src/tests/gpu/python_module.sh" "$build" "$py" >>"$log" 2>&1; then
      note python FAIL "the module did not build for $py, see python.log"
      return
    fi
    # Only the bundle's libraries the host lacks: its Python and PyTorch load the host's own
    # (newer) C++ runtime, OpenSSL, zlib, ...
    local libs=$build/bundle-lib-python name
    mkdir -p "$libs"
    for f in "$build"/bundle-lib/*; do
      name=$(basename "$f")
      ldconfig -p | grep -q "^[[:space:]]*$name " || ln -sf "$f" "$libs/"
    done
    local -x LD_LIBRARY_PATH=$libs
  fi
  # CUDA tensors (none may skip but the check meant for machines without a GPU), then the
  # module's other tests on this host's Python.
  local ok=1
  if ! PYTHONPATH=$build/python HETPS_BIN_DIR=$bin "$py" -m pytest -q -rA -p no:cacheprovider \
    -k "not without_a_gpu" "$src/tests/python/test_cuda.py" >>"$log" 2>&1 ||
    grep -q '^SKIPPED' "$log"; then
    ok=0
  fi
  PYTHONPATH=$build/python HETPS_BIN_DIR=$bin "$py" -m pytest -q -rA -p no:cacheprovider \
    -k "not the_example_trains" "$src/tests/python/test_client.py" \
    "$src/tests/python/test_torch.py" >>"$log" 2>&1 || ok=0
  PYTHONPATH=$build/python "$py" "$src/bench/python_pushpull.py" --bin_dir "$bin" --device cuda \
    --mb "${GPU_CHECK_PYTHON_MB:-1,64}" --seconds 0.3 --rounds 3 >>"$json" 2>>"$log" || ok=0
  if [ $ok = 1 ]; then
    note python ok "$(grep -cE '^PASSED' "$log") tests passed, $(grep -c '"op"' "$json") measurements"
  else
    note python FAIL "see python.log"
  fi
}

for s in "${stages[@]}"; do
  case $s in
    info | cuda | sanitizer | suite | codec | train | python) "stage_$s" ;;
    *)
      echo "unknown stage '$s'" >&2
      exit 2
      ;;
  esac
done
printf '%s\n' "${summary[@]}"
exit $failed
