// Peer benchmarks: handoff against Boost.Asio strands and CAF 0.17, all in this one binary
// (so that every implementation runs on the same machine, build and run, and their ratios
// compare like with like). Each peer is written the way its own documentation shows.
//
// Every benchmark is registered as "<workload>/<impl>" with impl "handoff", "asio_strand" or
// "caf"; tools/bench_table.py pairs them (ratio = baseline time / handoff time). Counter
// os_threads: the threads that run the workload (senders, io threads, scheduler workers).
//
// 1sender_1actor  One thread sends N trivial increments to one actor; each iteration is one
//                 message (time per message), every implementation gets the same fixed
//                 N = one_to_one_messages. The last iteration, still timed, waits until
//                 every message has run and reads the count, which is checked.
//                   handoff      actor<S>::post. No executor: the sender is the only thread.
//                   asio_strand  boost::asio::post(strand, f) on a strand of an io_context
//                                run by one io thread: 2 threads (sender + io thread).
//                   caf          caf::anon_send of an atom to an event-based stateful actor,
//                                scheduler with scheduler.max-threads = 1: 2 threads (sender +
//                                one worker), as for Asio. The end is a scoped_actor request.
//
// Savina micro-benchmarks (Imam & Sarkar, "Savina - An Actor Benchmark Suite", AGERE! 2014,
// github.com/shamsimam/savina). One iteration is one complete run, actor creation included
// (as in Savina's runIteration); the actor system / io threads are set up outside the timed
// loop. Every run checks its result. Message counts: the Savina defaults, unscaled (scale
// factor 1): with them the whole binary takes about 50 s with --benchmark_repetitions=3 on
// 2 loaded cores, under the ~4 minute budget, so nothing had to be scaled down. To scale
// down on a slower machine, change the constants under "Scale" (the context records them).
//   pingpong    Savina N = 40000 pings; here N = 40000. Ping sends ping, pong answers
//               pong, repeated N times, then ping sends stop (2N + 1 messages). Savina's
//               extra self-message per round in the ping actor is left out, in both.
//   counting    Savina N = 1000000; here N = 1000000. A producer actor sends N increments
//               to a counter actor, then a retrieve; the counter answers with its value.
//               Counters: peak_rss_mb (the process's peak resident memory during the runs)
//               and, for handoff, bytes_per_queued_msg (heap growth with all N queued).
//   threadring  Savina N = 100 actors, R = 100000 hops; here the same. A token travels
//               R hops around the ring, then an exit message goes once around (T hops).
//   fjthroughput Savina N = 10000 messages per actor, A = 60 actors; here the same.
//               The driver sends one message to each actor, N times over; each message
//               computes sin(theta)^2 (Savina's performComputation(37.2)).
//
// Where the actors run:
//   handoff  on the benchmark thread, for all four: no handoff::thread_pool is needed,
//            because a send from inside a handler that finds its target idle queues the
//            target on the sending thread's run queue, drained after the current handler
//            (docs/runtime.md), so every run completes on the thread
//            that posted its first message. 1 thread.
//   caf      caf::actor_system with the default configuration: work-stealing scheduler,
//            max-threads = max(4, hardware concurrency), plus the benchmark thread that
//            spawns the actors and waits in actor_system::await_all_actors_done() (Savina's
//            awaitTermination); every actor quits at the end of its protocol.
//
// scaling_1actor, scaling_1024actors  S = 1, 2, 4, 8, 16 sender threads send 2^20 trivial
//               increments in all (2^20 / S each) to one target, or to uniformly random
//               ones of 1024 targets (one index table, a per-thread offset). One iteration is one run: the threads are
//               started, joined, and the run ends when every message has run. Time per
//               message, all senders together; the totals are checked after the runs.
//                 handoff  actor<S>::post from the sender threads (no other thread).
//                 mutex    a std::mutex per target, locked around the increment.
//                 caf      caf::anon_send to event-based counters, default scheduler; the
//                          end of a run is seen through one shared atomic counter.
//               With more senders than cores, the rows measure the scheduler as much as
//               the primitive: the machine's core count is in the page's machine line.
//
// fib25         Recursive Fibonacci with an actor per call (150,049 actors per run): each call
//               actor sends "start" to two new child actors, each child answers its parent
//               with its value, and an actor whose answer is sent is destroyed. What it
//               measures is memory as much as time: how many actors are alive at once, which
//               depends on the order the scheduler runs what a handler made runnable.
//               Counters: peak_live_actors, rss_growth_mb (VmHWM during the runs minus the
//               resident memory before them, after malloc_trim), peak_live_vs_depth_first
//               (peak live actors over the depth-first reference's, for handoff). CAF is
//               left out: spawning an actor per call took about 14 s per run here.
//                 handoff               actor<fib_call>, new/delete per call, one thread.
//                 depth_first_reference the same program (same message order per actor) on a
//                                       hand-written single-threaded scheduler with a LIFO
//                                       stack of pending messages: the depth-first run that
//                                       bounds how few actors can be alive at once.
//
// mem_idle_10k  Bytes per idle actor: heap in use (mallinfo2, all arenas) before and after
//               creating 10000 actors that hold an int, divided by 10000. Not timed.
//                 handoff_actor  handoff::actor<int>[10000] (sizeof + what the constructor
//                                allocates: nothing), as actor_bench's mem_idle_100k.
//                 caf            10000 caf::stateful_actor<int state> spawned with one message
//                                handler, each measured once it has initialised (its behaviour
//                                is installed) and waits idle for a message. The caf::actor
//                                handles (8 bytes each) sit in a vector reserved beforehand,
//                                outside the delta; the actor system is created beforehand.
#include <utility>  // before the Asio headers (GCC 12, C++20)

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/version.hpp>
#include <caf/all.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <future>
#include <malloc.h>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_support.hpp"
#include "handoff/actor.hpp"

