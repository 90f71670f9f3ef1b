// What every benchmark binary shares: the machine description recorded next to its
// results, the parked thread that keeps glibc on its multi-threaded paths, the
// mutual-exclusion check of the lock benchmarks, and the calibrated busy work and timed
// loop of the throughput benchmarks.
#pragma once

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/utsname.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "handoff/detail/backoff.hpp"

namespace handoff::bench {

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
    }
  }
  return "unknown";
}

inline std::string os_description() {
  struct utsname u {};
  if (uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release + " " + u.machine;
}

inline std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "g++ " __VERSION__;
#else
  return "unknown";
#endif
}

// The cost of moving one cache line from one core to another and back, as the machine
// offers it when the binary starts: two threads bounce a counter on one line, and the
// median of 5 rounds of 20,000 round trips is returned, in ns per round trip (after 50,000
// unmeasured ones: a new thread may share its creator's core until the scheduler moves it).
// A hand-off between two threads moves a few lines per operation, so the two-thread rows
// follow this figure; on a VM it changes as the host moves the virtual CPUs.
inline double core_to_core_round_trip_ns() {
  constexpr int rounds = 5;
  constexpr std::int64_t trips = 20000;
  constexpr std::int64_t warm_up = 50000;
  struct alignas(64) line {
    std::atomic<std::int64_t> v{0};
  };
  line l;
  std::thread echo([&l] {
    // acquire/release: each side answers the value the other wrote.
    for (std::int64_t i = 0; i < warm_up + rounds * trips; ++i) {
      while (l.v.load(std::memory_order_acquire) != 2 * i + 1) {
      }
      l.v.store(2 * i + 2, std::memory_order_release);
    }
  });
  std::int64_t i = 0;
  const auto round_trip = [&l, &i] {
    l.v.store(2 * i + 1, std::memory_order_release);
    while (l.v.load(std::memory_order_acquire) != 2 * i + 2) {
    }
    ++i;
  };
  while (i < warm_up) round_trip();
  std::vector<double> ns;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (std::int64_t k = 0; k < trips; ++k) round_trip();
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - t0;
    ns.push_back(took.count() / static_cast<double>(trips));
  }
  echo.join();
  std::sort(ns.begin(), ns.end());
  return ns[rounds / 2];
}

// Records the machine in the results' context (tools/bench_table.py prints it).
inline void add_machine_context() {
  if (std::thread::hardware_concurrency() >= 2) {  // with one core the echo would wait for time slices
    char rtt[32];
    std::snprintf(rtt, sizeof rtt, "%.0f", core_to_core_round_trip_ns());
    benchmark::AddCustomContext("core_to_core_rtt_ns", rtt);
  }
  benchmark::AddCustomContext("cpu_model", cpu_model());
  benchmark::AddCustomContext("hardware_concurrency", std::to_string(std::thread::hardware_concurrency()));
  benchmark::AddCustomContext("os", os_description());
  benchmark::AddCustomContext("compiler", compiler());
}

// glibc skips the `lock` prefix of its mutex fast paths (and libstdc++ its atomic
// reference counts) while the process has a single thread (__libc_single_threaded), which
// would make the std::mutex baseline unrealistically cheap. A second thread, parked for the
// whole run, keeps every implementation on its real multi-threaded path. Construct it
// first thing in main().
class parked_thread {
 public:
  parked_thread() : thread_([f = stop_.get_future()] { f.wait(); }) {}
  ~parked_thread() {
    stop_.set_value();
    thread_.join();
  }
  parked_thread(const parked_thread&) = delete;
  parked_thread& operator=(const parked_thread&) = delete;

 private:
  std::promise<void> stop_;
  std::thread thread_;
};

// Heap bytes in use: what the C allocator handed out and did not get back (small blocks
// and mmapped ones, all arenas).
inline std::size_t heap_in_use() noexcept {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Thread 0, after the timed loop of a message benchmark: fails the benchmark unless
// exactly one message per iteration of every thread ran between `before` and `after`.
inline void check_count(benchmark::State& state, std::uint64_t before, std::uint64_t after) {
  if (state.thread_index() != 0) return;
  const auto expected = before + static_cast<std::uint64_t>(state.max_iterations) * state.threads();
  if (after != expected) {
    state.SkipWithError(("lost or duplicated messages: ran " + std::to_string(after - before) + ", sent " +
                         std::to_string(expected - before))
                            .c_str());
  }
}

// Thread 0, after the timed loop: fails the benchmark unless a counter incremented once
// per iteration under the lock by every thread went from `before` to exactly `after`.
inline void check_total(benchmark::State& state, std::uint64_t before, std::uint64_t after) {
  if (state.thread_index() != 0 || state.error_occurred()) return;
  const auto expected = before + static_cast<std::uint64_t>(state.max_iterations) * state.threads();
  if (after != expected) {
    state.SkipWithError(("mutual exclusion broken: " + std::to_string(after - before) + " increments, expected " +
                         std::to_string(expected - before))
                            .c_str());
  }
}

// ---------------------------------------------------------------------------------------
// Calibrated busy work and the timed loop of the throughput benchmarks.

// A waiter's pause: spin, then yield (the library's own backoff).
inline void cpu_relax(unsigned& spins) noexcept { handoff::detail::backoff(spins++); }

// The busy work: a dependent chain of multiply-adds the compiler cannot fold or vectorise.
[[gnu::noinline]] inline std::uint64_t spin_work(std::uint64_t x, std::uint32_t iterations) noexcept {
  for (std::uint32_t i = 0; i < iterations; ++i) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    asm volatile("" : "+r"(x));
  }
  return x;
}

// Iterations of spin_work that take `target_ns` on this machine (best of several probes,
// so that a noisy neighbour makes the work longer, never shorter).
inline std::uint32_t calibrate_work(double target_ns, double* ns_per_iteration) {
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

// Reached by every sender thread after its last message (timed_loop).
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

}  // namespace handoff::bench
