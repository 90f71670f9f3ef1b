// The error a send to a bounded actor reports when its mailbox stays full (see the
// capacity in actor_options.hpp).
#pragma once

#include <stdexcept>

namespace handoff {

// Thrown by post/send/ask/defer on a full mailbox: at once under full_policy::fail or
// from inside a handler, after max_block under full_policy::block. Nothing was sent.
class mailbox_full : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace handoff
