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
// (saturating); another clock's is measured from that clock's now, in integers where the
// time point fits in nanoseconds and saturating where it does not (time_point::max()).
template <class Clock, class Dur>
std::int64_t deadline_at(std::int64_t now, std::chrono::time_point<Clock, Dur> t) noexcept {
  using ns = std::chrono::nanoseconds;
  const auto since_epoch = t.time_since_epoch();
  const double since_ns = std::chrono::duration<double, std::nano>(since_epoch).count();
  if (since_ns >= static_cast<double>(no_deadline)) return no_deadline;
  if constexpr (std::is_same_v<Clock, std::chrono::steady_clock>) {
    return since_ns <= 0 ? 0 : to_ns_saturating(since_epoch);
  } else {
    if (since_ns <= static_cast<double>(std::numeric_limits<std::int64_t>::min())) return now;  // long past
    const std::int64_t at = std::chrono::ceil<ns>(since_epoch).count();
    const std::int64_t clock_now = std::chrono::duration_cast<ns>(Clock::now().time_since_epoch()).count();
    std::int64_t remaining = 0;
    if (__builtin_sub_overflow(at, clock_now, &remaining)) return at > clock_now ? no_deadline : now;
    return add_saturating(now, remaining);
  }
}

}  // namespace handoff::detail
