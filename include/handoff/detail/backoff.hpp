// Waiting for another thread that is a few instructions away: spin with the CPU's pause
// hint, then yield the core. Used where a waiter cannot block (the owner waiting for a
// counted message's enqueue) and by benchmarks that wait the same way.
#pragma once

#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace handoff::detail {

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
