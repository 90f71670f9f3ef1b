// The keyed mutex's statistics (detail/lock_stats.hpp): what the lock table counts and
// reports on its slow paths, and the waiter count computed from the shards on demand.
#include <algorithm>
#include <chrono>
#include <cstddef>

#include "handoff/detail/lock_table.hpp"
#include "handoff/metrics.hpp"

namespace handoff::detail {

void lock_table::note_wait(const lock_entry* e, std::int64_t since) noexcept {
  const std::int64_t waited = std::max<std::int64_t>(0, now() - since);
  counters_.waits.fetch_add(1, std::memory_order_relaxed);  // a statistic (lock_counters)
  if (metrics_sink* s = sink_or_global(sink_))
    s->observe_wait(metric_wait::keyed_lock, std::chrono::nanoseconds(waited));
  if (recorder_ != nullptr && e != nullptr) recorder_->record(e, waited);
}

void lock_table::note_timeout() noexcept {
  counters_.timeouts.fetch_add(1, std::memory_order_relaxed);  // a statistic (lock_counters)
  count_event(sink_, metric_counter::keyed_lock_timeouts);
}

void lock_table::note_lease_expiry() noexcept {
  counters_.lease_expiries.fetch_add(1, std::memory_order_relaxed);  // a statistic (lock_counters)
  count_event(sink_, metric_counter::keyed_lease_expiries);
}

std::size_t lock_table::waiting() const noexcept {
  // The count is the holder plus the queued requests (lock_entry::own).
  const std::size_t queued = sum_entries([](const lock_entry* e) -> std::size_t {
    const std::uint64_t pending = e->own.pending();
    return pending > 1 ? pending - 1 : 0;
  });
  return queued + counters_.parked.load(std::memory_order_relaxed);  // a statistic
}

}  // namespace handoff::detail
