// Per-actor options: drain budget, executor, error hook and mailbox capacity.
//
// An actor without options (the default) drains on the threads that send to it: the
// sender that finds it idle drains up to 256 messages, then the next sender that arrives
// at top level takes the drain over (with nobody arriving, the owner goes on). It accepts
// every message (its mailbox is unbounded) and reports exceptions from `post` handlers
// to stderr.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>

#include "handoff/executor.hpp"
#include "handoff/mailbox_full.hpp"

namespace handoff {

// What a send that must not fail (post, send, ask, defer) does when a bounded mailbox is
// full. try_post/try_send never wait and never throw: they return false.
enum class full_policy : unsigned char {
  block,  // wait for room, at most max_block (0: no limit), then throw mailbox_full
  fail,   // throw mailbox_full at once
};

struct actor_options {
  // Where the actor continues draining when its owner has spent the budget, or when the
  // owner would otherwise wait for a sender that is between counting and enqueueing.
  // Must outlive the actor.
  executor_ref executor;

  // Budget of one drain turn: after this many messages or this much time (0: no such
  // budget), the owner hands the actor to `executor` and returns to its caller. Without
  // an executor it offers the drain instead and goes on: the next sender that posts or
  // sends from outside any handler takes it over (it first waits for the handler running
  // then, for at most 1 ms: past that it leaves its message queued and returns), and the
  // owner returns once that successor has claimed it. An unbounded actor
  // without an executor whose options set neither budget drains at most 256 messages a
  // turn this way. A budget without an executor on a bounded actor is rejected
  // (std::invalid_argument) at construction.
  std::uint32_t max_messages = 0;
  std::chrono::nanoseconds max_time{0};  // negative: rejected (std::invalid_argument)

  // Called, on the draining thread, with each exception thrown by a `post` handler or a
  // basic_actor handler (exceptions from `ask` handlers travel to their future instead).
  // A hook shared by several actors may be called concurrently. Empty: print to
  // stderr and continue. If the hook itself throws, that is printed and ignored. A handler
  // that destroyed its own actor and then throws is reported to stderr, not to the hook
  // (the options went with the actor).
  std::function<void(std::exception_ptr)> on_error;

  // The most messages the actor holds at once, the one running included (0: unbounded).
  // A send that would exceed it counts nothing and follows `on_full`; try_post/try_send
  // return false. The owner of a bounded actor gives back room after every message (one
  // atomic per message more than an unbounded actor, which accounts once per batch).
  // Wherever the sender is inside a handler (of any actor, or a keyed-mutex callback or a
  // coroutine resumed by the library), a full mailbox throws mailbox_full at once whatever
  // the policy: that thread may hold the very actor that would make room, or one its
  // owner waits for, so waiting there could deadlock. async_ask on a full mailbox throws
  // mailbox_full from co_await. Destroying an actor is never refused.
  std::uint32_t capacity = 0;
  full_policy on_full = full_policy::block;
  // Under full_policy::block: how long a send waits for room (0: no limit). The waiting
  // thread first runs what its own run queue holds (deferred sends), then sleeps until the
  // owner makes room.
  std::chrono::nanoseconds max_block{0};  // negative: rejected (std::invalid_argument)
};

}  // namespace handoff