namespace {

using handoff::bench::heap_in_use;

// ---------------------------------------------------------------------------------------
// Scale.

constexpr benchmark::IterationCount one_to_one_messages = 1 << 22;  // same for every impl
constexpr int pingpong_n = 40000;                                   // Savina: 40000
constexpr int counting_n = 1000000;                                 // Savina: 1000000
constexpr int threadring_actors = 100;                              // Savina: 100
constexpr int threadring_hops = 100000;                             // Savina: 100000
constexpr int fj_actors = 60;                                       // Savina: 60
constexpr int fj_messages = 10000;                                  // Savina: 10000
constexpr std::int64_t scaling_messages = 1 << 20;                  // per run, all senders together
constexpr double savina_min_time_s = 1.0;                           // per instance and repetition

// Savina's fork-join payload. theta arrives in every message (a runtime value), and the
// volatile round trip stops the compiler from folding or hoisting the sine out of the loop.
// (Not benchmark::DoNotOptimize: with GCC 12, libbenchmark 1.7.1's "+m,r" constraint
// zeroed a double here.)
double fj_theta = 37.2;  // non-const: not a compile-time constant
inline double perform_computation(double theta) {
  volatile double opaque = theta;
  const double s = std::sin(opaque);
  const double res = s * s;
  if (res <= 0) std::abort();  // "unrealistic res value", as in Savina
  return res;
}

// Peak resident memory of the process since the last reset_peak_rss(), in bytes (Linux:
// VmHWM; writing 5 to clear_refs resets it). 0 where that is not available.
void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }
std::size_t peak_rss() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoul(line.substr(6)) * 1024;  // in kB
  }
  return 0;
}
void skip_unless(benchmark::State& state, bool ok, const std::string& what) {
  if (!ok) state.SkipWithError(what.c_str());
}

// CAF atoms (0.17: atom_constant; at most 10 characters).
using inc_atom = caf::atom_constant<caf::atom("inc")>;
using start_atom = caf::atom_constant<caf::atom("start")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
using retrieve_atom = caf::atom_constant<caf::atom("retrieve")>;
using token_atom = caf::atom_constant<caf::atom("token")>;
using ring_exit_atom = caf::atom_constant<caf::atom("ring_exit")>;

// ---------------------------------------------------------------------------------------
// 1 sender -> 1 actor.

struct count_state {
  std::uint64_t n = 0;
};

// The timed loop: send() per iteration; in the last iteration, finish() waits until every
// message has run and returns the count.
template <class Send, class Finish>
void one_to_one(benchmark::State& state, int threads, Send&& send, Finish&& finish) {
  const benchmark::IterationCount last = state.max_iterations;
  benchmark::IterationCount i = 0;
  std::uint64_t ran = 0;
  for (auto _ : state) {
    send();
    if (++i == last) ran = finish();
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["os_threads"] = threads;
  skip_unless(
      state, ran == static_cast<std::uint64_t>(state.iterations()),
      "lost or duplicated messages: ran " + std::to_string(ran) + ", sent " + std::to_string(state.iterations()));
}

void bm_1to1_handoff(benchmark::State& state) {
  handoff::actor<count_state> a;
  one_to_one(
      state, 1, [&] { a.post([](count_state& s) { ++s.n; }); },
      [&] { return a.ask([](count_state& s) { return s.n; }).get(); });
}

void bm_1to1_asio(benchmark::State& state) {
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::thread runner([&io] { io.run(); });
  auto strand = boost::asio::make_strand(io);
  count_state s;  // touched only by handlers on the strand
  one_to_one(
      state, 2, [&] { boost::asio::post(strand, [&s] { ++s.n; }); },
      [&] {
        std::promise<std::uint64_t> p;
        boost::asio::post(strand, [&] { p.set_value(s.n); });
        return p.get_future().get();
      });
  guard.reset();
  runner.join();
}

caf::behavior caf_counter(caf::stateful_actor<count_state>* self) {
  return {
      [=](inc_atom) { ++self->state.n; },
      [=](caf::get_atom) { return self->state.n; },
  };
}

void bm_1to1_caf(benchmark::State& state) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", 1);  // one worker: sender + 1 thread, as for Asio
  caf::actor_system sys{cfg};
  auto counter = sys.spawn(caf_counter);
  caf::scoped_actor self{sys};
  one_to_one(
      state, 2, [&] { caf::anon_send(counter, inc_atom::value); },
      [&] {
        // Enqueued after every increment (one mailbox, FIFO for normal-priority messages).
        std::uint64_t n = 0;
        self->request(counter, caf::infinite, caf::get_atom::value)
            .receive([&](std::uint64_t v) { n = v; }, [&](caf::error&) { n = ~std::uint64_t{0}; });
        return n;
      });
  caf::anon_send_exit(counter, caf::exit_reason::user_shutdown);
}

