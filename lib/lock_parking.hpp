// Parking and completing lock waiters (lib/lock_parking.cpp): the waiter-state CASes, the
// blocking wait of a thread, and where coroutine and callback waiters run.
#pragma once

#include <cstdint>

#include "handoff/detail/lock_entry.hpp"

namespace handoff::detail {

class task_thread;

// The holder's side of a hand-off: grants w unless it gave up (true: granted). Wakes a
// sleeping thread. Asserts that w was waiting or sleeping.
bool try_grant(waiter* w) noexcept;
// The requester's (or the timer's) side of giving up: true if it cancelled w, false if a
// grant won the race. `seen` is the state it expects: waiting or sleeping.
bool cancel_wait(waiter* w, std::uint32_t seen) noexcept;
// Blocks the calling thread until w is granted (true) or `deadline` passes and the wait is
// cancelled (false). Spins briefly, then sleeps on the futex.
bool wait_for_grant(waiter* w, std::int64_t deadline) noexcept;

// While non-null on a thread (the lease timer's), complete_waiter posts waiters to this
// completion thread instead of running them there. Owned by its thread.
void redirect_completions(task_thread* to) noexcept;

}  // namespace handoff::detail
