// How long a lock request may wait for its key: the one vocabulary of the requests of both
// keyed mutexes (handoff::keyed_mutex's lock table and handoff::redis::keyed_mutex's client).
#pragma once

#include <cstdint>

namespace handoff::detail {

// none:    one try, never queued (try_lock); the deadline is not read.
// until:   queued until the deadline (detail/clock.hpp); a deadline already past is one
//          try, as for none.
// forever: queued until granted (lock).
enum class wait_mode : std::uint8_t { none, until, forever };

}  // namespace handoff::detail
