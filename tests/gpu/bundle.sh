#!/usr/bin/env bash
# Packs a CUDA build for a GPU host that cannot build the project itself (no Debian -dev
# packages, no network): the programs and tests, stripped; ctest's test lists; the dashboard;
# every shared library they load that is not glibc's or CUDA's own (the host brings its CUDA
# runtime and driver); and, if given, the Fashion-MNIST files. The bundle travels to hosts that
# limit what they take (a lent machine takes 64 MiB), so it is xz-compressed.
#
#   tests/gpu/bundle.sh BUILD_DIR OUT.tar.xz [DATASET_DIR]
#
# On the GPU host, with the source tree at the same path as here (a symbolic link will do):
#   mkdir -p BUILD_DIR && tar -xJf OUT.tar.xz -C BUILD_DIR
#   export LD_LIBRARY_PATH=BUILD_DIR/bundle-lib
#   tests/gpu/check.sh BUILD_DIR OUT_DIR
# The dataset, if packed, lands in BUILD_DIR/bundle-data (pass it as --dataset_dir, or copy it
# to /usr/share/datasets/fashion-mnist where the tests look). The Python module is built there
# from BUILD_DIR/bundle-kit by tests/gpu/python_module.sh (check.sh's python stage does it).
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 BUILD_DIR OUT.tar.xz [DATASET_DIR]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
out=$(realpath -m "$2")
dataset=${3:-}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

cd "$build"
# Programs: every ELF executable under bin/ and tests/ (not object files, not scripts), less
# the sanitized ones (hostile_server_test: its runtime libraries would double the bundle, and it
# needs no GPU; exclude its tests from ctest there).
mapfile -t programs < <(find bin tests -maxdepth 1 -type f -perm -u+x -print |
  while read -r f; do
    file -b "$f" | grep -q '^ELF .*executable' || continue
    ldd "$f" 2>/dev/null | grep -q libasan || echo "$f"
  done)
for f in "${programs[@]}"; do
  mkdir -p "$stage/$(dirname "$f")"
  strip -o "$stage/$f" "$f"
done
# What ctest reads: the test lists, with the tests gtest_discover_tests found.
find . -name CTestTestfile.cmake -o -name '*_include.cmake' -o -name '*_tests.cmake' |
  while read -r f; do
    mkdir -p "$stage/$(dirname "$f")"
    cp "$f" "$stage/$f"
  done
[ ! -d share ] || cp -r share "$stage/"

# Libraries: the closure of what the programs load, less glibc and CUDA (the host's own).
mkdir -p "$stage/bundle-lib"
ldd "${programs[@]}" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
  while read -r name path; do
    case $name in
      libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | \
        ld-linux*.so.* | libcuda.so.* | libcudart.so.* | libcublas*.so.*) ;;
      *) cp -L "$path" "$stage/bundle-lib/$name" ;;
    esac
  done
# The Python module's kit (tests/gpu/python_module.sh builds hetps._hetps there, for the host's
# own Python): the static libraries the module links, the generated protobuf headers, and the
# third-party headers its sources include.
if [ -f worker/libhetps_client.a ]; then
  mkdir -p "$stage/bundle-kit/lib" "$stage/bundle-kit/include"
  for a in worker/libhetps_client.a worker/libhetps_worker.a worker/libhetps_link.a \
    common/libhetps_secagg.a common/libhetps_common.a proto/libhetps_proto.a \
    worker/libhetps_cuda_kernels.a; do
    [ ! -f "$a" ] || cp "$a" "$stage/bundle-kit/lib/"
  done
  (cd proto/gen && find . -name '*.h' -exec cp --parents {} "$stage/bundle-kit/include/" \;)
  cp -r /usr/include/google /usr/include/fmt "$stage/bundle-kit/include/"
  if [ -d /usr/include/pybind11 ]; then  # the fallback when the host's pybind11 fails
    mkdir -p "$stage/bundle-kit/pybind11-debian"
    cp -r /usr/include/pybind11 "$stage/bundle-kit/pybind11-debian/"
  fi
fi
if [ -n "$dataset" ]; then
  mkdir -p "$stage/bundle-data"
  cp "$dataset"/*-ubyte* "$stage/bundle-data/"
fi
tar -C "$stage" -cf - . | xz -T0 -6 >"$out"
echo "bundle: $out $(du -h "$out" | cut -f1) (${#programs[@]} programs," \
  "$(find "$stage/bundle-lib" -type f | wc -l) libraries)"
