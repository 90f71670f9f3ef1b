// Actor benchmarks: handoff against its baselines, all in this one binary (STYLE rule 11).
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
//   mailbox_2senders      the mailbox alternatives of SPEC §2 under the same minimal
//                         protocol (mini_actor below): handoff's intrusive Vyukov queue
//                         against moodycamel::ConcurrentQueue<int> and <std::function>.
//                         Counter ns_per_msg.
//   mem_idle_100k         bytes per idle actor (sizeof + heap allocated by the
//                         constructor, measured with mallinfo2) for actor<int>,
//                         basic_actor<int, H>, and a std::mutex + int for scale.
//   mem_mailbox_10k       the same for the three mini_actor mailboxes.
//
// Every timed run ends with all messages run: the last iteration of each thread waits on a
// barrier that all sender threads reach after their last post returned. Without an
// executor a post returns only after its message ran, or while another thread owns the
// actor, and an owner returns only once it released the actor with nothing counted; so
// once every sender has returned, every message has run. The counts are then checked
// (SkipWithError if a message was lost or duplicated).
#include <benchmark/benchmark.h>
#include <concurrentqueue/concurrentqueue.h>
#include <malloc.h>
#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <new>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "handoff/actor.hpp"
#include "handoff/basic_actor.hpp"
#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/mpsc_queue.hpp"

namespace {

constexpr double min_time_s = 1.0;  // per benchmark instance and repetition
constexpr std::size_t many_actors = 1024;

// ---------------------------------------------------------------------------------------
// Shared workload helpers.

void cpu_relax(unsigned& spins) noexcept { handoff::detail::backoff(spins++); }

// The busy work: a dependent chain of multiply-adds the compiler cannot fold or vectorise.
[[gnu::noinline]] std::uint64_t spin_work(std::uint64_t x, std::uint32_t iterations) noexcept {
  for (std::uint32_t i = 0; i < iterations; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : "+r"(x));
  }
  return x;
}

// Iterations of spin_work that take `target_ns` on this machine (best of several probes,
// so that a noisy neighbour makes the work longer, never shorter).
std::uint32_t calibrate_work(double target_ns, double* ns_per_iteration) {
  constexpr std::uint32_t probe = 1u << 20;
  double best = 1e300;
  std::uint64_t x = 1;
  for (int r = 0; r < 9; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    x = spin_work(x, probe);
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double, std::nano>(t1 - t0).count() / probe);
  }
  benchmark::DoNotOptimize(x);
  *ns_per_iteration = best;
  return static_cast<std::uint32_t>(std::max(1.0, std::round(target_ns / best)));
}

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

// Reached by every sender thread after its last message; see the overview.
class end_barrier {
 public:
  void reset() noexcept { arrived_.store(0, std::memory_order_relaxed); }
  void arrive_and_wait(int threads) noexcept {
    arrived_.fetch_add(1, std::memory_order_acq_rel);
    unsigned spins = 0;
    while (arrived_.load(std::memory_order_acquire) < threads) cpu_relax(spins);
  }

 private:
  std::atomic<int> arrived_{0};
};

// The timed loop of every throughput benchmark: op(i) per iteration, then, inside the
// last iteration (so still timed), wait until every sender is done. Thread 0 resets the
// barrier before the loop; Google Benchmark's start barrier orders that before any use.
template <class Op>
void timed_loop(benchmark::State& state, end_barrier& done, Op&& op) {
  if (state.thread_index() == 0) done.reset();
  const benchmark::IterationCount last = state.max_iterations;
  benchmark::IterationCount i = 0;
  for (auto _ : state) {
    op(i);
    if (++i == last) done.arrive_and_wait(state.threads());
  }
  state.SetItemsProcessed(state.iterations());
}

void check_count(benchmark::State& state, std::uint64_t before, std::uint64_t after) {
  if (state.thread_index() != 0) return;
  const auto expected = before + static_cast<std::uint64_t>(state.max_iterations) * state.threads();
  if (after != expected) {
    state.SkipWithError(("lost or duplicated messages: ran " + std::to_string(after - before) + ", sent " +
                         std::to_string(expected - before))
                            .c_str());
  }
}

