#!/usr/bin/env python3
"""Render Google Benchmark JSON output of handoff's benchmarks as Markdown tables.

Usage: tools/bench_table.py RESULT.json [MORE.json ...] [-o OUT.md] [--image PLOT.png]
                             [--plot-data RATIOS.tsv] [--km-image PLOT.png]
                             [--km-plot-data RATIOS.tsv] [--headline README.md]

-o writes the Markdown to OUT.md too (with a title and, with --image / --km-image, links to
the plot images, relative to OUT.md); --plot-data writes one "label<TAB>ratio" line per
compared pair for tools/plot.gp, --km-plot-data the same for the keyed-mutex pairs (which
--plot-data then leaves out). --headline rewrites the short headline table (HEADLINE) between
its two marker comments in that file. The Markdown always goes to stdout.

Input: files written with --benchmark_out=FILE --benchmark_out_format=json, ideally with
--benchmark_repetitions=N (N >= 3); --benchmark_report_aggregates_only may be true or
false. Every number shown is a *median*: the "median" aggregate of each benchmark, or,
for a file run without repetitions, the median of its iteration entries. When several
files hold the same benchmark, the median of their medians is shown.

Naming convention (what bench/*.cpp must follow):
  * A benchmark is registered as "<workload>/<impl>". Google Benchmark may append its own
    segments (/min_time:X, /iterations:N, /repeats:N, /real_time, /manual_time,
    /process_time, /threads:N); they are stripped, except /threads:N, which stays part of
    the workload (1 sender and 2 senders are different rows).
  * <impl> starting with "handoff" is a handoff implementation; every other <impl> of the
    same workload (same thread count) is a baseline ("mutex", "moodycamel_typed", ...).
    One row is printed per (handoff impl, baseline impl) pair.
  * ratio = baseline time / handoff time (real time per iteration); > 1 means handoff is
    faster.
  * Workloads whose name starts with "mem_" (or "km_mem_") measure memory: their time is
    not compared; they appear with their counters only.
  * Workloads whose name starts with "km_" (bench/keyed_mutex_bench.cpp) get their own
    section, "Keyed mutex": the same time table (time per lock/unlock), then their counters,
    and, with --km-plot-data, their own plot data.
  * Workloads whose name starts with "redis_" (bench/redis_bench.cpp) get their own section,
    "Redis keyed mutex": the time table with lock/unlocks per second, then their counters.
    Their ratios go to no plot.
  * Workloads whose name starts with "ractor_" (bench/redis_actor_bench.cpp) get their own
    section, "Redis actors", like the Redis keyed mutex's.
  * Workloads named "fanin_send<S>_work<H>/threads:<N>" (bench/fanin_bench.cpp) get their
    own section, "Fan-in matrix": one row per cell, one column per implementation with its
    ratio mutex time / its time, and the cell's target (FANIN_TARGET) judged on the library's
    rows (handoff_send and handoff_post; the prototypes are shown, not judged).
  * Workloads in SPEEDUP_TARGETS compare two handoff impls with each other (a worker pool
    of 1 and of more workers): speed-up = slow impl time / fast impl time, in its own table,
    one row per listed pair (a pair with no minimum is shown without a target).
  * Counters (state.counters, other than items/bytes per second) are printed per workload
    in a second table. Workloads named "mailbox*" and "mem_mailbox*" are also joined by
    impl into the "Mailbox comparison" table (ns_per_msg, sizeof, bytes_per_actor).

Targets (the project's performance goals: each entry's description says what it asks) are
in TIME_TARGETS, SPEEDUP_TARGETS, COUNTER_TARGETS and COUNTER_MIN_TARGETS below; a missed
target is marked "NOT met" in the table.

Python 3 standard library only.
"""

import argparse
import json
import re
import statistics
import sys
from collections import OrderedDict, defaultdict

import headline_guard  # tools/headline_guard.py: the hash of the code the headline measures

