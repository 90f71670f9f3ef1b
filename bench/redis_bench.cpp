// Redis keyed-mutex benchmarks: handoff::redis::keyed_mutex against the polling lock that
// most Redis lock code uses, all in this one binary (so that every implementation runs on
// the same machine, build and run, and their ratios compare like with like), against one
// redis-server that the binary starts on loopback (tests/support/redis_server.hpp).
//
// Every benchmark is registered as "<workload>/<impl>"; impls starting with "handoff" are
// ours, every other impl of the same workload (and thread count) is a baseline, and
// tools/bench_table.py prints ratio = baseline time / handoff time (> 1: handoff faster)
// in its "Redis keyed mutex" section. Each benchmark thread has its own client (its own
// keyed_mutex, or its own hiredis connection): like separate processes sharing the server.
//
// Implementations:
//   handoff     handoff::redis::keyed_mutex::lock(key) (no lease: the watchdog renews the
//               default 30 s lease), released by the guard's destructor. FIFO waiting,
//               woken by the release's notification (2 round trips when uncontended).
//   handoff_lease  lock(key, handoff::lease{30s}), as the baseline's PX 30000 (no
//               watchdog). redis_uncontended only.
//   poll_100ms  The usual lock: `SET key token NX PX 30000` to acquire; on failure sleep
//               and try again; release with a compare-and-delete Lua script (EVALSHA of
//               `if GET == token then DEL`). redis-plus-plus's RedMutex polls like this,
//               every 100 ms by default (RedMutexOptions::retry_delay). Raw hiredis, one
//               connection per client.
//   poll_1ms    The same, polling every 1 ms: a baseline tuned for latency (it costs the
//               server a failed SET per waiter per millisecond).
//
// Workloads (time: wall-clock per lock/unlock, all threads together; items_per_second is
// lock/unlocks per second):
//   redis_uncontended  threads:1; 1024 keys "player:<random>", visited in a pre-generated
//                      random order. Under the lock: ++count[key], checked at the end
//                      (sum == lock/unlocks).
//   redis_hotkey       threads:2, 4 and 8, each with its own client, all locking one key;
//                      the critical section is ++count (non-atomic: checked at the end, the
//                      mutual-exclusion check).
//   redis_64keys       threads:8 over 64 keys "room:<n>", each thread its own random order.
//                      Same check.
// Google Benchmark gives every thread the same number of iterations and stops the clock
// when the last one is done. A lock that lets its releaser take the key straight back (the
// polling lock: its waiters are asleep) lets one thread run through its share while the
// others sleep, a convoy-free serial run: its contended throughput is close to one
// thread's, and the price shows in same_holder_pct and wait_max_ms.
// Counters (contended workloads; all threads' samples together, thread 0 reports them):
//   handoff_p50_us, handoff_p99_us  hand-off latency: from the moment the holder calls
//                      unlock to the moment the next holder's lock() returns, over the
//                      grants whose lock() call started before that unlock (a waiter was
//                      there to take the key over). Both clocks are one process's
//                      steady_clock: the same clock.
//   wait_p50_us, wait_p99_us, wait_max_ms  how long lock() took, over every call.
//   same_holder_pct    grants that went to the thread that held the key last. A polling
//                      lock's releaser takes the key back while its waiters sleep; under
//                      FIFO it happens only when nobody was queued yet (another client
//                      slow to call lock() again: with 2 clients on a loaded machine).
//   fifo_ok            handoff only (redis_hotkey), checked on every call before the timed
//                      loop: a client holds "fifo:check", 4 more clients (threads) call
//                      lock() 20 ms apart, the holder unlocks; the grants must come in call
//                      order, and the key's lock, queue and waiter set must be gone from the
//                      server afterwards. 1, or a SkipWithError.
//   server_cpu_us, process_cpu_us, ctx_switches  (every workload) CPU time per lock/unlock
//                      of redis-server and of this process, and this process's context
//                      switches per lock/unlock: see cost_meter.
//
// Routes: every workload runs on loopback ("redis_hotkey/...") and again over a network's
// round trip ("redis_hotkey_rtt0.5ms/...", "_rtt2ms"): all clients (their subscriber
// connections included) then reach the server through a TCP proxy on loopback that delays
// each direction by half the round trip (delay_proxy.hpp). The context records the PING
// round trip measured through each route (redis_rtt_loopback, redis_rtt0.5ms, ...).
//
// Cluster: redis_hotkey_cluster and redis_64keys_cluster run handoff's rows again on a Redis
// Cluster of three primaries without replicas on loopback (tests/support/redis_cluster.hpp),
// keys spread over the primaries by their hash slots: beside redis_hotkey/handoff and
// redis_64keys/handoff, they show what routing costs. There is no baseline in them (the
// polling lock speaks to one server); server_cpu_us adds up the three primaries. The
// cluster runs, idle, through the other workloads (its nodes ping each other a few times a
// second).
//
// Caveat: loopback. The server, the clients, the proxy and the benchmark threads share the
// machine's cores; a loopback round trip is tens of microseconds of system calls and
// scheduling, not of network, and the proxy's own work adds to each delayed one.
#include <benchmark/benchmark.h>
#include <hiredis/hiredis.h>
#include <sys/resource.h>
#include <sys/time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bench_support.hpp"
#include "delay_proxy.hpp"
#include "handoff/redis/keyed_mutex.hpp"
#include "redis_cluster.hpp"  // tests/support: a private Redis Cluster on loopback
#include "redis_server.hpp"   // tests/support: a private redis-server on a free loopback port

