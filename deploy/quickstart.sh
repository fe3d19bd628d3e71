#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a local cluster on loopback
# (1 scheduler, 2 servers, 4 workers) that trains through the parameter server, printing
# progress. Extra arguments go to `hetps launch` (e.g. --iterations=200 --optimizer=adam).
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/install_deps.sh
./deploy/build.sh >/dev/null
exec ./build/bin/hetps launch --servers 2 --workers 4 --flagfile deploy/quickstart.flags "$@"
