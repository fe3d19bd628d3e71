#!/usr/bin/env bash
# Runs FedAvg (sampled rounds), FedAsync, FedBuff and FedSA (asynchronous, through the
# scheduler) one after another over the same seeded scenario, with the same number of clients
# training at once (7) and the same number of applied uploads (200), and prints a Markdown table per
# algorithm: wall time until the evaluator first measured the target test accuracy (seconds
# from the run's first training row), uploads and uplink MB until then (every upload sent,
# dropped ones too), and the final accuracy. Each run's folder is kept under OUT.
# ALGOS picks other presets from the table below, e.g. the AAFL ratios or the selection policies
# under 30% failing clients:
#   ALGOS="aafl-greedy aafl-0.3 aafl-0.6 aafl-1.0" deploy/edge/compare.sh
#   ALGOS="random-fail30 fedlesscan-fail30" deploy/edge/compare.sh
# The last column, kept/selected, is the effective update ratio: the share of the uploads
# asked for that an aggregation used.
# usage: [ALGOS="..."] deploy/edge/compare.sh [SCENARIO.flags] [TARGET] [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."

scenario="${1:-deploy/edge/hetero20.flags}"
target="${2:-0.80}"
out="${3:-runs/compare-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"

read -r -a names <<< "${ALGOS:-fedavg fedasync fedbuff fedsa}"
declare -A flags=(
  [fedavg]="--consistency=selected --aggregator=fedavg --optimizer=sgd:lr=1 --clients_per_round=5 --overcommit=1.4 --rounds=40 --eval_every=4"
  [fedasync]="--consistency=committed --aggregator=fedasync:alpha=0.6 --concurrency=7 --rounds=200 --eval_every=20"
  [fedbuff]="--consistency=committed --aggregator=fedbuff:k=5 --optimizer=sgd:lr=1 --concurrency=7 --rounds=200 --eval_every=20"
  [fedsa]="--consistency=committed:exponent=1 --aggregator=sum --optimizer=sgd:lr=0.5 --concurrency=7 --quorum=5 --rounds=40 --eval_every=4"
  [aafl-greedy]="--consistency=committed:exponent=1 --aggregator=sum --optimizer=sgd:lr=0.5 --concurrency=7 --ratio=greedy --rounds=40 --eval_every=4"
  [aafl-0.3]="--consistency=committed:exponent=1 --aggregator=sum --optimizer=sgd:lr=0.5 --concurrency=7 --ratio=fixed:alpha=0.3 --rounds=40 --eval_every=4"
  [aafl-0.6]="--consistency=committed:exponent=1 --aggregator=sum --optimizer=sgd:lr=0.5 --concurrency=7 --ratio=fixed:alpha=0.6 --rounds=40 --eval_every=4"
  [aafl-1.0]="--consistency=committed:exponent=1 --aggregator=sum --optimizer=sgd:lr=0.5 --concurrency=7 --ratio=fixed:alpha=1 --rounds=40 --eval_every=4"
  [random-fail30]="--consistency=selected --aggregator=fedavg --optimizer=sgd:lr=1 --clients_per_round=5 --overcommit=1.4 --round_deadline_ms=4000 --rounds=40 --eval_every=4 --fail_fraction=0.3 --selection=random"
  [fedlesscan-fail30]="--consistency=selected --aggregator=fedavg --optimizer=sgd:lr=1 --clients_per_round=5 --overcommit=1.4 --round_deadline_ms=4000 --rounds=40 --eval_every=4 --fail_fraction=0.3 --selection=fedlesscan"
)

# Prints "seconds uploads final kept/selected": the evaluator's first row >= target (or "- -";
# uploads "-" where aggregations have no fixed size), its last accuracy, and the share of the
# uploads asked for that were used.
measure() {
  local run="$1" mode="$2"
  awk -F, -v target="$target" -v mode="$mode" '
    FNR == 1 { file++; next }
    file == 1 { all_sel += $4; all_kept += $5; if (mode == "rounds") { sel[$1] = $4 } else { n++; kept_at[n] = $5 } next }
    # groups: the evaluator counts aggregations of --quorum uploads each (5 here)
    file == 2 && $3 == 0 && $5 != "" {
      final = $5
      if (!hit && $5 + 0 >= target) { hit = 1; secs = $1; closed = $2 }
    }
    END {
      uploads = 0
      if (hit && mode == "rounds") { for (r = 0; r < closed; r++) uploads += sel[r] }
      if (hit && (mode == "tasks" || mode == "groups")) {
        want = mode == "groups" ? closed * 5 : closed
        k = 0; for (i = 1; i <= n && k < want; i++) { uploads++; k += kept_at[i] }
      }
      ratio = all_sel > 0 ? sprintf("%.2f", all_kept / all_sel) : "-"
      if (hit && mode == "ratio") printf "%s - %s %s\n", secs, final, ratio
      else if (hit) printf "%s %d %s %s\n", secs, uploads, final, ratio
      else printf "- - %s %s\n", final, ratio
    }' "$run/rounds.csv" "$run/metrics.csv"
}

for name in "${names[@]}"; do
  if [[ -z "${flags[$name]+set}" ]]; then
    echo "compare.sh: no preset '$name' (presets: ${!flags[*]})" >&2
    exit 2
  fi
done
echo "| algorithm | time to ${target} (s) | uploads to ${target} | uplink MB to ${target} | final accuracy | kept/selected |"
echo "|---|---|---|---|---|---|"
for name in "${names[@]}"; do
  run="$out/$name"
  # shellcheck disable=SC2086
  ./build/bin/hetps launch --servers 2 --workers 21 --run_dir "$run" --flagfile "$scenario" \
    ${flags[$name]} > "$run.log" 2>&1
  mode=tasks
  [[ "${flags[$name]}" == *selected* ]] && mode=rounds
  [[ "${flags[$name]}" == *quorum=* ]] && mode=groups
  [[ "${flags[$name]}" == *ratio=* ]] && mode=ratio
  read -r secs uploads final ratio < <(measure "$run" "$mode")
  model_bytes=$(stat -c %s "$run/model.bin")
  mb="-"
  [[ "$uploads" != "-" ]] && mb=$(awk -v u="$uploads" -v b="$model_bytes" 'BEGIN { printf "%.1f", u * b / 1e6 }')
  echo "| $name | $secs | $uploads | $mb | $final | $ratio |"
done
