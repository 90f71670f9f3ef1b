// Fan-in: N sender threads feeding one actor, across the amount of work each side does.
//
// Each cell of the matrix is a workload "fanin_send<S>_work<H>/threads:<N>":
//   N  senders: 2 and 8 threads, all sending to one target;
//   S  sender work: calibrated busy work (bench_support.hpp, spin_work) done by the sender
//      before each send, outside the target: 0, ~30 ns, ~100 ns;
//   H  handler work: the same busy work inside the handler (under the lock for the mutex):
//      0, ~30 ns, ~100 ns, ~400 ns. Every handler also counts the message.
// The iteration counts and the measured ns per iteration of the busy work are recorded in
// the results' context (fanin_work_iterations, work_ns_per_iteration).
//
// Implementations, in one binary so that their ratios compare like with like:
//   mutex                 std::mutex locked around the handler's work (the baseline).
//   mailbox               the hand-off protocol in its minimal form over the Vyukov mailbox
//                         (mini_actor.hpp): a count fetch_add plus the mailbox exchange per
//                         queued send: the library's protocol, without its options and run
//                         queue.
//   handoff_send          handoff::basic_actor<int, H>::send (the library's typed actor).
//   handoff_post          handoff::actor<State>::post (the library's type-erased actor).
//   handoff_proto_packed  packed_actor.hpp: one fetch_add counts the message and gives it
//                         a ticket into slots of a preallocated ring (a prototype; the
//                         library carried it over pooled chunks for a while: docs/notebook.md).
//   handoff_proto_lines   the same with consumer batching: the drainer waits briefly at a
//                         line of slots that senders are still filling (prototype).
//   handoff_proto_sticky  the packed word with a sticky release: the last owner keeps a
//                         claim on the idle actor for its own next send (prototype).
// Time is wall-clock per message, all senders together; every run ends with every message
// run and the count checked (SkipWithError on a lost or duplicated message).
//
// Batches, "fanin_batch16/<impl>/threads:<N>": N senders (2, 8), no work on either side but
// the count; every iteration sends 16 messages: `mutex_per_message` locks once per message,
// `mutex_per_batch` once per 16, `handoff_send` sends them one by one, `handoff_send_all` and
// `handoff_post_all` as one batch (one atomic for the 16). Time per iteration: per 16
// messages.
//
// Fairness and latency, "fairness_work<H>/<impl>/threads:<N>" (separate from the matrix,
// so that its timestamps do not perturb the throughput cells): N senders (2, 8) with no
// sender work send for fair_run_s as fast as they can, to a std::mutex (`mutex`), a
// handoff::basic_actor (`handoff_send`) or one with capacity 256 whose senders block when it
// is full (`handoff_send_bounded256`); each message carries its sender and its send time
// (steady_clock), and the handler, with H ns of busy work (0, 30, 100, 400), counts per
// sender and records the send-to-handled time (to 8 M messages). Time: wall-clock per
// message handled, from the start to the last message run (an unbounded actor's backlog
// drains after the senders stop); the handler's clock read lengthens the mutex's critical
// section, so compare throughput in the matrix above, not here. Counters: share_min and share_max, the fewest and most
// messages a sender got handled as a fraction of an equal share (1 each: fair; a barging mutex lets one thread run long
// streaks), lat_p50_ns and lat_p99_ns, send-to-handled (for the mutex: the wait for the lock and the handler; for the
// actor: the queueing behind the owner), post_max_us, the longest single send call of any
// sender that ended by the deadline (an owner's drain included), in_post_max, the largest
// share of the run one sender spent inside its sends (up to the deadline), and
// last_post_us, the longest last send (for an unbounded actor, the drain of the backlog
// left when no sender remains to take it over). `handoff_post` is actor::post with default
// options.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "handoff/actor.hpp"
#include "handoff/basic_actor.hpp"
#include "handoff/detail/clock.hpp"
#include "mini_actor.hpp"
#include "packed_actor.hpp"

