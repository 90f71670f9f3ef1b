// What a Redis client counts (keyed_mutex::stats(), handoff/metrics.hpp): round trips,
// reconnects, lost notifications and re-checks, each also reported to the client's
// metrics sink (options::metrics, else the process-wide one). Private to lib/redis.
#pragma once

#include <atomic>
#include <cstdint>

#include "handoff/metrics.hpp"
#include "handoff/redis/client_stats.hpp"

namespace handoff::redis::detail {

struct client_counters {
  explicit client_counters(metrics_sink* s) noexcept : sink(s) {}

  void round_trip() noexcept { bump(round_trips_, sink, metric_counter::redis_round_trips); }
  void reconnect() noexcept { bump(reconnects_, sink, metric_counter::redis_reconnects); }
  void notifications_lost() noexcept { bump(lost_, sink, metric_counter::redis_notifications_lost); }
  void recheck() noexcept { bump(rechecks_, sink, metric_counter::redis_rechecks); }

  [[nodiscard]] client_stats snapshot() const noexcept {
    // relaxed: statistics, each read on its own; nothing is published through them.
    return client_stats(round_trips_.load(std::memory_order_relaxed), reconnects_.load(std::memory_order_relaxed),
                        lost_.load(std::memory_order_relaxed), rechecks_.load(std::memory_order_relaxed));
  }

  metrics_sink* const sink;  // options::metrics: nullptr for the process-wide sink

 private:
  static void bump(std::atomic<std::uint64_t>& c, metrics_sink* to, metric_counter m) noexcept {
    c.fetch_add(1, std::memory_order_relaxed);  // a statistic: see snapshot()
    handoff::detail::count_event(to, m);
  }
  std::atomic<std::uint64_t> round_trips_{0};
  std::atomic<std::uint64_t> reconnects_{0};
  std::atomic<std::uint64_t> lost_{0};
  std::atomic<std::uint64_t> rechecks_{0};
};

}  // namespace handoff::redis::detail
