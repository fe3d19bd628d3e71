#!/usr/bin/env bash
# The Compose cluster for real, on this machine (root): starts a private dockerd when none
# answers (its own data root, bridge and socket; stopped by its pid at the end), makes a Debian
# 12 base image with debootstrap when none can be pulled, builds the hetps and Prometheus images,
# brings deploy/docker/docker-compose.yml up, waits for the training to finish above 85%,
# checks that Prometheus scrapes the scheduler, SIGKILLs one server mid-run and sees Compose
# restart it and the run go on, then the cluster again with a standby per server rank, stopping
# a server mid-run (it hands its rank to its standby) and the run going on, then with an
# aggregator the workers push through, then elastic servers (one added with --scale server=3,
# partitions moving to it, and removed again, its rank retired), then the edge profile (tc-capped clients) to its end, then
# the package's systemd units under systemd as a container's init (each unit ready once its
# daemon said so, the workers' units ending in success), and tears everything down, also on
# failure.
#
#   sudo deploy/docker/e2e.sh [WORK_DIR]   # default /var/tmp/hetps-docker-e2e (kept: image cache)
#
# Not part of CI: dockerd changes the host's bridges. Exit 77 when it cannot run here.
set -euo pipefail
cd "$(dirname "$0")/../.."
work=${1:-/var/tmp/hetps-docker-e2e}
project=hetpse2e
compose=(docker-compose -p "$project" -f deploy/docker/docker-compose.yml)
export HETPS_HTTP_PORT=18080 HETPS_PROMETHEUS_PORT=19090 HETPS_ITERATIONS=3000
export HETPS_BASE_IMAGE=hetps-base:bookworm

say() { echo "e2e: $*"; }
if [ "$(id -u)" -ne 0 ]; then
  say "skipped: needs root (a private dockerd)"
  exit 77
fi
need=()
for p in docker.io docker-compose debootstrap iptables curl; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  say "installing ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" \
    >/dev/null
fi

mkdir -p "$work"
work=$(cd "$work" && pwd -P)  # as /proc/mounts names it (the cleanup unmounts under it)
dockerd_pid=""
bridge_made=""
cleanup() {
  set +e
  if [ -n "${DOCKER_HOST:-}" ] || [ -n "$dockerd_pid" ]; then
    "${compose[@]}" --profile edge down -v --remove-orphans >/dev/null 2>&1
    docker rm -f "$project-systemd" >/dev/null 2>&1
  fi
  if [ -n "$dockerd_pid" ]; then
    say "stopping the private dockerd (pid $dockerd_pid)"
    kill "$dockerd_pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$dockerd_pid" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$dockerd_pid" 2>/dev/null
    # What the private dockerd mounted under its folders and left behind (its default network
    # namespace's bind mount): deepest first.
    awk -v w="$work/" 'index($2, w) == 1 {print $2}' /proc/mounts | sort -r |
      while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  fi
  if [ -n "$bridge_made" ]; then ip link del "$bridge_made" 2>/dev/null; fi
}
trap cleanup EXIT

if ! docker info >/dev/null 2>&1; then
  # Own bridge and address pools, no iptables rules: the containers talk among themselves and
  # publish ports through docker-proxy; builds use the host's network.
  bridge=hpdock0
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
    ip addr add 10.213.0.1/24 dev "$bridge"
    ip link set "$bridge" up
    bridge_made=$bridge
  fi
  export DOCKER_HOST=unix://$work/docker.sock
  say "starting a private dockerd (data root $work/root)"
  dockerd --data-root "$work/root" --exec-root "$work/exec" --pidfile "$work/docker.pid" \
    -H "$DOCKER_HOST" --bridge "$bridge" --iptables=false --ip-masq=false \
    --default-address-pool base=10.214.0.0/16,size=24 >"$work/dockerd.log" 2>&1 &
  dockerd_pid=$!
  for _ in $(seq 100); do docker info >/dev/null 2>&1 && break; sleep 0.3; done
  docker info >/dev/null 2>&1 || { tail -20 "$work/dockerd.log"; exit 1; }
fi

