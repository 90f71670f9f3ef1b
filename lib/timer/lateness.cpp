// The lateness histogram of a timer service (lateness.hpp).
#include "lateness.hpp"

#include <algorithm>
#include <bit>
#include <mutex>

namespace handoff::detail {

std::size_t lateness_recorder::bucket_of(std::uint64_t ns) noexcept {
  // Values below 2^sub_bits get a bucket each; above, the top bit picks the octave and
  // the sub_bits below it the quarter.
  if (ns < (1U << sub_bits)) return static_cast<std::size_t>(ns);
  const auto top = static_cast<std::size_t>(std::bit_width(ns)) - 1;  // >= sub_bits
  const auto quarter = static_cast<std::size_t>(ns >> (top - sub_bits)) & ((1U << sub_bits) - 1);
  return ((top - sub_bits + 1) << sub_bits) + quarter;
}

std::uint64_t lateness_recorder::upper_bound_of(std::size_t bucket) noexcept {
  if (bucket < (1U << sub_bits)) return bucket;
  const std::size_t top = (bucket >> sub_bits) + sub_bits - 1;
  const std::uint64_t quarter = bucket & ((1U << sub_bits) - 1);
  const std::uint64_t low = (std::uint64_t{1} << top) + (quarter << (top - sub_bits));
  return low + (std::uint64_t{1} << (top - sub_bits)) - 1;
}

void lateness_recorder::record(std::int64_t late_ns) noexcept {
  const std::uint64_t ns = late_ns < 0 ? 0 : static_cast<std::uint64_t>(late_ns);
  std::lock_guard g(lock_);
  ++counts_[bucket_of(ns)];
  ++count_;
  max_ = std::max(max_, ns);
}

timer_lateness lateness_recorder::take() noexcept {
  timer_lateness out;
  std::lock_guard g(lock_);
  out.count = count_;
  if (count_ == 0) return out;
  // The smallest bucket holding the rank; its upper bound, never above the maximum seen.
  auto quantile = [&](std::uint64_t per_mille) {
    const std::uint64_t rank = std::max<std::uint64_t>(1, (count_ * per_mille + 999) / 1000);
    std::uint64_t seen = 0;
    for (std::size_t b = 0; b < bucket_count; ++b) {
      seen += counts_[b];
      if (seen >= rank) return std::chrono::nanoseconds(static_cast<std::int64_t>(std::min(upper_bound_of(b), max_)));
    }
    return std::chrono::nanoseconds(static_cast<std::int64_t>(max_));
  };
  out.p50 = quantile(500);
  out.p99 = quantile(990);
  out.max = std::chrono::nanoseconds(static_cast<std::int64_t>(max_));
  counts_.fill(0);
  count_ = 0;
  max_ = 0;
  return out;
}

}  // namespace handoff::detail
