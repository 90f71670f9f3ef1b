// deadline_clock: the "now" that after(), rearm() and a fixed-delay timer's next tick add
// their duration to. Private to lib/timer/.
//
// A deadline must never be early, so this is an upper bound of steady_clock's now, not an
// estimate: at most about `margin_ns` plus a few hundred ns after it. Where the kernel's
// clock source is the CPU's time-stamp counter (x86-64, "tsc": synchronized across cores
// and at a constant rate, or the kernel would not use it), it is read from the counter at
// a third of steady_clock's cost (one rdtsc against the vDSO's fenced read and seqlock):
// each thread keeps a base pair (counter, steady_clock) and converts the cycles since it at
// a rate measured once per process; it reads steady_clock again every `rebase_ns` (or at
// its next call, if later) and checks that the rate keeps its estimate an upper bound (if
// it ever did not, the process falls back to steady_clock for good). The calibration's
// samples bracket the counter between two steady_clock reads and are taken again when a
// preemption separates them, so a rate is never measured low. Elsewhere, and for `calibrate_ns` after the process's
// first service was made (deadline_clock_start), it is steady_clock itself.
//
// The driver compares deadlines with steady_clock, never with this: an upper bound of now
// there would send early.
#pragma once

#include <cstdint>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace handoff::detail {

inline constexpr std::int64_t margin_ns = 2'000;          // above the rate's error over a rebase
inline constexpr std::int64_t rebase_ns = 1'000'000;      // a thread re-reads steady_clock this often
inline constexpr std::int64_t calibrate_ns = 10'000'000;  // the rate is measured over this at least

// A thread's base: deadline_now() = ns + ((counter - tsc) * mult >> 32) while
// counter - tsc < span. span 0: no base (the slow path reads steady_clock).
struct deadline_base {
  std::uint64_t tsc = 0;
  std::uint64_t span = 0;  // cycles in rebase_ns; (span * mult) stays below 2^63
  std::uint64_t mult = 0;  // ns per cycle, 32.32 fixed point
  std::int64_t ns = 0;     // steady_clock read after the counter, plus margin_ns
};
constinit inline thread_local deadline_base tl_deadline_base;

// Takes the calibration's first sample and reads the kernel's clock source (a file), so
// that no later call does: called where a service is made, not under its lock.
void deadline_clock_start() noexcept;

// Reads steady_clock, checks the old base, calibrates, and sets a new base if it can.
std::int64_t deadline_rebase(deadline_base& b) noexcept;

// >= steady_clock's now at the call (ns since its epoch). Thread-safe.
inline std::int64_t deadline_now() noexcept {
#if defined(__x86_64__)
  deadline_base& b = tl_deadline_base;
  const std::uint64_t dt = __rdtsc() - b.tsc;  // a counter behind the base wraps: rebase
  if (dt < b.span) [[likely]]
    return b.ns + static_cast<std::int64_t>((dt * b.mult) >> 32);
  return deadline_rebase(b);
#else
  return deadline_rebase(tl_deadline_base);
#endif
}

// For tests: starts the calibration over, as if no service had been made (the next
// deadline_clock_start() or rebase takes the first sample), with first_sample_pause
// called between the counter and steady_clock in that sample: a preemption there. Or,
// with rate_scale > 0 once a rate was measured, keeps it times rate_scale: a rate that
// is wrong. A thread keeps its base until its next rebase: read from a fresh thread.
void deadline_clock_reset_for_test(void (*first_sample_pause)() = nullptr, double rate_scale = 0) noexcept;

// Whether deadline_now() reads the counter now (false before calibration and where it
// falls back). For tests and stats.
bool deadline_clock_fast() noexcept;

}  // namespace handoff::detail
