// Actors across processes: handoff::redis::actor_system against the usual design, a
// worker thread per key blocked in BLPOP on a Redis list that senders RPUSH to, and next to
// the in-process handoff::actor. The binary starts its own redis-server on loopback
// (tests/redis/redis_server.hpp).
//
// Workloads (each run once per repetition; the messages are trivial: the handler records
// the message's latency):
//   ractor_1key/<impl>     4 sender processes (fork) post 2000 messages each to one key
//   ractor_64keys/<impl>   the same over 64 keys (each sender cycles through all of them)
//   ractor_1key_paced, ractor_64keys_paced: 500 messages per sender, one every 1 ms (4000
//                          messages/s in all, under every impl's capacity): the latency
//                          of a loaded but not saturated system (the unpaced workloads
//                          saturate it, and their latency is mostly time in the queue)
//   ractor_1key_rtt0.5ms, ractor_64keys_rtt0.5ms: 400 messages per sender, every
//                          connection through a proxy on loopback that delays each
//                          direction by 250 us (bench/delay_proxy.hpp)
// Impls:
//   handoff_redis      every process runs an actor_system with the handler and a
//                      one-thread executor for budget hand-ons (the defaults: batches of
//                      16, max_messages 64, max_time 50 ms): the sender that finds an
//                      actor idle drains it
//   worker_blpop       every key has one worker thread, in the process key % 4, looping
//                      BLPOP on the key's list; senders RPUSH (raw hiredis)
//   handoff_inprocess  4 threads of one process post to handoff::actor<int>s (no Redis)
// Time: wall-clock from the moment all senders start to the moment the last message was
// handled, divided by the messages: time per message, all processes together
// (items_per_second: messages per second). Counters: p50_us, p99_us of the end-to-end
// latency, from the post (or RPUSH) call to the handler's start, on the machine's
// monotonic clock, which every process shares; server_cpu_us, the redis-server's CPU time
// (user + system, from INFO cpu) per message over the timed part of the run.
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
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "delay_proxy.hpp"
#include "redis_server.hpp"  // tests/redis: a private redis-server on a free loopback port

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
  std::int64_t latency_ns[max_messages];
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

