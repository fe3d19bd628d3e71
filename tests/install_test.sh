#!/usr/bin/env bash
# hetps as a user gets it. `cmake --install` into a scratch prefix: client.h compiles from the
# installed headers alone; the out-of-tree example (examples/cpp) builds against it with
# find_package(hetps) and trains through a cluster of the installed daemons; the installed
# `hetps launch` runs a cluster whose scheduler finds the installed dashboard. The .deb made by
# deploy/package.sh (as the image makes it), split into hetps and hetps-dev: the runtime
# package's declared dependencies are installed Debian packages here, and the binaries unpacked
# from it (dpkg-deb -x into a scratch root) run a cluster the same way. Everything
# lives under one scratch folder, removed at the end, also on failure.
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
# The public API: <hetps/client.h> compiles from the installed headers alone, and they are all
# there is under include/: no generated protobuf header, no internal folder.
echo '#include <hetps/client.h>' |
  c++ -std=c++20 -fsyntax-only -I"$prefix/include" -x c++ - ||
  { echo "FAIL: hetps/client.h needs headers that are not installed"; exit 1; }
extra=$(cd "$prefix/include" && find . -type f ! -path './hetps/*.h' -o -type d -path './hetps/*')
[ -z "$extra" ] || { echo "FAIL: installed beside the public headers: $extra"; exit 1; }
if grep -rl 'pb\.h\|"common/\|"worker/' "$prefix/include/hetps"; then
  echo "FAIL: a public header includes an internal one"; exit 1
fi
test -f "$prefix/share/hetps/dashboard/index.html" || { echo "FAIL: no installed dashboard"; exit 1; }

cmake -S "$src/examples/cpp" -B "$scratch/example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$scratch/example" >/dev/null

bin=$prefix/bin
"$bin/hetps-scheduler" --num_servers=1 --num_workers=1 --endpoint_file="$scratch/endpoint" \
  >"$scratch/scheduler.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -s "$scratch/endpoint" ] && break; sleep 0.1; done
endpoint=$(cat "$scratch/endpoint")
"$bin/hetps-server" --scheduler="$endpoint" --optimizer=sgd:lr=0.5 --init=zeros \
  >"$scratch/server.log" 2>&1 &
pids+=($!)
out=$(HETPS_SCHEDULER="$endpoint" timeout 60 "$scratch/example/sgd_example")
echo "$out"
distance=$(echo "$out" | sed -n 's/.*after 20 steps \([0-9.]*\)$/\1/p')
awk -v d="$distance" 'BEGIN { exit !(d != "" && d < 0.01) }' ||
  { echo "FAIL: the example did not converge"; cat "$scratch/server.log"; exit 1; }

# The installed Python package, when the build made one: imported from the prefix (not the
# build tree), its extension loads and its errors are hetps exceptions.
if [ -d "$build/python/hetps" ]; then
  PYTHONPATH="$prefix/lib/python3/dist-packages" /usr/bin/python3 -c "
import hetps, hetps.torch
assert hetps.__file__.startswith('$prefix'), hetps.__file__
try:
    hetps.Client('tcp://127.0.0.1:1', join_timeout_ms=200)
except hetps.DeadlineExceeded as e:
    assert e.code == 'DEADLINE_EXCEEDED'
else:
    raise SystemExit('no error from a scheduler that is not there')
" || { echo "FAIL: the installed Python package"; exit 1; }
fi

# `hetps launch` from an installed bin/ folder: a cluster whose scheduler finds its dashboard.
launch_from() {
  local log=$scratch/launch-$2.log
  "$1/hetps" launch --servers 1 --workers 2 --workload=synthetic --iterations=5 \
    --tensor_elements=1000 --run_dir="$scratch/run-$2" --http_port=0 >"$log" 2>&1 ||
    { echo "FAIL: hetps launch from $1"; cat "$log"; exit 1; }
  grep -q "all 2 workers finished" "$log" || { echo "FAIL: $log"; exit 1; }
  if grep -q "no dashboard at" "$log"; then
    echo "FAIL: the scheduler in $1 did not find its dashboard"; exit 1
  fi
}
launch_from "$bin" prefix
echo "PASS: installed tree, example and launch"

# Made the way the image's build stage makes it (deploy/package.sh: every target, then cpack).
"$src/deploy/package.sh" "$build" "$scratch/pkg" >/dev/null
deb=$(ls "$scratch"/pkg/hetps_*_amd64.deb)
dev=$(ls "$scratch"/pkg/hetps-dev_*_amd64.deb)
# Runtime and development files apart: the binaries in hetps, the headers, static libraries
# and CMake package in hetps-dev, which needs hetps of its own version.
dpkg-deb -c "$deb" | awk '{print $NF}' >"$scratch/runtime.files"
dpkg-deb -c "$dev" | awk '{print $NF}' >"$scratch/dev.files"
for d in hetps-scheduler hetps-server hetps-worker hetps-aggregator; do
  grep -qx "./usr/bin/$d" "$scratch/runtime.files" || { echo "FAIL: no $d in $deb"; exit 1; }
done
if grep -E '^./usr/include/|\.a$' "$scratch/runtime.files"; then
  echo "FAIL: $(basename "$deb") holds development files"; exit 1
fi
grep -qx './usr/include/hetps/client.h' "$scratch/dev.files" || { echo "FAIL: no client.h in $dev"; exit 1; }
grep -qx './usr/lib/cmake/hetps/hetpsConfig.cmake' "$scratch/dev.files" ||
  { echo "FAIL: no CMake package in $dev"; exit 1; }
if grep '^./usr/bin/' "$scratch/dev.files"; then echo "FAIL: $(basename "$dev") holds binaries"; exit 1; fi
version=$(dpkg-deb -f "$deb" Version)
dpkg-deb -f "$dev" Depends | grep -q "hetps (= $version)" ||
  { echo "FAIL: $(basename "$dev") does not depend on hetps (= $version)"; exit 1; }
# What is installed here: package names and the virtual names they provide.
dpkg-query -W -f='${db:Status-Abbrev} ${Package} ${Provides}\n' |
  awk '$1 == "ii" { print $2; for (i = 3; i <= NF; ++i) if ($i !~ /^[(=<>]/ && $i !~ /\)/) print $i }' |
  tr -d ',' | sed 's/:.*//' | sort -u >"$scratch/installed"
dpkg-deb -f "$deb" Depends | tr ',' '\n' | while read -r dependency; do
  [ -z "$dependency" ] && continue
  satisfied=no
  for alternative in $(echo "$dependency" | tr '|' '\n' | awk '{print $1}'); do
    grep -qx "$alternative" "$scratch/installed" && satisfied=yes
  done
  [ $satisfied = yes ] ||
    { echo "FAIL: $(basename "$deb") depends on '$dependency', which nothing here provides"; exit 1; }
done
dpkg-deb -x "$deb" "$scratch/root"
launch_from "$scratch/root/usr/bin" deb
echo "PASS: $(basename "$deb") unpacked runs a cluster"