// ---------------------------------------------------------------------------------------
// Scaling: S sender threads -> 1 target, and -> 1024 targets (uniform), trivial work.

// One run: `senders` threads, each sending its share of scaling_messages trivial
// increments to uniformly random targets (one table, a per-thread offset); the run ends when
// every message has run (`wait_all`). The totals are read and checked outside the runs.
template <class Send, class Total, class WaitAll>
void scaling(benchmark::State& state, int os_threads, Send&& send, Total&& total, WaitAll&& wait_all) {
  const int senders = static_cast<int>(state.range(0));
  const std::size_t targets = static_cast<std::size_t>(state.range(1));
  const std::int64_t per_sender = scaling_messages / senders;
  const std::uint64_t sent = static_cast<std::uint64_t>(per_sender) * static_cast<std::uint64_t>(senders);
  // Uniformly random targets: senders walking the targets in order would fall into step
  // behind each other and measure that convoy instead.
  std::vector<std::uint32_t> index(std::size_t{1} << 16);
  std::mt19937 rng(42);
  for (auto& i : index) i = static_cast<std::uint32_t>(rng() % targets);
  const std::uint64_t before = total();
  std::uint64_t expected = before;
  for (auto _ : state) {
    std::vector<std::thread> threads;
    threads.reserve(static_cast<std::size_t>(senders));
    for (int t = 0; t < senders; ++t) {
      threads.emplace_back([&, t] {
        std::size_t at = static_cast<std::size_t>(t) * 7919;
        for (std::int64_t i = 0; i < per_sender; ++i) send(index[at++ & (index.size() - 1)]);
      });
    }
    for (auto& th : threads) th.join();
    expected += sent;
    wait_all(expected);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(sent));
  state.counters["senders"] = senders;
  state.counters["os_threads"] = os_threads + senders;
  const std::uint64_t after = total();
  skip_unless(state, after == expected,
              "lost or duplicated messages: ran " + std::to_string(after - before) + ", sent " +
                  std::to_string(expected - before));
}

void bm_scaling_handoff(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(1));
  std::unique_ptr<handoff::actor<count_state>[]> actors { new handoff::actor<count_state>[ n ] };
  auto total = [&] {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) sum += actors[i].ask([](count_state& s) { return s.n; }).get();
    return sum;
  };
  // A post returns once its message is queued or run; after the senders joined, every
  // owner has drained and released (an owner is a sender, which returns only then).
  scaling(
      state, 0, [&](std::size_t t) { actors[t].post([](count_state& s) { ++s.n; }); }, total, [](std::uint64_t) {});
}

void bm_scaling_mutex(benchmark::State& state) {
  struct locked {
    std::mutex m;
    std::uint64_t n = 0;
  };
  const auto n = static_cast<std::size_t>(state.range(1));
  std::unique_ptr<locked[]> targets{new locked[n]};
  auto total = [&] {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < n; ++i) {
      std::lock_guard g(targets[i].m);
      sum += targets[i].n;
    }
    return sum;
  };
  scaling(
      state, 0,
      [&](std::size_t t) {
        std::lock_guard g(targets[t].m);
        ++targets[t].n;
      },
      total, [](std::uint64_t) {});
}

// Each CAF counter also adds to one shared atomic, so that the end of a run is seen without
// a message per actor.
struct caf_scaling_state {
  std::uint64_t n = 0;
  std::atomic<std::uint64_t>* ran = nullptr;
};
caf::behavior caf_scaling_counter(caf::stateful_actor<caf_scaling_state>* self, std::atomic<std::uint64_t>* ran) {
  self->state.ran = ran;
  return {
      [=](inc_atom) {
        ++self->state.n;
        self->state.ran->fetch_add(1, std::memory_order_release);
      },
  };
}

void bm_scaling_caf(benchmark::State& state) {
  caf::actor_system_config cfg;  // default scheduler: max(4, cores) workers
  caf::actor_system sys{cfg};
  const auto n = static_cast<std::size_t>(state.range(1));
  std::atomic<std::uint64_t> ran{0};
  std::vector<caf::actor> actors;
  actors.reserve(n);
  for (std::size_t i = 0; i < n; ++i) actors.push_back(sys.spawn(caf_scaling_counter, &ran));
  const int workers = static_cast<int>(sys.scheduler().num_workers());
  scaling(
      state, workers, [&](std::size_t t) { caf::anon_send(actors[t], inc_atom::value); },
      [&] { return ran.load(std::memory_order_acquire); },
      [&](std::uint64_t expected) {
        while (ran.load(std::memory_order_acquire) < expected) std::this_thread::yield();
      });
  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
}

// ---------------------------------------------------------------------------------------
// Savina, handoff: actor<State>::post, every run on the benchmark thread (see the top).