# (workload, baseline impl) -> (min ratio baseline_time / handoff_time, description).
# workload is either the full workload with its thread count ("1actor_trivial/threads:2"),
# which is looked up first, or the bare name, which then applies to every thread count.
# A key may name the handoff impl too, (workload, baseline impl, handoff impl): it is looked
# up before the two-part keys, for that impl's rows only.
TIME_TARGETS = {
    ("post_run_uncontended", "mutex"): (1.0, "handoff <= 1.0x mutex time"),
    ("1sender_1actor", "caf"): (10.0, ">= 10x CAF"),
    ("1sender_1actor", "asio_strand"): (10.0, ">= 10x Asio strand"),
    ("pingpong", "caf"): (5.0, ">= 5x CAF"),
    ("counting", "caf"): (5.0, ">= 5x CAF"),
    ("counting", "caf", "handoff"): (12.0, ">= 12x CAF"),
    ("threadring", "caf"): (5.0, ">= 5x CAF"),
    ("fjthroughput", "caf"): (5.0, ">= 5x CAF"),
    ("1actor_trivial/threads:2", "mutex"): (1.0, ">= 1.0x mutex, 2 senders"),
    ("1actor_work200ns/threads:2", "mutex"): (1.5, ">= 1.5x mutex, 2 senders"),
    ("chain1000", "mutex"): (0.95, "per hop >= 0.95x the mutex chain"),
    ("km_hotkey/threads:2", "map_mutex_cleanup"): (1.0, ">= 1.0x map + cleanup, FIFO kept"),
    ("km_hotkey/threads:2", "map_mutex_cleanup", "handoff_eventual"): (1.0, ">= 1.0x map of mutexes with cleanup"),
    # Keyed mutex: uncontended lock/unlock over 1024 keys.
    # Thin keyed locks: an uncontended key costs what a striped lock array costs.
    ("km_uncontended", "striped256"): (0.9, ">= 0.9x striped mutex (an uncontended key: no per-key state)"),
    ("km_hotkey/threads:2", "striped256", "handoff_eventual"): (0.8, ">= 0.8x striped mutex, hot key under eventual"),
    ("km_uncontended", "map_mutex_cleanup"): (2.0, ">= 2x map of mutexes with cleanup"),
    ("km_uncontended", "tbb_accessor_erase"): (2.0, ">= 2x tbb accessor with erase"),
    ("timer_schedule_cancel", "asio_steady_timer"): (5.0, ">= 5x Asio steady_timer"),
    ("timer_schedule_cancel_100k_targets", "asio_steady_timer"): (5.0, ">= 5x Asio steady_timer, 100,000 targets"),
}
# workload -> [(slow impl, fast impl, min speed-up slow_time / fast_time or None, description, note)]
SPEEDUP_TARGETS = {
    "1actor_bounded256": [("handoff_unbounded", "handoff_bounded256", 0.5, "bounded <= 2x unbounded time",
                           "1actor_bounded256: 8 senders -> one actor, trivial handler, with "
                           "actor_options{.capacity = 256} (full_policy::block) and without a capacity "
                           "(bench/actor_bench.cpp); here the speed-up is unbounded time / bounded time: >= 0.5 means the "
                           "bound costs at most 2x")],
    "keyed_pool_1011x1ms": [("handoff_1worker", "handoff_3workers", 2.8, "3 workers >= 2.8x 1 worker",
                             "keyed_pool: 1011 requests of 1 ms (sleep, not CPU) over 8 keys, one actor per key "
                             "with actor_options{.executor = pool, .max_messages = 1}, each request submitted "
                             "through the pool (bench/pool_bench.cpp). The ideal is 3.0x: the work does not "
                             "use the CPU")],
    "mesh_120actors_1us": [("handoff_1worker", "handoff_2workers", 1.7, "2 workers >= 1.7x 1 worker",
                            "mesh: 120 actors on a pool, 1 us of CPU work per message, each message then sent on "
                            "to a random actor, 240 in flight, 24,000 handler runs per iteration "
                            "(bench/pool_bench.cpp). With the idle hint, a worker hands runnable actors to idle "
                            "workers; handoff_2workers_nohint is the same pool behind an executor that gives no "
                            "hint. The ideal is the core count"),
                           ("handoff_2workers_nohint", "handoff_2workers", None, "the idle hint's effect", "")],
    "timer_schedule_cancel_threads": [("handoff_1thread", "handoff_2threads", 1.6, "2 threads >= 1.6x 1 thread",
                                       "timer_schedule_cancel_threads: 200,000 schedule + cancel pairs per iteration "
                                       "over 100,000 targets, split between 1 or 2 threads, each on its own targets "
                                       "with its own ring of pending timers (10,000 in all) (bench/timer_bench.cpp); "
                                       "each thread schedules into a shard of its own. The ideal is the core count. "
                                       "separate_services_2threads gives each thread a service and actors of its own "
                                       "(nothing of the library shared): what two threads of one process reach on "
                                       "the machine"),
                                      ("handoff_1thread", "separate_services_2threads", None,
                                       "nothing shared: the machine's two-thread ceiling", "")],
}
# (workload prefix, counter) -> (max value for handoff impls, description)
COUNTER_TARGETS = {
    ("mem_idle", "bytes_per_actor"): (99.0, "idle actor: tens of bytes (< 100)"),
    ("mem_mixed_lifetimes", "heap_growth_bytes"): (20000 * 64 + 4 * 1024 * 1024,
                                                    "20,000 long-queued messages: <= 64 B each + 4 MiB"),
    ("km_1m_keys", "size_after"): (0.0, "size() == 0 after"),
    ("km_1m_keys", "rss_growth_kb"): (256.0, "RSS growth <= 256 KB"),
    ("km_mem_live_100k", "size_after"): (0.0, "size() == 0 after release"),
    ("fib25", "peak_live_vs_depth_first"): (2.0, "peak live actors <= 2x a depth-first run"),
    ("timer_1m_pending", "bytes_per_timer"): (96.5, "96-byte entries (64-bit generation and in-flight count): <= 80 bytes beyond a 16-byte message"),
    ("timer_fire_latency", "early"): (0.0, "never early"),
    ("timer_schedule_cancel_100k_targets", "ns_per_op"): (50.0, "schedule + cancel over 100,000 targets <= 50 ns"),
    ("timer_rearm", "ns_per_op"): (30.0, "re-arm <= 30 ns"),
    ("timer_schedule_cancel_100k_targets", "allocs_per_op"): (0.0, "no allocation in the steady state"),
    ("timer_destroy_actor_1m_pending", "destroy_us"): (20.0, "destroying an actor with 1 timer, 1M pending: <= 20 us"),
    ("timer_cancel_busy_handler", "cancel_p99_us"): (50.0, "cancel() while the target's handler runs 10 ms: p99 <= 50 us"),
    ("timer_cancel_busy_handler", "late_p99_over_idle_us"): (1050.0, "other timers due meanwhile: p99 lateness <= the idle run's + 1.05 ms"),
    ("timer_cancel_busy_handler", "early"): (0.0, "never early"),
    ("timer_burst_memory", "bytes_beyond_wheel"): (65536.0, "after 1M scheduled and cancelled, a periodic timer living: <= 64 KB beyond the wheel"),
    ("redis_delayed_10k", "early"): (0.0, "never early"),
    ("redis_delayed_10k", "last_ms"): (1000.0, "the last within 1 s of the due time"),
}
# (workload prefix, counter) -> (min value for handoff impls, description)
COUNTER_MIN_TARGETS = {
    ("km_hotkey", "fifo_ok"): (1.0, "FIFO grant order checked"),
    # The one-server rows (plain and through the delay proxy); the cluster's run no check.
    ("redis_hotkey/", "fifo_ok"): (1.0, "FIFO grant order across clients checked"),
    ("redis_hotkey_rtt", "fifo_ok"): (1.0, "FIFO grant order across clients checked"),
}
FANIN_PREFIX = "fanin_"
FANIN_NAME = re.compile(r"^fanin_send(\d+)_work(\d+)/threads:(\d+)$")
FANIN_LIBRARY = ("handoff_send", "handoff_post")
FANIN_NOTE = ("N senders -> one actor; sender work is busy work before each send, handler work busy work in "
              "the handler (under the lock for the mutex); both calibrated (fanin_work_iterations). Cells: "
              "ratio = mutex time / implementation time (> 1: faster than the mutex); the mutex column is "
              "its time per message. mailbox = the library's protocol in minimal form over the Vyukov "
              "mailbox (the baseline the prototypes replace); handoff_send / handoff_post = the library's "
              "basic_actor / actor; proto_* = packed-word prototypes (bench/packed_actor.hpp): packed = one "
              "fetch_add per send into ticketed slots, lines = the same with consumer batching, sticky = "
              "with a sticky release. The target is judged on the slower of handoff_send and handoff_post. "
              "See bench/fanin_bench.cpp.")


