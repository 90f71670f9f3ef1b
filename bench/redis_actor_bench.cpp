// Actors across processes: handoff::redis::actor_system against the usual designs, a
// worker thread per key reading a Redis list or stream that senders write to (the one that
// loses a message on a crash, and the two crash-safe ones), a floor of two scripts per
// message, and the in-process handoff::actor. The binary starts its own redis-servers on
// loopback (tests/support/redis_server.hpp): one without persistence, and one with an
// append-only file fsynced every second.
//
// Workloads (each run once per repetition; the messages are trivial: the handler records
// the message's latency and counts it):
//   ractor_1key/<impl>     4 sender processes (fork) post 2000 messages each to one key
//   ractor_64keys/<impl>   the same over 64 keys (each sender cycles through all of them)
//   ractor_1key_aof, ractor_64keys_aof: the same on the server with --appendonly yes
//                          --appendfsync everysec
//   ractor_1key_paced, ractor_64keys_paced: 500 messages per sender, one every 1 ms (4000
//                          messages/s in all, under every impl's capacity): the latency
//                          of a loaded but not saturated system (the unpaced workloads
//                          saturate it, and their latency is mostly time in the queue)
//   ractor_1key_rtt0.5ms, ractor_64keys_rtt0.5ms: 400 messages per sender, every
//                          connection through a proxy on loopback that delays each
//                          direction by 250 us (bench/delay_proxy.hpp); the actors, the
//                          crash-safe peers and the BLPOP worker
//   redis_delayed_10k_<K>keys/<impl>  one process posts 10,000 delayed messages over K
//                          keys (100: a server's rooms; 10,000: one message per actor), all
//                          due at one instant 3 s ahead, and handles them. Time: from the
//                          due instant to the start of the last handler (the issue's
//                          "last within 1 s", also last_ms); counters p50_ms, p99_ms of that lateness,
//                          early (handlers started before the due instant: must be 0),
//                          post_us (one delayed post's round trip, the sender's cost),
//                          server_cpu_us (the server's CPU from the due instant to the
//                          last handler, per message).
//                          Impls: handoff_redis (post_at, the defaults: sweep_interval
//                          100 ms) and sorted_set_poller, the design of Sidekiq's scheduled
//                          set and BullMQ's delayed jobs: ZADD with the due time, a poller
//                          every 100 ms popping what is due (ZRANGEBYSCORE + ZREM in one
//                          script, 1,000 at a time, again at once while more are due) and
//                          handling it; a poller that dies after the pop loses those
//                          messages, and nothing serializes a key's messages.
// With HANDOFF_BENCH_COMMANDS set in the environment, each row first prints on stderr the
// commands the server ran per message and their time (INFO commandstats; the commands a
// script runs are listed beside it).
// Impls (the worker loops and their commands: bench/redis_peers.hpp):
//   handoff_redis_batch1, handoff_redis_batch16  every process runs an actor_system with
//                      the handler and a one-thread executor for budget hand-ons (the
//                      defaults but for the batch: max_messages 64, max_time 50 ms): the
//                      sender that finds an actor idle drains it. The name carries the
//                      batch (actor_options::batch; 16 is the default).
//   worker_blpop       every key has one worker thread, in the process key % 4, looping
//                      BLPOP on the key's list; senders RPUSH (raw hiredis). Not crash-safe:
//                      a worker that dies after BLPOP returned loses that message.
//   worker_reliable_list  the same workers, each looping BLMOVE <key> <key>:processing,
//                      handle, LREM from the processing list; senders RPUSH. A recovery pass
//                      (LRANGE the processing list, handle + LREM each) at start and every
//                      sweep_interval of the actors' defaults (100 ms).
//   worker_stream      the same workers on one stream per key and a consumer group:
//                      XREADGROUP, handle, XACK + XDEL in one round trip; senders XADD.
//                      Recovery: XAUTOCLAIM of entries idle for the actors' lease (5 s),
//                      every sweep_interval.
//   ..._batch16        the crash-safe workers reading up to 16 messages per round trip (the
//                      actors' default batch): the stream with XREADGROUP COUNT 16 and one
//                      XACK + XDEL for all; the list with a blocking BLMOVE and then 15
//                      LMOVEs pipelined in one round trip, and the LREMs in one more.
//   floor_two_scripts  no worker: the sender runs one script that RPUSHes its message and
//                      one that LPOPs the key's head, and handles what it popped: the
//                      least a script-based ownership protocol costs the server
//   shard_list_prototype  a prototype of actors owned by shard (bench/redis_shard_prototype.hpp):
//                      a list per shard (256), each process owns a quarter of the shards
//                      with one owner thread that reads the shards with messages in one
//                      round trip, runs them and acknowledges them with one script; senders
//                      RPUSH (and ring the owner's bell on an idle shard)
//                      _actors: each key's handler runs on its in-process actor, deferred to
//                      a pool of two threads per process (the owner thread only reads and
//                      acknowledges); ractor_64keys_paced_slowkey: the same, paced, with the
//                      first handler of one key sleeping 1 s (latency of the other keys).
//                      Counter per_visit: the messages a shard read found, on average
//   handoff_inprocess  4 threads of one process post to handoff::actor<int>s (no Redis)
// Time: wall-clock from the moment all senders start to the moment the last message was
// handled, divided by the messages: time per message, all processes together
// (items_per_second: messages per second). Counters: p50_us, p99_us of the end-to-end
// latency, from the post (or RPUSH, XADD) call to the handler's start, on the machine's
// monotonic clock, which every process shares; server_cpu_us, the redis-server's CPU time
// (user + system, from INFO cpu) per message over the timed part of the run.
// Every message carries an id; a run in which any message was not handled exactly once
// fails with what went wrong (these runs crash nothing, so recovery finds nothing).
//
// Caveat: loopback. Server, senders, workers and proxy share the machine's cores.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <handoff/actor.hpp>
#include <handoff/redis/actor_system.hpp>
#include <handoff/thread_pool.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "delay_proxy.hpp"
#include "redis_peers.hpp"
#include "redis_server.hpp"  // tests/support: a private redis-server on a free loopback port
#include "redis_shard_prototype.hpp"

