// Parking and completing lock waiters (lib/keyed/lock_parking.cpp): the waiter-state CASes, the
// blocking wait of a thread, and where coroutine and callback waiters run.
#pragma once

#include <atomic>
#include <cstdint>

#include "handoff/detail/lock_entry.hpp"

namespace handoff::detail {

class task_thread;

// The holder's side of a hand-off: grants w unless it gave up (true: granted). Wakes a
// sleeping thread. Asserts that w was waiting, sleeping or woken.
bool try_grant(waiter* w) noexcept;
// Eventual fairness, the releasing holder's side of freeing the key, under the shard lock:
// marks a thread's waiter woken so that it competes for the key. Returns the state found:
// waiting or sleeping (now woken; sleeping: the caller must wake_sleeper(w) while it holds
// a reference), woken (already competing: left so), or cancelled (gave up: left so).
std::uint32_t try_wake(waiter* w) noexcept;
// Wakes the thread asleep on w's state (after try_wake returned sleeping).
void wake_sleeper(waiter* w) noexcept;
// The requester's (or the timer's) side of giving up: true if it cancelled w, false if a
// grant won the race. `seen` is the state it expects: waiting or sleeping.
bool cancel_wait(waiter* w, std::uint32_t seen) noexcept;
// Blocks the calling thread until w is granted, woken (eventual fairness: the key was
// freed for it to compete), or `deadline` passes and the wait is cancelled; returns which
// of the three states it ended in. Spins briefly, then sleeps on the futex. Call again
// after a lost competition put w back to waiting.
std::uint32_t wait_for_turn(waiter* w, std::int64_t deadline) noexcept;

// A thin stripe's word (detail/thin_record.hpp): sleeps while `word` still holds `parked`
// (a thin-held word with its parked bit) until woken or `deadline` (steady_clock ns)
// passes; returns on spurious wake-ups too: the caller looks at the word again. The
// compare and the sleep are one step against wake_word(): a change of the word before the
// sleep is seen.
void park_on_word(std::atomic<std::uintptr_t>& word, std::uintptr_t parked, std::int64_t deadline) noexcept;
// Wakes every thread parked on `word`, after the word changed.
void wake_word(std::atomic<std::uintptr_t>& word) noexcept;

// While non-null on a thread (the lease timer's), complete_waiter posts waiters to this
// completion thread instead of running them there. Owned by its thread.
void redirect_completions(task_thread* to) noexcept;

}  // namespace handoff::detail