def fanin_target(senders, send_ns, work_ns):
    """(min ratio mutex / handoff, description) for one fan-in cell, or None."""
    if work_ns >= 100:
        return 1.2, ">= 1.2x mutex"
    if work_ns >= 30:
        if send_ns == 30 and senders == 2:
            return 1.1, ">= 1.1x mutex"
        return 1.0, ">= 1.0x mutex"
    if send_ns <= 30:
        return 1.0, ">= 1.0x mutex"
    return None


def ratio_cells(by_impl, base_impl, impls):
    """A row's baseline time and, per impl, its cell (baseline / impl, or ERROR / n/a) and ratio."""
    base = by_impl.get(base_impl, (None, {}))[1]
    bt = base.get("time") if "error" not in base else None
    cells, ratios = [], {}
    for impl in impls:
        r = by_impl.get(impl, (None, {}))[1]
        t = r.get("time")
        if "error" in r or not t or not bt:
            cells.append("ERROR" if "error" in r else "n/a")
            continue
        ratios[impl] = bt / t
        cells.append(f"{bt / t:.2f}")
    return bt, cells, ratios


def fanin_section(out, workloads):
    """Appends the fan-in matrix: one row per cell, ratio mutex / impl per column."""
    impls = []
    for by_impl in workloads.values():
        for impl in by_impl:
            if impl != "mutex" and impl not in impls:
                impls.append(impl)
    out.append("### Fan-in matrix")
    out.append("")
    out.append(FANIN_NOTE)
    out.append("")
    heads = [i.replace("handoff_", "") for i in impls]
    out.append("| senders | sender work | handler work | mutex | " + " | ".join(heads) + " | target |")
    out.append("|---:|---:|---:|---:|" + "---:|" * len(impls) + "---|")
    rows = []
    for workload, by_impl in workloads.items():
        m = FANIN_NAME.match(workload)
        if not m:
            continue
        send_ns, work_ns, senders = (int(g) for g in m.groups())
        rows.append(((senders, send_ns, work_ns), by_impl))
    for (senders, send_ns, work_ns), by_impl in sorted(rows, key=lambda r: r[0]):
        mt, cells, ratios = ratio_cells(by_impl, "mutex", impls)
        target = ""
        goal = fanin_target(senders, send_ns, work_ns)
        lib = [ratios[i] for i in FANIN_LIBRARY if i in ratios]
        if goal and lib:
            target = f"{'met' if min(lib) >= goal[0] else '**NOT met**'} ({goal[1]})"
        out.append(f"| {senders} | {send_ns} ns | {work_ns} ns | {fmt_ns(mt)} | " + " | ".join(cells) +
                   f" | {target} |")
    out.append("")


BATCH_PREFIX = "fanin_batch"
BATCH_NAME = re.compile(r"^fanin_batch(\d+)/threads:(\d+)$")
BATCH_TARGET = 1.5  # send_all / post_all against a mutex locked once per message


def batch_section(out, workloads):
    """Appends the batch rows: ratio = mutex locked once per message / impl, per sender count."""
    impls = ["handoff_send", "handoff_send_all", "handoff_post_all", "mutex_per_batch"]
    out.append("### Batch sends")
    out.append("")
    out.append("N senders -> one actor, trivial handler; every iteration sends a batch of messages. Ratio = "
               "`std::mutex` locked once per message / the implementation: `send` one message at a time, "
               "`send_all` and `post_all` the batch with one atomic, and a mutex locked once per batch. "
               "See bench/fanin_bench.cpp.")
    out.append("")
    out.append("| batch | senders | mutex per message | " + " | ".join(i.replace("handoff_", "") for i in impls) +
               " | target |")
    out.append("|---:|---:|---:|" + "---:|" * len(impls) + "---|")
    for workload, by_impl in workloads.items():
        m = BATCH_NAME.match(workload)
        if not m:
            continue
        size, senders = (int(g) for g in m.groups())
        bt, cells, ratios = ratio_cells(by_impl, "mutex_per_message", impls)
        lib = [ratios[i] for i in ("handoff_send_all", "handoff_post_all") if i in ratios]
        target = ""
        if lib:
            target = f"{'met' if min(lib) >= BATCH_TARGET else '**NOT met**'} (>= {BATCH_TARGET}x)"
        out.append(f"| {size} | {senders} | {fmt_ns(bt)} | " + " | ".join(cells) + f" | {target} |")
    out.append("")


KM_PREFIX = "km_"
KM_NOTE = ("Keys are std::string (\"player:123\"); time is wall-clock per lock/unlock, all threads together. "
           "Baselines: map_mutex_cleanup = std::unordered_map<std::string, {std::mutex, users}> under one "
           "global std::mutex, entry erased by its last user; striped256 = 256 std::mutex by hash (not an "
           "exact keyed lock); tbb_accessor_erase/_keep = tbb::concurrent_hash_map write accessor held as "
           "the lock, erased on unlock / kept. km_design compares the per-key state without a table: "
           "(b) the atomic-count ownership protocol (handoff's) against (a) an actor whose lock and unlock "
           "are messages, and a std::mutex. km_hotkey/handoff checks FIFO grant order on every call "
           "(fifo_ok). km_1m_keys and km_mem_live_100k run once per process (a memory delta means something "
           "only the first time an allocator reaches that size): their time is one sample. In "
           "km_mem_live_100k, bytes_per_live_key is the RSS delta, a cold measurement for handoff (it runs "
           "first); map_mutex_cleanup's reuses memory handoff freed: compare heap_bytes_per_live_key. "
           "See bench/keyed_mutex_bench.cpp.")

