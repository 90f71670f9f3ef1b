// The keyed mutex's thin path, for a key type (protocol in detail/thin_record.hpp): the
// uncontended lock (one CAS on the stripe's word), the contended one (a short spin on
// another thread's holder; under eventual fairness, a blocking lock then parks on the
// word; else, or after fair_after, the table), and inflating a stripe around its thin
// holder before its table is used.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "handoff/detail/backoff.hpp"
#include "handoff/detail/keyed_entry.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/thin_key.hpp"

namespace handoff::detail {

// With s locked and not inflated: inflates it (threads parked on the word are woken, for
// the table). A thin holder's key becomes a held entry (with its token and thread); a
// throw from that key's copy puts the word back (without the waiters' bits: they went to
// the table) and propagates with s unlocked.
template <class Key>
[[gnu::noinline]] void inflate_locked(lock_shard& s) {
  const std::uintptr_t w = lock_table::seize(s);
  if (w == 0) return;
  if constexpr (thin_capable<Key>) {
    thin_record* holder = thin_holder(w);
    try {
      lock_table::adopt(
          keyed_entry<Key>::create(s, holder->hash.load(std::memory_order_relaxed), thin_key_of<Key>(*holder)), holder);
    } catch (...) {
      s.word.store(w, std::memory_order_release);  // the holder's again; pairs with its unlock CAS
      s.lock.unlock();
      throw;
    }
  }
}

// Locks s for its table: inflated first, so that every key of s is in the table.
template <class Key>
[[gnu::always_inline]] inline void lock_inflated(lock_shard& s) {
  s.lock.lock();
  if (s.word.load(std::memory_order_relaxed) != thin_inflated) [[unlikely]]
    inflate_locked<Key>(s);
}

// The uncontended thin lock of key (hash h, in s): true with g the grant (rec is held);
// false with w what the word held instead (rec still this thread's, filled).
// Precondition: thin_fits(key).
template <class Key>
[[gnu::always_inline]] inline bool try_lock_thin(lock_shard& s, const Key& key, std::size_t h, thin_record* rec,
                                                 std::uintptr_t& w, grant& g) noexcept {
  fill_thin_record(rec, key, h, &s.word, lock_table::this_thread_id());
  w = 0;
  // acq_rel: takes the last owner's writes (the token counter), publishes rec; failing,
  // acquire: the holder's record is read next.
  if (!s.word.compare_exchange_strong(w, reinterpret_cast<std::uintptr_t>(rec), std::memory_order_acq_rel,
                                      std::memory_order_acquire))
    return false;
  g = {.token = lock_table::take_thin_token(s, rec), .record = rec};
  return true;
}

// A blocking lock() yields the core this many times on its key's holder, looking at the
// word after each, before it parks (or, if it may not park, goes to the table). No
// pauses: a hot key's holder relocks within nanoseconds, and a spinner that reads the
// word at every pause takes its line from the holder at each of them and wins the freed
// word often enough that the key moves between cores at most hand-offs; a yield looks
// once per system call (docs/notebook.md).
inline constexpr unsigned park_yields = 8;

// After try_lock_thin found the word w: spins a while on another thread's thin holder
// (most release within nanoseconds; a try-lock only on another key's; a blocking lock()
// by yields), taking the word if it is freed; finding the stripe inflated, deflates it
// if calm (t.deflate_if_calm) and takes it thin. A blocking lock that may park (lock()
// with t.parks_thin(): eventual fairness) then parks on the word of its own key's holder
// and barges again when woken, until it has waited fair_after (`since`: when it first
// parked, 0 if it never did). A word freed with waiters on it (W) is theirs once one of them is due:
// another lock parks (or, if it may not, goes to the table). Else gives rec back and
// returns an empty grant with s locked and inflated, for the table's request.
template <class Key>
[[gnu::noinline]] grant lock_thin_contended(lock_table& t, lock_shard& s, std::size_t h, thin_record* rec,
                                            std::uintptr_t w, bool may_spin, bool blocking, std::int64_t& since) {
  const bool may_park = blocking && t.parks_thin();
  const std::uintptr_t me = lock_table::this_thread_id();
  std::uintptr_t seen = 0;  // the word whose holder was read last
  bool same_key = false;    // that holder's hash is h
  bool others = false;      // that holder is another thread
  for (unsigned spins = 0;;) {
    if (thin_holder(w) == nullptr) {  // free (0, or W with waiters on the word; P kept)
      const bool waited = since != 0;
      if (w == 0 || waited || !t.thin_waiter_due(s)) {
        // A waiter that takes the word leaves W for the others (a stale W costs its
        // unlock the slow path once).
        const std::uintptr_t to = reinterpret_cast<std::uintptr_t>(rec) | w | (waited ? thin_waiters : 0);
        if (s.word.compare_exchange_strong(w, to, std::memory_order_acq_rel, std::memory_order_acquire)) {
          const grant g{.token = lock_table::take_thin_token(s, rec), .record = rec};
          if (waited) t.thin_wait_granted(s, since);
          return g;
        }
        continue;
      }
      if (may_park) {  // a waiter is due: after it
        t.park_thin(s, w, since);
        spins = 0;
        w = s.word.load(std::memory_order_acquire);
        continue;
      }
    } else if (w != thin_inflated) {
      // Relaxed: hints only (the record may be reused meanwhile); the table decides. This
      // thread's own record (stable) sends it to the table: the same key is a deadlock,
      // another key of the stripe waits for nothing there. Read once per word seen: the
      // holder rewrites its record at each relock, and a spinner reading it every pause
      // would pull that line away from it.
      if (w != seen) {
        seen = w;
        const thin_record* holder = thin_holder(w);
        same_key = holder->hash.load(std::memory_order_relaxed) == h;
        others = holder->thread.load(std::memory_order_relaxed) != me;
      }
      if (others && (may_spin || !same_key)) {
        if (spins < (blocking ? park_yields : spins_before_yield)) {
          backoff(blocking ? spins_before_yield : spins);  // blocking: a yield
          ++spins;
          w = s.word.load(std::memory_order_acquire);
          continue;
        }
        if (may_park && same_key && t.park_thin(s, w, since)) {
          spins = 0;  // woken: spin again before parking again
          w = s.word.load(std::memory_order_acquire);
          continue;
        }
      }
    }
    s.lock.lock();
    w = s.word.load(std::memory_order_relaxed);
    if (w == 0 || (w == thin_inflated && t.deflate_if_calm(s))) {  // free, or freed now: take it thin
      s.lock.unlock();
      w = 0;
      continue;
    }
    if (since != 0) t.thin_wait_to_table(s, since);
    push_thin_record(rec);
    if (w != thin_inflated) inflate_locked<Key>(s);
    return {};
  }
}

}  // namespace handoff::detail
