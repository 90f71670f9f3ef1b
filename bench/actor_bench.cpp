// Actor benchmarks: handoff against its baselines, all in this one binary (so that every
// implementation runs on the same machine, build and run, and their ratios compare like
// with like).
//
// Every benchmark is registered as "<workload>/<impl>"; Google Benchmark appends its own
// suffixes (/min_time:..., /real_time, /threads:N). Implementations whose name starts with
// "handoff" are ours; every other implementation of the same workload (and thread count) is
// a baseline. tools/bench_table.py pairs them by that convention and prints the ratios.
//
// Workloads (time is wall-clock per message, all threads together; items/s is the total):
//   post_run_uncontended  one thread: actor<S>::post / basic_actor::send of an increment,
//                         against std::mutex lock/unlock around the same increment.
//   1actor_trivial        N senders (threads:1, threads:2) -> one shared actor, increment;
//   1actor_work200ns      the same with ~200 ns of calibrated busy work per message, run
//                         under the actor / under the mutex (the same function both sides).
//   1024actors_uniform    N senders -> 1024 actors chosen uniformly at random (precomputed
//                         index sequence), against 1024 std::mutexes.
//   1024actors_zipf       the same with a skewed choice: Zipf, s = 1.0, over the 1024
//                         actors (rank -> actor by a fixed random permutation; the hottest
//                         actor gets ~13% of the messages), against 1024 std::mutexes.
//   1actor_bounded256     8 senders -> one actor<S> with actor_options{.capacity = 256}
//                         (full_policy::block: a sender waits for room), trivial handler,
//                         against the same actor unbounded: more blocked senders than cores.
//   chain1000             one message forwarded through a chain of 1000 actors (each
//                         handler counts it and posts it to the next actor; the nested sends
//                         run on the sender's thread, in constant stack), against a loop
//                         that locks each of 1000 std::mutex-protected nodes in turn and
//                         does the same work (count, read the next node). Time per message
//                         through the whole chain; items/s counts hops.
//   mailbox_2senders      the candidate per-actor mailboxes under the same minimal
//                         protocol (mini_actor below): handoff's intrusive Vyukov queue
//                         against moodycamel::ConcurrentQueue<int> and <std::function>.
//                         Counter ns_per_msg.
//   mem_idle_100k         bytes per idle actor (sizeof + heap allocated by the
//                         constructor, measured with mallinfo2) for actor<int>,
//                         basic_actor<int, H>, and a std::mutex + int for scale.
//   mem_mailbox_10k       the same for the three mini_actor mailboxes.
//   mem_mixed_lifetimes   heap growth while 20,000 long-queued 32-byte messages wait among
//                         10 million short-lived ones, after those drained (mallinfo2), in
//                         a child process: the node pool starts cold whatever ran before.
//                         Counters heap_growth_bytes, bytes_per_long_message.
//
// Every timed run ends with all messages run: the last iteration of each thread waits on a
// barrier that all sender threads reach after their last post returned. Without an
// executor a post returns only after its message ran, or while another thread owns the
// actor, and an owner returns only once it released the actor with nothing counted; so
// once every sender has returned, every message has run. The counts are then checked
// (SkipWithError if a message was lost or duplicated).
#include <benchmark/benchmark.h>
#include <concurrentqueue/concurrentqueue.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "bench_support.hpp"
#include "handoff/actor.hpp"
#include "handoff/basic_actor.hpp"
#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/mpsc_queue.hpp"
#include "mini_actor.hpp"

