#!/usr/bin/env bash
# The main job: build handoff in Release and run the actor benchmark suite against its
# baselines (std::mutex, moodycamel mailboxes), then print the comparison table.
#
#   bash tools/bench.sh [extra actor_bench flags, e.g. --benchmark_filter=mailbox]
#
# Works from any directory. On a fresh Debian 12 machine, run as root: missing Debian
# packages are installed first by tools/deps.sh (checked with dpkg; apt-get update once,
# then apt-get install --no-install-recommends). Takes about 2-3 minutes on 2 cores
# (3 repetitions of every benchmark; the table shows medians).
# Output: build/release/bench/actor_bench.json (raw results) and the Markdown table on
# stdout (tools/bench_table.py).
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Missing Debian packages (apt-get update once, then install), shared with tools/test.sh.
bash tools/deps.sh

cmake --preset release
cmake --build --preset release -j"$(nproc)" --target actor_bench

out=build/release/bench/actor_bench.json
build/release/bench/actor_bench --benchmark_repetitions=3 --benchmark_display_aggregates_only=true \
  --benchmark_out="$out" --benchmark_out_format=json "$@"

echo
python3 tools/bench_table.py "$out"