namespace {

constexpr int senders = 4;
constexpr std::int64_t max_messages = 8000;
constexpr auto run_limit = std::chrono::seconds(60);  // a run that takes longer fails

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Shared by the benchmark and its sender processes (MAP_SHARED, set up before fork). The
// atomics are lock-free, so they work across processes.
struct shared_area {
  std::atomic<std::int64_t> handled{0};  // messages handled, all processes
  std::atomic<std::int64_t> slots{0};    // latency samples written
  std::atomic<int> ready{0};             // senders set up
  std::atomic<int> go{0};                // 1: post; 2: all handled, exit
  std::atomic<int> failed{0};
  std::atomic<std::int64_t> stray{0};         // handled messages whose id is out of range
  std::atomic<std::int64_t> shard_visits[2];  // the shard prototype's reads that found messages, and those messages
  std::int64_t latency_ns[max_messages];
  std::atomic<std::int32_t> seen[max_messages];  // times message id was handled
};
static_assert(std::atomic<std::int64_t>::is_always_lock_free);

shared_area* area() {
  static shared_area* a = [] {
    void* p = ::mmap(nullptr, sizeof(shared_area), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) std::abort();
    return new (p) shared_area;
  }();
  return a;
}

// A message's handler: its latency (unless !sampled), and one more handling of message `id`.
void record(std::int64_t sent, std::int64_t id, bool sampled = true) {
  shared_area& a = *area();
  const std::int64_t slot = sampled ? a.slots.fetch_add(1) : max_messages;
  if (slot < max_messages) a.latency_ns[slot] = now_ns() - sent;
  if (id >= 0 && id < max_messages) {
    a.seen[id].fetch_add(1);
  } else {
    a.stray.fetch_add(1);
  }
  a.handled.fetch_add(1);
}

// A message on Redis: "<send time, ns> <id>" (ids 0 to total - 1, each sent once).
std::string body(std::int64_t id) { return std::to_string(now_ns()) + " " + std::to_string(id); }

void handle_message(const char* text, std::size_t size, bool sampled) {
  const std::string b(text, size);
  char* end = nullptr;
  const std::int64_t sent = std::strtoll(b.c_str(), &end, 10);
  record(sent, std::strtoll(end, nullptr, 10), sampled);
}

void handle(const char* text, std::size_t size) { handle_message(text, size, true); }

void reset_counts(std::int64_t total) {
  shared_area& a = *area();
  a.handled = 0;
  a.slots = 0;
  a.stray = 0;
  for (std::int64_t i = 0; i < std::min(total, max_messages); ++i) a.seen[i] = 0;
}

// Empty if every message 0 to total - 1 was handled exactly once; else what went wrong.
std::string exactly_once_error(std::int64_t total) {
  shared_area& a = *area();
  std::int64_t missing = 0;
  std::int64_t extra = 0;
  for (std::int64_t i = 0; i < std::min(total, max_messages); ++i) {
    const std::int32_t n = a.seen[i].load();
    if (n == 0) ++missing;
    if (n > 1) extra += n - 1;
  }
  if (missing == 0 && extra == 0 && a.stray.load() == 0) return {};
  return "not exactly once: " + std::to_string(missing) + " never handled, " + std::to_string(extra) +
         " extra handlings, " + std::to_string(a.stray.load()) + " unknown ids";
}

std::string key_name(int k) { return "bench:" + std::to_string(k); }

// A sender process: set-up, then `post(i)` for its messages once go is 1, then stays up
// (its executor or workers may still have work) until every message was handled.
template <class Setup>
void sender_process(Setup setup) {
  shared_area& a = *area();
  int code = 0;
  try {
    auto post = setup();
    a.ready.fetch_add(1);
    while (a.go.load() == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    post();
    while (a.go.load() != 2 && a.failed.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_actor_bench sender: %s\n", e.what());
    a.failed.store(1);
    code = 1;
  }
  std::fflush(stderr);
  ::_exit(code);
}

// Forks the senders (make_sender(p) runs in process p), times the run, reports.
// One command on a fresh connection (the benchmark's own bookkeeping); its integer reply.
long long command(int port, const char* cmd) {
  redisContext* c = redisConnect("127.0.0.1", port);
  long long v = -1;
  if (c != nullptr && c->err == 0) {
    if (auto* r = static_cast<redisReply*>(redisCommand(c, cmd))) {
      v = r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
      freeReplyObject(r);
    }
  }
  if (c != nullptr) redisFree(c);
  return v;
}

// used_cpu_user + used_cpu_sys of the server, in us (INFO reports seconds); -1 on failure.
double server_cpu_us(int port) {
  redisContext* c = redisConnect("127.0.0.1", port);
  double total = -1;
  if (c != nullptr && c->err == 0) {
    if (auto* r = static_cast<redisReply*>(redisCommand(c, "INFO cpu"))) {
      if (r->type == REDIS_REPLY_STRING) {
        const std::string info(r->str, r->len);
        total = 0;
        for (const std::string field : {"used_cpu_user:", "used_cpu_sys:"}) {
          const auto at = info.find("\n" + field);
          if (at != std::string::npos) total += std::strtod(info.c_str() + at + 1 + field.size(), nullptr);
        }
        total *= 1e6;
      }
      freeReplyObject(r);
    }
  }
  if (c != nullptr) redisFree(c);
  return total;
}

// The server's INFO commandstats: command -> {calls, usec} (commands a script runs included).
std::map<std::string, std::pair<double, double>> command_stats(int port) {
  std::map<std::string, std::pair<double, double>> out;
  redisContext* c = redisConnect("127.0.0.1", port);
  if (c != nullptr && c->err == 0) {
    if (auto* r = static_cast<redisReply*>(redisCommand(c, "INFO commandstats"))) {
      if (r->type == REDIS_REPLY_STRING) {
        // Lines "cmdstat_<name>:calls=N,usec=N,...".
        const std::string info(r->str, r->len);
        for (std::size_t at = info.find("cmdstat_"); at != std::string::npos; at = info.find("cmdstat_", at + 1)) {
          const std::size_t colon = info.find(':', at);
          const std::size_t calls = info.find("calls=", colon);
          const std::size_t usec = info.find("usec=", colon);
          if (colon == std::string::npos || calls == std::string::npos || usec == std::string::npos) break;
          out[info.substr(at + 8, colon - at - 8)] = {std::strtod(info.c_str() + calls + 6, nullptr),
                                                      std::strtod(info.c_str() + usec + 5, nullptr)};
        }
      }
      freeReplyObject(r);
    }
  }
  if (c != nullptr) redisFree(c);
  return out;
}

// With HANDOFF_BENCH_COMMANDS set: what the server ran per message during the run, on stderr
// (calls and us per message of each command; a script's own commands listed beside it).
void print_commands(int port, const std::map<std::string, std::pair<double, double>>& before, std::int64_t total) {
  std::string out = "commands per message (the row below):";
  for (const auto& [name, now] : command_stats(port)) {
    const auto it = before.find(name);
    const double calls = now.first - (it == before.end() ? 0 : it->second.first);
    const double usec = now.second - (it == before.end() ? 0 : it->second.second);
    if (calls <= 0) continue;
    char line[128];
    std::snprintf(line, sizeof line, " %s %.2f (%.2f us)", name.c_str(), calls / static_cast<double>(total),
                  usec / static_cast<double>(total));
    out += line;
  }
  std::fprintf(stderr, "%s\n", out.c_str());
}

// Forks the senders (make_sender(p) runs in process p), times the run, reports. The run
// ends when the last message's handler started; the senders stay up until every actor on
// `port` was released (a handler records before its dequeue), then the data set is flushed.
template <class MakeSender>
void run_processes(benchmark::State& state, int port, std::int64_t total, MakeSender make_sender) {
  shared_area& a = *area();
  reset_counts(total);
  a.ready = 0;
  a.go = 0;
  a.failed = 0;
  std::vector<pid_t> pids;
  for (int p = 0; p < senders; ++p) {
    const pid_t pid = ::fork();
    if (pid == 0) make_sender(p);  // never returns
    pids.push_back(pid);
  }
  const auto limit = std::chrono::steady_clock::now() + run_limit;
  while (a.ready.load() < senders && a.failed.load() == 0 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const bool commands = std::getenv("HANDOFF_BENCH_COMMANDS") != nullptr;
  const auto stats0 = commands ? command_stats(port) : std::map<std::string, std::pair<double, double>>{};
  const double cpu0 = server_cpu_us(port);
  const std::int64_t t0 = now_ns();
  a.go.store(1);
  while (a.handled.load() < total && a.failed.load() == 0 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const std::int64_t t1 = now_ns();
  const double cpu1 = server_cpu_us(port);
  if (commands) print_commands(port, stats0, total);
  const bool done = a.handled.load() >= total;  // more: duplicates, reported below
  while (done && command(port, "ZCARD handoff:actors:pending") != 0 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  a.go.store(2);
  if (!done) a.failed.store(1);
  for (const pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
  }
  command(port, "FLUSHALL");
  if (!done) {
    state.SkipWithError(("handled " + std::to_string(a.handled.load()) + " of " + std::to_string(total)).c_str());
    return;
  }
  if (const std::string error = exactly_once_error(total); !error.empty()) {
    state.SkipWithError(error.c_str());
    return;
  }
  state.SetIterationTime(static_cast<double>(t1 - t0) / 1e9 / static_cast<double>(total));
  if (cpu0 >= 0 && cpu1 >= 0) state.counters["server_cpu_us"] = (cpu1 - cpu0) / static_cast<double>(total);
}

void report(benchmark::State& state, std::int64_t total) {
  shared_area& a = *area();
  std::vector<std::int64_t> lat(a.latency_ns, a.latency_ns + std::min({total, max_messages, a.slots.load()}));
  std::sort(lat.begin(), lat.end());
  if (lat.empty()) return;
  state.SetItemsProcessed(1);  // per iteration time = per message: items/s = messages/s
  state.counters["p50_us"] = static_cast<double>(lat[lat.size() / 2]) / 1e3;
  state.counters["p99_us"] = static_cast<double>(lat[lat.size() * 99 / 100]) / 1e3;
}

struct route {
  int port;
  int keys;
  int per_sender;
  int pace_us;            // 0: post as fast as possible; else one post per sender every pace_us
  std::size_t batch = 1;  // messages per read: the peers' read batch, the actors' actor_options::batch
};

// Sleeps until message i of a paced sender is due (the schedule starts at `start`).
void pace(const route& r, std::int64_t start, int i) {
  if (r.pace_us == 0) return;
  const std::int64_t due = start + std::int64_t{i} * r.pace_us * 1000;
  const std::int64_t left = due - now_ns();
  if (left > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(left));
}

void handoff_redis(benchmark::State& state, route r) {
  const std::int64_t total = std::int64_t{r.per_sender} * senders;
  for (auto _ : state) {
    run_processes(state, r.port, total, [&](int p) {
      sender_process([&] {
        auto pool = std::make_shared<handoff::thread_pool>(1);
        handoff::redis::options o;
        o.port = r.port;
        handoff::redis::actor_options ao;
        ao.executor = *pool;
        ao.batch = static_cast<std::uint32_t>(r.batch);
        auto actors = std::make_shared<handoff::redis::actor_system>(o, ao);
        actors->on("bench:", [](handoff::redis::delivery& d) { handle(d.body().data(), d.body().size()); });
        return [pool, actors, p, r] {
          const std::int64_t start = now_ns();
          for (int i = 0; i < r.per_sender; ++i) {
            pace(r, start, i);
            actors->post(key_name((i + p) % r.keys), body(std::int64_t{p} * r.per_sender + i));
          }
        };
      });
    });
  }
  report(state, total);
}

struct context_free {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using context_ptr = std::unique_ptr<redisContext, context_free>;

context_ptr connect(int port) {
  context_ptr c(redisConnect("127.0.0.1", port));
  if (c == nullptr || c->err != 0) throw std::runtime_error("redis_actor_bench: cannot connect");
  return c;
}

bool alive() { return area()->go.load() != 2 && area()->failed.load() == 0; }

// The worker-per-key peers: every key k has one worker thread in process k % senders, on
// its own connection, running `work(connection, key, k)` until every message was handled;
// `setup_key(connection, key)` runs for this process's keys before it reports ready; the
// senders make `send(connection, key, body)` per message (bench/redis_peers.hpp).
template <class SetupKey, class Work, class Send>
void worker_per_key(benchmark::State& state, route r, SetupKey setup_key, Work work, Send send) {
  const std::int64_t total = std::int64_t{r.per_sender} * senders;
  for (auto _ : state) {
    run_processes(state, r.port, total, [&](int p) {
      sender_process([&] {
        auto sender = std::make_shared<context_ptr>(connect(r.port));
        for (int k = p; k < r.keys; k += senders) setup_key(sender->get(), key_name(k));
        auto workers = std::make_shared<std::vector<std::thread>>();
        for (int k = p; k < r.keys; k += senders) {
          workers->emplace_back([port = r.port, key = key_name(k), k, work] {
            try {
              const context_ptr c = connect(port);
              work(c.get(), key, k);
            } catch (const std::exception& e) {
              std::fprintf(stderr, "redis_actor_bench worker: %s\n", e.what());
              area()->failed.store(1);
            }
          });
        }
        return [workers, sender, p, r, send] {
          const std::int64_t start = now_ns();
          for (int i = 0; i < r.per_sender; ++i) {
            pace(r, start, i);
            send(sender->get(), key_name((i + p) % r.keys), body(std::int64_t{p} * r.per_sender + i));
          }
          while (alive()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          for (auto& w : *workers) w.join();
        };
      });
    });
  }
  report(state, total);
}

namespace peers = handoff::bench::redis_peers;

void no_setup(redisContext*, const std::string&) {}

void rpush(redisContext* c, const std::string& key, const std::string& msg) {
  (void)peers::command(c, {"RPUSH", key, msg});
}

void worker_blpop(benchmark::State& state, route r) {
  worker_per_key(
      state, r, no_setup,
      [](redisContext* c, const std::string& key, int) { peers::blpop_worker(c, key, handle, alive); }, rpush);
}

// The handoff actors' defaults, which the peers' recovery passes follow.
const handoff::redis::actor_options actor_defaults{};

void worker_reliable_list(benchmark::State& state, route r) {
  worker_per_key(
      state, r, no_setup,
      [batch = r.batch](redisContext* c, const std::string& key, int) {
        peers::reliable_list_worker(c, key, batch, actor_defaults.sweep_interval, handle, alive);
      },
      rpush);
}

void worker_stream(benchmark::State& state, route r) {
  worker_per_key(
      state, r, peers::stream_setup,
      [batch = r.batch](redisContext* c, const std::string& key, int k) {
        // XAUTOCLAIM's min-idle: the actors' lease, after which they take a dead owner's work.
        const auto min_idle = std::chrono::duration_cast<std::chrono::milliseconds>(actor_defaults.lease.duration);
        peers::stream_worker(c, key, "c" + std::to_string(k), batch, actor_defaults.sweep_interval, min_idle, handle,
                             alive);
      },
      [](redisContext* c, const std::string& key, const std::string& msg) {
        (void)peers::command(c, {"XADD", key, "*", "m", msg});
      });
}

// No worker: each sender pushes its message with one script and pops the key's head with
// another, and handles that (bench/redis_peers.hpp).
void floor_two_scripts(benchmark::State& state, route r) {
  const std::int64_t total = std::int64_t{r.per_sender} * senders;
  for (auto _ : state) {
    run_processes(state, r.port, total, [&](int p) {
      sender_process([&] {
        auto c = std::make_shared<context_ptr>(connect(r.port));
        auto scripts = std::make_shared<peers::two_scripts>(peers::load_two_scripts(c->get()));
        return [c, scripts, p, r] {
          for (int i = 0; i < r.per_sender; ++i) {
            peers::two_scripts_message(c->get(), *scripts, key_name((i + p) % r.keys),
                                       body(std::int64_t{p} * r.per_sender + i), handle);
          }
        };
      });
    });
  }
  report(state, total);
}

// The prototype of actors owned by shard (bench/redis_shard_prototype.hpp): every process
// owns a quarter of the shards with one owner thread, and its sender posts. Handlers run
// on the owner's thread, or (`actors`) each key's on its in-process actor, deferred to a
// pool of two threads, so that a slow key holds up only itself; `slow_key`: the first
// message of key 0 sleeps 1 s (its messages are left out of the latency figures).
void run_shard_prototype(benchmark::State& state, route r, bool actors, bool slow_key) {
  namespace sp = handoff::bench::shard_prototype;
  const std::int64_t total = std::int64_t{r.per_sender} * senders;
  for (auto& v : area()->shard_visits) v = 0;
  for (auto _ : state) {
    run_processes(state, r.port, total, [&](int p) {
      sender_process([&] {
        auto sender = std::make_shared<context_ptr>(connect(r.port));
        auto owner = std::make_shared<context_ptr>(connect(r.port));
        auto taken = std::make_shared<std::atomic<bool>>(false);
        auto thread = std::make_shared<std::thread>([owner, p, taken, actors, slow_key] {
          try {
            handoff::thread_pool pool(2);
            handoff::actor_options ao;
            ao.executor = pool;
            std::map<std::string, std::unique_ptr<handoff::actor<int>>, std::less<>> by_key;  // owner thread only
            bool slept = false;  // key 0's first message: by its actor only
            const auto run = [](std::string_view b, bool sampled, const std::shared_ptr<std::atomic<bool>>& done) {
              handle_message(b.data(), b.size(), sampled);
              done->store(true, std::memory_order_release);  // pairs with the owner's acquire load
            };
            sp::owner_loop(
                owner->get(), p, senders,
                [&](std::string_view key, std::string_view b, std::shared_ptr<std::atomic<bool>> done) {
                  if (!actors) return run(b, true, done);
                  auto it = by_key.find(key);
                  if (it == by_key.end()) {
                    it = by_key.emplace(std::string(key), std::make_unique<handoff::actor<int>>(ao)).first;
                  }
                  const bool slow = slow_key && key == key_name(0);
                  it->second->defer([run, body = std::string(b), slow, &slept, done = std::move(done)](int&) {
                    if (slow && !slept) {
                      slept = true;
                      std::this_thread::sleep_for(std::chrono::seconds(1));
                    }
                    run(body, !slow, done);
                  });
                },
                [taken] {
                  taken->store(true);
                  return alive();
                },
                actor_defaults.sweep_interval, area()->shard_visits);
            by_key.clear();  // before the pool: their work has run
          } catch (const std::exception& e) {
            std::fprintf(stderr, "redis_actor_bench shard owner: %s\n", e.what());
            area()->failed.store(1);
          }
        });
        while (!taken->load()) std::this_thread::sleep_for(std::chrono::microseconds(100));  // leases set
        return [thread, sender, owner, p, r] {
          const std::int64_t start = now_ns();
          for (int i = 0; i < r.per_sender; ++i) {
            pace(r, start, i);
            sp::post(sender->get(), senders, key_name((i + p) % r.keys), body(std::int64_t{p} * r.per_sender + i));
          }
          while (alive()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          thread->join();
        };
      });
    });
  }
  report(state, total);
  // Messages a shard read found, on average: where the rows stand in tools/redis_cost.sh's
  // shard<K>_l_r<R> modes (R 16 at 64 keys: about one).
  const std::int64_t reads = area()->shard_visits[0].load();
  if (reads > 0)
    state.counters["per_visit"] = static_cast<double>(area()->shard_visits[1].load()) / static_cast<double>(reads);
}

void shard_list_prototype(benchmark::State& state, route r) { run_shard_prototype(state, r, false, false); }
void shard_list_prototype_actors(benchmark::State& state, route r) { run_shard_prototype(state, r, true, false); }
void shard_list_prototype_actors_slowkey(benchmark::State& state, route r) {
  run_shard_prototype(state, r, true, true);
}

void handoff_inprocess(benchmark::State& state, route r) {
  const std::int64_t total = std::int64_t{r.per_sender} * senders;
  for (auto _ : state) {
    shared_area& a = *area();
    reset_counts(total);
    std::vector<std::unique_ptr<handoff::actor<int>>> actors;
    for (int k = 0; k < r.keys; ++k) actors.push_back(std::make_unique<handoff::actor<int>>());
    const std::int64_t t0 = now_ns();
    std::vector<std::thread> threads;
    for (int p = 0; p < senders; ++p) {
      threads.emplace_back([&, p] {
        for (int i = 0; i < r.per_sender; ++i) {
          const std::int64_t sent = now_ns();
          actors[static_cast<std::size_t>((i + p) % r.keys)]->post(
              [sent, id = std::int64_t{p} * r.per_sender + i](int& n) {
                ++n;
                record(sent, id);
              });
        }
      });
    }
    for (auto& t : threads) t.join();
    while (a.handled.load() < total) std::this_thread::yield();
    state.SetIterationTime(static_cast<double>(now_ns() - t0) / 1e9 / static_cast<double>(total));
    if (const std::string error = exactly_once_error(total); !error.empty()) state.SkipWithError(error.c_str());
  }
  report(state, total);
}

// redis_delayed_10k (see the header): every message's lateness from the due instant.
struct delayed_route {
  int port;
  int keys;
};
constexpr int delayed_total = 10000;
constexpr auto delayed_lead = std::chrono::seconds(3);  // ahead of the first post: posting all takes ~1 s
constexpr auto delayed_poll = std::chrono::milliseconds(100);

class delayed_run {
 public:
  explicit delayed_run(std::chrono::system_clock::time_point due)
      : due_(due), seen_(delayed_total), late_ns_(delayed_total) {}
  // A handler's record of message `id`.
  void handle(std::int64_t id) {
    const std::int64_t late = (std::chrono::system_clock::now() - due_).count();
    if (id < 0 || id >= delayed_total) {
      stray_.fetch_add(1);
    } else {
      late_ns_[static_cast<std::size_t>(id)] = late;
      seen_[static_cast<std::size_t>(id)].fetch_add(1);
    }
    handled_.fetch_add(1);
  }
  [[nodiscard]] std::chrono::system_clock::time_point due() const { return due_; }
  // Waits for every message (up to run_limit), then reports the run.
  void finish(benchmark::State& state, int port, double post_us) {
    const auto limit = std::chrono::steady_clock::now() + run_limit;
    std::this_thread::sleep_until(due_);
    const double cpu0 = server_cpu_us(port);
    while (handled_.load() < delayed_total && std::chrono::steady_clock::now() < limit) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const double cpu1 = server_cpu_us(port);
    std::this_thread::sleep_for(delayed_poll * 3);  // a few more polls: a message moved twice shows
    std::int64_t missing = 0;
    std::int64_t extra = 0;
    for (const auto& n : seen_) {
      if (n.load() == 0) ++missing;
      if (n.load() > 1) extra += n.load() - 1;
    }
    if (missing != 0 || extra != 0 || stray_.load() != 0) {
      state.SkipWithError(("not exactly once: " + std::to_string(missing) + " never handled, " + std::to_string(extra) +
                           " extra, " + std::to_string(stray_.load()) + " unknown ids")
                              .c_str());
      return;
    }
    std::vector<std::int64_t> late = late_ns_;
    std::sort(late.begin(), late.end());
    state.SetIterationTime(static_cast<double>(std::max<std::int64_t>(late.back(), 0)) / 1e9);
    state.counters["last_ms"] = static_cast<double>(late.back()) / 1e6;
    state.counters["p50_ms"] = static_cast<double>(late[late.size() / 2]) / 1e6;
    state.counters["p99_ms"] = static_cast<double>(late[late.size() * 99 / 100]) / 1e6;
    state.counters["early"] =
        static_cast<double>(std::count_if(late.begin(), late.end(), [](std::int64_t l) { return l < 0; }));
    state.counters["post_us"] = post_us;
    // The server's CPU from the due instant to the last handler, per message.
    if (cpu0 >= 0 && cpu1 >= 0) state.counters["server_cpu_us"] = (cpu1 - cpu0) / delayed_total;
  }

 private:
  const std::chrono::system_clock::time_point due_;
  std::vector<std::atomic<std::int32_t>> seen_;
  std::vector<std::int64_t> late_ns_;  // written once per message, by the handler that ran it, before handled_
  std::atomic<std::int64_t> handled_{0};
  std::atomic<std::int64_t> stray_{0};
};

void delayed_handoff(benchmark::State& state, delayed_route r) {
  for (auto _ : state) {
    handoff::redis::options o;
    o.port = r.port;
    handoff::redis::actor_system actors(o, {});
    delayed_run run(std::chrono::system_clock::now() + delayed_lead);
    actors.on("bench:", [&run](handoff::redis::delivery& d) { run.handle(std::stoll(std::string(d.body()))); });
    const std::int64_t t0 = now_ns();
    for (int i = 0; i < delayed_total; ++i) (void)actors.post_at(key_name(i % r.keys), std::to_string(i), run.due());
    run.finish(state, r.port, static_cast<double>(now_ns() - t0) / 1e3 / delayed_total);
  }
  command(r.port, "FLUSHALL");
}

void delayed_sorted_set(benchmark::State& state, delayed_route r) {
  const std::string pop =
      "local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2])) "
      "if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end return due";
  for (auto _ : state) {
    delayed_run run(std::chrono::system_clock::now() + delayed_lead);
    const std::string due_ms =
        std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(run.due().time_since_epoch()).count());
    std::atomic<bool> stop{false};
    std::thread poller([&] {
      const context_ptr c = connect(r.port);
      while (!stop.load()) {
        for (;;) {
          const std::string now_ms = std::to_string(
              std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
                  .count());
          const peers::reply_ptr got = peers::command(c.get(), {"EVAL", pop, "1", "delayed", now_ms, "1000"});
          if (got->type != REDIS_REPLY_ARRAY) break;
          for (std::size_t i = 0; i < got->elements; ++i) {
            const std::string m = peers::text(got->element[i]);
            run.handle(std::stoll(m.substr(m.find(' ') + 1)));
          }
          if (got->elements < 1000) break;
        }
        std::this_thread::sleep_for(delayed_poll);
      }
    });
    const context_ptr c = connect(r.port);
    const std::int64_t t0 = now_ns();
    for (int i = 0; i < delayed_total; ++i) {
      // The member names the key and the message, as a job would.
      (void)peers::command(c.get(), {"ZADD", "delayed", due_ms, key_name(i % r.keys) + " " + std::to_string(i)});
    }
    run.finish(state, r.port, static_cast<double>(now_ns() - t0) / 1e3 / delayed_total);
    stop = true;
    poller.join();
  }
  command(r.port, "FLUSHALL");
}

std::string server_version(int port) {
  const context_ptr c = connect(port);
  auto* reply = static_cast<redisReply*>(redisCommand(c.get(), "INFO server"));
  std::string v = "unknown";
  if (reply != nullptr && reply->type == REDIS_REPLY_STRING) {
    const std::string info(reply->str, reply->len);
    const auto at = info.find("redis_version:");
    if (at != std::string::npos) v = info.substr(at + 14, info.find('\r', at) - at - 14);
  }
  if (reply != nullptr) freeReplyObject(reply);
  return v;
}

// CONFIG GET <name> on the server: its value, or "unknown".
std::string config_value(int port, const std::string& name) {
  const context_ptr c = connect(port);
  const peers::reply_ptr r = peers::command(c.get(), {"CONFIG", "GET", name});
  return r->type == REDIS_REPLY_ARRAY && r->elements == 2 ? peers::text(r->element[1]) : "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    (void)area();  // mapped before any fork
    handoff::test::redis_server server;
    const int port = server.port();
    // The same server with an append-only file, fsynced once a second (Redis's default
    // when the file is on): the later --appendonly overrides the helper's "no".
    handoff::test::redis_server aof_server({"--appendonly", "yes", "--appendfsync", "everysec"});
    handoff::bench::add_machine_context();
    benchmark::AddCustomContext("redis_actor_server", "Redis " + server_version(port) +
                                                          " on TCP 127.0.0.1 (loopback), --save \"\" --appendonly no");
    benchmark::AddCustomContext("redis_actor_aof",
                                "_aof: a second server, --appendonly " + config_value(aof_server.port(), "appendonly") +
                                    " --appendfsync " + config_value(aof_server.port(), "appendfsync"));
    handoff::bench::delay_proxy proxy(port, std::chrono::microseconds(250));
    benchmark::AddCustomContext("redis_actor_rtt0.5ms", "a proxy on loopback delaying each direction by 250 us");
    const auto add = [](const std::string& name, void (*fn)(benchmark::State&, route), route r) {
      benchmark::RegisterBenchmark(name.c_str(), fn, r)->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
    };
    // Every impl reads one message per round trip, and again the default
    // actor_options::batch (the actors' rows carry their batch in their name).
    const std::size_t batch = actor_defaults.batch;
    const std::string b = "_batch" + std::to_string(batch);
    // The actors at batch 1 and at the default batch, and both crash-safe peers at both.
    const auto add_crash_safe = [&](const std::string& w, int p, int keys, int per_sender) {
      add(w + "/handoff_redis_batch1", handoff_redis, {p, keys, per_sender, 0});
      add(w + "/handoff_redis" + b, handoff_redis, {p, keys, per_sender, 0, batch});
      add(w + "/worker_reliable_list", worker_reliable_list, {p, keys, per_sender, 0});
      add(w + "/worker_reliable_list" + b, worker_reliable_list, {p, keys, per_sender, 0, batch});
      add(w + "/worker_stream", worker_stream, {p, keys, per_sender, 0});
      add(w + "/worker_stream" + b, worker_stream, {p, keys, per_sender, 0, batch});
    };
    for (const int keys : {1, 64}) {
      const std::string w = keys == 1 ? "ractor_1key" : "ractor_64keys";
      for (const auto& [suffix, p] :
           {std::pair{std::string(), port}, std::pair{std::string("_aof"), aof_server.port()}}) {
        add_crash_safe(w + suffix, p, keys, 2000);
        add(w + suffix + "/worker_blpop", worker_blpop, {p, keys, 2000, 0});
        add(w + suffix + "/floor_two_scripts", floor_two_scripts, {p, keys, 2000, 0});
        add(w + suffix + "/shard_list_prototype", shard_list_prototype, {p, keys, 2000, 0});
        add(w + suffix + "/shard_list_prototype_actors", shard_list_prototype_actors, {p, keys, 2000, 0});
      }
      add(w + "/handoff_inprocess", handoff_inprocess, {port, keys, 2000, 0});
      add(w + "_paced/handoff_redis" + b, handoff_redis, {port, keys, 500, 1000, batch});
      add(w + "_paced/worker_blpop", worker_blpop, {port, keys, 500, 1000});
      add(w + "_paced/shard_list_prototype", shard_list_prototype, {port, keys, 500, 1000});
      add(w + "_paced/shard_list_prototype_actors", shard_list_prototype_actors, {port, keys, 500, 1000});
      add_crash_safe(w + "_rtt0.5ms", proxy.port(), keys, 400);
      add(w + "_rtt0.5ms/worker_blpop", worker_blpop, {proxy.port(), keys, 400, 0});
      add(w + "_rtt0.5ms/shard_list_prototype", shard_list_prototype, {proxy.port(), keys, 400, 0});
    }
    // One key's first handler sleeps 1 s; the p50/p99 are the other 63 keys' (compare with
    // ractor_64keys_paced/shard_list_prototype_actors).
    add("ractor_64keys_paced_slowkey/shard_list_prototype_actors", shard_list_prototype_actors_slowkey,
        {port, 64, 500, 1000});
    for (const int keys : {100, delayed_total}) {
      const std::string w = "redis_delayed_10k_" + std::to_string(keys) + "keys";
      for (const auto& [impl, fn] :
           {std::pair{"handoff_redis", &delayed_handoff}, std::pair{"sorted_set_poller", &delayed_sorted_set}}) {
        benchmark::RegisterBenchmark((w + "/" + impl).c_str(), fn, delayed_route{port, keys})
            ->Iterations(1)
            ->UseManualTime()
            ->Unit(benchmark::kMillisecond);
      }
    }
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_actor_bench: %s\n", e.what());
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}