// Heap bytes in use (arena + mmapped chunks), all arenas.
std::size_t heap_in_use() noexcept {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// ---------------------------------------------------------------------------------------
// Mailbox alternatives (SPEC §2): one minimal actor, the same hand-off protocol as
// handoff::detail::actor_base (count first, 0 -> 1 winner runs inline and drains, release
// with fetch_sub), parameterised on the mailbox. No budget, no nesting, no error hook:
// only the mailbox differs between the instantiations.

template <class Msg, class Handler, class Mailbox>
class mini_actor {
 public:
  mini_actor() = default;
  explicit mini_actor(Handler h) : handler_(std::move(h)) {}

  void send(Msg m) {
    // acquire; pairs with the release below in the previous owner.
    if (count_.fetch_add(1, std::memory_order_acquire) != 0) {
      mailbox_.push(std::move(m));
      return;
    }
    handler_(m);
    std::uint64_t ran = 1;  // run and not yet uncounted
    unsigned spins = 0;
    for (;;) {
      if (mailbox_.try_pop(m)) {
        handler_(m);
        ++ran;
        spins = 0;
        continue;
      }
      if (ran != 0) {
        // release; pairs with the acquire above in the next owner.
        if (count_.fetch_sub(ran, std::memory_order_release) == ran) return;
        ran = 0;
        continue;
      }
      cpu_relax(spins);  // counted, not yet pushed: wait for that sender
    }
  }

 private:
  std::atomic<std::uint64_t> count_{0};
  Mailbox mailbox_;
  Handler handler_;
};

// handoff's mailbox: the intrusive Vyukov queue with nodes from handoff's node pool,
// exactly what basic_actor uses.
template <class Msg>
class vyukov_mailbox {
  struct node : handoff::detail::mailbox_node {
    explicit node(Msg&& m) : msg(std::move(m)) {}
    Msg msg;
  };

 public:
  vyukov_mailbox() = default;
  vyukov_mailbox(const vyukov_mailbox&) = delete;
  vyukov_mailbox& operator=(const vyukov_mailbox&) = delete;
  ~vyukov_mailbox() {
    Msg m;
    while (try_pop(m)) {
    }
  }

  void push(Msg&& m) {
    void* p = handoff::detail::allocate_node(sizeof(node));
    queue_.push(::new (p) node(std::move(m)));
  }
  bool try_pop(Msg& out) {
    auto* n = static_cast<node*>(queue_.pop());
    if (n == nullptr) return false;
    out = std::move(n->msg);
    n->~node();
    handoff::detail::free_node(n, sizeof(node));
    return true;
  }

 private:
  handoff::detail::mpsc_queue queue_;
};

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

struct many_targets {
  std::unique_ptr<handoff::actor<counter_state>[]> actors{new handoff::actor<counter_state>[many_actors]};
  std::unique_ptr<mutex_counter[]> mutexes{new mutex_counter[many_actors]};
  std::vector<std::uint32_t> index;  // uniform over [0, many_actors), a power-of-two length
  end_barrier done;
  many_targets() {
    std::mt19937 rng(12345);
    std::uniform_int_distribution<std::uint32_t> pick(0, many_actors - 1);
    index.resize(std::size_t{1} << 16);
    for (auto& i : index) i = pick(rng);
  }
  std::uint64_t actor_total() {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < many_actors; ++i) sum += actors[i].ask([](counter_state& s) { return s.n; }).get();
    return sum;
  }
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

void bm_actor_post(benchmark::State& state, one_target& t, std::uint32_t work) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) before = actor_count(t.actor);
  timed_loop(state, t.done, [&](benchmark::IterationCount) { t.actor.post([work](counter_state& s) { do_work(s, work); }); });
  if (state.thread_index() == 0) check_count(state, before, actor_count(t.actor));
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
  timed_loop(state, t.done,
             [&](benchmark::IterationCount i) { mutexes[index[(static_cast<std::size_t>(i) + offset) & mask]].run(0); });
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

struct mutex_slot {
  std::mutex m;
  int value = 0;
};
struct int_handler {
  int n = 0;
  void operator()(int m) noexcept { n += m; }
};

// ---------------------------------------------------------------------------------------
// Machine description for the benchmark context.

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

