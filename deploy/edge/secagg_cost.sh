#!/bin/sh
# Experiment 3 of docs/secure-aggregation.md in one command: what secure aggregation costs a
# client per round, against the same FedAvg run without it. Every client of the scenario takes
# part in every round (20 and 100 clients; at 100 also with dropout=0.1, whose graph is sparse),
# 10 rounds, --repeats runs per condition (the next selection seed each). From each client's
# final log lines: its bytes with the scheduler for the protocol and the CPU seconds of its
# secure-aggregation work, per round; its upload bytes and its process's CPU seconds per round
# (plain and secure alike), and the run's seconds per round (rounds.csv). Mean over the clients
# of a run, then mean ± 95% CI over the runs, to <run_dir>/report.md.
#   deploy/edge/secagg_cost.sh [--repeats=N] [--run_dir=D] [--bin_dir=B]
set -eu
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
repeats=3
run_dir=runs/secagg_cost
bin_dir=${HETPS_BIN_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
for arg in "$@"; do
  case $arg in
    --repeats=*) repeats=${arg#*=} ;;
    --run_dir=*) run_dir=${arg#*=} ;;
    --bin_dir=*) bin_dir=${arg#*=} ;;
    --help|-h) usage; exit 0 ;;
    *) echo "secagg_cost.sh: unknown option '$arg' (--repeats, --run_dir, --bin_dir)" >&2; exit 2 ;;
  esac
done
folder=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$run_dir"
# name scenario clients secure-aggregation spec
conditions="20-plain hetero20 20 off
20-secagg hetero20 20 secagg+
100-plain hetero100 100 off
100-secagg hetero100 100 secagg+
100-secagg-sparse hetero100 100 secagg+:dropout=0.1"
echo "$conditions" | while read -r name scenario clients secure; do
  if [ -f "$run_dir/$name/summary.json" ]; then echo "[secagg_cost] $name: done before"; continue; fi
  echo "[secagg_cost] $name: $clients clients, --secure_aggregation=$secure"
  "$bin_dir/hetps" fed run --flagfile="$folder/$scenario.flags" --algorithm=fedavg \
    --parallel="$clients" --per_round="$clients" --uploads=$((clients * 10)) \
    --eval_uploads=$((clients * 5)) --repeats="$repeats" --secure_aggregation="$secure" \
    --run_dir="$run_dir/$name" >"$run_dir/$name.log" 2>&1 ||
    { echo "[secagg_cost] $name failed: $run_dir/$name.log" >&2; exit 1; }
done
python3 - "$run_dir" "$(echo "$conditions" | awk '{print $1}')" <<'PY'
import glob, math, re, statistics, sys
run_dir, names = sys.argv[1], sys.argv[2].split()
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
client = re.compile(r"client (\d+): (\d+) rounds .* (\d+) bytes up, ([\d.]+) s CPU")
secure = re.compile(r"client (\d+): secure aggregation in (\d+) rounds: (\d+) bytes with the "
                    r"scheduler, ([\d.]+) s CPU")
graph = re.compile(r"secure round \d+: (\d+) neighbours each, threshold (\d+), (\d+) fixed")
def cell(xs, fmt):
    if not xs: return "-"
    m = statistics.mean(xs)
    ci = T95.get(len(xs) - 1, 1.96) * statistics.stdev(xs) / math.sqrt(len(xs)) if len(xs) > 1 else 0
    return (fmt + " ± " + fmt).format(m, ci)
rows = []
for name in names:
    per_run = {"up": [], "cpu": [], "sa_bytes": [], "sa_cpu": [], "round_s": []}
    k = "-"
    logs = sorted(glob.glob(f"{run_dir}/{name}/**/launch.log", recursive=True))
    for log in logs:
        text = open(log, errors="replace").read()
        ups, cpus, sab, sac = [], [], [], []
        for c, rounds, up, cpu in client.findall(text):
            r = max(1, int(rounds))
            ups.append(int(up) / r); cpus.append(float(cpu) / r)
        for c, rounds, b, cpu in secure.findall(text):
            r = max(1, int(rounds))
            sab.append(int(b) / r); sac.append(float(cpu) / r)
        if g := graph.search(text): k = f"{g.group(1)} / {g.group(2)} / {g.group(3)}"
        rows_csv = [l.split(",") for l in open(log.rsplit("/", 1)[0] + "/rounds.csv").read().split("\n")[1:] if l]
        if rows_csv:
            per_run["round_s"].append(float(rows_csv[-1][1]) / len(rows_csv))
        if ups:
            per_run["up"].append(statistics.mean(ups) / 1e3)
            per_run["cpu"].append(statistics.mean(cpus))
        if sab:
            per_run["sa_bytes"].append(statistics.mean(sab) / 1e3)
            per_run["sa_cpu"].append(statistics.mean(sac) * 1e3)
    rows.append(f"| {name} | {k} | {cell(per_run['up'], '{:.1f}')} | "
                f"{cell(per_run['sa_bytes'], '{:.2f}')} | {cell(per_run['cpu'], '{:.3f}')} | "
                f"{cell(per_run['sa_cpu'], '{:.2f}')} | {cell(per_run['round_s'], '{:.2f}')} | "
                f"{len(logs)} |")
head = ["| condition | k / t / bits | upload kB per round | protocol kB per round | "
        "process CPU s per round | secure-aggregation CPU ms per round | s per round | runs |",
        "|---|---|---|---|---|---|---|---|"]
open(f"{run_dir}/report.md", "w").write("\n".join(head + rows) + "\n")
print("\n".join(head + rows))
PY
