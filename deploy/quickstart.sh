#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs a local cluster on loopback
# (1 scheduler, 2 servers, 4 workers) that trains through the parameter server, printing
# progress. Extra arguments go to `hetps launch` (e.g. --iterations=200 --optimizer=adam).
set -euo pipefail
cd "$(dirname "$0")/.."

./deploy/install_deps.sh
# Only what the cluster runs (deploy/test.sh builds the rest). ninja shows its progress on a
# terminal; elsewhere (a log) one line in 20 steps says how far it is, and errors show whole.
binaries=(hetps hetps-scheduler hetps-server hetps-worker)
if [ ! -x build/bin/hetps-worker ]; then
  echo "hetps: building ${binaries[*]} into build/ (the first time takes a few minutes)"
fi
if [ -t 1 ]; then
  ./deploy/build.sh "${binaries[@]}"
else
  ./deploy/build.sh "${binaries[@]}" | awk '
    /^\[[0-9]+\/[0-9]+\]/ { if (++n % 20 == 0) { print "hetps: build " $1; fflush() } next }
    /^ninja: (Entering directory|no work to do)/ || (/^-- / && !/^-- hetps/) { next }
    { print; fflush() }'
fi
exec ./build/bin/hetps launch --servers 2 --workers 4 --flagfile deploy/quickstart.flags "$@"