// Runs one complete Savina run per iteration; run() returns true if its result checked.
template <class Run>
void savina(benchmark::State& state, std::int64_t messages_per_run, int threads, Run&& run) {
  bool ok = true;
  reset_peak_rss();
  for (auto _ : state) ok = run() && ok;
  // The process's resident memory at its peak during these runs (what earlier benchmarks
  // left resident included, the same for both implementations).
  state.counters["peak_rss_mb"] = static_cast<double>(peak_rss()) / (1 << 20);
  state.SetItemsProcessed(state.iterations() * messages_per_run);
  state.counters["messages_per_run"] = static_cast<double>(messages_per_run);
  state.counters["os_threads"] = threads;
  skip_unless(state, ok, "a run returned a wrong result");
}

// PingPong.
struct pp_ping;
struct pp_pong {
  std::uint64_t pongs = 0;
  bool stopped = false;
};
struct pp_ping {
  pp_ping(handoff::actor<pp_ping>* self_, handoff::actor<pp_pong>* pong_, int n, std::promise<int>* done_)
      : self(self_), pong(pong_), left(n), done(done_) {}
  handoff::actor<pp_ping>* self;  // the sender pong answers to
  handoff::actor<pp_pong>* pong;
  int left;                 // pings still to send
  std::promise<int>* done;  // set to the number of pongs received, at the end
  int received = 0;
  void send_ping();
};

void pp_ping::send_ping() {
  --left;
  pong->post([from = self](pp_pong& p) {
    ++p.pongs;
    from->post([](pp_ping& s) {  // the pong message
      ++s.received;
      if (s.left > 0) {
        s.send_ping();
      } else {
        s.pong->post([](pp_pong& p) { p.stopped = true; });
        s.done->set_value(s.received);
      }
    });
  });
}

bool pingpong_handoff_run() {
  std::promise<int> done;
  auto received = done.get_future();
  handoff::actor<pp_pong> pong;
  handoff::actor<pp_ping> ping(&ping, &pong, pingpong_n, &done);
  ping.post([](pp_ping& s) { s.send_ping(); });  // start
  const int pings_answered = received.get();
  const auto [pongs, stopped] = pong.ask([](pp_pong& p) { return std::pair(p.pongs, p.stopped); }).get();
  return pings_answered == pingpong_n && pongs == pingpong_n && stopped;
}

// Counting.
struct cnt_counter {
  std::uint64_t n = 0;
};
struct cnt_producer {
  cnt_producer(handoff::actor<cnt_counter>* c, std::promise<std::uint64_t>* r) : counter(c), result(r) {}
  handoff::actor<cnt_counter>* counter;
  std::promise<std::uint64_t>* result;  // set to the counter's answer
};

double counting_bytes_per_queued = 0;  // heap per queued increment, from the last unbounded run
// The counter's largest backlog and the heap's largest growth while producing, measured by
// the last Counting run (either form).
struct counting_peak {
  std::uint64_t queued = 0;
  double heap_growth = 0;  // bytes
};
counting_peak counting_last;

bool counting_handoff_run() {
  std::promise<std::uint64_t> answer;
  auto result = answer.get_future();
  handoff::actor<cnt_counter> counter;
  handoff::actor<cnt_producer> producer(&counter, &answer);
  producer.post([&producer](cnt_producer& p) {  // start
    const std::size_t before = heap_in_use();
    for (int i = 0; i < counting_n; ++i) p.counter->post([](cnt_counter& c) { ++c.n; });
    // Every increment is queued now (the counter runs after this handler). Heap growth:
    // free slabs kept from an earlier run are reused unseen, so this reads below the
    // 32 bytes (and a 64-byte header per 16 KiB slab) a queued increment occupies.
    counting_last = {p.counter->pending(), static_cast<double>(heap_in_use() - before)};
    counting_bytes_per_queued = counting_last.heap_growth / counting_n;
    p.counter->post([&producer](cnt_counter& c) {  // retrieve: answer to the producer
      producer.post([n = c.n](cnt_producer& p) { p.result->set_value(n); });
    });
  });
  return result.get() == counting_n;
}

// Counting with backpressure: the counter's mailbox holds at most counting_capacity
// messages. The producer sends with try_post until the mailbox is full, then defers the
// rest of its work to itself, which ends its turn so that the counter (won by this thread,
// queued on its run queue) drains first.
constexpr std::uint32_t counting_capacity = 1024;

bool counting_bounded_handoff_run() {
  struct producer_state {
    producer_state(handoff::actor<cnt_counter>* c, std::promise<std::uint64_t>* r) : counter(c), result(r) {}
    handoff::actor<cnt_counter>* counter;
    std::promise<std::uint64_t>* result;
    int sent = 0;
    std::size_t heap_before = heap_in_use();
  };
  using producer_actor = handoff::actor<producer_state>;
  std::promise<std::uint64_t> answer;
  auto result = answer.get_future();
  handoff::actor_options o;
  o.capacity = counting_capacity;
  handoff::actor<cnt_counter> counter{std::move(o)};
  producer_actor producer{&counter, &answer};
  counting_last = {};
  struct step {
    void operator()(producer_state& p, producer_actor& self) const {
      while (p.sent < counting_n && p.counter->try_post([](cnt_counter& c) { ++c.n; })) ++p.sent;
      counting_last.queued = std::max(counting_last.queued, p.counter->pending());
      counting_last.heap_growth =
          std::max(counting_last.heap_growth, static_cast<double>(heap_in_use()) - static_cast<double>(p.heap_before));
      if (p.sent < counting_n) return self.defer(step{});  // full: the counter runs first
      p.counter->post([&self](cnt_counter& c) { self.post([n = c.n](producer_state& q) { q.result->set_value(n); }); });
    }
  };
  producer.post(step{});
  return result.get() == counting_n;
}