REDIS_PREFIX = "redis_"
REDIS_NOTE = ("handoff::redis::keyed_mutex against the polling lock of redis-plus-plus's RedMutex and most "
              "hand-rolled code: SET key token NX PX 30000, on failure sleep 100 ms (poll_100ms, RedMutex's "
              "default) or 1 ms (poll_1ms) and retry, release by a compare-and-delete Lua script; raw hiredis. "
              "handoff = lock() without a lease (the watchdog renews it), handoff_lease = lock(key, lease{30s}), "
              "the baseline's PX. Every thread has its own client (its own keyed_mutex or hiredis connection), "
              "like separate processes. Time is wall-clock per lock/unlock, all threads together; ops/s = "
              "lock/unlocks per second. redis_uncontended: 1 thread, 1024 random keys; redis_hotkey: 2, 4 or 8 "
              "threads on one key, critical section ++count (checked); redis_64keys: 8 threads over 64 keys; "
              "the _cluster rows: handoff alone on a Redis Cluster of 3 primaries on loopback (the polling lock "
              "speaks to one server), to be read against the same workload's handoff row: the routing's cost "
              "(server_cpu_us adds up the 3 primaries). "
              "Counters: handoff_p50/p99_us = from the holder's unlock call to the next holder's grant, for "
              "grants whose lock() started before that unlock; wait_* = how long lock() took; same_holder_pct "
              "= grants to the thread that held the key last (a polling lock lets the releaser re-take the key: "
              "high throughput, unbounded waits for the others); fifo_ok = FIFO grant order across 5 clients "
              "checked on every redis_hotkey/handoff call; server_cpu_us, process_cpu_us = CPU time per "
              "lock/unlock of redis-server and of the benchmark process (all its threads: clients, their "
              "background threads, the delay proxy), ctx_switches = the process's context switches per "
              "lock/unlock. **Loopback caveat:** redis-server, the clients and their background threads share the machine's cores, so a round trip is tens of microseconds of "
              "system calls and scheduling, and on 2 cores the contended rows measure CPU time per operation as "
              "much as waiting; over a network every figure grows by the network's round trips. "
              "See bench/redis_bench.cpp and docs/redis.md.")

TIMER_PREFIX = "timer_"
TIMER_NOTE = ("handoff::timer_service against one Boost.Asio steady_timer per timeout on an io_context, "
              "10,000 timers pending (bench/timer_bench.cpp); timer_1m_pending and timer_fire_latency run once; "
              "timer_fire_latency_busy is timer_fire_latency while two threads spin (both cores busy).")
RACTOR_PREFIX = "ractor_"
RDELAYED_PREFIX = "redis_delayed_"  # the actors' delayed messages: in their section
RACTOR_NOTE = ("handoff::redis::actor_system (handoff_redis_batch16: the sender that finds an actor idle "
               "runs its own message; a one-thread executor per process sends the dequeues, several in one "
               "round trip, and runs what follows; its owner takes up to 16 messages, the default batch, "
               "per round trip) against a worker thread per key in the process key % 4: blocked in BLPOP "
               "on the key's list, senders RPUSH (worker_blpop: a worker that crashes loses the message "
               "it popped); the crash-safe peers: BLMOVE to a processing list, handle, LREM "
               "(worker_reliable_list), and a stream per key read by a consumer group, XREADGROUP, "
               "handle, XACK + XDEL in one round trip, senders XADD (worker_stream), each with a "
               "recovery pass every 100 ms (LRANGE of the processing list; XAUTOCLAIM); their _batch16 "
               "variants read up to 16 messages per round trip (the list: a BLMOVE, then 15 LMOVEs "
               "pipelined, then the LREMs pipelined; the stream: COUNT 16, one XACK + XDEL); "
               "floor_two_scripts: each sender runs a script that only RPUSHes and one that only LPOPs "
               "(the least a script-based ownership protocol costs); shard_list_prototype: a "
               "prototype of actors owned by shard, not the library (a list per shard of 256, each "
               "process the owner of a quarter of them: it reads its busy shards in one round trip, "
               "runs them and acknowledges them with one epoch-checked script; senders RPUSH, and "
               "ring the owner of a shard they find empty; _actors: each key's handler on its "
               "in-process actor on a pool of two threads; ractor_64keys_paced_slowkey: one key's "
               "first handler sleeps 1 s, the latency is the other keys'); and the in-process "
               "handoff::actor (handoff_inprocess: 4 threads, no Redis). 4 sender processes (fork), trivial "
               "handlers. ractor_1key: 2000 messages per sender to one key; ractor_64keys: over 64 keys; "
               "_aof: the same on a server with --appendonly yes --appendfsync everysec; "
               "_paced: 500 per sender, one every 1 ms (4000 messages/s, below every impl's capacity); "
               "_rtt0.5ms: 400 per sender through a proxy delaying each direction by 250 us. Time is "
               "wall-clock per message, all processes together (ops/s = messages per second); p50_us, "
               "p99_us = end-to-end latency from the post (RPUSH, XADD) call to the handler, on the shared "
               "monotonic clock; server_cpu_us = the redis-server's CPU time per message. Every row checks "
               "that each message was handled exactly once (a row that was not shows ERROR). The unpaced "
               "rows saturate the system: their latency is mostly queueing. "
               "redis_delayed_10k_<K>keys: one process posts 10,000 delayed messages over K keys, all due at "
               "one instant 3 s ahead, and handles them: handoff_redis (post_at, the default sweep_interval "
               "of 100 ms) against sorted_set_poller (the design of Sidekiq's scheduled set and BullMQ's "
               "delayed jobs: ZADD by due time, a poller every 100 ms popping what is due in one script, "
               "not crash-safe past the pop, no per-key order); time = from the due instant to the last "
               "handler's start (also last_ms), p50_ms and p99_ms of that lateness, early = handlers that "
               "started before the due instant, post_us = one delayed post, server_cpu_us = the server's "
               "CPU from the due instant to the last handler, per message. "
               "Each workload runs once per repetition. See bench/redis_actor_bench.cpp and "
               "docs/redis_actor.md.")

TIME_UNIT_NS = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
GB_SUFFIX = re.compile(r"^(min_time:.*|min_warmup_time:.*|iterations:\d+|repeats:\d+|real_time|manual_time|process_time)$")
NON_COUNTER_KEYS = {
    "name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions",
    "repetition_index", "threads", "iterations", "real_time", "cpu_time", "time_unit",
    "aggregate_name", "aggregate_unit", "error_occurred", "error_message", "label",
    "items_per_second", "bytes_per_second",
}


def split_name(run_name):
    """'w/impl/min_time:1.000/real_time/threads:2' -> ('w/threads:2', 'impl')."""
    parts = run_name.split("/")
    if len(parts) < 2:
        return run_name, ""
    workload, impl, rest = parts[0], parts[1], parts[2:]
    kept = [p for p in rest if not GB_SUFFIX.match(p)]
    return "/".join([workload] + kept), impl


