// How late a timer service sends its due messages: a histogram of send lateness (the
// batch's clock reading minus the deadline) for timer_stats::lateness, and the report of
// each one to a metrics sink (metric_wait::timer_lateness).
//
// Buckets are log-linear: four per power of two nanoseconds, so a quantile read from them
// is at most a quarter above the true one; the maximum is kept exactly. 256 buckets cover
// every int64 duration. The histogram is a window: take() reads it and starts a new one.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>

#include "handoff/detail/spin_lock.hpp"
#include "handoff/metrics.hpp"
#include "handoff/timer.hpp"

namespace handoff::detail {

class lateness_recorder {
 public:
  explicit lateness_recorder(metrics_sink* own) noexcept : own_(own) {}

  // The sink this batch reports to (the service's own, else the process-wide one): read
  // once per batch, so a service with no sink pays one load per batch, none per send.
  [[nodiscard]] metrics_sink* sink() const noexcept { return sink_or_global(own_); }
  // One message accepted `late_ns` after its deadline. Thread-safe (the recorder's lock;
  // the driver may hold a shard's lock, which the recorder's never waits for).
  void record(std::int64_t late_ns) noexcept;
  // The window since the last take(), and a new empty one. Thread-safe.
  [[nodiscard]] timer_lateness take() noexcept;

  static std::size_t bucket_of(std::uint64_t ns) noexcept;
  static std::uint64_t upper_bound_of(std::size_t bucket) noexcept;  // the largest ns in it

 private:
  static constexpr std::size_t sub_bits = 2;  // four buckets per power of two
  static constexpr std::size_t bucket_count = 64 << sub_bits;

  metrics_sink* const own_;  // set at construction, read by any batch
  spin_lock lock_;
  // Guarded by lock_.
  std::array<std::uint64_t, bucket_count> counts_{};
  std::uint64_t count_ = 0;
  std::uint64_t max_ = 0;
};

// Reports one send's lateness to `s` (the driving thread, no lock held).
inline void report_lateness(metrics_sink* s, std::int64_t late_ns) noexcept {
  if (s != nullptr) s->observe_wait(metric_wait::timer_lateness, std::chrono::nanoseconds(late_ns < 0 ? 0 : late_ns));
}

}  // namespace handoff::detail
