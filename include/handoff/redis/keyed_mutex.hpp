// handoff::redis::keyed_mutex: the keyed mutex across processes, through one Redis server
// or a Redis Cluster (over TCP, a Unix socket or TLS). Same guard API as handoff::keyed_mutex: lock, try_lock,
// try_lock_for/until, leases, extend, expired/check, fencing tokens, with_lock, lock_all,
// co_await async_lock.
//
//   handoff::redis::keyed_mutex m({.host = "127.0.0.1", .port = 6379});
//   auto g = m.lock("player:42");                      // held until unlock; watchdog-renewed
//   auto t = m.try_lock_for("room:7", 50ms);           // FIFO wait across processes
//   auto l = m.lock("order:9", handoff::lease{2s});    // freed by Redis at 2 s
//   store.write(x, g.token());                         // fencing: the store rejects stale tokens
//   auto g2 = co_await m.async_lock("player:42");      // suspends, never blocks a thread
//
// Per key K (names under options::prefix, all with the hash tag {K}):
//   {K}:lock     "<request id> <fencing token>" of the holder, with the lease as its PX;
//   {K}:queue    FIFO list of waiting request ids; {K}:waiters: sorted set id -> heartbeat
//                deadline; {K}:fence: the fencing counter;
//   {K}:grant:<request id>  a grant pushed to a blocking waiter (lives until it is taken).
// Every change is one Lua script, atomic on the server: acquire (drop dead waiters; grant
// if the key is free and the caller is first in line or nobody waits, else queue or
// refresh the caller), release and extend (compare on the whole lock value, never a plain
// DEL or PEXPIRE), cancel (leave the queue). The release hands the key on itself: it sets
// the lock to the first live waiter's request with that waiter's lease and the next
// fencing token, and tells the waiter, which is then the holder without a round trip of
// its own. A blocking waiter waits in BLPOP on its grant list, on a connection that no
// command shares (a pool of them, as large as the number of waiters); when its client's locks have been
// waiting lately, it sends its attempt with the BLPOP and the attempt's reply skipped
// (CLIENT REPLY SKIP, where the server has it: the list says what the reply would), so
// that the server writes one reply and the thread wakes once. An async waiter is told on
// its client's channel, through the mutex's one subscriber connection (on a cluster, on a
// sharded channel of the key's slot, through one subscriber per primary). A waiter that gives up
// while the key is being handed to it passes it on in its cancel. A waiter also re-checks
// every options::recheck_interval (its heartbeat: a waiter whose process died is skipped
// after 3 missed intervals) and when the holder's lease runs out.
// Lease clock of a handed-on grant: the server says how long after the waiter's last
// heartbeat it granted, so the waiter's local lease starts no later than the server's.
// A lease-less waiter is granted the shorter of watchdog_lease and 3 recheck_intervals,
// which its watchdog renews to watchdog_lease a third in: a waiter that died just before
// its grant holds the key no longer than a dead waiter blocks the queue.
//
// Guarantees (one Redis server, no failover):
//  - Mutual exclusion per key among all keyed_mutex instances on the server and prefix,
//    while holders' leases have not run out (a lease ends a hold that overruns it; the
//    watchdog keeps lease-less holds alive while this process runs).
//  - FIFO per key among waiters (try_lock never jumps the queue); a waiter that timed out
//    or gave up is never granted.
//  - Fencing tokens: each grant of a key gets a token greater than every earlier grant's
//    of that key, also after the counter expired (an hour after it started) or
//    the server lost its data: a new counter starts at the server's clock in microseconds.
//  - Nothing stays on the server for an idle key but its fence counter (one hour).
// On a Redis Cluster (found at construction: any node's host and port, or
// options::cluster_seeds): each key's names live on the primary of its hash slot, so the
// guarantees hold per key as on one server; calls follow MOVED, ASK, TRYAGAIN and
// CLUSTERDOWN within command_timeout, and a blocking waiter whose slot moves waits on the
// new primary. docs/redis.md, "Redis Cluster".
// Not promised: safety across a Redis failover (a grant or token the primary had not
// replicated is lost: two holders for up to a lease; options::min_replicas makes every grant
// and renewal returned be on that many replicas first, which WAIT does not make a
// consensus) or with several independent servers (no Redlock); that an expired holder notices before it acts (check()
// looks at the local clock, conservatively; fencing tokens are what a downstream store can rely on).
//
// Errors: every Redis failure (connect, timeout, server error, lost connection) throws
// handoff::redis::error with the server's, the socket's or TLS's message (keys in messages
// are cut to their first 64 bytes); a dropped connection never raises SIGPIPE. The failure
// bound is per step, not per call: a call that fails returns within its wait plus two
// command_timeouts (an attempt, and the cancel of a queued request), plus, when it must
// open a connection, connect_timeout (the connect, a TLS handshake and AUTH or a PING) and
// one command_timeout for SELECT, plus up to one command_timeout waiting for a pooled
// connection when all pool_size are busy. A guard's destructor never throws.
//
// Keys: lock name K of options::prefix P maps to the Redis keys P + "{" + E(K) + "}:lock"
// (":queue", ":waiters", ":fence"), where E escapes '{' as "\x01(", '}' as "\x01)" and
// '\x01' as "\x01\x01" and keeps every other byte: distinct (prefix, key) pairs never share
// a name, and keys without those bytes keep their plain names. Async waiters are told on
// the channel P + "notify:" + a random client id.
//
// Limits: lock keys are ordinary keys with an expiry, so a server that may evict keys
// (maxmemory with a policy other than noeviction) could evict a held lock: the constructor
// refuses such a server unless options::if_server_evicts says otherwise. A lease longer
// than 2^42 ms (about 139 years; lease{nanoseconds::max()} included) is that long on the
// server and never expires on the client.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ranges>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "handoff/detail/clock.hpp"
#include "handoff/detail/wait_mode.hpp"
#include "handoff/lease.hpp"
#include "handoff/multi_guard.hpp"
#include "handoff/redis/client_stats.hpp"
#include "handoff/redis/options.hpp"

