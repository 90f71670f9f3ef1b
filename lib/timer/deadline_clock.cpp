// The timers' deadline clock (lib/timer/deadline_clock.hpp): its slow path.
#include "deadline_clock.hpp"

#include <algorithm>
#include <atomic>
#include <fstream>
#include <mutex>
#include <string>

#include "handoff/detail/clock.hpp"

namespace handoff::detail {
namespace {

__extension__ using u128 = unsigned __int128;
__extension__ using i128 = __int128;

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
  void (*first_sample_pause)() = nullptr;  // a test's preemption (deadline_clock_reset_for_test)
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

#if defined(__x86_64__)
// A steady_clock read on each side of a counter read. Unpreempted, the two reads lie a
// few hundred ns apart; wider than sample_slack_ns, the thread was descheduled between
// them and the pair says little about when the counter was read.
constexpr std::int64_t sample_slack_ns = 20'000;
struct sample {
  std::int64_t before;
  std::uint64_t tsc;
  std::int64_t after;
  [[nodiscard]] bool tight() const noexcept { return after - before <= sample_slack_ns; }
};
sample take_sample(void (*pause)() = nullptr) noexcept {
  sample s{};
  s.before = now_ns();
  s.tsc = __rdtsc();
  if (pause != nullptr) pause();
  s.after = now_ns();
  return s;
}

// Under c.m: the first sample, and whether the counter may be used at all (if not, off
// for good: every later call is one steady_clock read, without the mutex). Its time is
// the read before the counter and the calibration's is the read after it, so that the
// rate is never measured low (a low rate reads early); a pair that was preempted is
// taken again, since it would make the rate high (late). False: no tight pair, the next
// rebase tries again.
bool sample_first(calibration& c) noexcept {
  for (int tries = 0; tries < 8; ++tries) {
    const sample s = take_sample(c.first_sample_pause);
    if (!s.tight()) continue;
    c.sampled = true;
    c.first_tsc = s.tsc;
    c.first_ns = s.before;
    if (!counter_is_clock_source()) c.off.store(true, std::memory_order_relaxed);
    return true;
  }
  return false;
}
#endif

}  // namespace

void deadline_clock_start() noexcept {
#if defined(__x86_64__)
  calibration& c = shared();
  std::lock_guard g(c.m);
  if (!c.sampled) (void)sample_first(c);
#endif
}

std::int64_t deadline_rebase(deadline_base& b) noexcept {
#if defined(__x86_64__)
  calibration& c = shared();
  if (c.off.load(std::memory_order_relaxed)) {  // not the clock source, or a check failed
    b.span = 0;
    return now_ns();
  }
  const sample s = take_sample();
  const std::int64_t after = s.after;  // >= steady_clock at s.tsc
  if (b.span != 0) {
    // Check the rate against steady_clock, however long since the last rebase: the base's
    // line must reach s.before (<= steady_clock at s.tsc) within what the margin covers, a
    // rate low by margin_ns per rebase_ns. Within a rebase that is the line itself, past
    // where it was used; a thread that rebases rarely checks the same share of the time
    // since (its line was used only over the first rebase_ns of it).
    const std::uint64_t dt = s.tsc - b.tsc;  // huge if the counter is behind the base: passes
    const i128 estimate = static_cast<i128>((static_cast<u128>(dt) * b.mult) >> 32);
    const std::int64_t elapsed = s.before - (b.ns - margin_ns);  // <= the time between the counters
    const std::int64_t covered = std::max(margin_ns, elapsed / (rebase_ns / margin_ns));
    if (estimate + covered < elapsed) [[unlikely]] {
      c.off.store(true, std::memory_order_relaxed);
      c.mult.store(0, std::memory_order_release);
    }
  }
  b.span = 0;
  std::uint64_t m = c.mult.load(std::memory_order_acquire);
  if (m == 0 && !c.off.load(std::memory_order_relaxed)) {
    std::lock_guard g(c.m);
    if (!c.sampled) {
      (void)sample_first(c);
    } else if (s.tight() && after - c.first_ns >= calibrate_ns && s.tsc > c.first_tsc &&
               !c.off.load(std::memory_order_relaxed)) {
      // Both samples tight: over calibrate_ns the rate is within 1e-5 (high, if anything),
      // 10 ns over a rebase, well inside margin_ns.
      m = static_cast<std::uint64_t>((static_cast<u128>(after - c.first_ns) << 32) / (s.tsc - c.first_tsc));
      c.mult.store(m, std::memory_order_release);
    }
  }
  if (m == 0) return after;
  b.tsc = s.tsc;
  b.mult = m;
  b.span = static_cast<std::uint64_t>((static_cast<u128>(rebase_ns) << 32) / m);
  b.ns = after + margin_ns;
  return b.ns;
#else
  (void)b;
  return now_ns();
#endif
}

void deadline_clock_reset_for_test(void (*first_sample_pause)(), double rate_scale) noexcept {
  calibration& c = shared();
  std::lock_guard g(c.m);
  const std::uint64_t measured = c.mult.load(std::memory_order_acquire);
  c.off.store(false, std::memory_order_relaxed);
  c.first_sample_pause = first_sample_pause;
  if (rate_scale > 0 && measured != 0) {
    c.mult.store(static_cast<std::uint64_t>(static_cast<double>(measured) * rate_scale), std::memory_order_release);
    return;  // calibrated: no samples needed
  }
  c.sampled = false;
  c.mult.store(0, std::memory_order_release);
}

bool deadline_clock_fast() noexcept { return shared().mult.load(std::memory_order_acquire) != 0; }

}  // namespace handoff::detail
