#!/usr/bin/env bash
# Instructions per operation on the single-thread paths (callgrind), for this working tree
# and, given OLD_REV, for that revision too, built in the same call: deterministic figures
# where 2-thread timings swing with the machine's load.
#
#   bash tools/instructions.sh [--modes "keyed striped ..."] [--tsv FILE] [--misses] [OLD_REV]
#
# Each tree's library is built in Release (its CMake defaults, -O3) from its own sources
# (OLD_REV from a git worktree); bench/instructions.cpp of this tree, which uses only the
# public API, is compiled against each at -O2 and at -O3, since the header-inlined paths
# differ between the two. Each mode runs at 200,000 and 400,000 operations under callgrind;
# the difference divided by 200,000 is the cost of one operation, start-up cancelled.
# Prints a Markdown table (one row per mode, `bench/instructions --list` says what each
# counts); --tsv also writes it as tab-separated values (mode, what it counts, O2, O3[, old
# O2, old O3]), the form tools/bench_table.py puts into docs/benchmarks.md. --misses adds a
# second table: L1 data-cache misses per operation at -O2 under cachegrind's simulated
# cache (32 KB 8-way L1d, 512 KB LL, 64-byte lines, fixed so that figures compare across
# machines), the memory side of a path that instruction counts do not show. Takes a few
# minutes per tree on 2 cores. Output files under build/instructions/ (the clone stays
# clean).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

modes=""
tsv=""
misses=""
old=""
while (($#)); do
  case $1 in
    --modes) modes=$2; shift 2 ;;
    --tsv) tsv=$2; shift 2 ;;
    --misses) misses=1; shift ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) echo "instructions.sh: unknown option $1" >&2; exit 2 ;;
    *) old=$1; shift ;;
  esac
done
command -v valgrind >/dev/null || bash tools/deps.sh
small=200000
large=400000
out=$PWD/build/instructions
mkdir -p "$out"
jobs=$(nproc)

# Builds TREE's library (target handoff only) into $out/NAME and the program against it.
build() {  # TREE NAME
  local tree=$1 name=$2
  cmake -S "$tree" -B "$out/$name/build" -DCMAKE_BUILD_TYPE=Release -DHANDOFF_BUILD_TESTS=OFF \
    -DHANDOFF_BUILD_BENCHMARKS=OFF -DHANDOFF_INSTALL=OFF >"$out/$name/configure.log"
  cmake --build "$out/$name/build" -j"$jobs" --target handoff >"$out/$name/build.log"
  for o in O2 O3; do
    g++ -std=c++20 -"$o" -DNDEBUG -pthread -I"$tree/include" bench/instructions.cpp \
      "$out/$name/build/libhandoff.a" -o "$out/$name/instructions-$o"
  done
}

trees=(new)
mkdir -p "$out/new"
build . new
if [[ -n $old ]]; then
  worktree=$(mktemp -d)
  trap 'git worktree remove --force "$worktree/tree" >/dev/null 2>&1 || true; rm -rf "$worktree"' EXIT
  git worktree add --detach "$worktree/tree" "$old" >/dev/null 2>&1
  rm -rf "$out/old"  # its CMake cache names the last call's worktree
  mkdir -p "$out/old"
  build "$worktree/tree" old
  trees+=(old)
fi
[[ -n $modes ]] || modes=$("$out/new/instructions-O2" --list | cut -f1 | tr '\n' ' ')

# One callgrind run: prints "TREE OPT MODE N INSTRUCTIONS".
count() {  # TREE OPT MODE N
  local f="$out/$1/cg.$3.$2.$4"
  valgrind --tool=callgrind --callgrind-out-file="$f" "$out/$1/instructions-$2" "$3" "$4" >/dev/null 2>"$f.log"
  echo "$1 $2 $3 $4 $(awk '/^summary:/ { print $2; exit }' "$f")"
}
export -f count
export out
runs=$out/runs.txt
for t in "${trees[@]}"; do
  for o in O2 O3; do
    for m in $modes; do
      for n in $small $large; do echo "$t $o $m $n"; done
    done
  done
done | xargs -P "$jobs" -L1 bash -c 'count "$@"' _ >"$runs"

# Per operation: (count at large - count at small) / (large - small), from FILE's "TREE OPT
# MODE N COUNT" lines (default: the callgrind runs), with DIGITS decimals (default 1).
per_op() {  # TREE OPT MODE [FILE [DIGITS]]
  awk -v t="$1" -v o="$2" -v m="$3" -v s=$small -v l=$large -v d="${5:-1}" '
    $1 == t && $2 == o && $3 == m { c[$4] = $5 }
    END { printf "%." d "f", (c[l] - c[s]) / (l - s) }' "${4:-$runs}"
}

header="| path | -O2 | -O3 |"
rule="|---|---:|---:|"
if [[ -n $old ]]; then
  header="| path | -O2 | -O3 | $(git rev-parse --short "$old") -O2 | -O3 | -O3 change |"
  rule="|---|---:|---:|---:|---:|---:|"
fi
echo "Instructions per operation (callgrind), this tree$( [[ -n $old ]] && echo " and $old"):"
echo "$header"
echo "$rule"
[[ -z $tsv ]] || : >"$tsv"
for m in $modes; do
  a=$(per_op new O2 "$m")
  b=$(per_op new O3 "$m")
  row="| $m | $a | $b |"
  fields="$m	$("$out/new/instructions-O2" --list | awk -F'\t' -v m="$m" '$1 == m { print $2 }')	$a	$b"
  if [[ -n $old ]]; then
    c=$(per_op old O2 "$m")
    d=$(per_op old O3 "$m")
    row="$row $c | $d | $(awk -v n="$b" -v o="$d" 'BEGIN { printf "%+.1f%%", (o > 0 ? 100 * (n - o) / o : 0) }') |"
    fields="$fields	$c	$d"
  fi
  echo "$row"
  [[ -z $tsv ]] || echo "$fields" >>"$tsv"
done

[[ -n $misses ]] || exit 0
# One cachegrind run: prints "TREE O2 MODE N D1_MISSES", the form per_op reads.
d1() {  # TREE MODE N
  local f="$out/$1/cachegrind.$2.$3"
  valgrind --tool=cachegrind --cache-sim=yes --D1=32768,8,64 --LL=524288,8,64 --cachegrind-out-file="$f" \
    "$out/$1/instructions-O2" "$2" "$3" >/dev/null 2>"$f.log"
  echo "$1 O2 $2 $3 $(awk '/D1  misses:/ { gsub(",", "", $4); print $4; exit }' "$f.log")"
}
export -f d1
for t in "${trees[@]}"; do
  for m in $modes; do
    for n in $small $large; do echo "$t $m $n"; done
  done
done | xargs -P "$jobs" -L1 bash -c 'd1 "$@"' _ >"$out/misses.txt"
echo
echo "L1 data misses per operation at -O2 (cachegrind, simulated 32 KB 8-way L1d):"
echo "| path | this tree |$( [[ -n $old ]] && echo " $(git rev-parse --short "$old") |")"
echo "|---|---:|$( [[ -n $old ]] && echo "---:|")"
for m in $modes; do
  row="| $m |"
  for t in "${trees[@]}"; do row="$row $(per_op "$t" O2 "$m" "$out/misses.txt" 2) |"; done
  echo "$row"
done
