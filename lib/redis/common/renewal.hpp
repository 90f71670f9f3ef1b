// Renewing a lease on the server (private to lib/redis): the one rule that the lock
// client's extend() and watchdog and the actors' renewer share. A lease is renewed a third
// into it; a renewal that got no reply is tried again a third of the lease later; a lease
// is lost only when the server says the token is not ours (the script's reply 0), never
// because a reply did not come (the lease may still run on the server).
#pragma once

#include <cstdint>

#include "connection.hpp"
#include "handoff/detail/clock.hpp"

namespace handoff::redis::detail {

// A lease is renewed when this fraction of it has passed (a failed renewal is retried as
// much later): two more tries fit before the lease would run out, so one lost round trip or
// a short server stall never loses it.
constexpr std::int64_t renew_fraction = 3;

// How long after a lease was granted or renewed it is renewed again, and how long after a
// renewal that failed the next one is tried: a third of the lease, in the lease's unit.
constexpr std::int64_t renewal_interval(std::int64_t lease) noexcept { return lease / renew_fraction; }

// What one renewal found.
struct renewal {
  std::int64_t sent;  // steady ns, taken before the request left: no later than the server renewed
  bool renewed;       // false: the server says the token is not ours any more (lost)

  // When the renewed lease of `lease_ns` ends on this process's clock: no later than on the
  // server's, since it counts from `sent`.
  [[nodiscard]] std::int64_t valid_until(std::int64_t lease_ns) const noexcept {
    return handoff::detail::add_saturating(sent, lease_ns);
  }
};

// What a renewal sent at `sent` found from its script's reply `r` (1: renewed; anything
// else: not ours).
inline renewal renewal_of(std::int64_t sent, const redisReply& r) noexcept {
  return {sent, r.type == REDIS_REPLY_INTEGER && r.integer == 1};
}

}  // namespace handoff::redis::detail
