// The keyed mutex's statistics as the key-independent lock table keeps them: event counts
// (lock_counters) and the interface through which it reports granted waits to the keyed
// part (wait_recorder, implemented by detail/longest_waits.hpp). Touched on slow paths
// only: a request that waited, a timeout, a lease expiry.
#pragma once

#include <atomic>
#include <cstdint>

#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/lock_shard.hpp"

namespace handoff::detail {

// Event counts of one keyed mutex, on a cache line of their own: they are bumped by
// waiting threads and the timer, and must not share a line with the table's hot fields.
// Relaxed: statistics, each read on its own; nothing is published through them.
struct alignas(cache_line_bytes) lock_counters {
  std::atomic<std::uint64_t> waits{0};
  std::atomic<std::uint64_t> timeouts{0};
  std::atomic<std::uint64_t> lease_expiries{0};
  // Threads parked on a thin stripe's word now (waiting() adds them): from a blocking
  // lock's first park until it takes the key or queues in the table.
  std::atomic<std::uint64_t> parked{0};
};

// Told of every granted wait, by the thread that waited (or resumed the waiter), while it
// holds the key: e is alive and its key stable. Must not throw or block for long.
class wait_recorder {
 public:
  wait_recorder() = default;
  wait_recorder(const wait_recorder&) = delete;
  wait_recorder& operator=(const wait_recorder&) = delete;
  wait_recorder(wait_recorder&&) = delete;
  wait_recorder& operator=(wait_recorder&&) = delete;
  virtual ~wait_recorder() = default;
  virtual void record(const lock_entry* e, std::int64_t waited_ns) noexcept = 0;
};

}  // namespace handoff::detail
