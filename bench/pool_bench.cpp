// Per-key serialization over a worker pool: does handoff share a pool's workers between keys
// while keeping each key's requests one at a time?
//
// The experiment: 1011 requests of fixed, non-CPU-bound work (1 ms of
// std::this_thread::sleep_for, standing for I/O) spread over a few keys; requests for the
// same key must run one at a time, requests for different keys may overlap. Each key is a
// handoff::actor<key_state>; the actors drain on a handoff::thread_pool of 1 worker and of
// 3 workers. Since the work does not use the CPU, 3 workers should finish about 3 times
// sooner than 1, even on 2 cores: the ideal is 3.0x, and the target >= 2.8x leaves room
// for the hand-offs and for scheduling noise (tools/bench_table.py prints the speed-up).
//
// How a request travels:
//  - The submitter (the benchmark thread) never runs the work: it calls pool.execute() with
//    a work item per request and returns at once. The pool worker that runs that item posts
//    the request to its key's actor. If the actor is idle, the worker becomes its owner and
//    runs the request; if another worker owns it, the post only enqueues and the worker
//    moves on to the next item.
//  - The actors are built with actor_options{.executor = pool, .max_messages = 1}: after
//    each request, an owner that finds more requests queued for its key hands the actor back
//    to the pool (one execute()) instead of draining the key's whole backlog. Without the
//    budget, an owner keeps its worker for as long as its key has requests queued, so one
//    busy key could pin a worker while the pool queue holds requests for idle keys, and the
//    workers would not be shared fairly between keys. With a budget of one, the pool picks
//    up the next key after every request, as a broker's handler picks the next message.
//    The hand-off costs one queue operation per 1 ms request: noise.
//
// Checks (SkipWithError if any fails): every handler sets its key's `inside` flag with an
// atomic exchange and clears it when done; finding it already set is a violation of the
// per-key serialization. Every run waits until all 1011 requests have run (a countdown),
// and at the end every key's actor reports how many requests it handled.
//
// One iteration is one complete run of 1011 requests (wall-clock time); the pool and the
// actors are created outside the timed loop, once per repetition.
//
// mesh_120actors_1us: does CPU-bound work spread over the pool's workers? 120 actors (one
// per "player"), each message 1 us of CPU work (a spin on the clock), after which it goes
// on to an actor picked at random, 100 hops per message, 240 messages in flight: 24,000
// handler runs per iteration. The messages start with defer() from the benchmark thread;
// after that every send is a nested send on a worker, which keeps an idle target on that
// worker's run queue unless the pool reports idle workers (executor_ref::has_idle_workers),
// in which case the worker hands it to the pool. Actors: actor_options{.executor = pool},
// no budget. Impls: handoff_1worker, handoff_2workers (target: >= 1.7x the 1-worker
// throughput on 2 cores), and handoff_2workers_nohint, the same pool behind an executor
// that does not forward the idle hint (how the run queue behaved before the hint). Checks:
// every run handles exactly 24,000 messages, and no actor runs two handlers at once.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "bench_support.hpp"
#include "handoff/actor.hpp"
#include "handoff/actor_options.hpp"
#include "handoff/executor.hpp"
#include "handoff/thread_pool.hpp"

namespace {

constexpr std::size_t requests = 1011;
constexpr std::size_t keys = 8;
constexpr auto work_time = std::chrono::milliseconds(1);
constexpr benchmark::IterationCount runs_per_repetition = 2;

struct key_state {
  std::uint64_t handled = 0;
};

// Everything one benchmark run shares with the pool workers.
struct keyed_pool {
  struct alignas(64) key_slot {
    std::atomic<bool> inside{false};  // a handler of this key is running
    std::uint64_t expected = 0;       // requests per run for this key
  };

  struct request {
    keyed_pool* pool;
    std::size_t key;
  };

  handoff::thread_pool pool;  // declared first: outlives the actors (destroyed after them)
  std::vector<std::unique_ptr<handoff::actor<key_state>>> actors;
  std::unique_ptr<key_slot[]> slots{new key_slot[keys]};
  std::vector<request> reqs;  // request i goes to key reqs[i].key
  std::atomic<std::uint64_t> remaining{0};
  std::atomic<std::uint64_t> violations{0};

