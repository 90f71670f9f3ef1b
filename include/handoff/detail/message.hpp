// What an actor's mailbox holds: a message (a node that runs or destroys itself), a batch
// of them built before it is sent (one node: detail/batch_node.hpp), and the thread's
// carry slot for a message that wins an idle actor inside a handler (detail/actor_base.hpp
// uses all three).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <type_traits>
#include <utility>

#include "handoff/detail/mpsc_queue.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/detail/tls_model.hpp"

namespace handoff::detail {

class actor_base;

// The owner's tally of its turn, which a message's invoke may advance: a batch's node runs
// several messages in one invoke (detail/batch_node.hpp). Touched only by the owner.
struct turn_tally {
  std::uint64_t uncounted;  // run but not yet subtracted from the count
  std::uint64_t turn;       // run in this turn (the owner's inline message included)
  std::uint64_t limit;      // the drain's limits are checked once turn >= limit (0: every message)
};

// A mailbox entry. `invoke` runs the message (turn != nullptr) or only destroys it (nullptr),
// and frees the node once no message of it is left. A node that runs k > 1 messages adds
// k - 1 to turn->uncounted and turn->turn (the drainer counts one). It returns false only
// for the destructor's marker, after which the drainer must not touch the actor again.
struct message : mailbox_node {
  using invoke_fn = bool (*)(message*, actor_base*, turn_tally* turn);
  invoke_fn invoke = nullptr;
};

// The source named when a handler's exception has no hook to go to.
inline constexpr const char* handler_source = "an actor handler";

// The thread's carry slot: the first message of one actor this thread won by a nested
// send, held until the run queue starts that actor's turn. Touched only by its thread.
inline constexpr std::size_t carry_size = 64;
inline constexpr std::size_t carry_align = 16;
struct carry_slot {
  const runnable* actor;  // whose message `storage` holds; nullptr: the slot is free
  // The actor's turn (actor_base::run_carried_turn): moves the message out of `storage`,
  // frees the slot, runs the message, then releases or drains the actor. Returns true.
  bool (*run)(actor_base*) noexcept;
  alignas(carry_align) unsigned char storage[carry_size];
};
HANDOFF_TLS_MODEL extern constinit thread_local carry_slot carried;

// Whether a message of type T can be carried: it fits, and moving it out cannot throw.
constexpr bool fits_carry_slot(std::size_t size, std::size_t align) noexcept {
  return size <= carry_size && align <= carry_align;
}
template <class T>
constexpr bool carriable() noexcept {
  return fits_carry_slot(sizeof(T), alignof(T)) && std::is_nothrow_move_constructible_v<T> &&
         std::is_nothrow_destructible_v<T>;
}

// A carry slot's run function, first: moves the message out and frees the slot for the handler's sends.
template <class T>
T take_carried() noexcept {
  T* held = std::launder(reinterpret_cast<T*>(carried.storage));
  T message(std::move(*held));
  held->~T();
  carried.actor = nullptr;
  return message;
}
struct no_carry {};  // submit()'s `carry` argument for a message that is never carried

// A batch built before it is sent (detail/batch_node.hpp): one node holding `size` messages.
struct message_batch {
  message* node = nullptr;
  std::uint64_t size = 0;
};

}  // namespace handoff::detail