namespace {

using handoff::bench::end_barrier;
using handoff::bench::spin_work;
using handoff::bench::timed_loop;

constexpr double min_time_s = 0.3;  // per instance and repetition: 7 impls x 24 cells

// The target's state: the message count and the busy work's value.
struct fan_state {
  std::uint64_t n = 0;
  std::uint64_t acc = 1;
  std::uint32_t work = 0;
  void run() noexcept {
    ++n;
    if (work != 0) acc = spin_work(acc, work);
  }
};

// The typed actors' handler: the state lives in it. Message -1 copies the count to
// *report (sent once the actor is idle, so that it runs on the caller's thread).
struct fan_handler {
  fan_state s;
  std::uint64_t* report;
  void operator()(int m) noexcept {
    if (m < 0) {
      *report = s.n;
      return;
    }
    s.run();
  }
};

template <class Actor>
std::uint64_t count_of(Actor& a, std::uint64_t& report) {
  a.send(-1);
  return report;
}

struct fan_mutex {
  std::mutex m;
  fan_state s;
};

using fan_mailbox = handoff::bench::mini_actor<int, fan_handler, handoff::bench::vyukov_mailbox<int>>;
using fan_packed = handoff::bench::packed_actor<int, fan_handler>;
using fan_lines = handoff::bench::packed_actor<int, fan_handler, handoff::bench::drain_mode::lines>;
using fan_sticky = handoff::bench::sticky_actor<int, fan_handler>;

// One cell's targets, each on its own cache lines. They outlive every run.
struct fan_targets {
  alignas(64) fan_mutex mutex;
  alignas(64) handoff::basic_actor<int, fan_handler> basic;
  alignas(64) handoff::actor<fan_state> actor;
  alignas(64) fan_mailbox mailbox;
  alignas(64) fan_packed packed;
  alignas(64) fan_lines lines;
  alignas(64) fan_sticky sticky;
  alignas(64) end_barrier done;
  std::uint64_t report = 0;  // written by message -1 on the reading thread
  explicit fan_targets(std::uint32_t work)
      : basic(fan_handler{{0, 1, work}, &report}), actor(fan_state{0, 1, work}),
        mailbox(fan_handler{{0, 1, work}, &report}), packed(fan_handler{{0, 1, work}, &report}),
        lines(fan_handler{{0, 1, work}, &report}), sticky(fan_handler{{0, 1, work}, &report}) {
    mutex.s.work = work;
  }
};

// Thread 0 reads the count before the start barrier and after the end barrier, when no
// send is in flight (see the overview of actor_bench.cpp: every sender has returned, so
// every message has run and its owner released).
template <class Send, class Count>
void bm_fan(benchmark::State& state, end_barrier& done, std::uint32_t send_work, Send&& send, Count&& count) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = count();
  std::uint64_t x = static_cast<std::uint64_t>(state.thread_index()) + 1;
  timed_loop(state, done, [&](benchmark::IterationCount) {
    if (send_work != 0) x = spin_work(x, send_work);
    send();
  });
  benchmark::DoNotOptimize(x);
  if (state.thread_index() == 0) handoff::bench::check_count(state, before, count());
}

void register_cell(const std::string& workload, fan_targets& t, std::uint32_t send_work) {
  const auto add = [&](const char* impl, auto fn) {
    benchmark::RegisterBenchmark((workload + "/" + impl).c_str(), fn)
        ->UseRealTime()
        ->MinTime(min_time_s)
        ->Threads(2)
        ->Threads(8);
  };
  fan_targets* p = &t;
  add("mutex", [p, send_work](benchmark::State& s) {
    bm_fan(
        s, p->done, send_work,
        [p] {
          std::lock_guard lock(p->mutex.m);
          p->mutex.s.run();
        },
        [p] {
          std::lock_guard lock(p->mutex.m);
          return p->mutex.s.n;
        });
  });
  // The typed actors: send(1) per message; message -1 reads the count (count_of).
  const auto add_typed = [&](const char* impl, auto member) {
    add(impl, [p, send_work, member](benchmark::State& s) {
      auto& a = p->*member;
      bm_fan(
          s, p->done, send_work, [&a] { a.send(1); }, [&a, p] { return count_of(a, p->report); });
    });
  };
  add_typed("mailbox", &fan_targets::mailbox);
  add_typed("handoff_send", &fan_targets::basic);
  add("handoff_post", [p, send_work](benchmark::State& s) {
    bm_fan(
        s, p->done, send_work, [p] { p->actor.post([](fan_state& st) { st.run(); }); },
        [p] { return p->actor.ask([](fan_state& st) { return st.n; }).get(); });
  });
  add_typed("handoff_proto_packed", &fan_targets::packed);
  add_typed("handoff_proto_lines", &fan_targets::lines);
  add_typed("handoff_proto_sticky", &fan_targets::sticky);
}

// ---------------------------------------------------------------------------------------
// Batches (see the overview): every iteration sends `batch_size` messages to the trivial
// handler.