  explicit keyed_pool(std::size_t workers) : pool(workers) {
    auto options = std::make_shared<const handoff::actor_options>(
        handoff::actor_options{.executor = pool, .max_messages = 1, .max_time = {}, .on_error = {}});
    actors.reserve(keys);
    for (std::size_t k = 0; k < keys; ++k) actors.push_back(std::make_unique<handoff::actor<key_state>>(options));
    // The keys of the 1011 requests: uniform at random, the same sequence in every run.
    std::mt19937 rng(20261123);
    std::uniform_int_distribution<std::size_t> pick(0, keys - 1);
    reqs.reserve(requests);
    for (std::size_t i = 0; i < requests; ++i) {
      const std::size_t k = pick(rng);
      reqs.push_back(request{this, k});
      ++slots[k].expected;
    }
  }

  // The work item a worker runs for each request: post it to its key's actor.
  static void submit(void* arg) noexcept {
    auto* r = static_cast<request*>(arg);
    keyed_pool* self = r->pool;
    const std::size_t key = r->key;
    // The lambda holds a pointer and an index: building it cannot throw, so neither can post.
    self->actors[key]->post([self, key](key_state& s) { self->handle(key, s); });
  }

  void handle(std::size_t key, key_state& s) noexcept {
    key_slot& slot = slots[key];
    if (slot.inside.exchange(true, std::memory_order_acq_rel)) violations.fetch_add(1, std::memory_order_relaxed);
    std::this_thread::sleep_for(work_time);  // the request's work: waiting, not computing
    ++s.handled;
    slot.inside.store(false, std::memory_order_release);
    if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) remaining.notify_all();
  }

  // One run: submit every request through the pool, wait until all have run.
  void run() {
    remaining.store(requests, std::memory_order_relaxed);
    for (request& r : reqs) pool.execute(handoff::work{&submit, &r});
    for (std::uint64_t n; (n = remaining.load(std::memory_order_acquire)) != 0;) {
      remaining.wait(n, std::memory_order_acquire);
    }
  }

  std::uint64_t max_key_requests() const {
    std::uint64_t m = 0;
    for (std::size_t k = 0; k < keys; ++k) m = std::max(m, slots[k].expected);
    return m;
  }
};

void bm_keyed_pool(benchmark::State& state, std::size_t workers) {
  keyed_pool kp(workers);
  for (auto _ : state) kp.run();

  std::string error;
  if (const auto v = kp.violations.load(); v != 0) {
    error = std::to_string(v) + " handlers ran while another handler of the same key was running";
  }
  const auto runs = static_cast<std::uint64_t>(state.iterations());
  for (std::size_t k = 0; k < keys && error.empty(); ++k) {
    const std::uint64_t handled = kp.actors[k]->ask([](key_state& s) { return s.handled; }).get();
    if (handled != kp.slots[k].expected * runs) {
      error = "key " + std::to_string(k) + " handled " + std::to_string(handled) + " requests, expected " +
              std::to_string(kp.slots[k].expected * runs);
    }
  }
  if (!error.empty()) state.SkipWithError(error.c_str());

  const double work_ms = std::chrono::duration<double, std::milli>(work_time).count();
  state.SetItemsProcessed(state.iterations() * static_cast<benchmark::IterationCount>(requests));
  state.counters["workers"] = static_cast<double>(workers);
  state.counters["requests"] = static_cast<double>(requests);
  state.counters["keys"] = static_cast<double>(keys);
  // Lower bound of a run's time: the work spread evenly over the workers, or the busiest
  // key's requests one after the other, whichever is longer.
  state.counters["ideal_ms"] = std::max(work_ms * static_cast<double>(requests) / static_cast<double>(workers),
                                        work_ms * static_cast<double>(kp.max_key_requests()));
}

// ---------------------------------------------------------------------------------------
// mesh_120actors_1us

constexpr std::size_t mesh_actors = 120;
constexpr std::size_t mesh_in_flight = 240;
constexpr int mesh_hops = 100;
constexpr auto mesh_work = std::chrono::microseconds(1);

// The pool without its idle hint: an executor with execute() only.
struct no_hint_executor {
  handoff::thread_pool* pool;
  void execute(handoff::work w) const { pool->execute(w); }
};