def load(paths):
    """Returns (contexts, {run_name: {"time": [...], counters..., "error": msg}})."""
    contexts = []
    repetitions = set()
    medians = defaultdict(lambda: defaultdict(list))  # run_name -> field -> [median per file]
    errors = {}
    for path in paths:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        contexts.append(data.get("context", {}))
        per_run = defaultdict(lambda: {"median": None, "iterations": []})
        for b in data.get("benchmarks", []):
            run = b.get("run_name", b["name"])
            repetitions.add(int(b.get("repetitions", 1)))
            if b.get("error_occurred"):
                errors[run] = b.get("error_message", "error")
                continue
            if b.get("run_type") == "aggregate":
                if b.get("aggregate_name") == "median":
                    per_run[run]["median"] = b
            else:
                per_run[run]["iterations"].append(b)
        for run, entries in per_run.items():
            if entries["median"] is not None:
                sources = [entries["median"]]
            else:
                sources = entries["iterations"]
            if not sources:
                continue
            fields = defaultdict(list)
            for b in sources:
                fields["time"].append(b["real_time"] * TIME_UNIT_NS.get(b.get("time_unit", "ns"), 1.0))
                for k, v in b.items():
                    if k not in NON_COUNTER_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool):
                        fields[k].append(float(v))
                    if k == "items_per_second":
                        fields[k].append(float(v))
            for k, vs in fields.items():
                medians[run][k].append(statistics.median(vs))
    results = OrderedDict()
    for run, fields in medians.items():
        results[run] = {k: statistics.median(vs) for k, vs in fields.items()}
    for run, msg in errors.items():
        results.setdefault(run, {})["error"] = msg
    if contexts:
        contexts[0]["_repetitions"] = sorted(repetitions)
    return contexts, results


def fmt_ns(ns):
    if ns is None:
        return "n/a"
    if ns >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.2f} us"
    return f"{ns:.1f} ns"


def fmt_num(v):
    if v is None:
        return ""
    if abs(v) >= 1e6:
        return f"{v / 1e6:.2f}M"
    if abs(v) >= 100 or v == int(v):
        return f"{v:.0f}"
    return f"{v:.2f}"


def machine_line(contexts):
    c = contexts[0] if contexts else {}
    parts = []
    if "cpu_model" in c:
        parts.append(c["cpu_model"])
    if "num_cpus" in c:
        parts.append(f"{c['num_cpus']} CPUs @ {c.get('mhz_per_cpu', '?')} MHz")
    for key in ("os", "compiler"):
        if key in c:
            parts.append(c[key])
    if "date" in c:
        parts.append(c["date"])
    parts += machine_state(c)
    if c.get("library_build_type") == "debug":
        parts.append("libbenchmark built as debug (Debian package; affects only its own overhead)")
    return "; ".join(parts)


def is_memory(workload):
    base = workload.split("/")[0]
    return base.startswith("mem_") or base.startswith(KM_PREFIX + "mem_")


def time_table(out, plot, by_workload, ops=False):
    """Appends the time comparison rows of by_workload to out, the ratios to plot. With ops,
    each time is followed by its operations per second (items_per_second)."""
    if ops:
        out.append("| Benchmark | handoff | handoff median | ops/s | baseline | baseline median | ops/s | ratio | "
                   "target |")
        out.append("|---|---|---:|---:|---|---:|---:|---:|---|")
    else:
        out.append("| Benchmark | handoff | handoff median | baseline | baseline median | ratio | target |")
        out.append("|---|---|---:|---|---:|---:|---|")

    def cells(r):
        """The time cell, and with ops its ops/s cell."""
        t = fmt_ns(r.get("time"))
        return f"{t} | {fmt_num(r.get('items_per_second'))}" if ops else t
    for workload, impls in by_workload.items():
        if is_memory(workload) or workload.split("/")[0] in SPEEDUP_TARGETS:
            continue
        ours = [i for i in impls if i.startswith("handoff")]
        theirs = [i for i in impls if not i.startswith("handoff")]
        base = workload.split("/")[0]
        for h in ours:
            hr = impls[h][1]
            for b in theirs:
                br = impls[b][1]
                ht, bt = hr.get("time"), br.get("time")
                if "error" in hr or "error" in br:
                    err = hr.get("error") or br.get("error")
                    out.append(f"| {workload} | {h} | {cells(hr)} | {b} | {cells(br)} | n/a | ERROR: {err} |")
                    continue
                ratio = bt / ht if ht and bt else None
                target = ""
                t = (TIME_TARGETS.get((workload, b, h)) or TIME_TARGETS.get((base, b, h))
                     or TIME_TARGETS.get((workload, b)) or TIME_TARGETS.get((base, b)))
                if t and ratio is not None:
                    target = f"{'met' if ratio >= t[0] else '**NOT met**'} ({t[1]})"
                if ratio is not None:
                    plot.append((plot_label(workload, h, b), ratio))
                ratio_s = f"{ratio:.2f}" if ratio is not None else "n/a"
                out.append(f"| {workload} | {h} | {cells(hr)} | {b} | {cells(br)} | {ratio_s} | {target} |")
        if not ours or not theirs:
            for i, (run, r) in impls.items():
                note = "ERROR: " + r["error"] if "error" in r else "(no pair)"
                empty = "| | | | " if ops else "| | | "
                out.append(f"| {workload} | {i} | {cells(r)} {empty}{note} |")
    out.append("")


# The fairness rows of the actors with default options (no executor, no budget set): no
# sender held hostage. counter -> (limit, is a maximum, description).
FAIRNESS_IMPLS = ("handoff_send", "handoff_post")
FAIRNESS_TARGETS = {
    "share_min": (0.25, False, "every sender's share >= 0.25"),
    "post_max_us": (10000.0, True, "longest single post <= 10 ms"),
}


