// The hook an actor's destructor calls first, before its shut-down: how a service that
// holds raw pointers to actors (the timer service, handoff/timer_service.hpp) learns that
// one is going, without a field in the actor and without a cost when no such service
// exists (one relaxed load of a null function pointer).
//
// The hook is process-wide and installed by the timer service while at least one exists
// (lib/timer/registry.cpp); it receives the address of the actor's base (the address of
// the actor<State> or basic_actor: their base is their first and only one) and returns
// once no service will touch that actor again.
#pragma once

#include <atomic>

namespace handoff::detail {

using actor_destroy_hook = void (*)(const void* actor) noexcept;

// Null while no service is installed. Relaxed suffices: a service that holds a pointer to
// an actor got it from a schedule that happened before the actor's destruction, and the
// service installed the hook before that schedule; the hook guards what it reads with its
// own locks.
inline std::atomic<actor_destroy_hook> actor_destroy_hook_fn{nullptr};

inline void run_actor_destroy_hook(const void* actor) noexcept {
  if (actor_destroy_hook h = actor_destroy_hook_fn.load(std::memory_order_relaxed)) h(actor);
}

}  // namespace handoff::detail
