#!/bin/sh
# Verifies a Promela model of tests/model (MODEL, default handoff.pml) with spin and
# compares the verdict with an expectation.
#
#   check.sh [--match REGEX] [--no-deadlock] pass|fail safety|liveness [-DNAME[=VALUE] ...]
#
# safety:   pan compiled with -DSAFETY: the model's assertions (handoff.pml: exactly once,
#           per-sender order, one owner; keyed_lock.pml: one holder, no grant to a waiter
#           that gave up, FIFO, entry lifetime; both: the invariant, nothing stranded at
#           the end) and invalid end states.
# liveness: spin -DLIVENESS adds the claim "every message eventually runs"; pan -a -f
#           searches for acceptance cycles under weak fairness (assertions still checked).
# pass: exit 0 iff pan finished the full search with no error.
# fail: exit 0 iff pan reported an error (assertion violated, invalid end state or
#       acceptance cycle); the counterexample is printed.
# --match REGEX: with fail, pan's error line must also match REGEX (grep -E).
# --no-deadlock: pan -E, do not report invalid end states (so that the search goes on
#       to the assertion --match names).
# Environment: MODEL (default handoff.pml), SPIN, CC (default spin, gcc), PAN_MEMLIM_MB
# (default 2048).
set -eu

match=""
noend=""
while [ $# -gt 0 ]; do
  case $1 in
    --match) match=$2; shift 2 ;;
    --no-deadlock) noend="-E"; shift ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "usage: $0 [--match REGEX] [--no-deadlock] pass|fail safety|liveness [-DNAME[=VALUE] ...]" >&2
  exit 2
fi
expect=$1
mode=$2
shift 2
case $expect in pass|fail) ;; *) echo "expectation must be pass or fail" >&2; exit 2 ;; esac
case $mode in safety|liveness) ;; *) echo "mode must be safety or liveness" >&2; exit 2 ;; esac

here=$(cd "$(dirname "$0")" && pwd)
spin=${SPIN:-spin}
cc=${CC:-gcc}
memlim=${PAN_MEMLIM_MB:-2048}
model=${MODEL:-handoff.pml}

work=$(mktemp -d "${TMPDIR:-/tmp}/handoff-model.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
cp "$here/$model" "$work/"
cd "$work"

if [ "$mode" = liveness ]; then
  set -- "$@" -DLIVENESS
  ccflags="-DNFAIR=3"
  panflags="-a -f"
else
  ccflags="-DSAFETY -DCOLLAPSE"   # COLLAPSE: lossless state compression
  panflags=""
fi

echo "model: spin $* $model ($mode, expect $expect)"
"$spin" "$@" -a "$model" >spin.log 2>&1 || { cat spin.log; echo "spin -a failed"; exit 1; }
# -DMEMLIM: pan stops with "out of memory" rather than exceeding the limit.
# A variant expected to fail stops at its first error, most within a second of search:
# there pan.c is compiled at -O0 (under a second, against four at -O2).
opt=-O2
if [ "$expect" = fail ]; then opt=-O0; fi
"$cc" $opt $ccflags -DMEMLIM="$memlim" -w -o pan pan.c || { echo "compiling pan.c failed"; exit 1; }

start=$(date +%s)
# -m: search depth; -n: no unreached-code report; -E is not given: deadlocks count.
./pan -m200000 -n $noend $panflags >pan.log 2>&1 || true
end=$(date +%s)

grep -E 'State-vector|states, stored|states, matched|total actual memory|elapsed time|errors:' pan.log || true
echo "wall: $((end - start)) s"

errors=$(sed -n 's/.*errors: \([0-9][0-9]*\).*/\1/p' pan.log | tail -n 1)
if [ -z "$errors" ]; then
  cat pan.log
  echo "RESULT: no verdict from pan"
  exit 1
fi
incomplete=0
if grep -qE 'max search depth too small|out of memory|Search not completed' pan.log; then
  incomplete=1
fi

if [ "$errors" -eq 0 ]; then
  if [ "$expect" = pass ] && [ "$incomplete" -eq 0 ]; then
    echo "RESULT: no errors, as expected"
    exit 0
  fi
  grep -E 'error|warning|Search' pan.log || true
  if [ "$incomplete" -ne 0 ]; then
    echo "RESULT: search incomplete (depth or memory limit)"
  else
    echo "RESULT: no error found, but this variant is expected to be rejected"
  fi
  exit 1
fi

# An error: show what pan found and the end of the counterexample.
grep -E '^pan:|acceptance cycle|assertion violated|invalid end state' pan.log | head -n 5 || true
if [ -f "$model.trail" ]; then
  echo "--- counterexample (last steps) ---"
  "$spin" "$@" -t -p -g -k "$model.trail" "$model" >trail.log 2>&1 || true
  grep -E '^ *[0-9]+:[[:space:]]+proc .*\[' trail.log | tail -n 20 || true
  grep -E 'text of failed assertion' trail.log || true
  echo "final:" $(sed -n '/^#processes/,$p' trail.log | grep -E '^[[:space:]]+(count|owners|H|R|nrun|own|refs|cur|leased) = ' | tr -s ' \t' ' ')
fi
if [ "$expect" = fail ]; then
  if [ -n "$match" ] && ! grep -E '^pan:1:' pan.log | grep -qE "$match"; then
    echo "RESULT: rejected, but not by an error matching: $match"
    exit 1
  fi
  echo "RESULT: rejected, as expected"
  exit 0
fi
echo "RESULT: error in a variant expected to pass"
exit 1
