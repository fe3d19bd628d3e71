#!/bin/sh
# A grid of federated comparisons in one command (docs/robust.md): every condition of a grid
# file is one `hetps fed compare` of the grid's scenario with the condition's flags added, into
# <run_dir>/<condition>; a finished condition is kept on a rerun. The table of every condition
# and algorithm (final accuracy, time to the target, epsilon under --dp; mean ± 95% CI over the
# repeats) goes to <run_dir>/report.md.
#   deploy/edge/grid.sh GRID [--repeats=N] [--run_dir=D] [--bin_dir=B]
# A grid file (deploy/edge/*.grid): '#' comments, one "scenario FLAGFILE" line (relative to the
# grid's folder), then "condition NAME FLAG..." lines.
set -eu
usage() { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; }
grid=""
repeats=3
run_dir=""
bin_dir=${HETPS_BIN_DIR:-$(cd "$(dirname "$0")/../.." && pwd)/build/bin}
for arg in "$@"; do
  case $arg in
    --repeats=*) repeats=${arg#*=} ;;
    --run_dir=*) run_dir=${arg#*=} ;;
    --bin_dir=*) bin_dir=${arg#*=} ;;
    --help|-h) usage; exit 0 ;;
    -*) echo "grid.sh: unknown option '$arg' (--repeats, --run_dir, --bin_dir)" >&2; exit 2 ;;
    *) grid=$arg ;;
  esac
done
[ -n "$grid" ] && [ -f "$grid" ] || { usage >&2; exit 2; }
folder=$(cd "$(dirname "$grid")" && pwd)
name=$(basename "$grid" .grid)
run_dir=${run_dir:-runs/$name}
scenario=$(awk '$1 == "scenario" { print $2 }' "$grid")
[ -n "$scenario" ] || { echo "grid.sh: $grid has no scenario line" >&2; exit 2; }
mkdir -p "$run_dir"
conditions=$(awk '$1 == "condition" { print $2 }' "$grid")
for c in $conditions; do
  flags=$(awk -v c="$c" '$1 == "condition" && $2 == c { $1 = ""; $2 = ""; print }' "$grid")
  if [ -f "$run_dir/$c/summary.json" ]; then echo "[grid] $c: done before"; continue; fi
  echo "[grid] $c:$flags"
  # shellcheck disable=SC2086
  "$bin_dir/hetps" fed compare --flagfile="$folder/$scenario" --repeats="$repeats" $flags \
    --run_dir="$run_dir/$c" >"$run_dir/$c.log" 2>&1 ||
    { echo "[grid] $c failed: $run_dir/$c.log" >&2; exit 1; }
done
python3 - "$run_dir" $conditions <<'PY'
import json, sys
run_dir, conditions = sys.argv[1], sys.argv[2:]
def cell(m, fmt="{:.4g}"):
    return "-" if not m else (fmt + " ± {:.2g}").format(m["mean"], m["ci95"] if m["ci95"] > 1e-9 else 0)
target = None
rows = []
for c in conditions:
    s = json.load(open(f"{run_dir}/{c}/summary.json"))
    target = s["target"]
    for a in s["algorithms"]:
        rows.append(f"| {c} | {a['algorithm']} | {cell(a['final_accuracy'])} | "
                    f"{cell(a['time_to_target_s'])} | {a['reached']}/{a['runs']} | "
                    f"{cell(a.get('epsilon'))} |")
head = [f"| condition | algorithm | final accuracy | s to {target} | reached | epsilon |",
        "|---|---|---|---|---|---|"]
open(f"{run_dir}/report.md", "w").write("\n".join(head + rows) + "\n")
print("\n".join(head + rows))
PY