namespace {

using handoff::bench::check_total;

using namespace std::chrono_literals;

constexpr double min_time_s = 0.5;            // per instance and repetition
constexpr std::size_t key_count = 1024;       // redis_uncontended
constexpr std::size_t room_count = 64;        // redis_64keys
constexpr std::size_t walk_length = 1 << 14;  // per-thread index walk (power of two)
constexpr int max_threads = 8;
constexpr int fifo_waiters = 4;
constexpr auto fifo_gap = 20ms;
constexpr const char* poll_lease_ms = "30000";  // the baseline's PX, as handoff's watchdog lease

std::int64_t now_ns() noexcept { return std::chrono::steady_clock::now().time_since_epoch().count(); }

// ---------------------------------------------------------------------------------------
// The baseline: SET NX PX, sleep and retry, compare-and-delete. One hiredis connection,
// used by one thread.

struct reply_free {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply = std::unique_ptr<redisReply, reply_free>;

class raw_connection {
 public:
  explicit raw_connection(int port) : ctx_(redisConnect("127.0.0.1", port)) {
    if (ctx_ == nullptr || ctx_->err != 0) {
      const std::string msg = ctx_ != nullptr ? ctx_->errstr : "out of memory";
      if (ctx_ != nullptr) redisFree(ctx_);
      throw std::runtime_error("redis_bench: connect: " + msg);
    }
  }
  ~raw_connection() { redisFree(ctx_); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  // Sends one command, returns its reply; throws on I/O failure or an error reply.
  reply command(std::initializer_list<std::string_view> args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (std::string_view a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    reply r(static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (r == nullptr) throw std::runtime_error(std::string("redis_bench: ") + ctx_->errstr);
    if (r->type == REDIS_REPLY_ERROR) throw std::runtime_error("redis_bench: " + std::string(r->str, r->len));
    return r;
  }

 private:
  redisContext* ctx_;
};

class polling_lock {
  static constexpr const char* release_script =
      "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

 public:
  class guard {
   public:
    guard(polling_lock& owner, std::string key, std::string token)
        : owner_(&owner), key_(std::move(key)), token_(std::move(token)) {}
    guard(guard&& o) noexcept
        : owner_(std::exchange(o.owner_, nullptr)), key_(std::move(o.key_)), token_(std::move(o.token_)) {}
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    guard& operator=(guard&&) = delete;
    // A failed release leaves the baseline's numbers meaningless: end the run.
    ~guard() {
      if (owner_ == nullptr) return;
      try {
        owner_->unlock(key_, token_);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "redis_bench: poll lock release failed: %s\n", e.what());
        std::abort();
      }
    }

   private:
    polling_lock* owner_;
    std::string key_;
    std::string token_;
  };

  polling_lock(int port, std::chrono::microseconds poll, int client_id)
      : c_(port), poll_(poll), id_("poll" + std::to_string(client_id) + ":") {
    reply r = c_.command({"SCRIPT", "LOAD", release_script});
    sha_.assign(r->str, r->len);
  }

  guard lock(const std::string& key) {
    std::string k = "poll:" + key;
    std::string token = id_ + std::to_string(++seq_);  // unique per grant, like a random token
    for (;;) {
      reply r = c_.command({"SET", k, token, "NX", "PX", poll_lease_ms});
      if (r->type == REDIS_REPLY_STATUS) return guard(*this, std::move(k), std::move(token));  // "OK"
      std::this_thread::sleep_for(poll_);  // nil: held by someone else
    }
  }

 private:
  void unlock(const std::string& key, const std::string& token) { c_.command({"EVALSHA", sha_, "1", key, token}); }

  raw_connection c_;
  std::chrono::microseconds poll_;
  std::string id_;
  std::string sha_;
  std::uint64_t seq_ = 0;
};

// handoff's client, with the same lock(const std::string&) shape.
class handoff_lock {
  static handoff::redis::options options_for(int port) {
    handoff::redis::options o;  // (g++ 12's -Wextra warns about designated initializers that leave fields out)
    o.port = port;
    return o;
  }

 public:
  explicit handoff_lock(int port) : m_(options_for(port)) {}
  handoff::redis::guard lock(const std::string& key) { return m_.lock(key); }
  // With a lease instead of the watchdog: the baseline's PX 30000.
  handoff::redis::guard lock_leased(const std::string& key) { return m_.lock(key, handoff::lease{30s}); }
  handoff::redis::keyed_mutex& mutex() { return m_; }

 private:
  handoff::redis::keyed_mutex m_;
};

// handoff_lock::lock_leased as lock().
struct leased {
  handoff_lock& h;
  handoff::redis::guard lock(const std::string& key) { return h.lock_leased(key); }
};

// ---------------------------------------------------------------------------------------
// Shared inputs and per-run statistics.

struct inputs {
  std::vector<std::string> keys;                            // key_count "player:<n>", distinct
  std::vector<std::string> rooms;                           // room_count "room:<n>"
  std::vector<std::vector<std::uint16_t>> walk, room_walk;  // per thread: indexes
  std::string hot_key = "player:42";
  // Counted under the lock being measured (the mutual-exclusion check).
  std::vector<std::uint64_t> counts = std::vector<std::uint64_t>(key_count);
  std::vector<std::uint64_t> room_counts = std::vector<std::uint64_t>(room_count);
  std::uint64_t hot_count = 0;

  inputs() {
    std::mt19937 rng(20240601);
    std::uniform_int_distribution<std::uint32_t> id(0, 999999);
    std::unordered_set<std::string> seen;
    while (keys.size() < key_count) {
      std::string k = "player:" + std::to_string(id(rng));
      if (seen.insert(k).second) keys.push_back(std::move(k));
    }
    for (std::size_t i = 0; i < room_count; ++i) rooms.push_back("room:" + std::to_string(i));
    const auto make_walks = [&rng](std::size_t n) {
      std::uniform_int_distribution<std::uint16_t> pick(0, static_cast<std::uint16_t>(n - 1));
      std::vector<std::vector<std::uint16_t>> w(max_threads, std::vector<std::uint16_t>(walk_length));
      for (auto& v : w) {
        for (auto& i : v) i = pick(rng);
      }
      return w;
    };
    walk = make_walks(key_count);
    room_walk = make_walks(room_count);
  }
};

std::uint64_t sum(const std::vector<std::uint64_t>& v) {
  std::uint64_t s = 0;
  for (std::uint64_t x : v) s += x;
  return s;
}

// Who released a key last, and when (steady ns, taken just before its unlock call).
// Relaxed: measurement only; each value stands alone.
struct alignas(64) release_mark {
  std::atomic<std::int64_t> at{0};
  std::atomic<int> holder{-1};
};

// One contended run's samples, per thread: each thread touches only its own slot inside
// the loop; thread 0 clears them before the loop and reads them after it (Google
// Benchmark's start and stop barriers order those with every thread's loop).
struct contention_stats {
  struct alignas(64) per_thread {
    std::vector<std::int64_t> handoff_ns, wait_ns;
    std::uint64_t same_holder = 0, grants = 0;
  };
  std::vector<per_thread> threads = std::vector<per_thread>(max_threads);
  std::vector<release_mark> marks = std::vector<release_mark>(std::max(key_count, room_count));

  void reset() {
    for (auto& t : threads) t = per_thread{};
    for (auto& m : marks) {
      m.at.store(0, std::memory_order_relaxed);
      m.holder.store(-1, std::memory_order_relaxed);
    }
  }

  static double percentile_us(std::vector<std::int64_t>& v, double p) {
    if (v.empty()) return 0;
    const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
    return static_cast<double>(v[i]) / 1e3;
  }

  void report(benchmark::State& state) {
    std::vector<std::int64_t> handoff;
    std::vector<std::int64_t> wait;
    std::uint64_t same = 0;
    std::uint64_t grants = 0;
    for (auto& t : threads) {
      handoff.insert(handoff.end(), t.handoff_ns.begin(), t.handoff_ns.end());
      wait.insert(wait.end(), t.wait_ns.begin(), t.wait_ns.end());
      same += t.same_holder;
      grants += t.grants;
    }
    state.counters["handoff_p50_us"] = percentile_us(handoff, 0.5);
    state.counters["handoff_p99_us"] = percentile_us(handoff, 0.99);
    state.counters["wait_p50_us"] = percentile_us(wait, 0.5);
    state.counters["wait_p99_us"] = percentile_us(wait, 0.99);
    state.counters["wait_max_ms"] =
        wait.empty() ? 0 : static_cast<double>(*std::max_element(wait.begin(), wait.end())) / 1e6;
    state.counters["same_holder_pct"] =
        grants == 0 ? 0 : 100.0 * static_cast<double>(same) / static_cast<double>(grants);
  }
};

// Where the CPU time of one run goes, per lock/unlock: the server's (INFO cpu: user + system
// of redis-server), this process's (every benchmark thread, the clients' background threads
// and, on the delayed routes, the proxy's thread) and this process's context switches
// (voluntary and involuntary). On loopback with 2 cores these, not the round trips, set
// the contended rows' throughput. Read by thread 0 before and after the loop (untimed;
// Google Benchmark's start and stop barriers put every thread's loop in between).
class cost_meter {
 public:
  // The servers: one, or a cluster's primaries (their CPU is added up).
  explicit cost_meter(std::vector<int> server_ports) : server_ports_(std::move(server_ports)) {}

  void start() {
    server_us_ = server_cpu_us();
    self_ = usage();
  }

  void report(benchmark::State& state, std::int64_t ops) const {
    if (ops <= 0) return;
    const rusage now = usage();
    const auto n = static_cast<double>(ops);
    state.counters["server_cpu_us"] = (server_cpu_us() - server_us_) / n;
    state.counters["process_cpu_us"] = (cpu_us(now) - cpu_us(self_)) / n;
    state.counters["ctx_switches"] =
        static_cast<double>((now.ru_nvcsw + now.ru_nivcsw) - (self_.ru_nvcsw + self_.ru_nivcsw)) / n;
  }

 private:
  static rusage usage() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u;
  }
  static double cpu_us(const rusage& u) {
    const auto us = [](const timeval& t) {
      return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec);
    };
    return us(u.ru_utime) + us(u.ru_stime);
  }
  // used_cpu_user + used_cpu_sys of the servers, in µs (INFO reports seconds).
  double server_cpu_us() const {
    double total = 0;
    for (const int port : server_ports_) {
      raw_connection c(port);
      reply r = c.command({"INFO", "cpu"});
      const std::string info(r->str, r->len);
      for (const char* field : {"used_cpu_user:", "used_cpu_sys:"}) {
        const auto at = info.find(std::string("\n") + field);
        if (at != std::string::npos) total += std::strtod(info.c_str() + at + 1 + std::strlen(field), nullptr);
      }
    }
    return total * 1e6;
  }

