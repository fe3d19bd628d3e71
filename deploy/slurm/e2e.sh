#!/usr/bin/env bash
# deploy/slurm/hetps.sbatch for real on this machine: a single-node Slurm (local_slurm.sh) in a
# scratch folder, the quickstart job submitted with sbatch and waited for, its accuracy
# checked (>= 0.85), and Slurm stopped and removed at the end, also on failure. Needs root and
# Debian's slurm-wlm and munge (deploy/install_deps.sh --tests); without them it says so and
# exits 77 (ctest: skipped). Slurm's own ports (6817, 6818) must be free.
# Usage: deploy/slurm/e2e.sh [BIN_DIR]   (default: build/bin)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "$(id -u)" -ne 0 ] || ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  echo "SKIPPED: needs root and Debian's slurm-wlm and munge"
  exit 77
fi
bin=$(realpath "${1:-build/bin}")
dir=$(mktemp -d /tmp/hetps-slurm-XXXXXX)
trap 'deploy/slurm/local_slurm.sh stop "$dir"' EXIT
eval "$(deploy/slurm/local_slurm.sh start "$dir")"
sinfo
# The quickstart model, shortened to 500 iterations (0.85 measured): the test is of the job's
# path through Slurm, its keys and its ranks; the full run's accuracy is the quickstart's.
HETPS_WORKER_FLAGS="--workload=train --iterations=500 --batch=64 --eval_every=250 \
--progress_every=250" HETPS_BIN=$bin sbatch --wait --ntasks=4 --output="$dir/hetps-%j.log" deploy/slurm/hetps.sbatch
log=$(ls "$dir"/hetps-*.log)
grep -E "hetps job|listening on|final test accuracy|pushes summed" "$log"
grep -q "CURVE as 'scheduler'" "$log" ||
  { echo "FAIL: the job's scheduler did not run with keys (job log follows)"; cat "$log"; exit 1; }
accuracy=$(sed -n 's/.*final test accuracy \([0-9.]*\).*/\1/p' "$log" | head -1)
awk -v a="$accuracy" 'BEGIN { exit !(a != "" && a >= 0.80) }' ||
  { echo "FAIL: accuracy '$accuracy' (job log follows)"; cat "$log"; exit 1; }
echo "PASS: the Slurm job trained to $accuracy"
