// The lock's lease clock (private to lib/redis): pure arithmetic on a client's options.
// It says which lease a request sets on the server (its own, the watchdog's, or, for a
// lease-less request granted by a release, the shorter of that and the heartbeat), and
// when a grant's lease ends on this process's clock: never later than on the server's,
// because it counts from a local time taken before the server granted.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../common/lease_ms.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/redis/options.hpp"

namespace handoff::redis::detail {

// A waiter's heartbeat deadline on the server is this many recheck_intervals: a waiter
// whose process died is dropped after missing that many re-checks, while one late
// re-check (a busy machine) never costs a live waiter its place.
constexpr std::int64_t missed_heartbeats = 3;

// Milliseconds to nanoseconds, saturating at no_deadline.
constexpr std::int64_t ms_to_ns(std::int64_t ms) noexcept {
  return ms >= handoff::detail::no_deadline / ms_ns ? handoff::detail::no_deadline : ms * ms_ns;
}

// When a grant's lease ends on this process's clock, and the lease it set on the server.
struct grant_clock {
  std::int64_t valid_until;  // steady ns
  std::int64_t px_ns;
};

// One client's leases. A lease of 0 ns is a lease-less request: the watchdog's.
struct lease_clock {
  explicit lease_clock(const options& o) noexcept
      : watchdog_ms(o.watchdog_lease.count()), recheck_ms(o.recheck_interval.count()),
        heartbeat_ms(missed_heartbeats * o.recheck_interval.count()) {}

  std::int64_t watchdog_ms;   // options::watchdog_lease
  std::int64_t recheck_ms;    // options::recheck_interval: how often a waiter re-checks
  std::int64_t heartbeat_ms;  // how long the server keeps a waiter after its last re-check

  // The lease a request sets when it takes the key itself, as PX.
  [[nodiscard]] std::int64_t lease_ms(std::int64_t lease_ns) const noexcept {
    return lease_ns == 0 ? watchdog_ms : lease_to_ms(lease_ns);
  }
  // The lease a hold keeps (and the watchdog renews): the request's, or the watchdog's.
  [[nodiscard]] std::int64_t hold_ns(std::int64_t lease_ns) const noexcept {
    return lease_ns == 0 ? watchdog_ms * ms_ns : lease_ns;
  }
  // The lease a release sets when it grants a queued request: the request's lease, or for
  // a lease-less one the shorter of the watchdog lease and the heartbeat (a waiter that
  // died just before it was granted holds the key no longer than a dead waiter blocks the
  // queue); the watchdog renews it to the full watchdog lease a third into it.
  [[nodiscard]] std::int64_t released_px(std::int64_t lease_ns) const noexcept {
    return lease_ns != 0 ? lease_ns : std::min(watchdog_ms, heartbeat_ms) * ms_ns;
  }
  // For an attempt sent at `sent` that found the key granted to it: by itself (`left_ms`
  // -1: the whole lease from then), or earlier by a release (`left_ms`: what PTTL said was
  // left).
  [[nodiscard]] grant_clock found(std::int64_t sent, std::int64_t lease_ns, std::int64_t left_ms) const noexcept {
    if (left_ms >= 0) return {handoff::detail::add_saturating(sent, ms_to_ns(left_ms)), released_px(lease_ns)};
    const std::int64_t lease = hold_ns(lease_ns);
    return {handoff::detail::add_saturating(sent, lease), lease};
  }
  // For a grant announced to a request whose last attempt was sent at `sent`: the lease
  // from `sent` plus the time the server says passed from that attempt to the grant.
  [[nodiscard]] grant_clock announced(std::int64_t sent, std::int64_t lease_ns, std::int64_t waited_ms) const noexcept {
    const std::int64_t px = released_px(lease_ns);
    return {handoff::detail::add_saturating(handoff::detail::add_saturating(sent, ms_to_ns(waited_ms)), px), px};
  }
};

}  // namespace handoff::redis::detail
