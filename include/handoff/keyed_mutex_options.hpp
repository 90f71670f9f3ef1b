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
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "handoff/metrics.hpp"

namespace handoff {

struct keyed_mutex_options {
  // Where this mutex reports its events (handoff/metrics.hpp); nullptr: the process-wide
  // sink, if one is set when the event happens. Not owned: it must outlive the mutex.
  metrics_sink* metrics = nullptr;
  // How many keys stats() lists in longest_waits; 0: none kept (no copy of a key is ever
  // made then). A key is copied when its wait makes the list (a slow path: it waited).
  std::size_t longest_waits = 8;
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