def counter_target(workload, impl, r):
    """The counter targets of one row, joined."""
    if not impl.startswith("handoff"):
        return ""
    found = []
    if workload.startswith("fairness_work") and impl in FAIRNESS_IMPLS:
        for counter, (limit, is_max, desc) in FAIRNESS_TARGETS.items():
            if counter in r:
                met = r[counter] <= limit if is_max else r[counter] >= limit
                found.append(f"{'met' if met else '**NOT met**'} ({desc})")
    for (prefix, counter), (limit, desc) in COUNTER_TARGETS.items():
        if workload.startswith(prefix) and counter in r:
            found.append(f"{'met' if r[counter] <= limit else '**NOT met**'} ({desc})")
    for (prefix, counter), (limit, desc) in COUNTER_MIN_TARGETS.items():
        if workload.startswith(prefix):
            if "error" in r:
                found.append(f"**NOT met** ({desc}: {r['error']})")
            elif counter in r:
                found.append(f"{'met' if r[counter] >= limit else '**NOT met**'} ({desc})")
            else:
                found.append(f"**NOT met** ({desc}: counter missing)")
    return "; ".join(found)


def counter_tables(out, by_workload):
    """Appends one counter table per workload that has counters."""
    for workload, impls in by_workload.items():
        names = []
        for _, r in impls.values():
            for k in r:
                if k not in ("time", "items_per_second", "error") and k not in names:
                    names.append(k)
        if not names:
            continue
        out.append(f"| {workload} | " + " | ".join(names) + " | target |")
        out.append("|---|" + "---:|" * len(names) + "---|")
        for impl, (_, r) in impls.items():
            if not any(n in r for n in names):
                continue  # a baseline without these counters (km_hotkey's fifo_ok)
            cells = [fmt_num(r.get(n)) for n in names]
            out.append(f"| {impl} | " + " | ".join(cells) + f" | {counter_target(workload, impl, r)} |")
        out.append("")


def machine_state(context):
    """What the machine offered when a binary started: its load and core-to-core round trip."""
    parts = []
    if "load_avg" in context:
        parts.append("load avg " + ", ".join(f"{x:.2f}" for x in context["load_avg"]))
    if "core_to_core_rtt_ns" in context:
        parts.append(f"core-to-core round trip {context['core_to_core_rtt_ns']} ns")
    return parts


def started_line(context):
    """Returns "This binary started at <date>, load avg ..., core-to-core round trip ... ns.", or ""
    when the context has neither figure."""
    parts = machine_state(context)
    if not parts:
        return ""
    return f"This binary started at {context.get('date', '?')}, " + ", ".join(parts) + "."


def ops_section(out, title, note, server_line, context, workloads):
    """Appends a section of time-and-ops/s rows: its title, note, the server line with the load
    when the binary started (from its context), the time table and the counters."""
    out.append(f"### {title}")
    out.append("")
    out.append(note)
    if context:
        out.append(" ".join(x for x in (server_line, started_line(context)) if x))
    out.append("")
    time_table(out, [], workloads, ops=True)
    counter_tables(out, workloads)


def speedup_table(out, by_workload, heading):
    """Speed-ups between two handoff impls of one workload (SPEEDUP_TARGETS), under heading."""
    speedups = [(w, impls) for w, impls in by_workload.items() if w.split("/")[0] in SPEEDUP_TARGETS]
    if not speedups:
        return
    out.append(heading)
    out.append("")
    out.append("| Benchmark | slower | time | faster | time | speed-up | target |")
    out.append("|---|---|---:|---|---:|---:|---|")
    notes = []
    for workload, impls in speedups:
        for slow, fast, limit, desc, note in SPEEDUP_TARGETS[workload.split("/")[0]]:
            sr, fr = impls.get(slow, (None, {}))[1], impls.get(fast, (None, {}))[1]
            st, ft = sr.get("time"), fr.get("time")
            if "error" in sr or "error" in fr or not st or not ft:
                err = sr.get("error") or fr.get("error") or "missing result"
                out.append(f"| {workload} | {slow} | {fmt_ns(st)} | {fast} | {fmt_ns(ft)} | n/a | ERROR: {err} |")
                continue
            speedup = st / ft
            if limit is None:
                target = f"no target ({desc})"
            else:
                target = f"{'met' if speedup >= limit else '**NOT met**'} ({desc})"
            out.append(f"| {workload} | {slow} | {fmt_ns(st)} | {fast} | {fmt_ns(ft)} | {speedup:.2f} | {target} |")
            if note and note not in notes:
                notes.append(note)
    out.append("")
    for note in notes:
        out.append(note[0].upper() + note[1:] + ".")
        out.append("")