std::string os_description() {
  struct utsname u{};
  if (uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "g++ " __VERSION__;
#else
  return "unknown";
#endif
}

// glibc skips the `lock` prefix of its mutex fast paths (and libstdc++ its atomic
// reference counts) while the process has a single thread (__libc_single_threaded), which
// would make the std::mutex baseline unrealistically cheap. A second thread, parked for the
// whole run, keeps every baseline on its real multi-threaded path.
class parked_thread {
 public:
  parked_thread() : thread_([f = stop_.get_future()] { f.wait(); }) {}
  ~parked_thread() {
    stop_.set_value();
    thread_.join();
  }

 private:
  std::promise<void> stop_;
  std::thread thread_;
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

int main(int argc, char** argv) {
  parked_thread idle;  // see parked_thread: before anything is measured

  double ns_per_iteration = 0;
  const std::uint32_t work200 = calibrate_work(200.0, &ns_per_iteration);

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("hardware_concurrency", std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("os", os_description());
  benchmark::AddCustomContext("compiler", compiler());
  benchmark::AddCustomContext("work200_iterations", std::to_string(work200));
  benchmark::AddCustomContext("work_ns_per_iteration", std::to_string(ns_per_iteration));
  benchmark::AddCustomContext("parked_thread", "yes (glibc multi-threaded lock paths)");

  // Shared targets; they outlive every run (destroyed after RunSpecifiedBenchmarks).
  one_target uncontended(0), trivial(0), worked(work200);
  many_targets many;
  mailbox_targets mail;

  // a. Uncontended post -> run.
  add("post_run_uncontended/handoff_post", [&](benchmark::State& s) { bm_actor_post(s, uncontended, 0); });
  add("post_run_uncontended/handoff_send", [&](benchmark::State& s) { bm_basic_send(s, uncontended); });
  add("post_run_uncontended/mutex", [&](benchmark::State& s) { bm_mutex(s, uncontended, 0); });

  // b. 1 and 2 senders -> 1 actor, trivial and ~200 ns of work.
  for (auto* t : {&trivial, &worked}) {
    const std::uint32_t work = t == &worked ? work200 : 0;
    const std::string w = t == &worked ? "1actor_work200ns" : "1actor_trivial";
    add(w + "/handoff_post", [t, work](benchmark::State& s) { bm_actor_post(s, *t, work); })->Threads(1)->Threads(2);
    add(w + "/handoff_send", [t](benchmark::State& s) { bm_basic_send(s, *t); })->Threads(1)->Threads(2);
    add(w + "/mutex", [t, work](benchmark::State& s) { bm_mutex(s, *t, work); })->Threads(1)->Threads(2);
  }

  // c. N senders -> 1024 actors, uniform.
  add("1024actors_uniform/handoff_post", [&](benchmark::State& s) { bm_many_actors(s, many); })->Threads(1)->Threads(2);
  add("1024actors_uniform/mutex", [&](benchmark::State& s) { bm_many_mutexes(s, many); })->Threads(1)->Threads(2);

  // d. Bytes per idle actor.
  constexpr std::size_t idle_n = 100000;
  add_memory("mem_idle_100k/handoff_actor", [](benchmark::State& s) { bm_idle_memory<handoff::actor<int>>(s, idle_n); });
  add_memory("mem_idle_100k/handoff_basic_actor",
      [](benchmark::State& s) { bm_idle_memory<handoff::basic_actor<int, int_handler>>(s, idle_n); });
  add_memory("mem_idle_100k/mutex", [](benchmark::State& s) { bm_idle_memory<mutex_slot>(s, idle_n); });

  // e. Mailbox alternatives under the same protocol: 2 senders -> 1 actor, and idle bytes.
  add("mailbox_2senders/handoff_vyukov", [&](benchmark::State& s) {
    bm_mailbox(s, mail.done, [&] { mail.vyukov.send(1); }, [&] { return mail.vyukov_n.n; });
  })->Threads(2);
  add("mailbox_2senders/moodycamel_typed", [&](benchmark::State& s) {
    bm_mailbox(s, mail.done, [&] { mail.moodycamel.send(1); }, [&] { return mail.moodycamel_n.n; });
  })->Threads(2);
  add("mailbox_2senders/moodycamel_fn", [&](benchmark::State& s) {
    std::uint64_t* n = &mail.fn_n.n;
    bm_mailbox(s, mail.done, [&] { mail.moodycamel_fn.send([n] { ++*n; }); }, [&] { return *n; });
  })->Threads(2);
  constexpr std::size_t mailbox_n = 10000;
  add_memory("mem_mailbox_10k/handoff_vyukov", [](benchmark::State& s) { bm_idle_memory<mini_vyukov>(s, mailbox_n); });
  add_memory("mem_mailbox_10k/moodycamel_typed", [](benchmark::State& s) { bm_idle_memory<mini_moodycamel>(s, mailbox_n); });
  add_memory("mem_mailbox_10k/moodycamel_fn", [](benchmark::State& s) { bm_idle_memory<mini_moodycamel_fn>(s, mailbox_n); });

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
