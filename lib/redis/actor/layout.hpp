// The names of an actor's keys on the server, and the shared helpers of lib/redis/actor
// (private to lib/redis).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "../common/connection.hpp"
#include "../common/format.hpp"
#include "../common/names.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::redis::detail {

// On a Redis Cluster every script of an actor touches its keys and a pending set (which
// sweepers read) in one hash slot: the actors are spread over actor_groups slot groups,
// each with a pending set of its own, and an actor's names carry its group's tag instead
// of its key (scripts.hpp gives the layout). A group is the unit a resharding moves, so
// 256 spread the actors over up to 256 primaries, while a sweep reads 256 sets.
constexpr std::size_t actor_groups = 256;
constexpr std::size_t slots_per_group = cluster_slots / actor_groups;

// The first slot of a group: the tag of that group's names is slot_tag(group_slot(g)).
constexpr std::uint16_t group_slot(std::size_t group) noexcept {
  return static_cast<std::uint16_t>(group * slots_per_group);
}

// The names of group `slot`'s keys start with this: prefix + "{" + its slot tag + "}:".
inline std::string group_prefix(std::string_view prefix, std::uint16_t slot) {
  std::string out(prefix);
  out += '{';
  out += slot_tag(slot);
  out += "}:";
  return out;
}

// The names of one actor's keys (scripts.hpp); `cluster`: on a Redis Cluster.
struct actor_names {
  actor_names(std::string_view prefix, std::string_view k, bool cluster) : key(k) {
    std::string base;
    if (cluster) {
      // The group of the slot the escaped key would hash to (it holds no brace).
      const std::string escaped = escape_key(k);
      const std::string group = group_prefix(prefix, group_slot(hash_slot(escaped) / slots_per_group));
      base = group + escaped + ":actor:";
      pending = group + std::string(actor_pending_set);
    } else {
      base = key_name(prefix, k, "actor:");
      pending = std::string(prefix) + std::string(actor_pending_set);
    }
    mailbox = base + "mailbox";
    owner = base + "owner";
    delivered = base + "delivered";
    dead = base + "dead";
    state = base + "state";
  }
  std::string key;  // the actor key itself (raw bytes): the pending set's member
  std::string mailbox, owner, delivered, dead, state;
  std::string pending;  // the pending set the actor is listed in while it has messages
};

// The delayed messages' set and records of the group whose pending set is `pending`
// (scripts.hpp): the same names with another ending.
struct delayed_names {
  explicit delayed_names(std::string_view pending) {
    const std::string_view base = pending.substr(0, pending.size() - actor_pending_set.size());
    set = std::string(base) + std::string(actor_delayed_set);
    bodies = std::string(base) + std::string(actor_delayed_bodies);
  }
  std::string set, bodies;
};

// True when this thread runs work of the library now: an in-process actor's handler, a
// keyed-mutex callback, a coroutine the library resumed, a task of the run queue, or a
// Redis handler (which runs under a frame of its own, see handler_frame). An actor won
// there never drains inside that work (continue_owned): no network round trip and no
// other actor's handler runs nested in a handler, and a chain of actors posting to each
// other cannot grow the stack.
inline bool inside_work() noexcept { return handoff::detail::tls.top != nullptr; }

inline std::string describe(std::string_view op, std::string_view key) {
  return std::string(op) + ' ' + handoff::detail::key_excerpt(key);
}

// An element "<id> <body>" split in two.
inline std::pair<std::string_view, std::string_view> split(std::string_view element, std::string_view what) {
  const std::size_t space = element.find(' ');
  if (space == std::string_view::npos) unexpected(what);
  return {element.substr(0, space), element.substr(space + 1)};
}

// Keys read per pending set and sweep: a process sees at most this many due actors of a
// set per sweep_interval (due actors of families it has no handler for included).
constexpr int sweep_batch = 256;
// Delayed messages moved per pending set and sweep. A sweep that reads a full batch of
// either sweeps again at once (the sweeper thread), so that 10,000 messages due at one
// instant wait for no more sweep intervals than one.
constexpr int delayed_batch = 1024;
// post_for's wait between attempts on a full mailbox: from 1 ms, doubling to 16 ms (a
// drain of a few messages on loopback frees room within a few ms).
constexpr std::chrono::milliseconds post_retry_min{1};
constexpr std::chrono::milliseconds post_retry_max{16};

}  // namespace handoff::redis::detail
