// Per-actor options: drain budget, executor and error hook.
//
// An actor without options (the default) drains on the threads that send to it, for as
// long as messages keep arriving, and reports exceptions from `post` handlers to stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>

#include "handoff/executor.hpp"

namespace handoff {

struct actor_options {
  // Where the actor continues draining when its owner has spent the budget, or when the
  // owner would otherwise wait for a sender that is between counting and enqueueing.
  // Must outlive the actor.
  executor_ref executor;

  // Budget of one drain turn: after this many messages (0: unlimited) or this much time
  // (0: unlimited), the owner hands the actor to `executor` and returns to its caller.
  // A budget without an executor is rejected (std::invalid_argument) at construction.
  std::uint32_t max_messages = 0;
  std::chrono::nanoseconds max_time{0};  // negative: rejected (std::invalid_argument)

  // Called, on the draining thread, with each exception thrown by a `post` handler or a
  // basic_actor handler (exceptions from `ask` handlers travel to their future instead).
  // A hook shared by several actors may be called concurrently. Empty: print to
  // stderr and continue. If the hook itself throws, that is printed and ignored. A handler
  // that destroyed its own actor and then throws is reported to stderr, not to the hook
  // (the options went with the actor).
  std::function<void(std::exception_ptr)> on_error;
};

}  // namespace handoff
