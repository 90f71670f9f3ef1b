// The error a send to a bounded actor reports when its mailbox stays full (see the
// capacity in actor_options.hpp), in this process and across processes
// (handoff::redis::actor_system, whose capacity is in redis/actor_system.hpp). A header of
// its own, so that both actor facades share it without including each other.
#pragma once

#include <stdexcept>

namespace handoff {

// Thrown by post/send/ask/defer on a full mailbox: at once under full_policy::fail or
// from inside a handler, after max_block under full_policy::block. Thrown by
// redis::actor_system::post and post_for on a mailbox at its capacity. Nothing was sent.
// A std::runtime_error, not a redis::error: a full mailbox is the actor's bound, not a
// Redis failure.
class mailbox_full : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace handoff