void report_counting_peak(benchmark::State& s) {
  s.counters["peak_queued_msgs"] = static_cast<double>(counting_last.queued);
  s.counters["peak_heap_growth_kb"] = counting_last.heap_growth / 1024;
}

// ThreadRing.
struct ring_run {
  std::promise<void> done;
  int pings = 0;  // token messages received
  int exits = 0;  // exit messages received
};
struct ring_node {
  handoff::actor<ring_node>* next = nullptr;
  ring_run* run = nullptr;
  void on_token(int left);
  void on_exit(int left);
};

void ring_node::on_token(int left) {
  ++run->pings;
  if (left > 0) {
    next->post([left](ring_node& n) { n.on_token(left - 1); });
  } else {
    next->post([](ring_node& n) { n.on_exit(threadring_actors); });
  }
}

void ring_node::on_exit(int left) {
  ++run->exits;
  if (left > 1) {
    next->post([left](ring_node& n) { n.on_exit(left - 1); });
  } else {
    run->done.set_value();
  }
}

bool threadring_handoff_run() {
  ring_run run;
  auto done = run.done.get_future();
  std::unique_ptr<handoff::actor<ring_node>[]> ring(new handoff::actor<ring_node>[threadring_actors]);
  for (int i = 0; i < threadring_actors; ++i) {  // Savina's DataMessage: who is next
    ring[i].post([next = &ring[(i + 1) % threadring_actors], r = &run](ring_node& n) {
      n.next = next;
      n.run = r;
    });
  }
  ring[0].post([](ring_node& n) { n.on_token(threadring_hops); });
  done.get();
  return run.pings == threadring_hops + 1 && run.exits == threadring_actors;
}

// Fork-join throughput.
struct fj_run {
  std::atomic<int> remaining{fj_actors};
  std::promise<void> done;
  std::atomic<std::uint64_t> processed{0};
};
struct fj_worker {
  explicit fj_worker(fj_run* r) : run(r) {}
  fj_run* run;
  int processed = 0;
  double sum = 0;
};

bool fjthroughput_handoff_run() {
  fj_run run;
  auto done = run.done.get_future();
  std::vector<std::unique_ptr<handoff::actor<fj_worker>>> actors;
  actors.reserve(fj_actors);
  for (int i = 0; i < fj_actors; ++i) actors.push_back(std::make_unique<handoff::actor<fj_worker>>(&run));
  const double theta = fj_theta;
  for (int m = 0; m < fj_messages; ++m) {
    for (auto& a : actors) {
      a->post([theta](fj_worker& w) {
        w.sum += perform_computation(theta);
        if (++w.processed == fj_messages) {
          w.run->processed.fetch_add(static_cast<std::uint64_t>(w.processed), std::memory_order_relaxed);
          if (w.run->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) w.run->done.set_value();
        }
      });
    }
  }
  done.get();
  return run.processed.load() == static_cast<std::uint64_t>(fj_actors) * fj_messages;
}

// ---------------------------------------------------------------------------------------
// Savina, CAF 0.17: event-based actors, default scheduler; each run ends when every actor
// has quit (actor_system::await_all_actors_done, Savina's awaitTermination).

// PingPong.
struct caf_ping_state {
  int left = 0;
  int received = 0;
};
caf::behavior caf_pp_pong(caf::stateful_actor<count_state>* self, std::uint64_t* pongs) {
  return {
      [=](ping_atom) {
        ++self->state.n;
        return pong_atom::value;  // answered to the sender
      },
      [=](stop_atom) {
        *pongs = self->state.n;
        self->quit();
      },
  };
}
caf::behavior caf_pp_ping(caf::stateful_actor<caf_ping_state>* self, caf::actor pong, int n, int* received) {
  self->state.left = n;
  return {
      [=](start_atom) {
        --self->state.left;
        self->send(pong, ping_atom::value);
      },
      [=](pong_atom) {
        ++self->state.received;
        if (self->state.left > 0) {
          --self->state.left;
          self->send(pong, ping_atom::value);
        } else {
          self->send(pong, stop_atom::value);
          *received = self->state.received;
          self->quit();
        }
      },
  };
}

// Counting.
caf::behavior caf_cnt_counter(caf::stateful_actor<count_state>* self) {
  return {
      [=](inc_atom) { ++self->state.n; },
      [=](retrieve_atom) {
        self->quit();
        return self->state.n;  // answered to the producer
      },
  };
}
caf::behavior caf_cnt_producer(caf::event_based_actor* self, caf::actor counter, int n, std::uint64_t* result) {
  return {
      [=](start_atom) {
        for (int i = 0; i < n; ++i) self->send(counter, inc_atom::value);
        self->send(counter, retrieve_atom::value);
      },
      [=](std::uint64_t count) {
        *result = count;
        self->quit();
      },
  };
}

