#!/usr/bin/env bash
# The hetps command's conventions, for every command the overview lists: `hetps CMD --help`
# prints that command's usage (exit 0); a wrong argument prints the error and that command's
# usage only (exit 2); flags take both --flag=value and --flag value. Every daemon takes --help.
# Usage: cli_test.sh BIN_DIR
set -euo pipefail
bin=$1
scratch=$(mktemp -d /tmp/hetps-cli-XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

commands=$("$bin/hetps" --help | awk '/^  [a-z]+ / {print $1}')
[ "$(echo "$commands" | wc -w)" -ge 7 ] || fail "hetps --help lists too few commands: $commands"
for c in $commands; do
  for help in --help -h; do
    out=$("$bin/hetps" "$c" $help) || fail "hetps $c $help exited $?"
    [[ $out == "usage: hetps $c"* ]] || fail "hetps $c $help does not start with its usage"
  done
  others=$(echo "$commands" | grep -vx "$c")
  set +e
  err=$("$bin/hetps" "$c" --no_such_flag_anywhere=1 2>&1 >/dev/null)
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "hetps $c with a wrong argument exited $rc, not 2"
  grep -q "usage: hetps $c" <<<"$err" || fail "hetps $c: a wrong argument shows no usage"
  for o in $others; do
    ! grep -q "usage: hetps $o " <<<"$err" || fail "hetps $c: a wrong argument shows $o's usage"
  done
done
"$bin/hetps" help launch | grep -q "usage: hetps launch" || fail "hetps help launch"

# Both spellings of a flag's value.
"$bin/hetps" keygen --out "$scratch/a" >/dev/null || fail "hetps keygen --out DIR"
"$bin/hetps" keygen --out="$scratch/b" --add worker:edge-1 >/dev/null ||
  fail "hetps keygen --out=DIR --add ROLE:NAME"
[ -f "$scratch/a/worker.key" ] && [ -f "$scratch/b/edge-1.key" ] || fail "keygen wrote no keys"
set +e
"$bin/hetps" health --scheduler tcp://127.0.0.1:1 --timeout_ms 200 >/dev/null 2>&1
rc=$?
set -e
[ $rc -eq 1 ] || fail "hetps health --scheduler URL --timeout_ms T: exit $rc (1: no scheduler)"

for d in hetps-scheduler hetps-server hetps-worker hetps-aggregator hetps-bench; do
  out=$("$bin/$d" --help 2>&1) || fail "$d --help exited $?"
  grep -q "Flags from .*/main.cc" <<<"$out" || fail "$d --help shows none of its own flags"
  ! grep -q "block_cache_trace\|gflags.cc" <<<"$out" || fail "$d --help shows libraries' flags"
done
echo "PASS: $(echo $commands | wc -w) commands, 4 daemons and the benchmark"
