// spin_lock: the test-and-test-and-set lock of the keyed mutex's table shards.
#pragma once

#include <atomic>

#include "handoff/detail/backoff.hpp"

namespace handoff::detail {

// Critical sections under it are a few loads and stores, never a system call or user code
// (pool allocation at most), so spinning beats parking.
class spin_lock {
 public:
  void lock() noexcept {
    // acquire; pairs with the release in unlock().
    if (!locked_.exchange(true, std::memory_order_acquire)) [[likely]]
      return;
    lock_contended();
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  // Out of line: the spin and its yield call would make every caller save registers.
  [[gnu::noinline]] void lock_contended() noexcept {
    for (unsigned spins = 0; locked_.exchange(true, std::memory_order_acquire);) {
      while (locked_.load(std::memory_order_relaxed)) backoff(spins++);
    }
  }

  std::atomic<bool> locked_{false};
};

}  // namespace handoff::detail
