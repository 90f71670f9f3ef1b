// What every benchmark binary shares: the machine description recorded next to its
// results, the parked thread that keeps glibc on its multi-threaded paths, and the
// mutual-exclusion check of the lock benchmarks.
#pragma once

#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/utsname.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <future>
#include <string>
#include <thread>

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

// Records the machine in the results' context (tools/bench_table.py prints it).
inline void add_machine_context() {
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

}  // namespace handoff::bench
