// Test access to the protocol steps that actor types keep protected, and to the table
// behind a keyed_mutex.
#pragma once

#include <handoff/detail/actor_base.hpp>
#include <handoff/detail/actor_turn.hpp>
#include <handoff/detail/lock_table.hpp>

#include <cstdint>
#include <utility>

namespace handoff::detail {

struct actor_core_access {
  using status = actor_base::drain_status;
  using cursor = actor_base::drain_cursor;

  static bool try_acquire(actor_base& a) { return a.try_acquire() == actor_base::admission::owner; }
  static bool try_release(actor_base& a, std::uint64_t n) { return a.try_release(n); }
  static void enqueue(actor_base& a, message* m) { a.enqueue(m); }
  static void enqueue_first(actor_base& a, message* m) { a.enqueue_first(m); }
  static void drain_now(actor_base& a, std::uint64_t ran) { a.drain_now(ran); }
  static std::uint64_t count(const actor_base& a) { return a.core_.pending(); }
  // The hand-over's flags in the ownership word: the owner offers the drain, a successor claimed it.
  static bool offered(const actor_base& a) { return (a.core_.word() & lockfree_ownership::offer_bit) != 0; }
  static bool taken(const actor_base& a) { return (a.core_.word() & lockfree_ownership::taken_bit) != 0; }
  static std::uint64_t word(const actor_base& a) { return a.core_.word(); }
  // The protocol under an actor type that keeps actor_base a private base (actor, basic_actor).
  template <class Actor>
  static const actor_base& base(const Actor& a) {
    return (const actor_base&)a;  // NOLINT: a C-style cast is the one way to a private base
  }
  // The two halves of a mailbox push, and one pop, as the owner would do it.
  static mailbox_node* claim(actor_base& a, message* m) { return a.core_.mailbox().claim(m); }
  static void link(mailbox_node* prev, message* m) { mpsc_queue::link(prev, m); }
  static mailbox_node* pop(actor_base& a) { return a.core_.pop(); }
  // The winner's release attempt after its inline message (false: drain from `uncounted`).
  static bool try_release_inline(actor_base& a, std::uint64_t& uncounted) { return a.try_release_inline(uncounted); }
  // The owner's drain, one step at a time.
  static cursor start_turn(actor_base& a, std::uint64_t ran, drain_frame& f) { return a.start_turn(ran, 0, f); }
  static status step(actor_base& a, cursor& c) { return a.drain_step(c); }
};

// An actor_base with no state of its own, for driving the protocol directly.
struct probe : actor_base {
  probe() = default;
  explicit probe(actor_options o) : actor_base(std::move(o)) {}
};

// The table behind a keyed_mutex, for its manual clock (a friend of keyed_mutex).
struct lock_table_access {
  template <class M>
  static lock_table& table(M& m) {
    return m.table_;
  }
};

}  // namespace handoff::detail
