// The timers' deadline clock (lib/timer/deadline_clock.hpp): its slow path.
#include "deadline_clock.hpp"

#include <atomic>
#include <fstream>
#include <mutex>
#include <string>

#include "handoff/detail/clock.hpp"

namespace handoff::detail {
namespace {

__extension__ using u128 = unsigned __int128;

// Process-wide; touched only by rebases: a thread's once per rebase_ns at most, or, where
// the counter is off, every call reading `off` (a line nobody writes after that).
struct calibration {
  std::mutex m;
  bool sampled = false;  // guarded by m, as the rest but the atomics
  std::uint64_t first_tsc = 0;
  std::int64_t first_ns = 0;
  // 0 until measured, and again for good once a check failed. Release/acquire: a thread
  // that reads it nonzero uses it alone (no other field).
  std::atomic<std::uint64_t> mult{0};
  std::atomic<bool> off{false};
};

calibration& shared() noexcept {
  static calibration c;
  return c;
}

bool counter_is_clock_source() noexcept {
  try {
    std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
    std::string s;
    f >> s;
    return s == "tsc";
  } catch (...) {
    return false;
  }
}

// Under c.m: the first sample, and whether the counter may be used at all (if not, off
// for good: every later call is one steady_clock read, without the mutex).
void sample_first(calibration& c, std::uint64_t t, std::int64_t ns) noexcept {
  c.sampled = true;
  c.first_tsc = t;
  c.first_ns = ns;
  if (!counter_is_clock_source()) c.off.store(true, std::memory_order_relaxed);
}

}  // namespace

void deadline_clock_start() noexcept {
#if defined(__x86_64__)
  calibration& c = shared();
  std::lock_guard g(c.m);
  if (!c.sampled) {
    const std::uint64_t t = __rdtsc();
    sample_first(c, t, now_ns());
  }
#endif
}

std::int64_t deadline_rebase(deadline_base& b) noexcept {
#if defined(__x86_64__)
  calibration& c = shared();
  if (c.off.load(std::memory_order_relaxed)) {  // not the clock source, or a check failed
    b.span = 0;
    return now_ns();
  }
  const std::int64_t before = now_ns();
  const std::uint64_t t = __rdtsc();
  const std::int64_t after = now_ns();  // >= steady_clock at t
  const std::uint64_t dt = t - b.tsc;
  if (b.span != 0 && dt < 2 * b.span) {
    // The old base's line, just past where it was used, must still be above steady_clock
    // at t: its error grows with the cycles, so it held everywhere it was used.
    const auto estimate = b.ns + static_cast<std::int64_t>((static_cast<u128>(dt) * b.mult) >> 32);
    if (estimate < before) [[unlikely]] {
      c.off.store(true, std::memory_order_relaxed);
      c.mult.store(0, std::memory_order_release);
    }
  }
  b.span = 0;
  std::uint64_t m = c.mult.load(std::memory_order_acquire);
  if (m == 0 && !c.off.load(std::memory_order_relaxed)) {
    std::lock_guard g(c.m);
    if (!c.sampled) {
      sample_first(c, t, after);
    } else if (after - c.first_ns >= calibrate_ns && t > c.first_tsc && !c.off.load(std::memory_order_relaxed)) {
      // Both samples read steady_clock after the counter (by at most ~100 ns): over
      // calibrate_ns the rate is within 1e-5, 10 ns over a rebase, well inside margin_ns.
      m = static_cast<std::uint64_t>((static_cast<u128>(after - c.first_ns) << 32) / (t - c.first_tsc));
      c.mult.store(m, std::memory_order_release);
    }
  }
  if (m == 0) return after;
  b.tsc = t;
  b.mult = m;
  b.span = static_cast<std::uint64_t>((static_cast<u128>(rebase_ns) << 32) / m);
  b.ns = after + margin_ns;
  return b.ns;
#else
  (void)b;
  return now_ns();
#endif
}

bool deadline_clock_fast() noexcept { return shared().mult.load(std::memory_order_acquire) != 0; }

}  // namespace handoff::detail
