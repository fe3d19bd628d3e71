#!/usr/bin/env bash
# Builds the Python module hetps._hetps on a GPU host that cannot configure the project, for
# that host's Python, from the kit bundle.sh packed into BUILD_DIR/bundle-kit (static libraries,
# generated and third-party headers) and the shared libraries in BUILD_DIR/bundle-lib. The host
# brings a C++20 compiler, CUDA, its Python's headers and pybind11 (pip's; Debian's from the kit
# when it has none or the build with it fails; PYBIND11_INCLUDE names another). The package lands
# in BUILD_DIR/python/hetps, so PYTHONPATH=BUILD_DIR/python imports it.
#
#   tests/gpu/python_module.sh BUILD_DIR [PYTHON]
set -euo pipefail

if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [PYTHON]" >&2
  exit 2
fi
build=$(cd "$1" && pwd)
py=${2:-python3}
src=$(cd "$(dirname "$0")/../.." && pwd)
kit=$build/bundle-kit
out=$build/python/hetps
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -d "$kit/lib" ] || { echo "no $kit: pack the build with tests/gpu/bundle.sh" >&2; exit 1; }

include=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
suffix=$("$py" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
[ -f "$include/Python.h" ] || { echo "$py has no headers (no $include/Python.h)" >&2; exit 1; }
mkdir -p "$out"
cp "$src"/python/hetps/*.py "$src"/python/hetps/*.pyi "$out/"
unity=$(mktemp --suffix=.cc)
trap 'rm -f "$unity"' EXIT
for f in "$src"/python/*.cc; do echo "#include \"$f\""; done >"$unity"
libs=()  # what the static libraries need, by the names the bundle gives them
for name in protobuf zmq spdlog fmt sodium gfshare z gomp xxhash; do
  for f in "$build"/bundle-lib/lib$name.so.*; do
    [ -e "$f" ] && libs+=("$f") && break
  done
done

# The host's shared C++ runtime, named so that nothing links a static copy into the module; and
# the static libraries' symbols kept inside it (--exclude-libs): otherwise libzmq, loaded with
# the module, binds its iostream calls to the copies in the module, made for another libstdc++.
stdcxx=$("${CXX:-g++}" -print-file-name=libstdc++.so)
[ -e "$stdcxx" ] || stdcxx=-lstdc++
compile() {  # the directory holding pybind11/
  "${CXX:-g++}" -O2 -std=gnu++20 -fPIC -shared -fvisibility=hidden -DFMT_SHARED \
    -DSPDLOG_COMPILED_LIB -DSPDLOG_FMT_EXTERNAL -DSPDLOG_SHARED_LIB -I"$src" -I"$src/include" \
    -isystem "$kit/include" -isystem "$1" -isystem "$include" -isystem "$cuda/include" \
    "$unity" -o "$out/_hetps$suffix" -Wl,--exclude-libs,ALL "$stdcxx" \
    -Wl,--start-group "$kit"/lib/*.a -Wl,--end-group "${libs[@]}" -L"$cuda/lib64" -lcudart \
    -ldl -lpthread
}
pip_pybind=${PYBIND11_INCLUDE:-$("$py" -c 'import pybind11; print(pybind11.get_include())' 2>/dev/null || true)}
if [ -n "$pip_pybind" ] && compile "$pip_pybind"; then
  echo "hetps._hetps built for $("$py" -V) with the pybind11 in $pip_pybind"
elif [ -d "$kit/pybind11-debian" ] && compile "$kit/pybind11-debian"; then
  echo "hetps._hetps built for $("$py" -V) with Debian's pybind11"
else
  echo "hetps._hetps did not build" >&2
  exit 1
fi