if ! docker image inspect "$HETPS_BASE_IMAGE" >/dev/null 2>&1; then
  if docker pull -q debian:bookworm >/dev/null 2>&1; then
    docker tag debian:bookworm "$HETPS_BASE_IMAGE"
  else
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null ||
      true)
    mirror=${mirror:-http://deb.debian.org/debian}
    say "no image can be pulled: debootstrap bookworm from $mirror (a few minutes)"
    rm -rf "$work/rootfs"
    debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1
    tar -C "$work/rootfs" -c . | docker import - "$HETPS_BASE_IMAGE" >/dev/null
    rm -rf "$work/rootfs"
  fi
fi

# The dashboard's charting library comes into the build context from this host's npm (which
# trusts this host's certificate authorities; a container's fresh store may not).
uplot=scheduler/dashboard/node_modules/uplot/dist/uPlot.iife.min.js
if [ ! -f "$uplot" ] && command -v npm >/dev/null 2>&1; then
  say "fetching the dashboard's charting library on the host"
  (cd scheduler/dashboard && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
say "building the images (the build stage compiles hetps: several minutes on 2 cores)"
start=$(date +%s)
docker build -q --network host -f deploy/docker/Dockerfile --build-arg BASE="$HETPS_BASE_IMAGE" \
  --target runtime -t hetps:latest . >/dev/null
docker build -q --network host -f deploy/docker/Dockerfile --build-arg BASE="$HETPS_BASE_IMAGE" \
  --target prometheus -t hetps-prometheus:latest . >/dev/null
docker build -q --network host -f deploy/docker/Dockerfile --build-arg BASE="$HETPS_BASE_IMAGE" \
  --target systemd -t hetps-systemd:latest . >/dev/null
say "images built in $(($(date +%s) - start)) s: $(docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep hetps | tr '\n' ' ')"

# A run stopped hard (its private dockerd killed before its own teardown finished) leaves its
# containers and volumes in the data root: a fresh start, not a resumed one.
"${compose[@]}" --profile edge down -v --remove-orphans >/dev/null 2>&1 || true
"${compose[@]}" up -d --no-build
say "cluster up: $("${compose[@]}" ps --services | tr '\n' ' ')"
logs() { "${compose[@]}" logs --no-color "$@" 2>/dev/null; }

# A server is killed once training is under way; Compose restarts it on its data dir.
# (grep -c and awk read all their input: with pipefail, grep -q and head would fail the pipe.)
for _ in $(seq 300); do logs worker | grep -c "iter 500/" >/dev/null && break; sleep 0.5; done
victim=$("${compose[@]}" ps -q server | awk 'NR == 1')
pid=$(docker inspect -f '{{.State.Pid}}' "$victim")
say "SIGKILL to server container ${victim:0:12} (pid $pid) at $(logs worker | grep -o 'iter [0-9]*/' | tail -1)"
kill -9 "$pid"
restarted=""
for _ in $(seq 120); do
  if [ "$(docker inspect -f '{{.RestartCount}} {{.State.Running}}' "$victim")" = "1 true" ]; then
    restarted=yes
    break
  fi
  sleep 0.5
done
[ -n "$restarted" ] || { say "FAIL: the killed server was not restarted"; logs server; exit 1; }
restored=""
for _ in $(seq 60); do
  restored=$(docker logs "$victim" 2>&1 | grep -E 'restored [0-9]+ partitions' | tail -1 || true)
  [ -n "$restored" ] && break
  sleep 0.5
done
[ -n "$restored" ] || { say "FAIL: the restarted server restored nothing"; exit 1; }
say "server restarted by Compose on its data dir: ${restored#*] }"

# Prometheus scrapes the scheduler's /metrics.
up=""
for _ in $(seq 60); do
  if curl -fs "http://127.0.0.1:$HETPS_PROMETHEUS_PORT/api/v1/targets" | grep -c '"health":"up"' \
    >/dev/null; then
    up=yes
    break
  fi
  sleep 1
done
[ -n "$up" ] || { say "FAIL: Prometheus reports no target up"; exit 1; }
say "Prometheus: the scheduler's target is up"
curl -fs "http://127.0.0.1:$HETPS_HTTP_PORT/api/status" >/dev/null &&
  say "dashboard and status answer on port $HETPS_HTTP_PORT"

# The workers' final test accuracy, once one reported it (up to 10 minutes); empty if none did.
final_accuracy() {
  local a=""
  for _ in $(seq 600); do
    a=$(logs worker | grep -o 'final test accuracy [0-9.]*' | awk '{print $4}' | tail -1 || true)
    [ -n "$a" ] && break
    sleep 1
  done
  echo "$a"
}

accuracy=$(final_accuracy)
logs worker | grep -E "test accuracy" | tail -3 || true
[ -n "$accuracy" ] || { say "FAIL: training did not finish"; logs | tail -40; exit 1; }
if awk -v a="$accuracy" 'BEGIN { exit !(a > 0.85) }'; then
  say "PASS: final test accuracy $accuracy after a server was killed and restarted"
else
  say "FAIL: final test accuracy $accuracy <= 0.85"
  exit 1
fi

# Standbys: the cluster again with a backup per server rank (HETPS_REPLICAS=1, two standbys);
# a server stopped while training (docker stop: SIGTERM) hands its rank to its standby and
# exits, and training goes on to the same accuracy.
"${compose[@]}" down -v >/dev/null 2>&1
HETPS_REPLICAS=1 HETPS_STANDBYS=2 "${compose[@]}" up -d --no-build
for _ in $(seq 300); do logs worker | grep -c "iter 500/" >/dev/null && break; sleep 0.5; done
victim=$("${compose[@]}" ps -q server | awk 'NR == 1')
say "docker stop of server container ${victim:0:12} at $(logs worker | grep -o 'iter [0-9]*/' | tail -1)"
docker stop "$victim" >/dev/null
handed=""
for _ in $(seq 20); do
  handed=$(logs scheduler | grep -o 'server rank [0-9]*: handed from node .*' | tail -1 || true)
  [ -n "$handed" ] && break
  sleep 0.5
done
[ -n "$handed" ] || { say "FAIL: the stopped server did not hand its rank over"; logs | tail -40; exit 1; }
say "$handed"
replicated=$(final_accuracy)
[ -n "$replicated" ] || { say "FAIL: the replicated run did not finish"; logs | tail -40; exit 1; }
if awk -v a="$replicated" 'BEGIN { exit !(a > 0.85) }'; then
  say "PASS: final test accuracy $replicated after a server handed its rank to its standby"
else
  say "FAIL: final test accuracy $replicated <= 0.85 (replicated)"
  exit 1
fi

# The aggregation tier: the cluster again with an aggregator the workers share a host name with;
# they push through it and train to the same accuracy.
"${compose[@]}" down -v >/dev/null 2>&1
HETPS_AGGREGATORS=1 "${compose[@]}" up -d --no-build
joined=""
for _ in $(seq 120); do
  joined=$(logs aggregator | grep -o 'joined as aggregator 0: [0-9]* workers' | tail -1 || true)
  [ -n "$joined" ] && break
  sleep 0.5
done
[ -n "$joined" ] || { say "FAIL: no aggregator joined"; logs | tail -40; exit 1; }
say "$joined"
tiered=$(final_accuracy)
[ -n "$tiered" ] || { say "FAIL: the run through the aggregator did not finish"; logs | tail -40; exit 1; }
summed=""
for _ in $(seq 60); do
  summed=$(logs aggregator | grep -o 'stopped: [0-9]* pushes summed into [0-9]* sums' | tail -1 || true)
  [ -n "$summed" ] && break
  sleep 0.5
done
if awk -v a="$tiered" 'BEGIN { exit !(a > 0.85) }' && [ -n "$summed" ]; then
  say "PASS: final test accuracy $tiered through the aggregator ($summed)"
else
  say "FAIL: final test accuracy $tiered through the aggregator, '$summed'"
  exit 1
fi
"${compose[@]}" down -v >/dev/null 2>&1

# Elastic servers (docs/resharding.md): with HETPS_MAX_SERVERS=3 a third server added while
# training (--scale server=3) becomes rank 2 and partitions move to it; scaled back to two
# (Compose stops the newest: SIGTERM) it moves its partitions off and its rank retires; training
# ends at the same accuracy.
elastic=(env HETPS_MAX_SERVERS=3 HETPS_PARTITION_BYTES=65536 "${compose[@]}")
"${elastic[@]}" up -d --no-build
for _ in $(seq 300); do logs worker | grep -c "iter 250/" >/dev/null && break; sleep 0.5; done
"${elastic[@]}" up -d --no-build --no-recreate --scale server=3 server >/dev/null 2>&1
moved=""
for _ in $(seq 120); do
  moved=$(logs scheduler | grep -o 'move [0-9]*: [0-9]* partition(s) moved in .*' | tail -1 || true)
  [ -n "$moved" ] && break
  sleep 0.5
done
[ -n "$moved" ] || { say "FAIL: no partitions moved to the added server"; logs scheduler | tail -40; exit 1; }
say "server added at $(logs worker | grep -o 'iter [0-9]*/' | tail -1): $moved"
"${elastic[@]}" up -d --no-build --no-recreate --scale server=2 server >/dev/null 2>&1
retired=""
for _ in $(seq 120); do
  retired=$(logs scheduler | grep -o 'server rank [0-9]* retired: .*' | tail -1 || true)
  [ -n "$retired" ] && break
  sleep 0.5
done
[ -n "$retired" ] || { say "FAIL: the removed server did not retire its rank"; logs | tail -40; exit 1; }
say "scaled back to two servers: $retired"
scaled=$(final_accuracy)
[ -n "$scaled" ] || { say "FAIL: the elastic run did not finish"; logs | tail -40; exit 1; }
if awk -v a="$scaled" 'BEGIN { exit !(a > 0.85) }'; then
  say "PASS: final test accuracy $scaled with a server added and removed by Compose"
else
  say "FAIL: final test accuracy $scaled <= 0.85 (elastic)"
  exit 1
fi
"${compose[@]}" down -v >/dev/null 2>&1

# The edge profile: federated rounds of clients whose uplink tc caps inside their containers.
"${compose[@]}" --profile edge up -d --no-build edge-scheduler edge-server edge-client
# Each client prints its eth0 qdisc once tc has set it (its log, not docker exec: on a loaded
# machine the short run may be over before a container could be asked).
qdisc=""
for _ in $(seq 60); do
  qdisc=$(logs edge-client | grep -o 'uplink: qdisc tbf.*' | awk 'NR == 1' || true)
  [ -n "$qdisc" ] && break
  sleep 0.5
done
[ -n "$qdisc" ] || { say "FAIL: no tbf on an edge client's eth0"; logs edge-client | tail; exit 1; }
say "edge client $qdisc"
edge=""
for _ in $(seq 600); do
  edge=$(logs edge-client | grep -o 'final test accuracy .*' | tail -1 || true)
  [ -n "$edge" ] && break
  sleep 1
done
[ -n "$edge" ] || { say "FAIL: the edge run did not finish"; logs edge-scheduler | tail; exit 1; }
say "PASS: edge profile: $edge"

# The package's systemd units for real: systemd as a container's init, the roles started with
# systemctl from flags in /etc/hetps (with keys), each unit active only once its daemon said
# READY=1, the workers' units ending in success with the model trained.
"${compose[@]}" --profile edge down -v --remove-orphans >/dev/null 2>&1
docker run -d --name "$project-systemd" --cap-add SYS_ADMIN --security-opt seccomp=unconfined \
  --tmpfs /run --tmpfs /run/lock -v /sys/fs/cgroup:/sys/fs/cgroup:ro hetps-systemd:latest >/dev/null
in_systemd() { docker exec "$project-systemd" "$@"; }
state=""
for _ in $(seq 60); do
  state=$(in_systemd systemctl is-system-running 2>/dev/null || true)
  case "$state" in running | degraded) break ;; esac
  sleep 0.5
done
case "$state" in
  running | degraded) say "systemd is the container's init ($state)" ;;
  *) say "FAIL: systemd did not start in its container ($state)"; docker logs "$project-systemd" | tail; exit 1 ;;
