// handoff::redis::client_stats: what a Redis keyed_mutex's client counted since it was
// constructed (keyed_mutex::stats()). Vocabulary: no facade logic, so that the client's
// shared code (which counts) and the facade (which returns the snapshot) both include it.
#pragma once

#include <cstdint>

namespace handoff::redis {

// What a keyed_mutex's client did since it was constructed (keyed_mutex::stats()).
struct client_stats {
  client_stats(std::uint64_t trips, std::uint64_t reconnected, std::uint64_t lost, std::uint64_t checks) noexcept
      : round_trips(trips), reconnects(reconnected), notifications_lost(lost), rechecks(checks) {}
  std::uint64_t round_trips;         // commands (or pipelined pairs) sent and answered, or failed
  std::uint64_t reconnects;          // connections opened to replace one that broke or was closed
  std::uint64_t notifications_lost;  // subscriber connection drops: grants announced meanwhile were missed
  std::uint64_t rechecks;            // attempts a waiter repeated because no notification answered in time
};

}  // namespace handoff::redis
