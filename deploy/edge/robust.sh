#!/bin/sh
# Experiment 2 of docs/robust.md in one command: FedAvg against the coordinate-wise median, the
# trimmed mean and Krum on deploy/edge/robust20.flags, with no attackers and with 10% and 30% of
# the clients running each emulated attack; --repeats seeds each (3). Each condition is one
# `hetps fed compare` into <run_dir>/<condition>; a finished condition is kept on a rerun. The
# table (final accuracy and virtual time to 0.75, mean ± 95% CI) goes to <run_dir>/report.md.
#   deploy/edge/robust.sh [--repeats=N] [--run_dir=D] [--bin_dir=B]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repeats=3
run_dir=runs/robust
bin_dir=${HETPS_BIN_DIR:-$here/../../build/bin}
for arg in "$@"; do
  case $arg in
    --repeats=*) repeats=${arg#*=} ;;
    --run_dir=*) run_dir=${arg#*=} ;;
    --bin_dir=*) bin_dir=${arg#*=} ;;
    --help|-h) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "robust.sh: unknown argument '$arg' (--repeats, --run_dir, --bin_dir)" >&2; exit 2 ;;
  esac
done
mkdir -p "$run_dir"
conditions="none:0:sign_flip"
for attack in sign_flip:factor=4 scale:factor=10 gaussian:std=1 label_flip; do
  for fraction in 0.1 0.3; do conditions="$conditions ${attack%%:*}-$fraction:$fraction:$attack"; done
done
for c in $conditions; do
  name=${c%%:*}; rest=${c#*:}; fraction=${rest%%:*}; attack=${rest#*:}
  if [ -f "$run_dir/$name/summary.json" ]; then echo "[robust] $name: done before"; continue; fi
  echo "[robust] $name: --byzantine_fraction=$fraction --attack=$attack"
  "$bin_dir/hetps" fed compare --flagfile="$here/robust20.flags" --repeats="$repeats" \
    --byzantine_fraction="$fraction" --attack="$attack" \
    --run_dir="$run_dir/$name" >"$run_dir/$name.log" 2>&1 ||
    { echo "[robust] $name failed: $run_dir/$name.log" >&2; exit 1; }
done
python3 - "$run_dir" $conditions <<'PY'
import json, sys
run_dir, conditions = sys.argv[1], [c.split(":")[0] for c in sys.argv[2:]]
def cell(m):
    return "-" if not m else f"{m['mean']:.4g} ± {m['ci95']:.2g}"
rows = ["| condition | algorithm | final accuracy | virtual s to 0.75 | reached |", "|---|---|---|---|---|"]
for c in conditions:
    for a in json.load(open(f"{run_dir}/{c}/summary.json"))["algorithms"]:
        rows.append(f"| {c} | {a['algorithm']} | {cell(a['final_accuracy'])} | "
                    f"{cell(a['time_to_target_s'])} | {a['reached']}/{a['runs']} |")
open(f"{run_dir}/report.md", "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
