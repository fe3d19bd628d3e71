#!/usr/bin/env bash
# The installed tree as a user gets it: `cmake --install` into a scratch prefix; client.h
# compiles from the installed headers alone; the out-of-tree example (examples/cpp) builds
# against it with find_package(hetps) and trains through a cluster of the installed daemons;
# the installed `hetps launch` runs a cluster and its scheduler finds the installed dashboard.
# Everything lives under one scratch folder, removed at the end, also on failure.
# Usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1
src=$2
scratch=$(mktemp -d /tmp/hetps-install-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT

prefix=$scratch/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
echo '#include "worker/client.h"' |
  c++ -std=c++20 -fsyntax-only -I"$prefix/include/hetps" -x c++ - ||
  { echo "FAIL: worker/client.h needs headers that are not installed"; exit 1; }
test -f "$prefix/share/hetps/dashboard/index.html" || { echo "FAIL: no installed dashboard"; exit 1; }

cmake -S "$src/examples/cpp" -B "$scratch/example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$scratch/example" >/dev/null

bin=$prefix/bin
"$bin/hetps-scheduler" --num_servers=1 --num_workers=1 --endpoint_file="$scratch/endpoint" \
  2>"$scratch/scheduler.log" &
pids+=($!)
for _ in $(seq 100); do [ -s "$scratch/endpoint" ] && break; sleep 0.1; done
endpoint=$(cat "$scratch/endpoint")
"$bin/hetps-server" --scheduler="$endpoint" --optimizer=sgd:lr=0.5 --init=zeros \
  2>"$scratch/server.log" &
pids+=($!)
out=$(HETPS_SCHEDULER="$endpoint" timeout 60 "$scratch/example/sgd_example")
echo "$out"
distance=$(echo "$out" | sed -n 's/.*after 20 steps \([0-9.]*\)$/\1/p')
awk -v d="$distance" 'BEGIN { exit !(d != "" && d < 0.01) }' ||
  { echo "FAIL: the example did not converge"; cat "$scratch/server.log"; exit 1; }

"$bin/hetps" launch --servers 1 --workers 2 --workload=synthetic --iterations=5 \
  --tensor_elements=1000 --run_dir="$scratch/run" --http_port=0 >"$scratch/launch.log" 2>&1 ||
  { echo "FAIL: the installed hetps launch"; cat "$scratch/launch.log"; exit 1; }
grep -q "all 2 workers finished" "$scratch/launch.log"
if grep -qi "dashboard.*not found\|no dashboard" "$scratch/launch.log"; then
  echo "FAIL: the installed scheduler did not find its dashboard"; exit 1
fi
echo "PASS: installed tree, example and launch"