def render(contexts, results):
    """Returns (markdown, [(plot label, ratio)], [(keyed-mutex plot label, ratio)])."""
    out = []
    plot = []
    km_plot = []
    out.append("## handoff benchmark results")
    out.append("")
    out.append("Machine: " + machine_line(contexts) + ".")
    reps = str(max(contexts[0].get("_repetitions") or [1])) if contexts else "1"
    out.append(f"All values are medians of {reps} repetitions (except where a workload says it runs once); "
               "time is wall-clock per iteration: per "
               "message (all sender threads together) for the actor workloads, per message through the "
               "whole chain for chain1000, per complete run for the Savina benchmarks and the worker "
               "pool. Ratio = baseline / handoff (> 1: handoff faster).")
    out.append("")

    by_workload = OrderedDict()
    km_workload = OrderedDict()  # the keyed mutex's workloads: their own section
    redis_workload = OrderedDict()  # handoff::redis's: their own section
    ractor_workload = OrderedDict()  # handoff::redis::actor_system's: their own section
    fanin_workload = OrderedDict()  # the fan-in matrix: its own section
    batch_workload = OrderedDict()  # fan-in with batch sends: its own section
    timer_workload = OrderedDict()  # the timer service's: their own section
    for run, r in results.items():
        workload, impl = split_name(run)
        if workload.startswith(BATCH_PREFIX):
            target = batch_workload
        elif workload.startswith(FANIN_PREFIX):
            target = fanin_workload
        elif workload.startswith(KM_PREFIX):
            target = km_workload
        elif workload.startswith(TIMER_PREFIX):
            target = timer_workload
        elif workload.startswith(RACTOR_PREFIX) or workload.startswith(RDELAYED_PREFIX):
            target = ractor_workload
        elif workload.startswith(REDIS_PREFIX):
            target = redis_workload
        else:
            target = by_workload
        target.setdefault(workload, OrderedDict())[impl] = (run, r)

    # Time comparison.
    if by_workload:
        time_table(out, plot, by_workload)

    if fanin_workload:
        fanin_section(out, fanin_workload)
    if batch_workload:
        batch_section(out, batch_workload)

    # Speed-ups between two handoff impls of one workload (the worker pool).
    speedup_table(out, by_workload, "### Worker pool: speed-up with more workers")

    # Counters per workload.
    counter_out = []
    counter_tables(counter_out, by_workload)
    if counter_out:
        out.append("### Counters (medians)")
        out.append("")
        out.extend(counter_out)

    # Mailbox comparison: join mailbox* and mem_mailbox* by impl.
    mailbox = OrderedDict()
    for workload, impls in by_workload.items():
        base = workload.split("/")[0]
        if not (base.startswith("mailbox") or base.startswith("mem_mailbox")):
            continue
        for impl, (_, r) in impls.items():
            row = mailbox.setdefault(impl, {})
            if base.startswith("mailbox"):
                row["ns_per_msg"] = r.get("ns_per_msg", r.get("time"))
                row["workload"] = workload
            else:
                row["sizeof"] = r.get("sizeof")
                row["bytes_per_actor"] = r.get("bytes_per_actor")
    if mailbox:
        out.append("### Mailbox comparison (same hand-off protocol, mailbox varies)")
        out.append("")
        out.append("| mailbox | ns/message (2 senders -> 1 actor) | sizeof | bytes per idle actor (sizeof + heap) |")
        out.append("|---|---:|---:|---:|")
        for impl, row in mailbox.items():
            ns = row.get("ns_per_msg")
            out.append(f"| {impl} | {fmt_ns(ns) if ns is not None else ''} | {fmt_num(row.get('sizeof'))} | "
                       f"{fmt_num(row.get('bytes_per_actor'))} |")
        out.append("")

    # The keyed mutex: its time table, then its counters.
    if km_workload:
        out.append("### Keyed mutex")
        out.append("")
        out.append(KM_NOTE)
        km_context = next((c for c in contexts if "keyed_mutex_keys" in c), None)
        if km_context and started_line(km_context):
            # The binaries run one after another: the machine when this one started says
            # more about its numbers than when the first one did.
            out.append(started_line(km_context))
        out.append("")
        time_table(out, km_plot, km_workload)
        counter_tables(out, km_workload)

    # The timer service: its time table, then its counters (bytes, lateness).
    if timer_workload:
        out.append("### Timers")
        out.append("")
        out.append(TIMER_NOTE)
        out.append("")
        time_table(out, [], timer_workload)  # not in the main plot
        speedup_table(out, timer_workload, "Speed-up with a second scheduling thread:")
        counter_tables(out, timer_workload)

    # The keyed mutex over Redis, then the actors over Redis: each its time table with
    # ops/s, then its counters.
    if redis_workload:
        context = next((c for c in contexts if "redis_server" in c), None)
        ops_section(out, "Redis keyed mutex", REDIS_NOTE, context and f"Redis {context['redis_server']}.", context,
                    redis_workload)
    if ractor_workload:
        context = next((c for c in contexts if "redis_actor_server" in c), None)
        server = context and "; ".join(context[k] for k in ("redis_actor_server", "redis_actor_aof") if k in context)
        ops_section(out, "Redis actors", RACTOR_NOTE, server and server + ".", context, ractor_workload)
    return "\n".join(out), plot, km_plot


# The README's headline: (label, workload, handoff impl, baseline impl, what a number means).
# tools/bench.sh --update-docs writes it between HEADLINE_BEGIN and HEADLINE_END.
HEADLINE = [
    ("uncontended post -> run, `actor::post` vs `std::mutex` lock/unlock", "post_run_uncontended",
     "handoff_post", "mutex"),
    ("1 sender -> 1 actor vs Boost.Asio strand", "1sender_1actor", "handoff", "asio_strand"),
    ("1 sender -> 1 actor vs CAF 0.17", "1sender_1actor", "handoff", "caf"),
    ("Savina Counting vs CAF (1M queued messages)", "counting", "handoff", "caf"),
    ("2 senders -> 1 actor, trivial handler, `post` vs mutex", "fanin_send0_work0/threads:2", "handoff_post",
     "mutex"),
    ("2 senders -> 1 actor, ~100 ns handler, `post` vs mutex", "fanin_send0_work100/threads:2", "handoff_post",
     "mutex"),
    ("8 senders -> 1 actor, ~30 ns on both sides, `post` vs mutex", "fanin_send30_work30/threads:8",
     "handoff_post", "mutex"),
    ("message forwarded through 1000 actors vs 1000 mutexes", "chain1000", "handoff_post", "mutex"),
    ("keyed mutex, uncontended, 1024 keys vs a map of `std::mutex` with cleanup", "km_uncontended/threads:1",
     "handoff", "map_mutex_cleanup"),
    ("keyed mutex, one hot key, 2 threads, `fifo` vs the same map", "km_hotkey/threads:2", "handoff",
     "map_mutex_cleanup"),
    ("keyed mutex, one hot key, 2 threads, `eventual` vs the same map", "km_hotkey/threads:2", "handoff_eventual",
     "map_mutex_cleanup"),
]
HEADLINE_BEGIN = "<!-- headline:begin (generated by tools/bench.sh --update-docs) -->"
HEADLINE_END = "<!-- headline:end -->"


def headline(contexts, results):
    """The README's short table: one row per HEADLINE entry found in results."""
    times = {}
    for run, r in results.items():
        if "error" not in r and r.get("time"):
            times[split_name(run)] = r["time"]
    out = [HEADLINE_BEGIN, headline_guard.mark_line(), "", "Machine: " + machine_line(contexts) + ". Ratio = baseline "
           "time / handoff time (above 1: handoff faster); **bold**: the baseline wins.", "",
           "| workload | handoff | baseline | ratio |", "|---|---:|---:|---:|"]
    for label, workload, ours, theirs in HEADLINE:
        h, b = times.get((workload, ours)), times.get((workload, theirs))
        if not h or not b:
            continue
        ratio = b / h
        shown = f"{ratio:.2f}" if ratio < 10 else f"{ratio:.0f}"
        out.append(f"| {label} | {fmt_ns(h)} | {fmt_ns(b)} | {'**' + shown + '**' if ratio < 1 else shown} |")
    out += ["", HEADLINE_END]
    return "\n".join(out)