struct mesh {
  struct node {
    mesh* m;
    std::uint64_t rng;  // xorshift64, per actor
    std::atomic<bool> inside{false};
    std::uint64_t handled = 0;
    node(mesh* owner, std::uint64_t seed) : m(owner), rng(seed) {}
  };

  handoff::thread_pool pool;
  no_hint_executor plain{&pool};
  std::vector<std::unique_ptr<handoff::actor<node>>> actors;
  std::atomic<std::uint64_t> remaining{0};
  std::atomic<std::uint64_t> violations{0};

  mesh(std::size_t workers, bool hint) : pool(workers) {
    handoff::actor_options o;
    if (hint) {
      o.executor = pool;
    } else {
      o.executor = plain;
    }
    auto options = std::make_shared<const handoff::actor_options>(std::move(o));
    for (std::size_t i = 0; i < mesh_actors; ++i) {
      actors.push_back(std::make_unique<handoff::actor<node>>(options, this, 0x9E3779B97F4A7C15ULL * (i + 1)));
    }
  }

  static void hop(node& n, int left) noexcept {
    if (n.inside.exchange(true, std::memory_order_acquire)) n.m->violations.fetch_add(1, std::memory_order_relaxed);
    const auto until = std::chrono::steady_clock::now() + mesh_work;
    while (std::chrono::steady_clock::now() < until) {
    }
    ++n.handled;
    n.rng ^= n.rng << 13;
    n.rng ^= n.rng >> 7;
    n.rng ^= n.rng << 17;
    n.inside.store(false, std::memory_order_release);
    mesh* m = n.m;
    if (left > 0) {
      m->actors[n.rng % mesh_actors]->post([left](node& next) { hop(next, left - 1); });
    } else if (m->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      m->remaining.notify_all();
    }
  }

  void run() {
    remaining.store(mesh_in_flight, std::memory_order_relaxed);
    for (std::size_t i = 0; i < mesh_in_flight; ++i) {
      actors[i % mesh_actors]->defer([](node& n) { hop(n, mesh_hops - 1); });
    }
    for (std::uint64_t n; (n = remaining.load(std::memory_order_acquire)) != 0;) {
      remaining.wait(n, std::memory_order_acquire);
    }
  }
};

void bm_mesh(benchmark::State& state, std::size_t workers, bool hint) {
  mesh m(workers, hint);
  for (auto _ : state) m.run();
  std::uint64_t handled = 0;
  for (auto& a : m.actors) handled += a->ask([](mesh::node& n) { return n.handled; }).get();
  const auto expected = static_cast<std::uint64_t>(state.iterations()) * mesh_in_flight * mesh_hops;
  if (handled != expected) {
    state.SkipWithError(
        ("handled " + std::to_string(handled) + " messages, expected " + std::to_string(expected)).c_str());
  } else if (m.violations.load() != 0) {
    state.SkipWithError("an actor ran two handlers at once");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<benchmark::IterationCount>(mesh_in_flight * mesh_hops));
  state.counters["workers"] = static_cast<double>(workers);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  handoff::bench::add_machine_context();
  benchmark::AddCustomContext("keyed_pool", std::to_string(requests) + " requests x " +
                                                std::to_string(work_time.count()) + " ms sleep over " +
                                                std::to_string(keys) +
                                                " keys (uniform random, fixed seed); actor_options{.executor = pool, "
                                                ".max_messages = 1}");

  for (const std::size_t workers : {std::size_t{1}, std::size_t{3}}) {
    const std::string name =
        "keyed_pool_1011x1ms/handoff_" + std::to_string(workers) + (workers == 1 ? "worker" : "workers");
    benchmark::RegisterBenchmark(name.c_str(), [workers](benchmark::State& s) { bm_keyed_pool(s, workers); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->Iterations(runs_per_repetition);
  }

  for (auto [impl, workers, hint] : {std::tuple{"handoff_1worker", 1, true}, std::tuple{"handoff_2workers", 2, true},
                                     std::tuple{"handoff_2workers_nohint", 2, false}}) {
    const std::string name = std::string("mesh_120actors_1us/") + impl;
    benchmark::RegisterBenchmark(
        name.c_str(),
        [workers = workers, hint = hint](benchmark::State& s) { bm_mesh(s, static_cast<std::size_t>(workers), hint); })
        ->UseRealTime()
        ->Unit(benchmark::kMillisecond)
        ->MinTime(0.5);
  }

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