namespace handoff::redis {

namespace detail {
struct client;
struct hold;
}  // namespace detail

// The RAII guard of one key. Movable, not copyable; one thread at a time.
class [[nodiscard]] guard {
 public:
  guard() noexcept;
  guard(guard&&) noexcept;
  guard& operator=(guard&& o) noexcept;  // takes o's hold, then unlocks what this held as ~guard does
  guard(const guard&) = delete;
  guard& operator=(const guard&) = delete;
  // Unlocks; a Redis error is swallowed (the key is then freed by its lease on the server).
  ~guard();

  // True while held: acquired, not unlocked, not known to be expired.
  [[nodiscard]] bool owns_lock() const noexcept;
  explicit operator bool() const noexcept { return owns_lock(); }

  // Releases the key (compare-on-token), handing it to the next live waiter in the same
  // script; stops the watchdog first, so that no renewal is sent after this returns. A no-op when the guard holds
  // nothing. Throws error if Redis cannot be reached: the guard is then empty all the
  // same, and the key is freed by its lease.
  void unlock();

  // The fencing token of this grant (see the overview); 0 if never acquired. Kept after
  // unlock and expiry.
  [[nodiscard]] std::uint64_t token() const noexcept;

  // True once the hold is known to be over without unlock(): the lease ran out by the
  // local clock (started before the request was sent, so never later than the server's),
  // or the watchdog failed to renew it (the key was taken over, or Redis was unreachable
  // for longer than the lease). Stays true.
  [[nodiscard]] bool expired() const noexcept;

  // Throws handoff::lock_expired unless owns_lock().
  void check() const;

  // Sets the key's remaining lease to `l` (at least 1 ms) from now, on the server. Returns
  // false if the key is no longer this guard's. For a watchdog-renewed guard, `l` becomes
  // the renewed lease. Throws error on Redis failure.
  bool extend(lease l);
  // As extend(lease{d}), like handoff::key_guard::extend: throws std::invalid_argument for
  // d <= 0.
  bool extend(std::chrono::nanoseconds d) { return extend(lease{d}); }

  // The lease on the server: as granted or last extended (for lock() without a lease, the
  // watchdog's).
  [[nodiscard]] std::chrono::nanoseconds lease_duration() const noexcept;

  // The key, as given to lock. Empty for an empty guard.
  [[nodiscard]] const std::string& key() const noexcept;

  explicit guard(std::shared_ptr<detail::hold> h) noexcept;  // internal: keyed_mutex builds guards