namespace {

using handoff::bench::calibrate_work;
using handoff::bench::check_count;
using handoff::bench::end_barrier;
using handoff::bench::heap_in_use;
using handoff::bench::mini_actor;
using handoff::bench::spin_work;
using handoff::bench::timed_loop;
using handoff::bench::vyukov_mailbox;

constexpr double min_time_s = 1.0;  // per benchmark instance and repetition
constexpr std::size_t many_actors = 1024;

// ---------------------------------------------------------------------------------------
// Shared workload helpers.

// The state every implementation protects: a message count and the busy work's value.
struct counter_state {
  std::uint64_t n = 0;
  std::uint64_t acc = 1;
};

inline void do_work(counter_state& s, std::uint32_t work) noexcept {
  ++s.n;
  if (work != 0) s.acc = spin_work(s.acc, work);
}

struct mutex_counter {
  std::mutex m;
  counter_state s;
  void run(std::uint32_t work) {
    std::lock_guard lock(m);
    do_work(s, work);
  }
  std::uint64_t count() {
    std::lock_guard lock(m);
    return s.n;
  }
};

// basic_actor's handler; the state lives in it, as in a real typed actor. Message -1
// copies the count to *report (the benchmark sends it once the actor is idle, so it runs
// inline on the caller's thread).
struct counting_handler {
  counter_state s;
  std::uint32_t work;
  std::uint64_t* report;
  void operator()(int m) noexcept {
    if (m < 0) {
      *report = s.n;
      return;
    }
    do_work(s, work);
  }
};

// ---------------------------------------------------------------------------------------
// Mailbox alternatives (docs/notebook.md, "Mailbox choice"): mini_actor (mini_actor.hpp) over
// handoff's Vyukov mailbox and over moodycamel's queue.

// moodycamel's ConcurrentQueue, default-constructed, implicit (token-less) producers.
template <class Msg>
class moodycamel_mailbox {
 public:
  void push(Msg&& m) {
    if (!queue_.enqueue(std::move(m))) throw std::bad_alloc();
  }
  bool try_pop(Msg& out) { return queue_.try_dequeue(out); }

 private:
  moodycamel::ConcurrentQueue<Msg> queue_;
};

// The mini actors' handler state lives on its own cache line, the same for the three
// mailboxes, so that only the mailbox differs (moodycamel's 632-byte queue would otherwise
// separate the state from the count while the 24-byte Vyukov queue does not).
struct int_sum {
  std::uint64_t* n = nullptr;
  void operator()(int& m) noexcept { *n += static_cast<std::uint64_t>(m); }
};
struct fn_call {
  void operator()(std::function<void()>& f) { f(); }
};

using mini_vyukov = mini_actor<int, int_sum, vyukov_mailbox<int>>;
using mini_moodycamel = mini_actor<int, int_sum, moodycamel_mailbox<int>>;
using mini_moodycamel_fn = mini_actor<std::function<void()>, fn_call, moodycamel_mailbox<std::function<void()>>>;

// ---------------------------------------------------------------------------------------
// Objects shared by the sender threads of one benchmark; created in main, they outlive
// every run, so that threads need no hand-over of pointers.

// Each target on its own cache lines: no false sharing between them (what the library's
// own layout shares inside one actor is part of what is measured).
struct one_target {
  alignas(64) handoff::actor<counter_state> actor;
  alignas(64) handoff::basic_actor<int, counting_handler> basic;
  alignas(64) mutex_counter mutex;
  alignas(64) end_barrier done;
  std::uint64_t basic_report = 0;
  explicit one_target(std::uint32_t work) : basic(counting_handler{{}, work, &basic_report}) {}
  std::uint64_t basic_count() {
    basic.send(-1);  // idle: runs inline, before send() returns
    return basic_report;
  }
};

// The sum of the states' `n` over n actors, each read through ask().
template <class State>
std::uint64_t sum_counts(handoff::actor<State>* actors, std::size_t n) {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < n; ++i) sum += actors[i].ask([](State& s) { return s.n; }).get();
  return sum;
}

struct many_targets {
  std::unique_ptr<handoff::actor<counter_state>[]> actors { new handoff::actor<counter_state>[ many_actors ] };
  std::unique_ptr<mutex_counter[]> mutexes{new mutex_counter[many_actors]};
  std::vector<std::uint32_t> index;  // uniform over [0, many_actors), a power-of-two length
  end_barrier done;
  many_targets() {
    std::mt19937 rng(12345);
    std::uniform_int_distribution<std::uint32_t> pick(0, many_actors - 1);
    index.resize(std::size_t{1} << 16);
    for (auto& i : index) i = pick(rng);
  }
  std::uint64_t actor_total() { return sum_counts(actors.get(), many_actors); }
  std::uint64_t mutex_total() {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < many_actors; ++i) sum += mutexes[i].count();
    return sum;
  }
};

struct mailbox_targets {
  struct alignas(64) padded_count {
    std::uint64_t n = 0;
  };
  padded_count vyukov_n, moodycamel_n, fn_n;
  alignas(64) mini_vyukov vyukov{int_sum{&vyukov_n.n}};
  alignas(64) mini_moodycamel moodycamel{int_sum{&moodycamel_n.n}};
  alignas(64) mini_moodycamel_fn moodycamel_fn;
  alignas(64) end_barrier done;
};

std::uint64_t actor_count(handoff::actor<counter_state>& a) {
  return a.ask([](counter_state& s) { return s.n; }).get();
}

// ---------------------------------------------------------------------------------------
// Benchmarks.