void record(std::int64_t sent) {
  shared_area& a = *area();
  const std::int64_t slot = a.slots.fetch_add(1);
  if (slot < max_messages) a.latency_ns[slot] = now_ns() - sent;
  a.handled.fetch_add(1);
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

// Forks the senders (make_sender(p) runs in process p), times the run, reports. The run
// ends when the last message's handler started; the senders stay up until every actor on
// `port` was released (a handler records before its dequeue), then the data set is flushed.
template <class MakeSender>
void run_processes(benchmark::State& state, int port, std::int64_t total, MakeSender make_sender) {
  shared_area& a = *area();
  a.handled = 0;
  a.slots = 0;
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
  const double cpu0 = server_cpu_us(port);
  const std::int64_t t0 = now_ns();
  a.go.store(1);
  while (a.handled.load() < total && a.failed.load() == 0 && std::chrono::steady_clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  const std::int64_t t1 = now_ns();
  const double cpu1 = server_cpu_us(port);
  const bool done = a.handled.load() == total;
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
  state.SetIterationTime(static_cast<double>(t1 - t0) / 1e9 / static_cast<double>(total));
  if (cpu0 >= 0 && cpu1 >= 0) state.counters["server_cpu_us"] = (cpu1 - cpu0) / static_cast<double>(total);
}

void report(benchmark::State& state, std::int64_t total) {
  shared_area& a = *area();
  std::vector<std::int64_t> lat(a.latency_ns, a.latency_ns + std::min(total, max_messages));
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
  int pace_us;  // 0: post as fast as possible; else one post per sender every pace_us
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
        auto actors = std::make_shared<handoff::redis::actor_system>(o, ao);
        actors->on("bench:", [](handoff::redis::delivery& d) { record(std::stoll(std::string(d.body()))); });
        return [pool, actors, p, r] {
          const std::int64_t start = now_ns();
          for (int i = 0; i < r.per_sender; ++i) {
            pace(r, start, i);
            actors->post(key_name((i + p) % r.keys), std::to_string(now_ns()));
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

void worker_blpop(benchmark::State& state, route r) {
  const std::int64_t total = std::int64_t{r.per_sender} * senders;
  for (auto _ : state) {
    run_processes(state, r.port, total, [&](int p) {
      sender_process([&] {
        // This process's workers: one per key k with k % senders == p, each on its own
        // connection, until every message was handled.
        auto workers = std::make_shared<std::vector<std::thread>>();
        for (int k = p; k < r.keys; k += senders) {
          workers->emplace_back([port = r.port, key = key_name(k)] {
            const context_ptr c = connect(port);
            while (area()->go.load() != 2 && area()->failed.load() == 0) {
              auto* reply = static_cast<redisReply*>(redisCommand(c.get(), "BLPOP %b 0.05", key.data(), key.size()));
              if (reply == nullptr) {
                area()->failed.store(1);
                return;
              }
              if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2) {
                record(std::stoll(std::string(reply->element[1]->str, reply->element[1]->len)));
              }
              freeReplyObject(reply);
            }
          });
        }
        auto sender = std::make_shared<context_ptr>(connect(r.port));
        return [workers, sender, p, r] {
          const std::int64_t start = now_ns();
          for (int i = 0; i < r.per_sender; ++i) {
            pace(r, start, i);
            const std::string key = key_name((i + p) % r.keys);
            const std::string body = std::to_string(now_ns());
            auto* reply = static_cast<redisReply*>(
                redisCommand(sender->get(), "RPUSH %b %b", key.data(), key.size(), body.data(), body.size()));
            if (reply == nullptr) throw std::runtime_error("RPUSH failed");
            freeReplyObject(reply);
          }
          while (area()->go.load() != 2 && area()->failed.load() == 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
          for (auto& w : *workers) w.join();
        };
      });
    });
  }
  report(state, total);
}

void handoff_inprocess(benchmark::State& state, route r) {
  const std::int64_t total = std::int64_t{r.per_sender} * senders;
  for (auto _ : state) {
    shared_area& a = *area();
    a.handled = 0;
    a.slots = 0;
    std::vector<std::unique_ptr<handoff::actor<int>>> actors;
    for (int k = 0; k < r.keys; ++k) actors.push_back(std::make_unique<handoff::actor<int>>());
    const std::int64_t t0 = now_ns();
    std::vector<std::thread> threads;
    for (int p = 0; p < senders; ++p) {
      threads.emplace_back([&, p] {
        for (int i = 0; i < r.per_sender; ++i) {
          const std::int64_t sent = now_ns();
          actors[static_cast<std::size_t>((i + p) % r.keys)]->post([sent](int& n) {
            ++n;
            record(sent);
          });
        }
      });
    }
    for (auto& t : threads) t.join();
    while (a.handled.load() < total) std::this_thread::yield();
    state.SetIterationTime(static_cast<double>(now_ns() - t0) / 1e9 / static_cast<double>(total));
  }
  report(state, total);
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

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    (void)area();  // mapped before any fork
    handoff::test::redis_server server;
    const int port = server.port();
    handoff::bench::add_machine_context();
    benchmark::AddCustomContext("redis_actor_server", "Redis " + server_version(port) +
                                                          " on TCP 127.0.0.1 (loopback), --save \"\" --appendonly no");
    handoff::bench::delay_proxy proxy(port, std::chrono::microseconds(250));
    benchmark::AddCustomContext("redis_actor_rtt0.5ms", "a proxy on loopback delaying each direction by 250 us");
    const auto add = [](const std::string& name, void (*fn)(benchmark::State&, route), route r) {
      benchmark::RegisterBenchmark(name.c_str(), fn, r)->Iterations(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
    };
    for (const int keys : {1, 64}) {
      const std::string w = keys == 1 ? "ractor_1key" : "ractor_64keys";
      add(w + "/handoff_redis", handoff_redis, {port, keys, 2000, 0});
      add(w + "/worker_blpop", worker_blpop, {port, keys, 2000, 0});
      add(w + "/handoff_inprocess", handoff_inprocess, {port, keys, 2000, 0});
      add(w + "_paced/handoff_redis", handoff_redis, {port, keys, 500, 1000});
      add(w + "_paced/worker_blpop", worker_blpop, {port, keys, 500, 1000});
      add(w + "_rtt0.5ms/handoff_redis", handoff_redis, {proxy.port(), keys, 400, 0});
      add(w + "_rtt0.5ms/worker_blpop", worker_blpop, {proxy.port(), keys, 400, 0});
    }
    benchmark::RunSpecifiedBenchmarks();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_actor_bench: %s\n", e.what());
    return 1;
  }
  benchmark::Shutdown();
  return 0;
}