 private:
  std::shared_ptr<detail::hold> hold_;  // shared with the watchdog while it renews
};

using multi_guard = handoff::basic_multi_guard<guard>;

// One client of the keyed locks on a Redis server. Thread-safe. Owns a pool of command
// connections, one subscriber connection, one background thread (notifications, the
// watchdog, async waiters' attempts) and one callback thread (async_lock resumptions and
// lock_async callbacks). Precondition of destruction: no guard or waiter of it alive;
// async requests still waiting end with error("keyed_mutex destroyed while waiting"), and
// the watchdog stops, so holds still alive end with their lease.
class keyed_mutex {
 public:
  using key_type = std::string;
  using guard = redis::guard;

  // Connects once to check the options and the server's eviction policy (throws error if
  // Redis cannot be reached, rejects the AUTH, or may evict keys under
  // eviction_check::refuse; std::invalid_argument for nonsensical options: port out of
  // range, pool_size 0, non-positive timeouts or recheck_interval, watchdog_lease under
  // 3 ms, negative database) and starts the background and callback threads.
  explicit keyed_mutex(options o = {});
  ~keyed_mutex();
  keyed_mutex(const keyed_mutex&) = delete;
  keyed_mutex& operator=(const keyed_mutex&) = delete;

  // Thread-safe. Blocks until granted (FIFO across processes), without polling: the
  // release grants the key and wakes this thread (no round trip once granted). While it
  // waits, the thread has a connection of its own (options::pool_size does not limit
  // those). Without a lease the watchdog renews the hold until
  // unlock. Not reentrant: a second lock of a held key waits for the first to be released
  // (or for its lease). Throws error.
  guard lock(std::string_view key) { return acquire(key, wait_mode::forever, no_deadline, 0); }
  guard lock(std::string_view key, lease l) { return acquire(key, wait_mode::forever, no_deadline, ns(l)); }

  // Thread-safe. One round trip: acquires only if the key is free and nobody waits.
  guard try_lock(std::string_view key) { return acquire(key, wait_mode::none, 0, 0); }
  guard try_lock(std::string_view key, lease l) { return acquire(key, wait_mode::none, 0, ns(l)); }

  // Thread-safe. Waits at most `d` (until `t`) in the key's queue; on timeout the request
  // leaves the queue and is never granted: owns_lock() on the result says which.
  template <class Rep, class Period>
  guard try_lock_for(std::string_view key, std::chrono::duration<Rep, Period> d) {
    return acquire(key, wait_mode::until, deadline_in(d), 0);
  }
  template <class Rep, class Period>
  guard try_lock_for(std::string_view key, std::chrono::duration<Rep, Period> d, lease l) {
    return acquire(key, wait_mode::until, deadline_in(d), ns(l));
  }
  template <class Clock, class Dur>
  guard try_lock_until(std::string_view key, std::chrono::time_point<Clock, Dur> t) {
    return acquire(key, wait_mode::until, handoff::detail::deadline_at(handoff::detail::now_ns(), t), 0);
  }
  template <class Clock, class Dur>
  guard try_lock_until(std::string_view key, std::chrono::time_point<Clock, Dur> t, lease l) {
    return acquire(key, wait_mode::until, handoff::detail::deadline_at(handoff::detail::now_ns(), t), ns(l));
  }

  // Thread-safe. Runs f() while holding the key (lock()) and returns its result. The key
  // is released when f returns or throws; a release error after f threw is swallowed.
  template <class F>
    requires(std::invocable<F&>)
  decltype(auto) with_lock(std::string_view key, F&& f) { return handoff::detail::run_locked(lock(key), f); }

  // Thread-safe. Locks several keys without deadlock against any other lock_all: sorted,
  // deduplicated, locked in order; on an error the keys already taken are released.
  template <std::ranges::input_range Keys>
    requires(std::convertible_to<std::ranges::range_reference_t<Keys>, std::string_view>)
  multi_guard lock_all(const Keys& keys) {
    return handoff::detail::lock_in_order<std::string, guard>(
        keys, std::equal_to<>(), [this](std::vector<guard>& out, const std::string& k) { out.push_back(lock(k)); });
  }
  multi_guard lock_all(std::initializer_list<std::string_view> keys) {
    return lock_all(std::vector<std::string_view>(keys));
  }