void bm_actor_post(benchmark::State& state, handoff::actor<counter_state>& a, end_barrier& done, std::uint32_t work) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = actor_count(a);
  timed_loop(state, done, [&](benchmark::IterationCount) { a.post([work](counter_state& s) { do_work(s, work); }); });
  if (state.thread_index() == 0) check_count(state, before, actor_count(a));
}

void bm_basic_send(benchmark::State& state, one_target& t) {
  // No send is in flight before the start barrier or after the end barrier: the actor is
  // idle when thread 0 asks for the count.
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = t.basic_count();
  timed_loop(state, t.done, [&](benchmark::IterationCount) { t.basic.send(1); });
  if (state.thread_index() == 0) check_count(state, before, t.basic_count());
}

void bm_mutex(benchmark::State& state, one_target& t, std::uint32_t work) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = t.mutex.count();
  timed_loop(state, t.done, [&](benchmark::IterationCount) { t.mutex.run(work); });
  if (state.thread_index() == 0) check_count(state, before, t.mutex.count());
}

void bm_many_actors(benchmark::State& state, many_targets& t) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = t.actor_total();
  const std::size_t mask = t.index.size() - 1;
  const std::size_t offset = static_cast<std::size_t>(state.thread_index()) * 7919;  // threads differ
  const std::uint32_t* index = t.index.data();
  auto* actors = t.actors.get();
  timed_loop(state, t.done, [&](benchmark::IterationCount i) {
    actors[index[(static_cast<std::size_t>(i) + offset) & mask]].post([](counter_state& s) { ++s.n; });
  });
  if (state.thread_index() == 0) check_count(state, before, t.actor_total());
}

void bm_many_mutexes(benchmark::State& state, many_targets& t) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = t.mutex_total();
  const std::size_t mask = t.index.size() - 1;
  const std::size_t offset = static_cast<std::size_t>(state.thread_index()) * 7919;
  const std::uint32_t* index = t.index.data();
  auto* mutexes = t.mutexes.get();
  timed_loop(state, t.done, [&](benchmark::IterationCount i) {
    mutexes[index[(static_cast<std::size_t>(i) + offset) & mask]].run(0);
  });
  if (state.thread_index() == 0) check_count(state, before, t.mutex_total());
}

// Mailbox comparison: the same loop for the three mini actors; ns_per_msg is the wall time
// of the whole run (first iteration of thread 0 to the end barrier) per message.
template <class Send, class Count>
void bm_mailbox(benchmark::State& state, end_barrier& done, Send&& send, Count&& count) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = count();
  std::chrono::steady_clock::time_point t0;
  const bool timer = state.thread_index() == 0;
  timed_loop(state, done, [&](benchmark::IterationCount i) {
    if (timer && i == 0) t0 = std::chrono::steady_clock::now();
    send();
  });
  if (timer) {
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    state.counters["ns_per_msg"] = ns / static_cast<double>(state.max_iterations * state.threads());
    check_count(state, before, count());
  }
}

// Bytes per idle actor: n instances in one array; the heap delta covers the array itself
// and whatever the constructors allocate.
template <class T>
void bm_idle_memory(benchmark::State& state, std::size_t n) {
  double per_actor = 0;
  for (auto _ : state) {
    const std::size_t before = heap_in_use();
    std::unique_ptr<T[]> actors(new T[n]);
    const std::size_t after = heap_in_use();
    benchmark::DoNotOptimize(actors.get());
    per_actor = static_cast<double>(after - before) / static_cast<double>(n);
  }
  state.counters["sizeof"] = static_cast<double>(sizeof(T));
  state.counters["bytes_per_actor"] = per_actor;
  state.counters["heap_bytes_per_actor"] = per_actor - static_cast<double>(sizeof(T));
  state.SetItemsProcessed(state.iterations() * static_cast<benchmark::IterationCount>(n));
}

// Heap kept by long-queued messages among short-lived ones: `longs` 32-byte messages wait
// in the mailbox of an actor held busy by another thread while `per_long` short-lived ones
// each are queued and drained around them (nested sends from a handler, drained when it
// returns). Measured once the short ones have drained, before the long ones run; -1: a
// long message was lost.
double mixed_lifetimes_growth(std::size_t longs, std::size_t per_long) {
  handoff::actor<int> slow;
  handoff::actor<int> fast;
  handoff::actor<int> hub;
  std::atomic<bool> holding{false};
  std::atomic<bool> release{false};
  std::thread holder([&] {
    slow.post([&](int&) {
      holding = true;
      holding.notify_one();
      release.wait(false);
    });
  });
  holding.wait(false);
  const std::size_t before = heap_in_use();
  for (std::size_t r = 0; r < longs; ++r) {
    hub.post([&](int&) {
      for (std::size_t i = 0; i < per_long; ++i) fast.post([](int& n) { ++n; });
      slow.post([](int& n) { ++n; });
    });
  }
  const auto growth = static_cast<double>(heap_in_use() - before);
  release = true;
  release.notify_one();
  holder.join();
  return slow.ask([](int& n) { return n; }).get() == static_cast<int>(longs) ? growth : -1;
}

