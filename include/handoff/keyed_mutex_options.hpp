// The configuration of a handoff::keyed_mutex (keyed_mutex_options) and what its stats()
// returns (keyed_mutex_stats): the introspection a health endpoint or an operator reads
// to find hot keys and timeouts without counting around every call.
//
//   handoff::keyed_mutex<> m({.metrics = &sink, .longest_waits = 16});
//   auto s = m.stats();   // keys, waiters, timeouts, lease expiries, longest waits
//   for (const auto& w : s.longest_waits) log(w.key, w.waited);
//
// Counts are since the mutex was constructed (monotonic, as metrics systems expect);
// longest_waits is since the previous stats() call (each call starts a new window).
//
// Fairness (see handoff::fairness below and docs/keyed_mutex.md, "Fairness modes"):
//
//   handoff::keyed_mutex<> m({.fairness = handoff::fairness::eventual});  // fair_after 500 us
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "handoff/metrics.hpp"

namespace handoff {

class timer_service;

// How a keyed_mutex passes a key on when its holder unlocks with waiters queued.
enum class fairness : unsigned char {
  // The unlock hands the key to the oldest waiter: nobody else can take it in between
  // (try_lock fails, a new request queues behind). Strict FIFO, one hand-off per lock.
  fifo,
  // The unlock frees the key and wakes the oldest waiter to compete for it: until it has
  // waited fair_after, anyone may take the key first (the unlocking thread relocking, a
  // new request, a try_lock). Once it has waited fair_after, the next unlock hands it the
  // key as fifo does. Waiters keep their order among themselves; only requests that have
  // not queued can pass them. Coroutine and callback waiters are always handed the key
  // (they never compete): the barging window is opened only for a blocked thread.
  eventual,
};

struct keyed_mutex_options {
  // Where this mutex reports its events (handoff/metrics.hpp); nullptr: the process-wide
  // sink, if one is set when the event happens. Not owned: it must outlive the mutex.
  metrics_sink* metrics = nullptr;
  // How many keys stats() lists in longest_waits; 0: none kept (no copy of a key is ever
  // made then). A key is copied when its wait makes the list (a slow path: it waited).
  std::size_t longest_waits = 8;
  // fifo (the default): every unlock hands the key to the oldest waiter. eventual: unlocks
  // free the key for whoever comes first, until the oldest waiter has waited fair_after.
  handoff::fairness fairness = handoff::fairness::fifo;
  // Under eventual: how long the oldest waiter may be passed over, counted from when it
  // queued (its whole wait, not from its last wake-up). 500 us, parking_lot's figure: short
  // enough to keep a waiter's worst case far below a scheduler tick, long enough that a
  // thread relocking a hot key in a loop takes it hundreds of times before it must hand it
  // on. Zero or less behaves as fifo. Ignored under fifo.
  std::chrono::nanoseconds fair_after = std::chrono::microseconds(500);
  // The timer service that fires this mutex's leases and async wait times (one entry in
  // it, made by the first of them; it must be started, or driven by its owner's run_due()).
  // nullptr: the library's own, started at the first lease or wait time in the process
  // (one thread, shared by every mutex given none, never stopped). Not owned: it must
  // outlive the mutex; a service destroyed first terminates the program with a message.
  // Under a test scheduler, ignored: the scheduler's virtual clock fires them.
  timer_service* timers = nullptr;
};

// One key's longest wait in a stats() window.
template <class Key>
struct key_wait {
  key_wait(Key k, std::chrono::nanoseconds w) : key(std::move(k)), waited(w) {}
  Key key;
  std::chrono::nanoseconds waited;  // from joining the key's queue to the grant
};

// A snapshot of a keyed_mutex, by value. Not atomic across the mutex: each figure is read
// on its own, the gauges shard by shard (see stats()).
template <class Key>
struct keyed_mutex_stats {
  // Gauges, now: keys with live state (size()), and lock requests queued behind a holder
  // (approximate: a waiter that just timed out counts until the holder skips it).
  std::size_t keys = 0;
  std::size_t waiters = 0;
  // Since construction: requests that waited and were granted; timed requests that ended
  // without the key (try_lock_for/until, async_lock with a wait time); leases that ran out.
  std::uint64_t waits = 0;
  std::uint64_t timeouts = 0;
  std::uint64_t lease_expiries = 0;
  // Since the previous stats() call: the keys with the longest granted waits, longest
  // first, each key once (its longest wait), at most keyed_mutex_options::longest_waits.
  std::vector<key_wait<Key>> longest_waits;
};

}  // namespace handoff