// ThreadRing.
struct caf_ring_state {
  caf::actor next;
};
caf::behavior caf_ring_node(caf::stateful_actor<caf_ring_state>* self, int ring_size, std::atomic<int>* pings,
                            std::atomic<int>* exits) {
  return {
      [=](caf::actor next) { self->state.next = std::move(next); },  // Savina's DataMessage
      [=](token_atom, int left) {
        pings->fetch_add(1, std::memory_order_relaxed);
        if (left > 0) {
          self->send(self->state.next, token_atom::value, left - 1);
        } else {
          self->send(self->state.next, ring_exit_atom::value, ring_size);
        }
      },
      [=](ring_exit_atom, int left) {
        exits->fetch_add(1, std::memory_order_relaxed);
        if (left > 1) self->send(self->state.next, ring_exit_atom::value, left - 1);
        self->quit();
      },
  };
}

// Fork-join throughput.
struct caf_fj_state {
  int processed = 0;
  double sum = 0;
};
caf::behavior caf_fj_worker(caf::stateful_actor<caf_fj_state>* self, int n, std::atomic<std::uint64_t>* processed) {
  return {
      [=](double theta) {
        self->state.sum += perform_computation(theta);
        if (++self->state.processed == n) {
          processed->fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
          self->quit();
        }
      },
  };
}

bool pingpong_caf_run(caf::actor_system& sys) {
  std::uint64_t pongs = 0;
  int received = 0;
  {
    auto pong = sys.spawn(caf_pp_pong, &pongs);
    auto ping = sys.spawn(caf_pp_ping, pong, pingpong_n, &received);
    caf::anon_send(ping, start_atom::value);
  }
  sys.await_all_actors_done();
  return received == pingpong_n && pongs == pingpong_n;
}

bool counting_caf_run(caf::actor_system& sys) {
  std::uint64_t result = 0;
  {
    auto counter = sys.spawn(caf_cnt_counter);
    auto producer = sys.spawn(caf_cnt_producer, counter, counting_n, &result);
    caf::anon_send(producer, start_atom::value);
  }
  sys.await_all_actors_done();
  return result == counting_n;
}

bool threadring_caf_run(caf::actor_system& sys) {
  std::atomic<int> pings{0}, exits{0};
  {
    std::vector<caf::actor> ring;
    ring.reserve(threadring_actors);
    for (int i = 0; i < threadring_actors; ++i)
      ring.push_back(sys.spawn(caf_ring_node, threadring_actors, &pings, &exits));
    for (int i = 0; i < threadring_actors; ++i) caf::anon_send(ring[i], ring[(i + 1) % threadring_actors]);
    caf::anon_send(ring[0], token_atom::value, threadring_hops);
  }
  sys.await_all_actors_done();
  return pings.load() == threadring_hops + 1 && exits.load() == threadring_actors;
}

bool fjthroughput_caf_run(caf::actor_system& sys) {
  std::atomic<std::uint64_t> processed{0};
  {
    std::vector<caf::actor> actors;
    actors.reserve(fj_actors);
    for (int i = 0; i < fj_actors; ++i) actors.push_back(sys.spawn(caf_fj_worker, fj_messages, &processed));
    const double theta = fj_theta;
    for (int m = 0; m < fj_messages; ++m) {
      for (auto& a : actors) caf::anon_send(a, theta);
    }
  }
  sys.await_all_actors_done();
  return processed.load() == static_cast<std::uint64_t>(fj_actors) * fj_messages;
}

// One CAF benchmark: a default actor system per benchmark run, created outside the timing.
template <class Run>
void savina_caf(benchmark::State& state, std::int64_t messages_per_run, Run run) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  const int threads = 1 + static_cast<int>(sys.scheduler().num_workers());
  savina(state, messages_per_run, threads, [&] { return run(sys); });
}

// ---------------------------------------------------------------------------------------
// fib25: an actor per call (see the top).

constexpr int fib_n = 25;
constexpr long fib_expected = 75025;
constexpr std::int64_t fib_actors = 150049;  // calls of fib(25)

std::size_t current_rss() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6)) * 1024;  // in kB
  }
  return 0;
}

struct fib_stats {
  long live = 0;
  long peak = 0;
  void born() { peak = std::max(peak, ++live); }
};

// handoff: the state names its own actor type (its parent).
struct fib_call {
  fib_call(handoff::actor<fib_call>* p, int k, long* r, fib_stats* st) : parent(p), n(k), result(r), stats(st) {}
  handoff::actor<fib_call>* parent;
  int n;
  long* result;
  fib_stats* stats;
  long sum = 0;
  int pending = 2;
};

void fib_answer(fib_call& s, handoff::actor<fib_call>& self, long value) {
  if (s.parent == nullptr) {
    *s.result = value;
    return;
  }
  s.parent->post([value](fib_call& p, handoff::actor<fib_call>& parent) {
    p.sum += value;
    if (--p.pending == 0) fib_answer(p, parent, p.sum);
  });
  --s.stats->live;
  delete &self;  // from its own last handler: nothing queued behind it
}

