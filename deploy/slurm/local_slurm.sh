#!/usr/bin/env bash
# A single-node Slurm on this machine, for trying deploy/slurm/hetps.sbatch: munge and
# slurmctld/slurmd from Debian's munge and slurm-wlm, with their configuration, state and logs
# in one folder. Needs root.
#   deploy/slurm/local_slurm.sh start DIR   # prints: export SLURM_CONF=DIR/slurm.conf
#   deploy/slurm/local_slurm.sh stop DIR    # stops the daemons it started, removes DIR
set -euo pipefail
action=${1:?start|stop}
dir=${2:?a folder for the configuration, state and logs}

stop() {
  local pids=()
  for pidfile in "$dir"/slurmd.pid "$dir"/slurmctld.pid "$dir"/munged.pid; do
    [ -f "$pidfile" ] && pids+=("$(cat "$pidfile")")
  done
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for _ in $(seq 50); do  # until they are gone (5 s at most)
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.1
  done
  rm -rf "$dir"
}

if [ "$action" = stop ]; then
  stop
  exit 0
fi

command -v slurmctld >/dev/null && command -v munged >/dev/null ||
  { echo "needs Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)"; exit 2; }
mkdir -p "$dir/state" "$dir/spool" "$dir/munge"
chmod 755 "$dir"  # munged runs as munge and must reach its folder
chown munge:munge "$dir/munge"
host=$(hostname)
cpus=$(nproc)
mem=$(awk '/MemTotal/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
cat >"$dir/slurm.conf" <<CONF
ClusterName=hetps-local
SlurmctldHost=$host
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=local Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
runuser -u munge -- munged --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" \
  --log-file="$dir/munge/munged.log" --seed-file="$dir/munge/seed"
cp "$dir/munge/munged.pid" "$dir/munged.pid"
export SLURM_CONF=$dir/slurm.conf
slurmctld
slurmd
for _ in $(seq 50); do
  sinfo -h -o %T 2>/dev/null | grep -q idle && break
  sleep 0.2
done
sinfo -h -o %T | grep -q idle || { echo "slurm did not come up; see $dir/*.log"; stop; exit 1; }
echo "export SLURM_CONF=$dir/slurm.conf"
