// The format of the data a client keeps under its key prefix (private to lib/redis):
// key names, value layouts and the scripts' protocol. A version that changes any of them
// changes data_format, and CHANGELOG.md says so. Each client claims the prefix when it
// starts (check_server, connection.hpp): it writes the marker if there is none, and
// refuses to run when the marker names another format, since two formats sharing a
// prefix would misread each other's mailboxes and counts.
#pragma once

#include <string_view>

namespace handoff::redis::detail {

// Format 1: builds from before the marker, which write none. Format 2: Redis actors drain
// in batches (per-message delivery counts in the actor's `delivered` hash). Format 3: an
// actor's count is its mailbox's length (no `count` key); only sweepers take over; delayed
// messages wait beside the pending sets.
inline constexpr std::string_view data_format = "3";
// The marker's key, after options::prefix: it stays while any client may use the prefix.
inline constexpr std::string_view format_marker = "format";
// The actors' pending set, after options::prefix (actor/actor_core.hpp): its presence with
// no marker means actors of format 1 have messages there.
inline constexpr std::string_view actor_pending_set = "actors:pending";
// Beside each pending set, the actors' delayed messages (actor/scripts.hpp).
inline constexpr std::string_view actor_delayed_set = "actors:delayed";
inline constexpr std::string_view actor_delayed_bodies = "actors:delayed:body";

}  // namespace handoff::redis::detail
