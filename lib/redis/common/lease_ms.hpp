// A handoff::lease as the milliseconds a Redis PX takes (private to lib/redis): the lock
// client and the actors send every lease through here (renewal.hpp renews it).
#pragma once

#include <algorithm>
#include <cstdint>

namespace handoff::redis::detail {

constexpr std::int64_t ms_ns = 1'000'000;
// The longest lease sent to the server: 2^42 ms, about 139 years. Redis rejects a PX past
// its clock's range; this is far inside it and far beyond any real lease ("never").
constexpr std::int64_t max_lease_ms = std::int64_t{1} << 42;

// A lease in nanoseconds to whole milliseconds for PX: rounded up, at least 1, at most
// max_lease_ms.
constexpr std::int64_t lease_to_ms(std::int64_t lease_ns) noexcept {
  const std::int64_t ms = lease_ns / ms_ns + (lease_ns % ms_ns != 0 ? 1 : 0);
  return std::clamp<std::int64_t>(ms, 1, max_lease_ms);
}

}  // namespace handoff::redis::detail
