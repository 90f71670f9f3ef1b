// Test access to the protocol steps that actor types keep protected, and to the table
// behind a keyed_mutex.
#pragma once

#include <handoff/detail/actor_base.hpp>
#include <handoff/detail/lock_table.hpp>

#include <cstdint>
#include <deque>
#include <map>
#include <utility>

namespace handoff::detail {

struct actor_core_access {
  using status = actor_base::drain_status;
  using cursor = actor_base::drain_cursor;
  using admission = actor_base::admission;

  // The two halves of a send, as a sender does them: count the message (its admission
  // says owner, or queued with the ticket enqueue() needs), then store it.
  static admission count_one(actor_base& a) { return a.try_acquire(); }
  static void enqueue(actor_base& a, admission t, message* m) { a.enqueue(t, m); }
  // Both halves at once, or the first with its ticket kept for enqueue() below, which
  // stores the oldest kept ticket's message (tests that count, then enqueue in order).
  // Winning the count means nothing was counted before: the actor's kept tickets (of an
  // earlier actor at the same address, say) are dropped.
  static bool try_acquire(actor_base& a) {
    const admission t = a.try_acquire();
    if (t == admission::owner) {
      tickets().erase(&a);
      return true;
    }
    tickets()[&a].push_back(t);
    return false;
  }
  static void enqueue(actor_base& a, message* m) {
    std::deque<admission>& kept = tickets()[&a];
    const admission t = kept.front();
    kept.pop_front();
    a.enqueue(t, m);
  }
  static bool try_release(actor_base& a, std::uint64_t n) { return a.try_release(n); }
  static void enqueue_first(actor_base& a, message* m) { a.enqueue_first(m); }
  static void drain_now(actor_base& a, std::uint64_t ran) { a.drain_now(ran); }
  static std::uint64_t count(const actor_base& a) { return a.core_.pending(); }
  static mailbox_node* pop(actor_base& a) { return a.core_.pop(); }
  // The winner's release attempt after its inline message (false: drain from `uncounted`).
  static bool try_release_inline(actor_base& a, std::uint64_t& uncounted) { return a.try_release_inline(uncounted); }
  // The owner's drain, one step at a time.
  static cursor start_turn(actor_base& a, std::uint64_t ran, drain_frame& f) { return a.start_turn(ran, 0, f); }
  static status step(actor_base& a, cursor& c) { return a.drain_step(c); }

 private:
  static std::map<const actor_base*, std::deque<admission>>& tickets() {
    thread_local std::map<const actor_base*, std::deque<admission>> kept;
    return kept;
  }
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