  std::vector<int> server_ports_;
  double server_us_ = 0;
  rusage self_{};
};

// ---------------------------------------------------------------------------------------
// Benchmarks.

template <class Impl>
void bm_uncontended(benchmark::State& state, Impl& impl, inputs& in, cost_meter& cost) {
  const std::uint64_t before = sum(in.counts);
  cost.start();
  const std::uint16_t* walk = in.walk[0].data();
  std::size_t i = 0;
  for (auto _ : state) {
    try {
      const std::uint16_t k = walk[i++ & (walk_length - 1)];
      auto g = impl.lock(in.keys[k]);
      ++in.counts[k];
    } catch (const std::exception& e) {
      state.SkipWithError(e.what());
      break;
    }
  }
  state.SetItemsProcessed(state.iterations());
  cost.report(state, state.iterations());
  check_total(state, before, sum(in.counts));
}

// One contended loop: thread t locks keys[walk[t][i]] with its own client clients[t].
template <class Impl>
void contended_loop(benchmark::State& state, Impl& impl, const std::vector<std::string>& keys,
                    const std::vector<std::uint16_t>* walk, std::uint64_t* counts, contention_stats& stats) {
  const int me = state.thread_index();
  auto& mine = stats.threads[static_cast<std::size_t>(me)];
  std::size_t i = 0;
  for (auto _ : state) {
    try {
      const std::size_t k = walk != nullptr ? (*walk)[i++ & (walk_length - 1)] : 0;
      release_mark& mark = stats.marks[k];
      const std::int64_t t0 = now_ns();
      auto g = impl.lock(keys[k]);
      const std::int64_t t1 = now_ns();
      if (mark.at.load(std::memory_order_relaxed) > t0) {
        mine.handoff_ns.push_back(t1 - mark.at.load(std::memory_order_relaxed));  // waited across that unlock
      }
      if (mark.holder.load(std::memory_order_relaxed) == me) ++mine.same_holder;
      ++mine.grants;
      mine.wait_ns.push_back(t1 - t0);
      ++counts[k];
      mark.holder.store(me, std::memory_order_relaxed);
      mark.at.store(now_ns(), std::memory_order_relaxed);
    } catch (const std::exception& e) {  // the guard's unlock is in the try
      state.SkipWithError(e.what());
      break;
    }
  }
}

// The FIFO check (see the overview). Returns an empty string when the grants came in call
// order and the server keeps nothing for the key, else what was seen.
std::string fifo_check(std::vector<std::unique_ptr<handoff_lock>>& clients, int port) {
  const std::string key = "fifo:check";
  std::vector<int> order;        // written under the key
  std::atomic<int> calling{-1};  // the last waiter that is about to call lock()
  auto holder = clients[0]->lock(key);
  std::vector<std::thread> threads;
  for (int i = 0; i < fifo_waiters; ++i) {
    threads.emplace_back([&clients, &key, &order, &calling, i] {
      calling.store(i, std::memory_order_release);
      auto g = clients[static_cast<std::size_t>(i) + 1]->lock(key);
      order.push_back(i);
    });
    // Wait until the thread runs, then give it fifo_gap to reach the queue on the server.
    while (calling.load(std::memory_order_acquire) != i) std::this_thread::yield();
    std::this_thread::sleep_for(fifo_gap);
  }
  holder.unlock();
  for (auto& t : threads) t.join();
  bool ok = order.size() == static_cast<std::size_t>(fifo_waiters);
  for (int i = 0; ok && i < fifo_waiters; ++i) ok = order[static_cast<std::size_t>(i)] == i;
  raw_connection c(port);
  const std::string base = clients[0]->mutex().config().prefix + "{" + key + "}:";
  const long long left = c.command({"EXISTS", base + "lock", base + "queue", base + "waiters"})->integer;
  if (ok && left == 0) return {};
  std::string seen = "FIFO violated: grant order";
  for (int i : order) seen += ' ' + std::to_string(i);
  seen += " (expected 0.." + std::to_string(fifo_waiters - 1) + "), keys left on the server: " + std::to_string(left);
  return seen;
}

template <class Impl>
void bm_hotkey(benchmark::State& state, std::vector<std::unique_ptr<Impl>>& clients, inputs& in,
               contention_stats& stats, std::vector<std::unique_ptr<handoff_lock>>* fifo_clients, int port,
               cost_meter& cost) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) {
    if (fifo_clients != nullptr) {
      if (const std::string error = fifo_check(*fifo_clients, port); !error.empty()) {
        state.SkipWithError(error.c_str());
      } else {
        state.counters["fifo_ok"] = 1;
      }
    }
    stats.reset();
    before = in.hot_count;
    cost.start();
  }
  const std::vector<std::string> key{in.hot_key};
  contended_loop(state, *clients[static_cast<std::size_t>(state.thread_index())], key, nullptr, &in.hot_count, stats);
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    stats.report(state);
    cost.report(state, state.iterations() * state.threads());
    check_total(state, before, in.hot_count);
  }
}

