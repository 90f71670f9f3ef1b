#!/usr/bin/env bash
# The main job: build handoff in Release and run the benchmark suite against its baselines
# (actor_bench: std::mutex, moodycamel mailboxes; fanin_bench: the fan-in matrix against std::mutex
# and the protocol baseline; peers_bench: Boost.Asio strands and
# CAF 0.17, the Savina micro-benchmarks, idle-actor memory; pool_bench: per-key
# serialization over a handoff::thread_pool of 1 and 3 workers; timer_bench: handoff::timer_service against Asio steady_timer; keyed_mutex_bench:
# handoff::keyed_mutex against a map of std::mutex with cleanup, a striped mutex array and
# tbb::concurrent_hash_map accessors, the FIFO check and the per-key memory; redis_bench, when
# hiredis is found: handoff::redis::keyed_mutex against the SET NX polling lock, on a
# redis-server it starts on loopback; redis_actor_bench: handoff::redis::actor_system against a
# worker per key in BLPOP and the in-process actor, 4 sender processes), then print the
# comparison table and regenerate docs/benchmarks.md and its plots docs/benchmarks.png and docs/benchmarks_keyed_mutex.png.
# A full run also counts instructions per operation on the single-thread paths
# (tools/instructions.sh, callgrind, about 5 minutes more) for the page's last table.
#
#   bash tools/bench.sh [--update-docs] [extra benchmark flags, given to every binary, e.g. --benchmark_filter=mailbox]
#
# Works from any directory. On a fresh Debian 12 machine, run as root: missing Debian
# packages are installed first by tools/deps.sh (checked with dpkg; apt-get update once,
# then apt-get install --no-install-recommends). Takes about 15 minutes on 2 cores
# (3 repetitions of every benchmark; the table shows medians).
# Output, all under build/release/bench/ (the clone stays clean): the raw results
# {actor,fanin,peers,pool,keyed_mutex,redis,redis_actor}_bench.json, the Markdown table on
# stdout (tools/bench_table.py) and, for a full run (no extra flags), benchmarks.md with the
# same table and the machine, and its plots benchmarks.png and benchmarks_keyed_mutex.png
# (gnuplot, tools/plot.gp: the ratios as bars, log scale). --update-docs (full runs only)
# then copies the page and its plots over docs/benchmarks.md and docs/*.png, the tracked
# copies, and rewrites README.md's headline table: run it when a change to a benchmark or
# its table is committed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

update_docs=0
if [[ ${1:-} == --update-docs ]]; then
  update_docs=1
  shift
  if (($# != 0)); then
    echo "handoff: --update-docs regenerates the tracked page from a full run: give no other flags" >&2
    exit 2
  fi
fi

# Missing Debian packages (apt-get update once, then install), shared with tools/test.sh.
bash tools/deps.sh

cmake --preset release
benches=(actor_bench fanin_bench peers_bench pool_bench keyed_mutex_bench timer_bench)
# redis_bench exists when CMake found hiredis (tools/deps.sh installs it and redis-server).
hiredis_found() { grep -q '^HANDOFF_HAS_REDIS:INTERNAL=ON$' build/release/CMakeCache.txt; }
if hiredis_found; then
  benches+=(redis_bench redis_actor_bench)
else
  echo "handoff: hiredis not found: redis_bench is skipped"
fi
cmake --build --preset release -j"$(nproc)" --target "${benches[@]}"

start=$SECONDS
outs=()
for bench in "${benches[@]}"; do
  out=build/release/bench/$bench.json
  rm -f "$out"
  build/release/bench/$bench --benchmark_repetitions=3 --benchmark_display_aggregates_only=true \
    --benchmark_out="$out" --benchmark_out_format=json "$@"
  # A filter that matches nothing in one binary leaves its JSON file empty.
  if [[ -s $out ]]; then outs+=("$out"); fi
done
echo "handoff: benchmarks ran in $((SECONDS - start)) s"

echo
rc=0
if (($# == 0)); then
  dir=build/release/bench
  # Instructions per operation on the single-thread paths (callgrind), beside the timings.
  bash tools/instructions.sh --tsv "$dir/instructions.tsv"
  python3 tools/bench_table.py "${outs[@]}" -o "$dir/benchmarks.md" --image benchmarks.png \
    --instructions "$dir/instructions.tsv" \
    --plot-data "$dir/ratios.tsv" --km-image benchmarks_keyed_mutex.png --km-plot-data "$dir/ratios_keyed_mutex.tsv" ||
    rc=$?
  gnuplot -e "datafile='$dir/ratios.tsv'; outfile='$dir/benchmarks.png'" tools/plot.gp
  gnuplot -e "datafile='$dir/ratios_keyed_mutex.tsv'; outfile='$dir/benchmarks_keyed_mutex.png'; heading='keyed mutex'" \
    tools/plot.gp
  echo
  if ((update_docs)); then
    cp "$dir/benchmarks.md" "$dir/benchmarks.png" "$dir/benchmarks_keyed_mutex.png" docs/
    python3 tools/bench_table.py "${outs[@]}" --headline README.md >/dev/null
    echo "handoff: wrote docs/benchmarks.md, docs/benchmarks.png, docs/benchmarks_keyed_mutex.png and README.md's headline"
  else
    echo "handoff: wrote $dir/benchmarks.md and its plots (bash tools/bench.sh --update-docs writes them to docs/)"
  fi
else
  python3 tools/bench_table.py "${outs[@]}" || rc=$?
fi
# README.md's headline table against the code it measured (a content hash it records):
# reported here, and run before a release; the benchmarks' own status is the exit code.
if ! python3 tools/headline_guard.py check README.md; then
  echo "handoff: README.md's headline table is stale (see above)" >&2
fi
exit "$rc"