// The argument that makes this program a child that prints mixed_lifetimes_growth().
constexpr std::string_view mixed_lifetimes_child = "--mixed-lifetimes-child";
constexpr std::size_t mixed_longs = 20000;
constexpr std::size_t mixed_per_long = 500;

// mixed_lifetimes_growth() in a fresh process: in this one the node pool keeps the slabs
// of earlier rows and repetitions, which would serve the long messages without any growth.
void bm_mixed_lifetimes(benchmark::State& state) {
  double growth = 0;
  for (auto _ : state) {
    std::string self(4096, '\0');
    const ssize_t n = readlink("/proc/self/exe", self.data(), self.size() - 1);
    if (n <= 0) return state.SkipWithError("readlink /proc/self/exe");
    self.resize(static_cast<std::size_t>(n));
    FILE* child = popen(("'" + self + "' " + std::string(mixed_lifetimes_child)).c_str(), "r");
    if (child == nullptr) return state.SkipWithError("popen");
    if (std::fscanf(child, "%lf", &growth) != 1) growth = -1;
    if (pclose(child) != 0 || growth < 0) return state.SkipWithError("the child failed, or a long message was lost");
  }
  state.counters["heap_growth_bytes"] = growth;
  state.counters["bytes_per_long_message"] = growth / static_cast<double>(mixed_longs);
  state.SetItemsProcessed(state.iterations() *
                          static_cast<benchmark::IterationCount>(mixed_longs * (mixed_per_long + 1)));
}

struct mutex_slot {
  std::mutex m;
  int value = 0;
};
struct int_handler {
  int n = 0;
  void operator()(int m) noexcept { n += m; }
};

// A throughput benchmark: real time, min_time_s per instance.
template <class F>
benchmark::internal::Benchmark* add(const std::string& name, F&& fn) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))->UseRealTime()->MinTime(min_time_s);
}

// A memory benchmark: a few fixed iterations (each builds and frees all the instances).
template <class F>
benchmark::internal::Benchmark* add_memory(const std::string& name, F&& fn) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))->UseRealTime()->Iterations(5);
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Skewed actor choice and the forwarding chain.

namespace {

// An index sequence over n_targets with Zipf-distributed ranks (P(rank k) ~ 1 / (k+1)^s),
// each rank mapped to a target by a fixed random permutation, so that the hot targets are
// not neighbours in memory. `length` must be a power of two (bm_many_* mask with it).
std::vector<std::uint32_t> zipf_index(std::size_t n_targets, double s, std::size_t length, std::uint32_t seed) {
  std::vector<double> weight(n_targets);
  for (std::size_t k = 0; k < n_targets; ++k) weight[k] = 1.0 / std::pow(static_cast<double>(k + 1), s);
  std::mt19937 rng(seed);
  std::vector<std::uint32_t> target_of_rank(n_targets);
  for (std::size_t k = 0; k < n_targets; ++k) target_of_rank[k] = static_cast<std::uint32_t>(k);
  std::shuffle(target_of_rank.begin(), target_of_rank.end(), rng);
  std::discrete_distribution<std::size_t> rank(weight.begin(), weight.end());
  std::vector<std::uint32_t> index(length);
  for (auto& i : index) i = target_of_rank[rank(rng)];
  return index;
}

constexpr std::size_t chain_length = 1000;

struct chain_node {
  handoff::actor<chain_node>* next = nullptr;  // null: the end of the chain
  std::uint64_t n = 0;                         // messages that passed through
};

// The forwarded message: count it, pass it on.
struct chain_hop {
  void operator()(chain_node& s) const;
};
void chain_hop::operator()(chain_node& s) const {
  ++s.n;
  if (s.next != nullptr) s.next->post(chain_hop{});
}

struct mutex_chain_node {
  std::mutex m;
  std::uint64_t n = 0;
  mutex_chain_node* next = nullptr;
};

struct chain_targets {
  std::unique_ptr<handoff::actor<chain_node>[]> actors { new handoff::actor<chain_node>[ chain_length ] };
  std::unique_ptr<mutex_chain_node[]> mutexes{new mutex_chain_node[chain_length]};
  end_barrier done;
  chain_targets() {
    for (std::size_t i = 0; i + 1 < chain_length; ++i) {
      actors[i].post([next = &actors[i + 1]](chain_node& s) { s.next = next; });  // idle: runs inline
      mutexes[i].next = &mutexes[i + 1];
    }
  }
  std::uint64_t actor_total() { return sum_counts(actors.get(), chain_length); }
  std::uint64_t mutex_total() {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < chain_length; ++i) {
      std::lock_guard lock(mutexes[i].m);
      sum += mutexes[i].n;
    }
    return sum;
  }
};