template <class Impl>
void bm_rooms(benchmark::State& state, std::vector<std::unique_ptr<Impl>>& clients, inputs& in, contention_stats& stats,
              cost_meter& cost) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) {
    stats.reset();
    before = sum(in.room_counts);
    cost.start();
  }
  const auto t = static_cast<std::size_t>(state.thread_index());
  contended_loop(state, *clients[t], in.rooms, &in.room_walk[t], in.room_counts.data(), stats);
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    stats.report(state);
    cost.report(state, state.iterations() * state.threads());
    check_total(state, before, sum(in.room_counts));
  }
}

template <class F>
benchmark::internal::Benchmark* add(const std::string& name, F&& fn) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))->UseRealTime()->MinTime(min_time_s);
}

std::string server_version(int port) {
  raw_connection c(port);
  reply r = c.command({"INFO", "server"});
  const std::string info(r->str, r->len);
  const std::string field = "redis_version:";
  const auto at = info.find(field);
  if (at == std::string::npos) return "unknown";
  const auto end = info.find_first_of("\r\n", at);
  return info.substr(at + field.size(), end - at - field.size());
}

// The network round trips of the delayed routes (a proxy delays each direction by half).
constexpr std::chrono::microseconds network_rtts[] = {500us, 2000us};
constexpr int rtt_pings = 200;