  // Thread-safe. `co_await m.async_lock(key)` yields a guard; the coroutine is suspended
  // (no thread blocked) while it waits and is resumed on this mutex's callback thread,
  // through that thread's run queue (a long continuation delays other callbacks only:
  // keep it short, or hop to your executor). With a wait time the guard
  // does not own the lock if it timed out. A Redis error is thrown from the co_await.
  [[nodiscard]] auto async_lock(std::string key) { return awaiter(*this, std::move(key), no_deadline, 0); }
  [[nodiscard]] auto async_lock(std::string key, lease l) { return awaiter(*this, std::move(key), no_deadline, ns(l)); }
  template <class Rep, class Period>
  [[nodiscard]] auto async_lock(std::string key, std::chrono::duration<Rep, Period> wait) {
    return awaiter(*this, std::move(key), deadline_in(wait), 0);
  }

  // Thread-safe. Callback form: f(guard, error) runs once, on this mutex's callback thread
  // (never on the background thread that keeps heartbeats and renewals: a slow callback
  // costs no waiter its place), with the guard (empty if the wait timed out) or the Redis
  // error that ended the request. What f makes runnable (actor sends, keyed-mutex grants)
  // runs after it returns, on that thread. Exceptions thrown by f are reported to stderr.
  // Never blocks. (Only when no memory is left to post it does f run on the background
  // thread instead, rather than be lost.) Without a wait time it waits until granted;
  // without a lease the watchdog renews the hold, as for lock().
  using callback = std::function<void(guard, std::exception_ptr)>;
  void lock_async(std::string key, callback f) { lock_async_until(std::move(key), std::move(f), no_deadline, 0); }
  void lock_async(std::string key, callback f, lease l) {
    lock_async_until(std::move(key), std::move(f), no_deadline, ns(l));
  }
  // NOLINTBEGIN(performance-unnecessary-value-param): moved on; clang-tidy misreads the
  // dependent call as taking references.
  template <class Rep, class Period>
  void lock_async(std::string key, callback f, std::chrono::duration<Rep, Period> wait) {
    lock_async_until(std::move(key), std::move(f), deadline_in(wait), 0);
  }
  template <class Rep, class Period>
  void lock_async(std::string key, callback f, std::chrono::duration<Rep, Period> wait, lease l) {
    lock_async_until(std::move(key), std::move(f), deadline_in(wait), ns(l));
  }
  // NOLINTEND(performance-unnecessary-value-param)

  [[nodiscard]] const options& config() const noexcept;

  // Thread-safe, never blocks or allocates. Counts since construction, each read on its
  // own (not one atomic snapshot); the same events go to options::metrics.
  [[nodiscard]] client_stats stats() const noexcept;

 private:
  using wait_mode = handoff::detail::wait_mode;
  static constexpr std::int64_t no_deadline = handoff::detail::no_deadline;
  // The library's lease arithmetic is in nanoseconds (0 inside: the watchdog's lease).
  static std::int64_t ns(lease l) noexcept { return l.duration.count(); }
  template <class Rep, class Period>
  static std::int64_t deadline_in(std::chrono::duration<Rep, Period> d) noexcept {
    return handoff::detail::deadline_after(handoff::detail::now_ns(), d);
  }
  // `deadline` is read under wait_mode::until only.
  guard acquire(std::string_view key, wait_mode mode, std::int64_t deadline, std::int64_t lease_ns);
  // lock_async with a deadline on the library's clock (detail/clock.hpp).
  void lock_async_until(std::string key, callback f, std::int64_t deadline, std::int64_t lease_ns);

  class [[nodiscard]] awaiter {
   public:
    awaiter(keyed_mutex& m, std::string key, std::int64_t deadline, std::int64_t lease_ns)
        : m_(m), key_(std::move(key)), deadline_(deadline), lease_(lease_ns) {}
    [[nodiscard]] static bool await_ready() noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      m_.lock_async_until(
          std::move(key_),
          [this, h](guard g, std::exception_ptr e) {
            result_ = std::move(g);
            error_ = std::move(e);
            h.resume();
          },
          deadline_, lease_);
    }
    guard await_resume() {
      if (error_) std::rethrow_exception(error_);
      return std::move(result_);
    }

   private:
    keyed_mutex& m_;
    std::string key_;
    std::int64_t deadline_;
    std::int64_t lease_;
    guard result_;
    std::exception_ptr error_;
  };

  std::shared_ptr<detail::client> client_;
};

}  // namespace handoff::redis