constexpr int batch_size = 16;
struct run_one {
  void operator()(fan_state& st) const noexcept { st.run(); }
};

template <class SendBatch, class Count>
void bm_batch(benchmark::State& state, end_barrier& done, SendBatch&& send_batch, Count&& count) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = count();
  timed_loop(state, done, [&](benchmark::IterationCount) { send_batch(); });
  state.SetItemsProcessed(state.iterations() * batch_size);
  if (state.thread_index() != 0) return;
  const std::uint64_t sent = static_cast<std::uint64_t>(state.max_iterations) * state.threads() * batch_size;
  if (count() - before != sent) state.SkipWithError("lost or duplicated messages");
}

void register_batches(fan_targets& t) {
  const auto add = [&](const char* impl, auto fn) {
    benchmark::RegisterBenchmark((std::string("fanin_batch16/") + impl).c_str(), fn)
        ->UseRealTime()
        ->MinTime(min_time_s)
        ->Threads(2)
        ->Threads(8);
  };
  fan_targets* p = &t;
  const auto mutex_count = [p] {
    std::lock_guard lock(p->mutex.m);
    return p->mutex.s.n;
  };
  add("mutex_per_message", [p, mutex_count](benchmark::State& s) {
    bm_batch(
        s, p->done,
        [p] {
          for (int i = 0; i < batch_size; ++i) {
            std::lock_guard lock(p->mutex.m);
            p->mutex.s.run();
          }
        },
        mutex_count);
  });
  add("mutex_per_batch", [p, mutex_count](benchmark::State& s) {
    bm_batch(
        s, p->done,
        [p] {
          std::lock_guard lock(p->mutex.m);
          for (int i = 0; i < batch_size; ++i) p->mutex.s.run();
        },
        mutex_count);
  });
  const auto basic_count = [p] { return count_of(p->basic, p->report); };
  add("handoff_send", [p, basic_count](benchmark::State& s) {
    bm_batch(
        s, p->done,
        [p] {
          for (int i = 0; i < batch_size; ++i) p->basic.send(1);
        },
        basic_count);
  });
  add("handoff_send_all", [p, basic_count](benchmark::State& s) {
    std::array<int, batch_size> ones{};
    ones.fill(1);
    bm_batch(
        s, p->done, [p, &ones] { p->basic.send_all(ones); }, basic_count);
  });
  add("handoff_post_all", [p](benchmark::State& s) {
    const std::array<run_one, batch_size> handlers{};
    bm_batch(
        s, p->done, [p, &handlers] { p->actor.post_all(handlers); },
        [p] { return p->actor.ask([](fan_state& st) { return st.n; }).get(); });
  });
}

// ---------------------------------------------------------------------------------------
// Fairness and latency (see the overview).

constexpr double fair_run_s = 0.2;
constexpr int max_fair_senders = 8;
constexpr std::size_t max_latencies = std::size_t{8} << 20;

using handoff::detail::now_ns;

struct fair_msg {
  int sender;  // -1: report (run on the reading thread once every sender has returned)
  std::int64_t sent_ns;
};

// The handled side, serialized by the lock or the actor.
struct fair_state {
  std::array<std::uint64_t, max_fair_senders> per_sender{};
  std::vector<std::int64_t> latency;  // send-to-handled, ns; capacity reserved once
  std::uint64_t acc = 1;
  std::uint32_t work = 0;
  void run(const fair_msg& m) {
    ++per_sender[static_cast<std::size_t>(m.sender)];
    if (work != 0) acc = spin_work(acc, work);
    if (latency.size() < max_latencies) latency.push_back(now_ns() - m.sent_ns);
  }
  void reset() {
    per_sender.fill(0);
    latency.clear();
  }
};

struct fair_handler {
  fair_state* s;
  void operator()(const fair_msg& m) {
    if (m.sender >= 0) s->run(m);
  }
};

handoff::actor_options bounded_options() {
  handoff::actor_options o;
  o.capacity = 256;  // full_policy::block: a sender waits for room
  return o;
}

