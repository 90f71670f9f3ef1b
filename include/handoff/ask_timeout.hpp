// The error actor<State>::ask_for and ask_until report when the answer is not there by
// their deadline. A header of its own, so that the actor facades share it.
#pragma once

#include <stdexcept>

namespace handoff {

// Thrown by ask_for / ask_until when the deadline passed before the handler answered.
// The message was sent and still runs exactly once; its result (or exception) is
// dropped. A std::runtime_error, like folly's FutureTimeout: a deadline is an outcome of
// the system's load, not a programming error.
class ask_timeout : public std::runtime_error {
 public:
  ask_timeout() : std::runtime_error("handoff: ask timed out before the actor answered") {}
};

}  // namespace handoff