std::string rtt_name(std::chrono::microseconds d) {
  char s[32];
  if (d.count() % 1000 == 0) {
    std::snprintf(s, sizeof s, "%lldms", static_cast<long long>(d.count() / 1000));
  } else if (d.count() >= 1000 || d.count() % 100 == 0) {
    std::snprintf(s, sizeof s, "%.1fms", static_cast<double>(d.count()) / 1000);
  } else {
    std::snprintf(s, sizeof s, "%lldus", static_cast<long long>(d.count()));
  }
  return s;
}

// rtt_pings PING round trips through `to`, sorted (ns).
std::vector<std::int64_t> ping_times(int to) {
  raw_connection c(to);
  std::vector<std::int64_t> ns;
  for (int i = 0; i < rtt_pings; ++i) {
    const std::int64_t t0 = now_ns();
    c.command({"PING"});
    ns.push_back(now_ns() - t0);
  }
  std::sort(ns.begin(), ns.end());
  return ns;
}

// A proxy whose PING round trip is about `rtt`: its own cost (the median round trip with
// no delay: two more hops and its thread's wake-ups) is measured first and taken off the
// delay, so that the route models a network of that round trip rather than one plus the
// proxy's overhead. `how` says what was set.
std::unique_ptr<handoff::bench::delay_proxy> network(int port, std::chrono::microseconds rtt, std::string& how) {
  auto proxy = std::make_unique<handoff::bench::delay_proxy>(port, std::chrono::nanoseconds(0));
  const std::int64_t overhead = ping_times(proxy->port())[rtt_pings / 2];
  const std::int64_t one_way = std::max<std::int64_t>(0, (std::chrono::nanoseconds(rtt).count() - overhead) / 2);
  proxy->set_delay(std::chrono::nanoseconds(one_way));
  char s[160];
  std::snprintf(s, sizeof s, "a proxy on loopback (its own round trip %.0f us) delaying each direction by %.0f us",
                static_cast<double>(overhead) / 1e3, static_cast<double>(one_way) / 1e3);
  how = s;
  return proxy;
}

