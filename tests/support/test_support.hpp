// Helpers shared by the tests.
#pragma once

#include <handoff/actor_options.hpp>

#include <malloc.h>

#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <latch>
#include <thread>
#include <vector>

namespace handoff::test {

// Options for a bounded actor.
inline actor_options bounded(std::uint32_t capacity, full_policy policy = full_policy::block,
                             std::chrono::nanoseconds max_block = std::chrono::nanoseconds(0)) {
  actor_options o;
  o.capacity = capacity;
  o.on_full = policy;
  o.max_block = max_block;
  return o;
}

// An eager coroutine that nobody awaits; the tests observe it through what it writes.
struct fire_and_forget {
  struct promise_type {
    fire_and_forget get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

// Polls pred every millisecond until it holds or `limit` passes; returns its last value.
// The one way the tests wait for state another thread changes (never a bare sleep).
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return pred();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Bytes the C allocator has handed out and not got back (small blocks and mmapped ones,
// all arenas). Sanitizer builds replace the allocator, and mallinfo2 does not see theirs.
inline std::size_t heap_in_use() noexcept {
  const struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
}

// Allocations made through operator new in this binary so far (the unit tests replace it
// with a counting one: allocation_counter.cpp).
long allocations_so_far() noexcept;

// Runs body(i) on n threads, started together, and joins them.
template <class Body>
void run_threads(int n, Body body) {
  std::vector<std::jthread> threads;
  threads.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) threads.emplace_back([&body, i] { body(i); });
}

// A thread that owns an actor by sitting inside one of its handlers until release().
// `post(hold)` must post a handler to the actor that calls hold() first; the constructor
// returns once that handler is running, so the actor is busy from then on.
class owner_thread {
 public:
  template <class Post>
  explicit owner_thread(Post post)
      : thread_([this, post] {
          post([this] {
            entered_.count_down();
            gate_.wait();
          });
        }) {
    entered_.wait();
  }
  owner_thread(const owner_thread&) = delete;
  owner_thread& operator=(const owner_thread&) = delete;
  ~owner_thread() {
    release();
    join();
  }

  void release() {
    if (!released_) gate_.count_down();
    released_ = true;
  }
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  // The owning thread's id (kept after join()).
  [[nodiscard]] std::thread::id id() const noexcept { return id_; }

 private:
  std::latch entered_{1};
  std::latch gate_{1};
  bool released_ = false;
  std::thread thread_;
  std::thread::id id_ = thread_.get_id();
};

// Busy work the optimizer cannot remove: a handler that takes a while without sleeping.
inline void burn(int iterations) {
  for (int i = 0; i < iterations; ++i) asm volatile("" ::: "memory");
}

}  // namespace handoff::test
