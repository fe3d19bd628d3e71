#!/usr/bin/env bash
# Server scaling with each server on its own emulated host: a network namespace per server,
# joined to this host by a bridge, its link limited to RATE in both directions (tc tbf), as if
# each server had its own NIC. Runs `hetps-bench pushpull` for 1, 2 and 4 servers and prints
# its JSON lines. Needs root (ip netns, tc). Usage: bench/netns_scaling.sh [RATE] [MB] [SECONDS]
# [PUSHPULL FLAGS...] (the rest go to every pushpull run, e.g. --transport=tcp,shm: the servers are
# not co-located with the workers, so shm must refuse to run there)
# Addresses are the project's own: 10.201.0.0/24 inside namespaces this script creates and
# removes (also on failure).
set -euo pipefail
cd "$(dirname "$0")/.."

rate="${1:-1gbit}"
mb="${2:-16}"
seconds="${3:-12}"
shift $(($# < 3 ? $# : 3))
max_servers=4
bridge=hetps-br0
bench=./build/bin/hetps-bench

cleanup() {
  for i in $(seq 0 $((max_servers - 1))); do
    ip netns del "hetps-s$i" 2>/dev/null || true
    ip link del "hetps-v$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}
trap cleanup EXIT
cleanup

ip link add "$bridge" type bridge
ip addr add 10.201.0.1/24 dev "$bridge"
ip link set "$bridge" up
for i in $(seq 0 $((max_servers - 1))); do
  ns="hetps-s$i"
  ip netns add "$ns"
  ip link add "hetps-v$i" type veth peer name eth0 netns "$ns"
  ip link set "hetps-v$i" master "$bridge" up
  ip -n "$ns" addr add "10.201.0.$((10 + i))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  # Push direction (towards the server) and pull direction (from it).
  tc qdisc add dev "hetps-v$i" root tbf rate "$rate" burst 1mbit latency 100ms
  ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 1mbit latency 100ms
done

# The test's own namespaces: listening there without keys is what this measures (the daemons
# read HETPS_INSECURE as --insecure).
for servers in 1 2 4; do
  HETPS_INSECURE=true "$bench" pushpull --servers "$servers" --workers 2 --mb "$mb" --seconds "$seconds" \
    --partition_bytes=1048576 \
    --scheduler_bind='tcp://10.201.0.1:*' \
    --server_exec='ip netns exec hetps-s{i}' \
    --server_bind='tcp://10.201.0.1{i}:*' "$@"
done