void fib_start(fib_call& s, handoff::actor<fib_call>& self) {
  if (s.n < 2) return fib_answer(s, self, s.n);
  for (int k : {1, 2}) {
    s.stats->born();
    (new handoff::actor<fib_call>(&self, s.n - k, s.result, s.stats))->post(fib_start);
  }
}

long fib_handoff_run(fib_stats& stats) {
  long result = 0;
  stats.born();
  handoff::actor<fib_call> root(nullptr, fib_n, &result, &stats);
  root.post(fib_start);
  --stats.live;
  return result;
}

// The depth-first reference: the same program, its pending messages on a LIFO stack.
long fib_depth_first_run(fib_stats& stats) {
  struct call {
    call(call* p, int k) : parent(p), n(k) {}
    call* parent;
    int n;
    long sum = 0;
    int pending = 2;
  };
  struct msg {
    call* to;
    bool start;
    long value;
  };
  std::vector<msg> stack;
  long result = 0;
  auto answer = [&](call* c, long value) {
    if (c->parent == nullptr) {
      result = value;
    } else {
      stack.push_back(msg{c->parent, false, value});
    }
    --stats.live;
    delete c;
  };
  stats.born();
  stack.push_back(msg{new call{nullptr, fib_n}, true, 0});
  while (!stack.empty()) {
    const msg m = stack.back();
    stack.pop_back();
    call* c = m.to;
    if (!m.start) {
      c->sum += m.value;
      if (--c->pending == 0) answer(c, c->sum);
    } else if (c->n < 2) {
      answer(c, c->n);
    } else {
      // Pushed in reverse so that the first child runs first, as handoff runs them.
      stats.born();
      stats.born();
      stack.push_back(msg{new call{c, c->n - 2}, true, 0});
      stack.push_back(msg{new call{c, c->n - 1}, true, 0});
    }
  }
  return result;
}

template <class Run>
void fib_bench(benchmark::State& state, int threads, Run run) {
  long peak_live = 0;
  bool ok = true;
  malloc_trim(0);
  const std::size_t rss_before = current_rss();
  reset_peak_rss();
  for (auto _ : state) {
    fib_stats stats;
    ok = run(stats) == fib_expected && stats.live == 0 && ok;
    peak_live = std::max(peak_live, stats.peak);
  }
  const std::size_t hwm = peak_rss();
  state.counters["peak_live_actors"] = static_cast<double>(peak_live);
  state.counters["rss_growth_mb"] = static_cast<double>(hwm > rss_before ? hwm - rss_before : 0) / (1 << 20);
  state.counters["os_threads"] = threads;
  state.SetItemsProcessed(state.iterations() * fib_actors);
  skip_unless(state, ok, "a run returned a wrong result or left actors alive");
}

void bm_fib_handoff(benchmark::State& state) {
  fib_bench(state, 1, fib_handoff_run);
  fib_stats reference;
  fib_depth_first_run(reference);
  state.counters["peak_live_vs_depth_first"] = state.counters["peak_live_actors"] / static_cast<double>(reference.peak);
}
void bm_fib_depth_first(benchmark::State& state) { fib_bench(state, 1, fib_depth_first_run); }
// ---------------------------------------------------------------------------------------
// Bytes per idle actor: handoff against CAF.

constexpr std::size_t idle_actors = 10000;

// Heap bytes in use (arena + mmapped chunks), all arenas (CAF's workers allocate in theirs).

void report_idle_bytes(benchmark::State& state, double per_actor) {
  state.counters["bytes_per_actor"] = per_actor;
  state.SetItemsProcessed(state.iterations() * static_cast<benchmark::IterationCount>(idle_actors));
}

void bm_idle_handoff(benchmark::State& state) {
  double per_actor = 0;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    std::unique_ptr<handoff::actor<int>[]> actors(new handoff::actor<int>[idle_actors]);
    const std::size_t after = heap_in_use();
    benchmark::DoNotOptimize(actors.get());
    per_actor = static_cast<double>(after - before) / static_cast<double>(idle_actors);
  }
  state.counters["sizeof"] = static_cast<double>(sizeof(handoff::actor<int>));
  report_idle_bytes(state, per_actor);
}

struct idle_state {
  int n = 0;
};

caf::behavior caf_idle_actor(caf::stateful_actor<idle_state>* self, std::atomic<std::size_t>* started) {
  caf::behavior b{
      [=](inc_atom) { ++self->state.n; },
  };
  started->fetch_add(1, std::memory_order_release);
  return b;
}

void bm_idle_caf(benchmark::State& state) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  std::vector<caf::actor> actors;
  actors.reserve(idle_actors);
  double per_actor = 0;
  for (auto _ : state) {  // the last iteration's value is reported (the first warms CAF up)
    std::atomic<std::size_t> started{0};
    const std::size_t before = heap_in_use();
    for (std::size_t i = 0; i < idle_actors; ++i) actors.push_back(sys.spawn(caf_idle_actor, &started));
    // Spawned actors initialise on the scheduler's workers: wait until every behaviour is
    // built, then a little longer for the workers to finish the initialisation jobs.
    while (started.load(std::memory_order_acquire) < idle_actors) std::this_thread::yield();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::size_t after = heap_in_use();
    per_actor = static_cast<double>(after - before) / static_cast<double>(idle_actors);
    for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    actors.clear();  // keeps the capacity: the next iteration's handles allocate nothing
    sys.await_all_actors_done();
  }
  report_idle_bytes(state, per_actor);
}

