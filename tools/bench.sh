#!/usr/bin/env bash
# The main job: build handoff in Release and run the actor benchmark suite against its
# baselines (std::mutex, moodycamel mailboxes: actor_bench; Boost.Asio strands and CAF 0.17,
# Savina micro-benchmarks: peers_bench), then print the comparison table.
#
#   bash tools/bench.sh [extra benchmark flags, given to both binaries, e.g. --benchmark_filter=mailbox]
#
# Works from any directory. On a fresh Debian 12 machine, run as root: missing Debian
# packages are installed first by tools/deps.sh (checked with dpkg; apt-get update once,
# then apt-get install --no-install-recommends). Takes about 3-4 minutes on 2 cores
# (3 repetitions of every benchmark; the table shows medians).
# Output: build/release/bench/actor_bench.json and peers_bench.json (raw results) and the
# Markdown table of both on stdout (tools/bench_table.py).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Missing Debian packages (apt-get update once, then install), shared with tools/test.sh.
bash tools/deps.sh

cmake --preset release
cmake --build --preset release -j"$(nproc)" --target actor_bench peers_bench

outs=()
for bench in actor_bench peers_bench; do
  out=build/release/bench/$bench.json
  rm -f "$out"
  build/release/bench/$bench --benchmark_repetitions=3 --benchmark_display_aggregates_only=true \
    --benchmark_out="$out" --benchmark_out_format=json "$@"
  # A filter that matches nothing in one binary leaves its JSON file empty.
  if [[ -s $out ]]; then outs+=("$out"); fi
done

echo
python3 tools/bench_table.py "${outs[@]}"
