#!/usr/bin/env bash
# What a message costs the Redis server: the server's instructions per message (callgrind
# on redis-server, user space; the kernel's socket work per request is not counted: each
# script and each of the peers' commands is one request) and its commands per message (INFO
# commandstats: a script and each command it runs count one each), for the Redis actors'
# paths and the crash-safe peers' commands (bench/redis_actor_cost.cpp says what each mode
# runs). The idle-actor and peer modes are deterministic, where the server's CPU time swings
# with the machine's load; the busy modes' batches follow the timing.
#
#   bash tools/redis_cost.sh [--build DIR] [--modes "idle64 busy1 ..."]
#
# The default modes are the actors' and the peers'; linger64, shard64 and the
# shard<K>_<queue>_r<R>, renew256 and poll256 modes (named with --modes) are prototypes of
# ownership that outlives one message and of ownership per shard, and owner<K>_r<R> the
# library's shard parts in the poster's hand-off (docs/notebook.md,
# bench/redis_actor_cost.cpp).
#
# Uses DIR/bench/redis_actor_cost (default build/release; built here if missing). Each
# mode runs at 1,000 and 2,000 messages on a fresh server; the difference divided by 1,000
# is the cost of one message, start-up cancelled. Takes about a minute per mode.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

build=build/release
modes="idle64 list64 stream64 busy1 busy1_b1"
while (($#)); do
  case $1 in
    --build) build=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "redis_cost.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v valgrind >/dev/null && command -v redis-server >/dev/null || bash tools/deps.sh
bin=$build/bench/redis_actor_cost
[[ -x $bin ]] || cmake --build "$build" --target redis_actor_cost -j2 >/dev/null

work=$(mktemp -d)
server=""
stop() {
  if [[ -n $server ]]; then
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap stop EXIT
port=$((20000 + RANDOM % 20000))
valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" \
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no >"$work/server.log" 2>&1 &
server=$!
for _ in $(seq 1 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.2; done
redis-cli -p "$port" ping >/dev/null

# One run of `mode` with `n` messages on an empty server: "<instructions> <commands> <requests>".
run() {
  local mode=$1 n=$2
  redis-cli -p "$port" flushall >/dev/null
  redis-cli -p "$port" config resetstat >/dev/null
  callgrind_control -z "$server" >/dev/null 2>&1
  "$bin" "$port" "$mode" "$n" >/dev/null
  rm -f "$work"/cg.*.*
  callgrind_control -d "$server" >/dev/null 2>&1
  local ir
  ir=$(awk '/^(summary|totals):/ {print $2; exit}' "$work"/cg.*.*)
  # commandstats (the script commands' own lines counted once each) and the client requests.
  redis-cli -p "$port" info commandstats | tr -d '\r' | awk -F'[=,:]' -v ir="$ir" '
    /^cmdstat_/ && $1 != "cmdstat_info" && $1 != "cmdstat_config" {
      calls += $3
      if ($1 ~ /^cmdstat_(evalsha|eval)$/) scripts += $3
    }
    END { print ir, calls, scripts }'
}

printf '| mode | server instructions per message | commands per message | scripts per message |\n'
printf '| --- | ---: | ---: | ---: |\n'
for mode in $modes; do
  read -r ir1 c1 s1 < <(run "$mode" 1000)
  read -r ir2 c2 s2 < <(run "$mode" 2000)
  awk -v m="$mode" -v a="$ir1" -v b="$ir2" -v c="$c1" -v d="$c2" -v s="$s1" -v t="$s2" \
    'BEGIN { printf "| %s | %.0f | %.2f | %.2f |\n", m, (b - a) / 1000, (d - c) / 1000, (t - s) / 1000 }'
done
