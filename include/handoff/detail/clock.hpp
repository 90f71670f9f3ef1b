// One clock and one deadline convention for every timed call of the library.
//
// Time is std::chrono::steady_clock in nanoseconds since its epoch, as std::int64_t.
// A deadline is such an instant; `no_deadline` (INT64_MAX) means "never". Every
// conversion from a user's duration or time point saturates: a duration too long to add
// to now is no_deadline, a time point beyond the range is no_deadline, and a duration
// <= 0 (or a time point in the past) is now, which means "do not wait".
#pragma once

#include <chrono>
#include <cstdint>
#include <limits>
#include <type_traits>

namespace handoff::detail {

inline constexpr std::int64_t no_deadline = std::numeric_limits<std::int64_t>::max();

// steady_clock now, in nanoseconds. Never 0 and never no_deadline in practice.
inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// now + d, saturating at no_deadline; d < 0 counts as 0.
constexpr std::int64_t add_saturating(std::int64_t now, std::int64_t d) noexcept {
  if (d <= 0) return now;
  return d >= no_deadline - now ? no_deadline : now + d;
}

// A duration in nanoseconds, rounded up and saturating at no_deadline (negative: 0).
template <class Rep, class Period>
constexpr std::int64_t to_ns_saturating(std::chrono::duration<Rep, Period> d) noexcept {
  using ns = std::chrono::nanoseconds;
  if (d <= std::chrono::duration<Rep, Period>::zero()) return 0;
  if (std::chrono::duration<double, std::nano>(d).count() >= static_cast<double>(no_deadline)) return no_deadline;
  return std::chrono::ceil<ns>(d).count();
}

// The deadline `d` after `now` (see the overview).
template <class Rep, class Period>
constexpr std::int64_t deadline_after(std::int64_t now, std::chrono::duration<Rep, Period> d) noexcept {
  return add_saturating(now, to_ns_saturating(d));
}

// The deadline of a time point of any clock. A steady_clock time point converts exactly
// (saturating); another clock's is measured from its own now.
template <class Clock, class Dur>
std::int64_t deadline_at(std::int64_t now, std::chrono::time_point<Clock, Dur> t) noexcept {
  if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>) {
    const auto since_epoch = t.time_since_epoch();
    if (since_epoch <= Dur::zero()) return 0;
    return to_ns_saturating(since_epoch);
  } else {
    using dsec = std::chrono::duration<double>;
    using common = std::common_type_t<Dur, typename Clock::duration>;
    const auto c_now = Clock::now();
    // Near the ends of the range (time_point<system_clock, seconds>::max()), comparing or
    // subtracting in the common, finer duration would overflow: measure in double there.
    const dsec since_epoch(t.time_since_epoch());
    if (since_epoch >= dsec(common::max()) / 2 || since_epoch <= dsec(common::min()) / 2) {
      return deadline_after(now, since_epoch - dsec(c_now.time_since_epoch()));
    }
    if (t <= c_now) return now;
    return deadline_after(now, t - c_now);
  }
}

}  // namespace handoff::detail