def write_headline(path, block):
    """Replaces the HEADLINE_BEGIN .. HEADLINE_END block of path with block."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    begin, end = text.find(HEADLINE_BEGIN), text.find(HEADLINE_END)
    if begin < 0 or end < begin:
        raise SystemExit(f"{path}: no headline block ({HEADLINE_BEGIN} ... {HEADLINE_END})")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text[:begin] + block + text[end + len(HEADLINE_END):])


def plot_label(workload, handoff_impl, baseline):
    """'1actor_trivial/threads:2', 'handoff_post', 'mutex' -> '1actor_trivial t2 post vs mutex'."""
    w = re.sub(r"/threads:(\d+)", r" t\1", workload)
    h = handoff_impl[len("handoff"):].lstrip("_")
    return f"{w}{' ' + h if h else ''} vs {baseline}"


# bench/instructions.cpp mode -> (max at -O2, max at -O3, description): a path's budget in
# instructions per operation (tools/instructions.sh).
INSTRUCTION_TARGETS = {
    "keyed": (170.0, 170.0, "<= 170: a striped mutex's cost"),
    "keyed_hot": (170.0, 170.0, "<= 170"),
    "keyed_cold": (250.0, 250.0, "<= 250: no entry made for a new key"),
    "keyed_long": (222.8, 236.8, "no worse than before thin keys (222.8 / 236.8)"),
    "post": (38.0, 47.0, "<= 38 / 47"),
    "chain": (86.6, 86.6, "<= 86.6"),
    "backlog": (103.0, 102.0, "<= 103 / 102: the budget's test per queued message (+3.2 / +3.1)"),
    "keyed_int": (120.0, 120.0, "<= 120"),
}
# mode -> (the mode it is measured against, most instructions more than it, description)
RELATIVE_INSTRUCTION_TARGETS = {
    "post_bounded": ("post", 10.0, "within 10 of post: a bounded send admitted in one atomic"),
}


def instruction_target(mode, o2, o3, rows=None):
    """The target cell of one instructions row (rows: mode -> (O2, O3), for relative targets)."""
    t = INSTRUCTION_TARGETS.get(mode)
    rel = RELATIVE_INSTRUCTION_TARGETS.get(mode)
    if t is None and rel is not None and rows and rel[0] in rows:
        try:
            base = [float(x) for x in rows[rel[0]]]
        except ValueError:
            return ""
        t = (base[0] + rel[1], base[1] + rel[1], rel[2])
    if t is None:
        return ""
    try:
        met = float(o2) <= t[0] and float(o3) <= t[1]
    except ValueError:
        return ""
    return f"{'met' if met else '**NOT met**'} ({t[2]})"


def instructions_section(path):
    """The table of tools/instructions.sh --tsv (mode, what, O2, O3), as Markdown."""
    out = ["### Instructions per operation (callgrind)", "",
           "Counted by `bash tools/instructions.sh` in the same run as the timings above: "
           "bench/instructions.cpp, built against this tree's library at -O2 and at -O3, each path "
           "run at 200,000 and 400,000 operations under callgrind; the difference per operation. "
           "Deterministic where the 2-thread timings swing with the machine's load.", "",
           "| path | what it counts | -O2 | -O3 | target |", "|---|---|---:|---:|---|"]
    with open(path, encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t") for line in f]
    rows = {cols[0]: (cols[2], cols[3]) for cols in lines if len(cols) >= 4}
    for cols in lines:
        if len(cols) >= 4:
            target = instruction_target(cols[0], cols[2], cols[3], rows)
            out.append(f"| {cols[0]} | {cols[1]} | {cols[2]} | {cols[3]} | {target} |")
    return "\n".join(out) + "\n"


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="Google Benchmark JSON output files")
    ap.add_argument("-o", "--output", help="also write the Markdown to this file")
    ap.add_argument("--image", help="with -o: the plot image to show, relative to the Markdown file")
    ap.add_argument("--plot-data", help="write 'label<TAB>ratio' lines (one per compared pair) here")
    ap.add_argument("--km-image", help="with -o: the keyed-mutex plot image, relative to the Markdown file")
    ap.add_argument("--km-plot-data", help="write the keyed-mutex pairs' 'label<TAB>ratio' lines here "
                    "(without it they go to --plot-data)")
    ap.add_argument("--headline", help="rewrite the generated headline table in this Markdown file (README.md)")
    ap.add_argument("--instructions", help="tools/instructions.sh --tsv output: adds its table of instructions "
                    "per operation")
    args = ap.parse_args(argv)
    contexts, results = load(args.files)
    if not results:
        print("no benchmark results found in " + ", ".join(args.files), file=sys.stderr)
        return 1
    text, plot, km_plot = render(contexts, results)
    if args.instructions:
        text += "\n" + instructions_section(args.instructions)
    if args.headline:
        write_headline(args.headline, headline(contexts, results))
    if not args.km_plot_data:
        plot = plot + km_plot
    print(text)
    if args.output:
        head = ["# Benchmarks", "",
                "Generated by `bash tools/bench.sh --update-docs` (do not edit: rerun it). Each workload runs "
                "with its baselines in the same binary (bench/actor_bench.cpp, bench/fanin_bench.cpp, "
                "bench/peers_bench.cpp, bench/pool_bench.cpp, bench/keyed_mutex_bench.cpp, "
                "bench/redis_bench.cpp, bench/redis_actor_bench.cpp), with --benchmark_repetitions; the "
                "tables show medians.", ""]
        if args.image:
            head += [f"![ratio baseline time / handoff time per workload, log scale; above 1: handoff "
                     f"faster]({args.image})", ""]
        if args.km_image:
            head += [f"![keyed mutex: ratio baseline time / handoff time per workload, log scale; above 1: "
                     f"handoff faster]({args.km_image})", ""]
        with open(args.output, "w", encoding="utf-8") as f:
            f.write("\n".join(head) + "\n" + text + "\n")
    c = contexts[0] if contexts else {}
    short = [c.get("cpu_model", "unknown CPU"), f"{c.get('num_cpus', '?')} CPUs", c.get("compiler", ""),
             c.get("date", "")[:10]]
    subtitle = "# " + ", ".join(x for x in short if x).replace("\t", " ") + "\n"
    for path, pairs in ((args.plot_data, plot), (args.km_plot_data, km_plot)):
        if path:
            with open(path, "w", encoding="utf-8") as f:
                f.write(subtitle)
                for label, ratio in pairs:
                    f.write(f"{label}\t{ratio:.4f}\n")
    errors = [run for run, r in results.items() if "error" in r]
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