// Median and p99 of PING round trips through `to`, as text.
std::string measured_rtt(int to) {
  const std::vector<std::int64_t> ns = ping_times(to);
  char s[96];
  std::snprintf(s, sizeof s, "median %.0f us, p99 %.0f us", static_cast<double>(ns[ns.size() / 2]) / 1e3,
                static_cast<double>(ns[ns.size() * 99 / 100]) / 1e3);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  handoff::bench::parked_thread idle;  // see parked_thread: before anything is measured

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  try {
    handoff::test::redis_server server;  // stopped when main returns
    const int port = server.port();
    raw_connection(port).command({"FLUSHALL"});

    handoff::bench::add_machine_context();
    benchmark::AddCustomContext("parked_thread", "yes (glibc multi-threaded lock paths)");
    benchmark::AddCustomContext("redis_server", server_version(port) +
                                                    " on TCP 127.0.0.1 (loopback, same machine), started by the "
                                                    "benchmark with --save \"\" --appendonly no");
    benchmark::AddCustomContext("redis_rtt_loopback", "PING round trip: " + measured_rtt(port));
    benchmark::AddCustomContext("redis_keys", std::to_string(key_count) +
                                                  " keys \"player:<random>\" for redis_uncontended, one key for "
                                                  "redis_hotkey, " +
                                                  std::to_string(room_count) + " keys \"room:<n>\" for redis_64keys");

    inputs in;
    contention_stats stats;
    cost_meter cost({port});

    // One route to the server: loopback, or through a delay proxy. One client per
    // benchmark thread (like one process each), a fresh set per workload (as
    // keyed_mutex_bench gives each workload its own instances), and the FIFO check's own five.
    struct client_set {
      std::vector<std::unique_ptr<handoff_lock>> handoff;
      std::vector<std::unique_ptr<polling_lock>> poll1;
      std::vector<std::unique_ptr<polling_lock>> poll100;
    };
    struct route {
      std::string tag;  // in the workload's name: "" (loopback) or "_rtt<delay>"
      int port;         // what the clients connect to
      std::unique_ptr<handoff::bench::delay_proxy> proxy;
      client_set unc, hot, rooms;
      std::vector<std::unique_ptr<handoff_lock>> fifo_clients;
    };
    int next_id = 0;  // the polling clients' token prefixes
    const auto make_set = [&next_id](int to, int n) {
      client_set c;
      for (int t = 0; t < n; ++t) {
        c.handoff.push_back(std::make_unique<handoff_lock>(to));
        c.poll1.push_back(std::make_unique<polling_lock>(to, 1ms, next_id++));
        c.poll100.push_back(std::make_unique<polling_lock>(to, 100ms, next_id++));
      }
      return c;
    };
    std::vector<std::unique_ptr<route>> routes;
    const auto add_route = [&](std::string tag, std::unique_ptr<handoff::bench::delay_proxy> proxy) {
      auto r = std::make_unique<route>();
      r->tag = std::move(tag);
      r->port = proxy != nullptr ? proxy->port() : port;
      r->proxy = std::move(proxy);
      r->unc = make_set(r->port, 1);
      r->hot = make_set(r->port, max_threads);
      r->rooms = make_set(r->port, max_threads);
      for (int t = 0; t <= fifo_waiters; ++t) r->fifo_clients.push_back(std::make_unique<handoff_lock>(r->port));
      route& rt = *r;
      routes.push_back(std::move(r));

      // 1. Uncontended lock/unlock over 1024 keys, one client.
      const std::string unc = "redis_uncontended" + rt.tag;
      add(unc + "/handoff",
          [&rt, &in, &cost](benchmark::State& s) { bm_uncontended(s, *rt.unc.handoff[0], in, cost); });
      add(unc + "/handoff_lease", [&rt, &in, &cost](benchmark::State& s) {
        leased l{*rt.unc.handoff[0]};
        bm_uncontended(s, l, in, cost);
      });
      add(unc + "/poll_1ms", [&rt, &in, &cost](benchmark::State& s) { bm_uncontended(s, *rt.unc.poll1[0], in, cost); });
      add(unc + "/poll_100ms",
          [&rt, &in, &cost](benchmark::State& s) { bm_uncontended(s, *rt.unc.poll100[0], in, cost); });

      // 2. One hot key, 2, 4 and 8 clients (with the FIFO check for handoff).
      const auto hotkey = [&](const std::string& impl, auto& clients, auto* fifo) {
        add("redis_hotkey" + rt.tag + "/" + impl,
            [&clients, &in, &stats, fifo, port, &cost](benchmark::State& s) {
              bm_hotkey(s, clients, in, stats, fifo, port, cost);
            })
            ->Threads(2)
            ->Threads(4)
            ->Threads(8);
      };
      hotkey("handoff", rt.hot.handoff, &rt.fifo_clients);
      hotkey("poll_1ms", rt.hot.poll1, static_cast<decltype(&rt.fifo_clients)>(nullptr));
      hotkey("poll_100ms", rt.hot.poll100, static_cast<decltype(&rt.fifo_clients)>(nullptr));

      // 3. 8 clients over 64 keys.
      const auto many = [&](const std::string& impl, auto& clients) {
        add("redis_64keys" + rt.tag + "/" + impl, [&clients, &in, &stats, &cost](benchmark::State& s) {
          bm_rooms(s, clients, in, stats, cost);
        })->Threads(8);
      };
      many("handoff", rt.rooms.handoff);
      many("poll_1ms", rt.rooms.poll1);
      many("poll_100ms", rt.rooms.poll100);
    };

    add_route("", nullptr);
    // The same over a network's round trip: a proxy on loopback delays each direction
    // (delay_proxy.hpp, calibrated by network()); its measured round trip goes into the
    // context.
    for (const auto rtt : network_rtts) {
      std::string how;
      auto proxy = network(port, rtt, how);
      const std::string name = rtt_name(rtt);
      benchmark::AddCustomContext("redis_rtt" + name,
                                  how + "; PING round trip through it: " + measured_rtt(proxy->port()));
      add_route("_rtt" + name, std::move(proxy));
    }

    // The same lock on a Redis Cluster: the routing's cost (see the overview).
    handoff::test::redis_cluster cluster(0);
    benchmark::AddCustomContext("redis_cluster", "3 primaries, no replicas, " + server_version(cluster.seed_port()) +
                                                     " on loopback, started by the benchmark");
    cost_meter cluster_cost(cluster.primaries());
    std::vector<std::unique_ptr<handoff_lock>> cluster_hot;
    std::vector<std::unique_ptr<handoff_lock>> cluster_rooms;
    for (int t = 0; t < max_threads; ++t) {
      cluster_hot.push_back(std::make_unique<handoff_lock>(cluster.seed_port()));
      cluster_rooms.push_back(std::make_unique<handoff_lock>(cluster.seed_port()));
    }
    add("redis_hotkey_cluster/handoff",
        [&](benchmark::State& s) {
          bm_hotkey(s, cluster_hot, in, stats, static_cast<std::vector<std::unique_ptr<handoff_lock>>*>(nullptr),
                    cluster.seed_port(), cluster_cost);
        })
        ->Threads(2)
        ->Threads(4)
        ->Threads(8);
    add("redis_64keys_cluster/handoff", [&](benchmark::State& s) {
      bm_rooms(s, cluster_rooms, in, stats, cluster_cost);
    })->Threads(8);

    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
