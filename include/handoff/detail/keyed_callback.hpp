// keyed_mutex::lock_async (keyed_mutex.hpp): the callback waiter, and the request that
// grants a free key at once or queues the waiter for the holder's unlock to complete. It
// reaches the mutex's table, hash and lookup as its friend.
#pragma once

#include <cstddef>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_shard.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/node_pool.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::detail {

template <class Mutex>
struct keyed_callback {
  using key_type = typename Mutex::key_type;
  using guard = typename Mutex::guard;

  // lock_async(key, f) on m: see its contract in keyed_mutex.hpp.
  template <class F>
  static void start(Mutex& m, const key_type& key, F&& f) {
    const std::size_t h = mix_hash(m.hash_(key));  // first: a throw leaves nothing to free
    auto* w = new_node<waiter_of<std::decay_t<F>>>(std::forward<F>(f));
    lock_shard& s = m.table_.shard_for(h);
    lock_entry* e;
    try {
      e = m.lock_entry_of(s, h, key);
    } catch (...) {
      delete_node(w);
      throw;
    }
    if (const grant g = m.table_.acquire_or_enqueue(s, e, w, no_deadline); g.token != 0) {
      m.table_.grant_at_once(w, g);  // free: run f here, as a grant would
      if (tls.top == nullptr) {
        // At top level: run it as a later grant runs, as a task under a sentinel frame, so
        // that f counts as inside a handler (a post to a full bounded actor throws at once
        // instead of waiting for room while f holds the key) and what f makes runnable
        // runs after it. schedule() at top level runs it before returning.
        complete_waiter(w);
      } else {
        waiter_of<std::decay_t<F>>::run(w);  // inside a handler already: run it now
      }
    }
  }

  template <class Fn>
  struct waiter_of final : waiter {
    template <class A>
      requires(!std::is_same_v<std::remove_cvref_t<A>, waiter_of>)
    // NOLINTNEXTLINE(bugprone-forwarding-reference-overload): constrained not to take waiter_of
    explicit waiter_of(A&& a) : fn(std::in_place, std::forward<A>(a)) {
      type = kind::callback;
      complete = &run;
      destroy = &free;
    }
    std::optional<Fn> fn;  // destroyed once called: what it captured (a guard) goes with it
    static void run(waiter* base) {
      auto* self = static_cast<waiter_of*>(base);
      const grant g = self->table->outcome(self);
      invoke(*self->fn, g.token != 0 ? Mutex::make_guard(self->table, g) : guard());
      self->fn.reset();  // not when the node goes: a holder may still keep it queued
      release_waiter(self);
    }
    static void free(waiter* w) noexcept { delete_node(static_cast<waiter_of*>(w)); }
  };

  template <class Fn>
  static void invoke(Fn& f, guard g) noexcept {
    try {
      f(std::move(g));
    } catch (...) {
      report_to_stderr(std::current_exception(), "a keyed_mutex::lock_async callback");
    }
  }
};

}  // namespace handoff::detail
