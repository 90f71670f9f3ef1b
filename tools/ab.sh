#!/usr/bin/env bash
# Same-run A/B of the uncontended post and keyed lock/unlock between a git revision and
# this working tree: builds bench/ab/probe.cpp against each version's library sources into
# a shared object of its own, loads both into one process (bench/ab/side_by_side.cpp) and
# alternates them, so that both see the same machine state. For changes that claim to
# cost nothing on these paths. Run it alone: a build beside it skews the figures.
# Usage: bash tools/ab.sh OLD_REV [ROUNDS]   (ROUNDS: 21)
set -euo pipefail
cd "$(dirname "$0")/.."
old=${1:?usage: bash tools/ab.sh OLD_REV [ROUNDS]}
rounds=${2:-21}
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/old" "$old" >/dev/null 2>&1

# The in-process library's sources of a tree (not the Redis or Prometheus parts).
sources() { find "$1/lib" \( -path "$1/lib/redis" -o -path "$1/lib/prometheus" \) -prune -o -name '*.cpp' -print; }
build() {  # TREE OUTPUT
  # shellcheck disable=SC2046: one argument per source file
  g++ -std=c++20 -O3 -DNDEBUG -fPIC -shared -fvisibility=hidden -I"$1/include" bench/ab/probe.cpp \
    $(sources "$1") -lpthread -o "$2"
}
build "$work/old" "$work/old.so" &
p_old=$!
build . "$work/new.so" &
p_new=$!
wait "$p_old"
wait "$p_new"
g++ -std=c++20 -O2 bench/ab/side_by_side.cpp -ldl -o "$work/side_by_side"
echo "old: $(git rev-parse --short "$old"); new: this working tree; $(nproc) CPUs"
"$work/side_by_side" "$work/old.so" "$work/new.so" "$rounds"
