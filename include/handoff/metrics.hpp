// handoff::metrics_sink: where handoff reports its counters and wait times, for a metrics
// system (Prometheus, StatsD, OpenTelemetry) to export. The library never exports anything
// itself: install a sink, per keyed_mutex (keyed_mutex_options::metrics), per Redis client
// (redis::options::metrics), or process-wide (set_metrics_sink), and the library calls it.
//
//   struct my_sink final : handoff::metrics_sink {
//     void add(handoff::metric_counter c, std::uint64_t n) noexcept override { ... }
//     void observe_wait(handoff::metric_wait w, std::chrono::nanoseconds d) noexcept override { ... }
//   };
//   my_sink sink;
//   handoff::set_metrics_sink(&sink);                       // everything without its own sink
//   handoff::keyed_mutex<> players({.metrics = &sink});     // or one mutex
//
// Which sink gets an event: the object's own sink if it has one, else the process-wide
// sink at the moment of the event, else nobody. The optional target handoff::prometheus
// (handoff/prometheus.hpp) is a ready-made sink that serves the figures over HTTP.
//
// Cost: events are reported only on slow paths: a lock request that had to wait, a wait
// that timed out, a lease that ran out, a Redis round trip, a full mailbox, a timer's
// send (its lateness, from the batch's one clock reading; the sink is read once per
// batch). The
// uncontended keyed lock/unlock and an actor post on a mailbox with room reach no sink and
// read no clock, sink or not. On a slow path, with no sink set, an event costs one
// pointer load (the process-wide sink) besides the object's own statistics (a relaxed
// counter add; a clock read for a wait). Wait times therefore describe the requests that
// waited (queued behind a holder), never the ones that found their key free.
//
// Not promised: events reach a sink in the order they happened, or at all for a sink
// swapped while the event was being reported (a report in flight may still go to the old
// sink: keep a sink alive until every object that may report to it is gone).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace handoff {

// Counted events. Prometheus names (handoff::prometheus) in brackets.
enum class metric_counter : std::uint8_t {
  // A timed keyed lock request (try_lock_for/try_lock_until, async_lock with a wait time)
  // that ended without the key [handoff_keyed_lock_timeouts_total].
  keyed_lock_timeouts,
  // A keyed lease that ran out: the lease timer took the key from its holder
  // [handoff_keyed_lease_expiries_total].
  keyed_lease_expiries,
  // A post or try_post that found an actor's bounded mailbox full
  // [handoff_actor_mailbox_full_total].
  mailbox_full,
  // A command (or pipelined pair) sent to Redis and answered [handoff_redis_round_trips_total].
  redis_round_trips,
  // A Redis connection opened to replace one that broke or that the server closed, the
  // subscriber's included [handoff_redis_reconnects_total].
  redis_reconnects,
  // The subscriber connection dropped: grant notifications sent until it is back are lost
  // (waiters find their grants by re-checking) [handoff_redis_notifications_lost_total].
  redis_notifications_lost,
  // A Redis waiter asked the server again because no notification answered in time
  // (its re-check interval, or the holder's lease ran out) [handoff_redis_rechecks_total].
  redis_rechecks,
};
inline constexpr std::size_t metric_counter_count = 7;

// Wait-time distributions (histograms).
enum class metric_wait : std::uint8_t {
  // From a keyed lock request joining its key's queue to its grant; granted waits only
  // [handoff_keyed_lock_wait_seconds].
  keyed_lock,
  // From a blocking Redis lock request's first attempt to its grant, for the requests the
  // first attempt did not grant [handoff_redis_lock_wait_seconds].
  redis_lock,
  // How late a timer service sent a due message: its batch's clock reading minus the
  // deadline (handoff::timer_lateness) [handoff_timer_lateness_seconds].
  timer_lateness,
};
inline constexpr std::size_t metric_wait_count = 3;

// The interface a metrics system implements. Both functions may be called from any
// thread, concurrently, including a timer service's driver, a Redis client's background
// thread and threads inside a keyed_mutex or an actor's protocol: they must be thread-safe,
// must not throw, must not block for long (a lock wait is reported by the waiter itself,
// but a timeout or lease expiry is reported by the timer service's driver that every
// lease on that service depends on), and must not call back into the object reporting
// (no locking from inside add()).
class metrics_sink {
 public:
  metrics_sink() = default;
  metrics_sink(const metrics_sink&) = delete;
  metrics_sink& operator=(const metrics_sink&) = delete;
  virtual ~metrics_sink() = default;

  // `n` more events of kind c (n >= 1).
  virtual void add(metric_counter c, std::uint64_t n) noexcept = 0;
  // One wait of kind w that lasted `waited` (>= 0).
  virtual void observe_wait(metric_wait w, std::chrono::nanoseconds waited) noexcept = 0;
};

// Thread-safe, never blocks or allocates. Installs the process-wide sink (nullptr: none):
// every object without a sink of its own reports its next events to it. The sink must
// stay alive until it is replaced and every report that may have read it has returned
// (in practice: until the objects that report to it are gone, or for the whole process).
void set_metrics_sink(metrics_sink* sink) noexcept;
// Thread-safe, never blocks: the process-wide sink, or nullptr.
[[nodiscard]] metrics_sink* global_metrics_sink() noexcept;

namespace detail {
// The sink an event goes to: the object's own, else the process-wide one (or nullptr).
inline metrics_sink* sink_or_global(metrics_sink* own) noexcept { return own != nullptr ? own : global_metrics_sink(); }
// Reports n events of kind c, if anyone listens.
inline void count_event(metrics_sink* own, metric_counter c, std::uint64_t n = 1) noexcept {
  if (metrics_sink* s = sink_or_global(own)) s->add(c, n);
}
}  // namespace detail

}  // namespace handoff