// One handler work's targets; they outlive every run.
struct fair_targets {
  alignas(64) std::mutex m;
  alignas(64) fair_state mutex_state;
  alignas(64) fair_state actor_state;
  alignas(64) fair_state bounded_state;
  alignas(64) fair_state posted_state;
  alignas(64) handoff::basic_actor<fair_msg, fair_handler> actor;
  alignas(64) handoff::actor<fair_state*> posted;                    // actor::post, default options
  alignas(64) handoff::basic_actor<fair_msg, fair_handler> bounded;  // capacity 256, senders block
  alignas(64) std::atomic<std::int64_t> deadline{0};
  std::atomic<std::uint64_t> sent{0};             // all senders' sends of a run, checked against the handled
  std::atomic<double> per_message_s{0};           // the run's result, written by thread 0 for every thread
  std::atomic<std::int64_t> send_max_ns{0};       // the longest single send call of the run, any sender
  std::atomic<std::int64_t> in_send_max_ns{0};    // the most time one sender spent inside its sends
  std::atomic<std::int64_t> last_send_max_ns{0};  // the longest last send of a sender (the final drain)
  std::int64_t start_ns = 0;                      // thread 0's
  alignas(64) end_barrier started, done, reported;
  explicit fair_targets(std::uint32_t work)
      : actor(fair_handler{&actor_state}), posted(&posted_state),
        bounded(bounded_options(), fair_handler{&bounded_state}) {
    for (fair_state* st : {&mutex_state, &actor_state, &bounded_state, &posted_state}) {
      st->work = work;
      st->latency.reserve(max_latencies);
    }
  }
};

// One run: every sender sends until the shared deadline; thread 0 then reads the state
// (every message has run: each sender's sends returned, and an idle actor's report message
// runs on this thread after them) and reports.
template <class Send, class Settle>
void bm_fair(benchmark::State& state, fair_targets& t, fair_state& st, Send&& send, Settle&& settle) {
  const int me = state.thread_index();
  for (auto _ : state) {
    if (me == 0) {
      st.reset();
      t.sent.store(0, std::memory_order_relaxed);
      t.send_max_ns.store(0, std::memory_order_relaxed);
      t.in_send_max_ns.store(0, std::memory_order_relaxed);
      t.last_send_max_ns.store(0, std::memory_order_relaxed);
      t.done.reset();
      t.reported.reset();
      t.start_ns = now_ns();
      t.deadline.store(t.start_ns + static_cast<std::int64_t>(fair_run_s * 1e9), std::memory_order_release);
    }
    t.started.arrive_and_wait(state.threads());
    const std::int64_t deadline = t.deadline.load(std::memory_order_acquire);
    std::uint64_t sent = 0;
    // The loop's own clock reads time each send: the longest that ended by the deadline, the
    // time inside sends up to the deadline, and the last send's (the backlog's drain, when
    // no sender is left to take it over).
    std::int64_t longest = 0, inside = 0, last = 0;
    for (std::int64_t now = now_ns(), next = 0; now < deadline; now = next) {
      send(fair_msg{me, now});
      ++sent;
      next = now_ns();
      if (next <= deadline) longest = std::max(longest, next - now);
      inside += std::min(next, deadline) - now;
      last = next - now;
    }
    t.sent.fetch_add(sent, std::memory_order_relaxed);  // before the barrier, which orders it
    for (auto [slot, v] : {std::pair{&t.send_max_ns, longest}, std::pair{&t.in_send_max_ns, inside},
                           std::pair{&t.last_send_max_ns, last}}) {
      for (std::int64_t seen = slot->load(std::memory_order_relaxed);
           v > seen && !slot->compare_exchange_weak(seen, v, std::memory_order_relaxed);) {
      }
    }
    t.done.arrive_and_wait(state.threads());
    if (me == 0) t.started.reset();
    if (me != 0) {
      t.reported.arrive_and_wait(state.threads());  // thread 0's result
      // Google Benchmark averages the threads' manual times over all threads' iterations.
      state.SetIterationTime(t.per_message_s.load(std::memory_order_relaxed) * state.threads());
      continue;
    }
    settle();
    const std::int64_t end_ns = now_ns();  // the backlog drained after the deadline included
    std::uint64_t total = 0, least = ~std::uint64_t{0}, most = 0;
    for (int i = 0; i < state.threads(); ++i) {
      const std::uint64_t n = st.per_sender[static_cast<std::size_t>(i)];
      total += n;
      least = std::min(least, n);
      most = std::max(most, n);
    }
    t.per_message_s.store(static_cast<double>(end_ns - t.start_ns) / 1e9 / static_cast<double>(total),
                          std::memory_order_relaxed);
    t.reported.arrive_and_wait(state.threads());  // the others report it too
    state.SetIterationTime(t.per_message_s.load(std::memory_order_relaxed) * state.threads());
    if (total != t.sent.load(std::memory_order_relaxed)) {
      state.SkipWithError("lost or duplicated messages");
      continue;
    }
    const double equal = static_cast<double>(total) / state.threads();
    state.counters["share_min"] = static_cast<double>(least) / equal;
    state.counters["share_max"] = static_cast<double>(most) / equal;
    auto& lat = st.latency;
    const auto at = [&lat](double q) {
      auto k = lat.begin() + static_cast<std::ptrdiff_t>(q * static_cast<double>(lat.size() - 1));
      std::nth_element(lat.begin(), k, lat.end());
      return static_cast<double>(*k);
    };
    state.counters["lat_p50_ns"] = at(0.5);
    state.counters["lat_p99_ns"] = at(0.99);
    state.counters["handled"] = static_cast<double>(total);
    state.counters["post_max_us"] = static_cast<double>(t.send_max_ns.load(std::memory_order_relaxed)) / 1e3;
    state.counters["in_post_max"] =
        static_cast<double>(t.in_send_max_ns.load(std::memory_order_relaxed)) / (fair_run_s * 1e9);
    state.counters["last_post_us"] = static_cast<double>(t.last_send_max_ns.load(std::memory_order_relaxed)) / 1e3;
  }
}