esac
in_systemd sh -ec '
  mkdir -p /etc/hetps
  hetps keygen --out=/etc/hetps/keys >/dev/null && chown -R hetps:hetps /etc/hetps/keys
  printf "HETPS_AUTH=curve\nHETPS_KEYS=/etc/hetps/keys\n" >/etc/hetps/hetps.env
  printf "HETPS_BIND=tcp://127.0.0.1:7340\nHETPS_NUM_SERVERS=1\nHETPS_NUM_WORKERS=2\n" >/etc/hetps/scheduler.env
  printf "HETPS_SCHEDULER=tcp://127.0.0.1:7340\nHETPS_OPTIMIZER=adam:lr=0.001\nHETPS_INIT=worker\n" >/etc/hetps/server.env
  printf "HETPS_SCHEDULER=tcp://127.0.0.1:7340\nHETPS_WORKLOAD=train\nHETPS_ITERATIONS=600\n" >/etc/hetps/worker.env'
in_systemd systemctl start hetps-scheduler  # returns once the scheduler said READY=1
in_systemd systemctl start --no-block hetps-server@0 hetps-worker@0 hetps-worker@1
for _ in $(seq 600); do
  [ "$(in_systemd systemctl is-active hetps-worker@0 hetps-worker@1 | sort -u)" = inactive ] && break
  sleep 1
done
for unit in hetps-worker@0 hetps-worker@1 hetps-server@0; do
  result=$(in_systemd systemctl show -p Result --value "$unit")
  [ "$result" = success ] ||
    { say "FAIL: $unit: $result"; in_systemd journalctl -u 'hetps-*' --no-pager | tail -30; exit 1; }
done
ready=$(in_systemd journalctl -u hetps-server@0 --no-pager | grep -c "joined as server 0" || true)
systemd_accuracy=$(in_systemd journalctl -u hetps-worker@0 --no-pager |
  grep -o 'final test accuracy [0-9.]*' | awk '{print $4}' | tail -1)
if [ "$ready" -ge 1 ] && awk -v a="$systemd_accuracy" 'BEGIN { exit !(a > 0.80) }'; then
  say "PASS: systemd units: scheduler active, server and workers ready once joined, final test accuracy $systemd_accuracy"
else
  say "FAIL: systemd units: joined $ready, accuracy '$systemd_accuracy'"
  in_systemd journalctl -u 'hetps-*' --no-pager | tail -30
  exit 1
fi
