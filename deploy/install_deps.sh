#!/usr/bin/env bash
# Installs what hetps needs from Debian's packages to build and run (the quickstart); with
# --tests, also what only the tests use. Does nothing when everything is present.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config file  # file: cpack -G DEB (dpkg-shlibdeps)
  libzmq3-dev cppzmq-dev libprotobuf-dev protobuf-compiler
  librocksdb-dev libspdlog-dev libfmt-dev libgflags-dev
  libgtest-dev libgmock-dev zlib1g-dev libxxhash-dev
  libcpp-httplib-dev nlohmann-json3-dev libeigen3-dev
  libsystemd-dev  # sd_notify: the daemons' systemd units learn when a node is ready
  libsodium-dev libgfshare-dev  # secure aggregation's cryptography (common/secagg/)
  dataset-fashion-mnist gnuplot-nox
  iproute2  # ip and tc, for hetps launch --links=netns
  python3-dev pybind11-dev python3-numpy  # the Python module (python/)
)
if [ "${1:-}" = "--tests" ]; then
  # The dashboard in a headless browser (observe_test, observe_fed_test), promtool on the
  # metrics, a single-node Slurm for deploy/slurm/e2e.sh, docker-compose and python3-yaml to check
  # the Compose file and the Kubernetes manifests, sshd and ssh for hetps launch -H across
  # network namespaces (tests/ssh_launch_test.py), clang and libFuzzer for the fuzz targets
  # (deploy/fuzz.sh), pytest and PyTorch for the Python module's tests and its PyTorch example,
  # mkdocs for the docs site (DocsTest).
  packages+=(prometheus chromium slurm-wlm munge docker-compose python3-yaml openssh-server
             openssh-client clang-14 libclang-rt-14-dev libfuzzer-14-dev python3-pytest
             python3-torch mkdocs)
fi
# npm fetches the dashboard's charting library, when it is not there yet; any npm will do
# (Debian's, or one that came with a Node.js install).
dashboard="$(dirname "$0")/../scheduler/dashboard"
uplot="$dashboard/node_modules/uplot/dist/uPlot.iife.min.js"
if [ ! -f "$uplot" ] && ! command -v npm >/dev/null 2>&1; then packages+=(npm); fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "hetps: installing ${missing[*]}"
  sudo=""
  if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The dashboard's charting library (uPlot), pinned by package-lock.json; the build bundles it.
if [ ! -f "$uplot" ]; then
  echo "hetps: fetching the dashboard's charting library from the npm registry"
  (cd "$dashboard" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
