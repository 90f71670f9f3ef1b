// lib/redis/lock/: handoff::redis::keyed_mutex. Each file holds one job:
//   keyed_mutex.cpp      the public facade and its guard
//   client.hpp/.cpp      this client: its parts, and what runs on the caller's thread
//                        (the blocking lock, unlock, extend, the guard of a grant)
//   acquire_step.hpp     the lock protocol of one request, driven by the blocking lock
//                        and by the async waiters
//   commands.hpp/.cpp    the command pools, request ids, and the scripts sent and parsed
//   scripts.hpp          the lock's Lua
//   lease_clock.hpp      which lease a request sets, when a grant's lease ends locally
//   hold.hpp             one grant's state, shared by its guard and the watchdog
//   watchdog.hpp/.cpp    renewing lease-less holds (common/renewal.hpp)
//   async_waiters.hpp/.cpp  async requests: registry, subscriber, attempts, callbacks
//   background.hpp/.cpp  the background thread that runs the watchdog and async waiters
// The stores and the actors never use any of it.
//
// The client behind handoff::redis::keyed_mutex (private to lib/redis). Threads: callers
// run their own acquire/release round trips on pooled connections; a blocking waiter
// waits for its grant in BLPOP on a connection no command shares (router.hpp's lanes). One
// background thread per client runs the async waiters' attempts and the watchdog's
// renewals on a connection of its own (per node) and reads the subscriber connections on
// which async grants are announced. User callbacks run on the client's callback thread,
// never on it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "../common/counters.hpp"
#include "acquire_step.hpp"
#include "async_waiters.hpp"
#include "background.hpp"
#include "commands.hpp"
#include "handoff/redis/keyed_mutex.hpp"
#include "hold.hpp"
#include "lease_clock.hpp"
#include "watchdog.hpp"

namespace handoff::redis::detail {

// Whether blocking locks of this client have been waiting lately: then a lock sends its
// first attempt and the BLPOP of its wait together (one round trip to queue and wait,
// instead of two), at the price of a '-' pushed and popped when the key was free. Up by
// step each time a lock had to queue (at most max), down by one each time one found the
// key free: a lock that had to queue counts as four free ones, and eight queued locks in a
// row are remembered, so a hot key keeps the single round trip while a free grant now and
// then (a hand-off to a thread that was not queued yet) does not turn it off.
class contention_hint {
 public:
  static constexpr int step = 4;
  static constexpr int max = 32;

  [[nodiscard]] bool high() const noexcept { return v_.load(std::memory_order_relaxed) > 0; }
  void queued() noexcept {
    const int v = v_.load(std::memory_order_relaxed);
    v_.store(std::min(max, v + step), std::memory_order_relaxed);
  }
  void found_free() noexcept {
    const int v = v_.load(std::memory_order_relaxed);
    if (v > 0) v_.store(v - 1, std::memory_order_relaxed);
  }

 private:
  // Relaxed: a hint, read and written on its own (a lost update only shifts the hint).
  std::atomic<int> v_{0};
};

struct client : std::enable_shared_from_this<client> {
  // Checks the options, connects (to the server, or to a cluster's seed and, for its checks,
  // every primary; on one server the subscriber too), checks the eviction policy of each
  // primary, claims the prefix and loads the scripts. Throws std::invalid_argument or error.
  explicit client(options opts);

  void start();          // the background thread
  void stop() noexcept;  // joins it; ends the async requests still waiting; runs the callbacks left

  // keyed_mutex's blocking requests: `deadline` is read under wait_mode::until only.
  guard acquire(std::string_view key, handoff::detail::wait_mode mode, std::int64_t deadline, std::int64_t lease_ns);
  // keyed_mutex's async requests: `deadline` on the library's clock (no_deadline: none).
  void lock_async(std::string key, keyed_mutex::callback f, std::int64_t deadline, std::int64_t lease_ns);
  bool extend(hold& h, std::int64_t lease_ns);
  // The guard of a grant to `step`'s request (lease-less: watched from now on), confirmed
  // on options::min_replicas replicas first, on a connection of lane `l`. Throws error
  // when they do not confirm it (the key given up).
  guard granted(std::string_view key, const acquire_step& step, const grant& g,
                lock_commands::lane l = lock_commands::lane::commands);

  const options o;
  client_counters counters{o.metrics};  // before the pools and connections that count into it
  const lease_clock clock{o};
  lock_commands commands{o, counters, clock};

 private:
  // granted()'s confirmation: throws error, having given the key up, when fewer than
  // options::min_replicas replicas acknowledged the grant.
  void confirm(hold& h, lock_commands::lane l);
  // Releases h's key, best effort (a failure leaves it to its lease).
  void give_up(const hold& h) noexcept;

  contention_hint contention_;
  background background_;
  watchdog watchdog_{commands, background_};
  async_waiters async_{*this, background_};  // last: its callback thread runs from here on
};

}  // namespace handoff::redis::detail