template <class F>
benchmark::internal::Benchmark* add(const std::string& name, F&& fn) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))->UseRealTime();
}

}  // namespace

int main(int argc, char** argv) {
  handoff::bench::parked_thread idle;

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  handoff::bench::add_machine_context();
  benchmark::AddCustomContext("parked_thread", "yes (glibc multi-threaded paths)");
  benchmark::AddCustomContext("caf_version", std::to_string(CAF_MAJOR_VERSION) + "." +
                                                 std::to_string(CAF_MINOR_VERSION) + "." +
                                                 std::to_string(CAF_PATCH_VERSION));
  benchmark::AddCustomContext("boost_version", BOOST_LIB_VERSION);
  benchmark::AddCustomContext("one_to_one_messages", std::to_string(one_to_one_messages));
  benchmark::AddCustomContext("savina_scale", "pingpong N=" + std::to_string(pingpong_n) +
                                                  " (Savina 40000); counting N=" + std::to_string(counting_n) +
                                                  " (1000000); threadring N=" + std::to_string(threadring_actors) +
                                                  " R=" + std::to_string(threadring_hops) +
                                                  " (100, 100000); fjthroughput A=" + std::to_string(fj_actors) +
                                                  " N=" + std::to_string(fj_messages) + " (60, 10000)");

  // 1 sender -> 1 actor: the same fixed message count for every implementation.
  add("1sender_1actor/handoff", bm_1to1_handoff)->Iterations(one_to_one_messages);
  add("1sender_1actor/asio_strand", bm_1to1_asio)->Iterations(one_to_one_messages);
  add("1sender_1actor/caf", bm_1to1_caf)->Iterations(one_to_one_messages);

  // Savina. Messages per run, for items/s: every message any actor receives.
  constexpr std::int64_t pingpong_msgs = 2LL * pingpong_n + 2;  // start, N pings, N pongs, stop
  constexpr std::int64_t counting_msgs = counting_n + 3LL;      // start, N increments, retrieve, result
  constexpr std::int64_t threadring_msgs = threadring_actors + threadring_hops + 1LL + threadring_actors;
  constexpr std::int64_t fj_msgs = static_cast<std::int64_t>(fj_actors) * fj_messages;

  struct savina_workload {
    const char* name;
    std::int64_t messages;
    bool (*handoff_run)();
    bool (*caf_run)(caf::actor_system&);
  };
  for (const savina_workload& w :
       {savina_workload{"pingpong", pingpong_msgs, pingpong_handoff_run, pingpong_caf_run},
        savina_workload{"counting", counting_msgs, counting_handoff_run, counting_caf_run},
        savina_workload{"threadring", threadring_msgs, threadring_handoff_run, threadring_caf_run},
        savina_workload{"fjthroughput", fj_msgs, fjthroughput_handoff_run, fjthroughput_caf_run}}) {
    add(std::string(w.name) + "/handoff", [w](benchmark::State& s) {
      savina(s, w.messages, 1, w.handoff_run);
      if (w.handoff_run == counting_handoff_run) {
        s.counters["bytes_per_queued_msg"] = counting_bytes_per_queued;
        report_counting_peak(s);
      }
    })->MinTime(savina_min_time_s);
    if (w.handoff_run == counting_handoff_run) {
      add(std::string(w.name) + "/handoff_bounded1024", [w](benchmark::State& s) {
        savina(s, w.messages, 1, counting_bounded_handoff_run);
        report_counting_peak(s);
      })->MinTime(savina_min_time_s);
    }
    add(std::string(w.name) + "/caf", [w](benchmark::State& s) {
      savina_caf(s, w.messages, w.caf_run);
    })->MinTime(savina_min_time_s);
  }

  // Scaling: 1..16 sender threads, to 1 target and to 1024 (time per message, all senders).
  for (const std::int64_t targets : {1, 1024}) {
    const std::string w = targets == 1 ? "scaling_1actor" : "scaling_1024actors";
    for (auto [impl, fn] : {std::pair{"handoff", &bm_scaling_handoff}, std::pair{"mutex", &bm_scaling_mutex},
                            std::pair{"caf", &bm_scaling_caf}}) {
      auto* b = add(w + "/" + impl, fn)->ArgNames({"senders", "targets"})->MinTime(0.3);
      for (const std::int64_t senders : {1, 2, 4, 8, 16}) b->Args({senders, targets});
    }
  }

  // An actor per call: memory follows the run order (first: before other workloads grow
  // the heap).
  add("fib25/handoff", bm_fib_handoff)->MinTime(0.5);
  add("fib25/depth_first_reference", bm_fib_depth_first)->MinTime(0.5);

  // Bytes per idle actor (not timed: mem_ workloads show their counters only).
  add("mem_idle_10k/handoff_actor", bm_idle_handoff)->Iterations(3);
  add("mem_idle_10k/caf", bm_idle_caf)->Iterations(3);

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
