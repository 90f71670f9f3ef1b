// Waiting for another thread that is a few instructions away: spin with the CPU's pause
// hint, then yield the core. Used where a waiter cannot block (the owner waiting for a
// counted message's enqueue) and by benchmarks that wait the same way.
#pragma once

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace handoff::detail {

// The window waited for (a sender between two adjacent instructions) lasts nanoseconds
// unless that thread was preempted. 64 pauses take a microsecond or two on the machines
// measured (docs/design.md, "The hand-off protocol"): far longer than the window, and
// short against a yield, which is what a preempted sender needs to get its core back.
inline constexpr unsigned spins_before_yield = 64;

// Call with 0, 1, 2, ... for successive waits of one episode.
inline void backoff(unsigned spins) noexcept {
  if (spins < spins_before_yield) {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  } else {
    std::this_thread::yield();
  }
}

}  // namespace handoff::detail