void check_chain(benchmark::State& state, std::uint64_t before, std::uint64_t after) {
  const auto expected = static_cast<std::uint64_t>(state.iterations()) * chain_length;
  if (after - before != expected) {
    state.SkipWithError(
        ("chain: " + std::to_string(after - before) + " hops ran, expected " + std::to_string(expected)).c_str());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<benchmark::IterationCount>(chain_length));
}

// A top-level post returns only once the whole chain has run: each nested post finds its
// target idle and queues it on this thread's run queue, drained before post() returns.
void bm_chain_actors(benchmark::State& state, chain_targets& t) {
  const std::uint64_t before = t.actor_total();
  handoff::actor<chain_node>& head = t.actors[0];
  timed_loop(state, t.done, [&](benchmark::IterationCount) { head.post(chain_hop{}); });
  check_chain(state, before, t.actor_total());
}

void bm_chain_mutexes(benchmark::State& state, chain_targets& t) {
  const std::uint64_t before = t.mutex_total();
  timed_loop(state, t.done, [&](benchmark::IterationCount) {
    for (mutex_chain_node* p = &t.mutexes[0]; p != nullptr;) {
      std::lock_guard lock(p->m);
      ++p->n;
      p = p->next;  // read under the node's lock, as the actor reads s.next in its handler
    }
  });
  check_chain(state, before, t.mutex_total());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && argv[1] == mixed_lifetimes_child) {
    const double growth = mixed_lifetimes_growth(mixed_longs, mixed_per_long);
    std::printf("%.0f\n", growth);
    return growth < 0 ? 1 : 0;
  }
  handoff::bench::parked_thread idle;  // see parked_thread: before anything is measured

  double ns_per_iteration = 0;
  const std::uint32_t work200 = calibrate_work(200.0, &ns_per_iteration);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  handoff::bench::add_machine_context();
  benchmark::AddCustomContext("work200_iterations", std::to_string(work200));
  benchmark::AddCustomContext("work_ns_per_iteration", std::to_string(ns_per_iteration));
  benchmark::AddCustomContext("parked_thread", "yes (glibc multi-threaded lock paths)");

  // Shared targets; they outlive every run (destroyed after RunSpecifiedBenchmarks).
  one_target uncontended(0), trivial(0), worked(work200);
  many_targets many;
  mailbox_targets mail;

  // Bounded against unbounded, 8 senders, trivial work.
  one_target unbounded8(0);
  struct bounded_target {
    static handoff::actor_options capacity(std::uint32_t n) {
      handoff::actor_options o;
      o.capacity = n;
      return o;
    }
    alignas(64) handoff::actor<counter_state> actor{capacity(256)};
    alignas(64) end_barrier done;
  } bounded8;

  // a. Uncontended post -> run.
  add("post_run_uncontended/handoff_post",
      [&](benchmark::State& s) { bm_actor_post(s, uncontended.actor, uncontended.done, 0); });
  add("post_run_uncontended/handoff_send", [&](benchmark::State& s) { bm_basic_send(s, uncontended); });
  add("post_run_uncontended/mutex", [&](benchmark::State& s) { bm_mutex(s, uncontended, 0); });

  // b. 1 and 2 senders -> 1 actor, trivial and ~200 ns of work.
  for (auto* t : {&trivial, &worked}) {
    const std::uint32_t work = t == &worked ? work200 : 0;
    const std::string w = t == &worked ? "1actor_work200ns" : "1actor_trivial";
    add(w + "/handoff_post", [t, work](benchmark::State& s) { bm_actor_post(s, t->actor, t->done, work); })
        ->Threads(1)
        ->Threads(2);
    add(w + "/handoff_send", [t](benchmark::State& s) { bm_basic_send(s, *t); })->Threads(1)->Threads(2);
    add(w + "/mutex", [t, work](benchmark::State& s) { bm_mutex(s, *t, work); })->Threads(1)->Threads(2);
  }

  // c. N senders -> 1024 actors, uniform.
  add("1024actors_uniform/handoff_post", [&](benchmark::State& s) { bm_many_actors(s, many); })->Threads(1)->Threads(2);
  add("1024actors_uniform/mutex", [&](benchmark::State& s) { bm_many_mutexes(s, many); })->Threads(1)->Threads(2);

  // d. Bytes per idle actor.
  constexpr std::size_t idle_n = 100000;
  add_memory("mem_idle_100k/handoff_actor",
             [](benchmark::State& s) { bm_idle_memory<handoff::actor<int>>(s, idle_n); });
  add_memory("mem_idle_100k/handoff_basic_actor",
             [](benchmark::State& s) { bm_idle_memory<handoff::basic_actor<int, int_handler>>(s, idle_n); });
  add_memory("mem_idle_100k/mutex", [](benchmark::State& s) { bm_idle_memory<mutex_slot>(s, idle_n); });

  // Heap kept by 20,000 long-queued messages among 10 million short-lived ones.
  benchmark::RegisterBenchmark("mem_mixed_lifetimes/handoff_actor", [](benchmark::State& s) { bm_mixed_lifetimes(s); })
      ->UseRealTime()
      ->Iterations(1);

  // e. Mailbox alternatives under the same protocol: 2 senders -> 1 actor, and idle bytes.
  add("mailbox_2senders/handoff_vyukov", [&](benchmark::State& s) {
    bm_mailbox(
        s, mail.done, [&] { mail.vyukov.send(1); }, [&] { return mail.vyukov_n.n; });
  })->Threads(2);
  add("mailbox_2senders/moodycamel_typed", [&](benchmark::State& s) {
    bm_mailbox(
        s, mail.done, [&] { mail.moodycamel.send(1); }, [&] { return mail.moodycamel_n.n; });
  })->Threads(2);
  add("mailbox_2senders/moodycamel_fn", [&](benchmark::State& s) {
    std::uint64_t* n = &mail.fn_n.n;
    bm_mailbox(
        s, mail.done, [&] { mail.moodycamel_fn.send([n] { ++*n; }); }, [&] { return *n; });
  })->Threads(2);
  constexpr std::size_t mailbox_n = 10000;
  add_memory("mem_mailbox_10k/handoff_vyukov", [](benchmark::State& s) { bm_idle_memory<mini_vyukov>(s, mailbox_n); });
  add_memory("mem_mailbox_10k/moodycamel_typed",
             [](benchmark::State& s) { bm_idle_memory<mini_moodycamel>(s, mailbox_n); });
  add_memory("mem_mailbox_10k/moodycamel_fn",
             [](benchmark::State& s) { bm_idle_memory<mini_moodycamel_fn>(s, mailbox_n); });

  // f. N senders -> 1024 actors, skewed (Zipf, s = 1.0). Same code as the uniform case,
  // another index sequence. 0.5 s per instance keeps the four instances under ~10 s.
  many_targets skewed;
  skewed.index = zipf_index(many_actors, 1.0, std::size_t{1} << 16, 4242);
  add("1024actors_zipf/handoff_post", [&](benchmark::State& s) { bm_many_actors(s, skewed); })
      ->Threads(1)
      ->Threads(2)
      ->MinTime(0.5);
  add("1024actors_zipf/mutex", [&](benchmark::State& s) { bm_many_mutexes(s, skewed); })
      ->Threads(1)
      ->Threads(2)
      ->MinTime(0.5);

  // h. A bounded mailbox under oversubscription: 8 senders, capacity 256.
  add("1actor_bounded256/handoff_unbounded", [&](benchmark::State& s) {
    bm_actor_post(s, unbounded8.actor, unbounded8.done, 0);
  })->Threads(8);
  add("1actor_bounded256/handoff_bounded256", [&](benchmark::State& s) {
    bm_actor_post(s, bounded8.actor, bounded8.done, 0);
  })->Threads(8);

  // g. A message forwarded through a chain of 1000 actors, against 1000 mutex-protected nodes.
  chain_targets chain;
  add("chain1000/handoff_post", [&](benchmark::State& s) { bm_chain_actors(s, chain); });
  add("chain1000/mutex", [&](benchmark::State& s) { bm_chain_mutexes(s, chain); });

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