void register_fair(const std::string& workload, fair_targets& t) {
  fair_targets* p = &t;
  const auto add = [&](const char* impl, auto fn) {
    benchmark::RegisterBenchmark((workload + "/" + impl).c_str(), fn)
        ->UseManualTime()
        ->Iterations(1)
        ->Threads(2)
        ->Threads(max_fair_senders);
  };
  add("mutex", [p](benchmark::State& s) {
    bm_fair(
        s, *p, p->mutex_state,
        [p](const fair_msg& m) {
          std::lock_guard lock(p->m);
          p->mutex_state.run(m);
        },
        [] {});
  });
  add("handoff_send", [p](benchmark::State& s) {
    bm_fair(
        s, *p, p->actor_state, [p](const fair_msg& m) { p->actor.send(m); },
        [p] {
          p->actor.send(fair_msg{-1, 0});
        });
  });
  add("handoff_post", [p](benchmark::State& s) {
    bm_fair(
        s, *p, p->posted_state, [p](const fair_msg& m) { p->posted.post([m](fair_state*& st) { st->run(m); }); },
        [p] { p->posted.post([](fair_state*&) {}); });
  });
  add("handoff_send_bounded256", [p](benchmark::State& s) {
    bm_fair(
        s, *p, p->bounded_state, [p](const fair_msg& m) { p->bounded.send(m); },
        [p] {
          p->bounded.send(fair_msg{-1, 0});
        });
  });
}

}  // namespace

int main(int argc, char** argv) {
  handoff::bench::parked_thread idle;  // see parked_thread: before anything is measured

  double ns_per_iteration = 0;
  constexpr std::array<int, 4> work_ns{0, 30, 100, 400};
  std::array<std::uint32_t, 4> iterations{};
  std::string recorded;
  for (std::size_t i = 0; i < work_ns.size(); ++i) {
    iterations[i] = work_ns[i] == 0 ? 0 : handoff::bench::calibrate_work(work_ns[i], &ns_per_iteration);
    recorded += (i == 0 ? "" : ", ") + std::to_string(work_ns[i]) + " ns: " + std::to_string(iterations[i]);
  }

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  handoff::bench::add_machine_context();
  benchmark::AddCustomContext("fanin_work_iterations", recorded);
  benchmark::AddCustomContext("work_ns_per_iteration", std::to_string(ns_per_iteration));
  benchmark::AddCustomContext("parked_thread", "yes (glibc multi-threaded lock paths)");

  // One set of targets per handler work (the work is the handler's state); sender work is
  // the loop's.
  std::array<std::unique_ptr<fan_targets>, 4> targets;
  for (std::size_t h = 0; h < work_ns.size(); ++h) targets[h] = std::make_unique<fan_targets>(iterations[h]);
  for (std::size_t s = 0; s < 3; ++s) {
    for (std::size_t h = 0; h < work_ns.size(); ++h) {
      const std::string workload = "fanin_send" + std::to_string(work_ns[s]) + "_work" + std::to_string(work_ns[h]);
      register_cell(workload, *targets[h], iterations[s]);
    }
  }

  register_batches(*targets[0]);

  std::array<std::unique_ptr<fair_targets>, 4> fair;
  for (std::size_t h = 0; h < work_ns.size(); ++h) {
    fair[h] = std::make_unique<fair_targets>(iterations[h]);
    register_fair("fairness_work" + std::to_string(work_ns[h]), *fair[h]);
  }

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
