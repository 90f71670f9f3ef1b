// handoff::keyed_mutex<Key>: one lock per key ("player:42"), with FIFO waiters, try-lock,
// wait timeouts, leases, fencing tokens, coroutine and callback waiting, and multi-key
// locking, and a bounded amount of memory kept for keys nobody holds or waits for.
//
//   handoff::keyed_mutex<> m;
//   auto g = m.lock("player:42");                        // blocks; RAII guard
//   auto t = m.try_lock_for("room:7", 50ms);             // t.owns_lock() says if it got it
//   auto l = m.lock("order:9", handoff::lease{2s});      // released by the mutex after 2 s
//   auto all = m.lock_all({"a", "b", "c"});              // sorted, deduplicated: no deadlock
//   auto some = m.try_lock_all_for({"a", "b"}, 50ms);    // all keys by the deadline, or none
//   auto g2 = co_await m.async_lock("player:42");        // suspends, never blocks a thread
//   m.lock_async("player:42", [](handoff::key_guard g) { ... });
//
// An uncontended key has no state in any table: its lock is one CAS on its stripe's word
// (256 one-line stripes) pointing to a record of the locking thread, its unlock one CAS
// back (detail/thin_record.hpp). A key that is contended, leased, waited for by a
// coroutine or a callback, or too big for a record (detail/thin_key.hpp) is an entry
// in its stripe's table instead, which follows the actor's hand-off rule: a count and a
// FIFO waiter queue of its own (detail/lock_table.hpp). The stripe's thin holder becomes
// such an entry when the stripe inflates, and the stripe deflates once calm: a lock that
// finds it inflated with every entry idle, the 64th since a wait there.
// docs/keyed_mutex.md is the guide.
//
// Guarantees:
//  - Mutual exclusion per key, and everything a holder wrote before unlocking is visible
//    to the next holder of the same key (on whatever thread or coroutine).
//  - FIFO per key, under fairness::fifo (the default, keyed_mutex_options.hpp): waiters
//    are granted in the order their requests reached the key (the shard lock orders them),
//    each by the previous holder's unlock. A waiter that timed out is never granted.
//  - Eventual fairness, under fairness::eventual: an unlock frees the key and wakes the
//    oldest waiter to compete; a request that has not queued (a relock, a new request, a
//    try_lock) may take it first. Waiters keep their order among themselves, and once the
//    oldest has waited keyed_mutex_options::fair_after in all, the next unlock hands it the
//    key. Coroutine and callback waiters are always handed the key. fair_after 0: fifo.
//  - Fencing tokens: every grant of a key gets a token greater than every earlier grant's
//    for that key, across the key's state being freed and recreated.
//  - Leases: when one runs out the key passes to the next waiter (or is freed) a moment
//    after the old guard's expired() turns true; its check() throws, unlock() is a no-op.
//  - Memory: size() counts keys with a holder, a waiter or an expired guard, and is 0 when
//    no guard or waiter is alive. An uncontended thin key keeps nothing once unlocked; an
//    entry may stay idle for its next lock: at most 16 per stripe (2 of thin keys), 4,096
//    per mutex, reclaimed by locks of new keys and calm stripes. Records (64 bytes) are
//    kept per thread.
//
// Not promised: fairness across keys; FIFO between a try_lock and waiters (try_lock fails
// whenever the key is held; under fifo it never jumps the queue, under eventual it takes a
// key an unlock freed, waiters or not); that a lease expires at its exact
// deadline (the timer service may run late under load, and rounds a deadline up to its
// resolution: expiry is never early); destroying
// a coroutine while it is suspended in async_lock (its waiter would be resumed after the
// frame is gone: let it time out or be granted).
//
// Self-deadlock detection: a blocking lock/try_lock_for of a key that this thread acquired
// through lock, try_lock or try_lock_for throws instead of waiting for ever. It follows
// the guard as created: moving a guard (to another thread, a container, a return value)
// turns detection off for that hold, so that a thread that handed its guard on waits
// normally. Keys held through async_lock or lock_async are not tracked.
//
// Where waiters run: a blocked thread wakes on its own thread; a coroutine or callback
// waiter is resumed by the thread that unlocks the key (inside unlock() or the guard's
// destructor) or, when a lease expires or an async wait times out, by the process-wide
// completion thread (the mutex has no executor; one thread for every keyed mutex, started
// by the first lease or wait time, never stopped; the destructor waits for what the
// mutex's expiries queued there). The timer service that fires leases and wait times
// (keyed_mutex_options::timers; by default the library's own, one thread per process)
// never runs user code there: a callback or coroutine that blocks delays only the
// completions queued after it, of any keyed mutex, never a lease. Resumptions triggered
// while one is running on a thread are queued and run after it, so chains of hand-offs do
// not grow the stack. A blocking call inside an actor's handler that must wait first runs
// what this thread owns only through its run queue (actors won by nested sends, granted
// waiters), before it queues for the key: nobody else could run them (docs/runtime.md).
//
// Introspection: size(), waiting() and stats() (keyed_mutex_options.hpp) read the table
// shard by shard; waits, timeouts and lease expiries are counted, and reported to a
// metrics_sink (metrics.hpp), on the slow paths only: never on the uncontended lock/unlock.
//
// Keys: Hash, Eq and Key's copy constructor may throw; the exception propagates out of the
// locking call with nothing held, nothing queued and no state left for the key.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <ranges>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "handoff/detail/clock.hpp"
#include "handoff/detail/keyed_awaiter.hpp"
#include "handoff/detail/keyed_callback.hpp"
#include "handoff/detail/keyed_lookup.hpp"
#include "handoff/detail/keyed_thin.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/longest_waits.hpp"
#include "handoff/key_guard.hpp"
#include "handoff/keyed_mutex_options.hpp"
#include "handoff/lease.hpp"
#include "handoff/multi_guard.hpp"

namespace handoff {
namespace detail {
struct lock_table_access;
}

template <class Key = std::string, class Hash = std::hash<Key>, class Eq = std::equal_to<Key>>
class keyed_mutex {
 public:
  using key_type = Key;
  using guard = key_guard;

  explicit keyed_mutex(Hash hash = Hash(), Eq eq = Eq())
      : keyed_mutex(keyed_mutex_options{}, std::move(hash), std::move(eq)) {}
  // With options (keyed_mutex_options.hpp): a metrics sink, how many longest waits stats()
  // keeps, the fairness mode (fifo or eventual, with its fair_after).
  explicit keyed_mutex(keyed_mutex_options o, Hash hash = Hash(), Eq eq = Eq())
      : hash_(std::move(hash)), eq_(std::move(eq)), longest_(o.longest_waits, eq_) {
    table_.observe(o.metrics, &longest_);
    table_.use_timers(o.timers);
    if (o.fairness == fairness::eventual) table_.use_fairness(o.fair_after.count());
  }
  // Precondition: no guard and no waiter of this mutex is alive (checked: violating it
  // terminates with a message rather than leave them pointing into freed memory).
  ~keyed_mutex() = default;
  keyed_mutex(const keyed_mutex&) = delete;
  keyed_mutex& operator=(const keyed_mutex&) = delete;

  // Thread-safe. Blocks until the key is granted (FIFO; under eventual fairness, a woken
  // waiter competes for the freed key and waits again if it loses, at most fair_after
  // from when it queued). Throws
  // std::system_error(resource_deadlock_would_occur) if this thread holds the key through
  // a blocking lock (not reentrant); std::bad_alloc; std::system_error if the first lease
  // cannot start the completion thread or the default timer service. Allocates the key's
  // state when the key has none (operator new, or this thread's recycled entry), and a
  // pooled waiter node when it must wait.
  [[gnu::always_inline]] guard lock(const Key& key) { return acquire(key, wait_parking); }
  guard lock(const Key& key, lease l) { return acquire(key, {.lease = l.duration.count()}); }

  // Thread-safe, never blocks or waits in a queue: acquires only if nobody holds the key
  // (under eventual fairness, also when an unlock freed it with waiters queued).
  guard try_lock(const Key& key) { return acquire(key, never_wait); }
  guard try_lock(const Key& key, lease l) {
    return acquire(key, {.mode = wait_mode::none, .lease = l.duration.count()});
  }

  // Thread-safe. Waits at most `d` (or until `t`) in the key's FIFO queue; a request that
  // times out leaves the queue and is never granted. owns_lock() on the result says which.
  // Same errors as lock().
  template <class Rep, class Period>
  guard try_lock_for(const Key& key, std::chrono::duration<Rep, Period> d) {
    return acquire(key, {.mode = wait_mode::until, .deadline = deadline_in(d)});
  }
  template <class Rep, class Period>
  guard try_lock_for(const Key& key, std::chrono::duration<Rep, Period> d, lease l) {
    return acquire(key, {.mode = wait_mode::until, .deadline = deadline_in(d), .lease = l.duration.count()});
  }
  template <class Clock, class Dur>
  guard try_lock_until(const Key& key, std::chrono::time_point<Clock, Dur> t) {
    return acquire(key, {.mode = wait_mode::until, .deadline = steady_deadline(t)});
  }
  template <class Clock, class Dur>
  guard try_lock_until(const Key& key, std::chrono::time_point<Clock, Dur> t, lease l) {
    return acquire(key, {.mode = wait_mode::until, .deadline = steady_deadline(t), .lease = l.duration.count()});
  }

  // Thread-safe. Runs f() while holding the key (lock()), and returns its result; unlocks when f
  // returns or throws.
  template <class F>
    requires(std::invocable<F&>)
  decltype(auto) with_lock(const Key& key, F&& f) { return detail::run_locked(lock(key), f); }

  // Thread-safe. Locks several keys without deadlock against any other lock_all or
  // try_lock_all_for (or single-key lock in the same order): the keys are sorted with
  // operator< (required) and deduplicated, then locked one by one, each waiting as lock()
  // does. If a lock throws, the keys already taken are released. Blocks; allocates the
  // sorted copy of the keys and the guards' vector. Same errors as lock().
  // With a lease, each key is granted with its own lease, which starts at that key's
  // grant: when one runs out, that key alone passes to its next waiter; owns_lock() on the
  // result turns false (that guard's expired() true) while the other keys stay held until
  // unlock or their own lease. Check owns_lock() (or each guard's check()) before acting.
  template <std::ranges::input_range Keys>
    requires(std::convertible_to<std::ranges::range_reference_t<Keys>, const Key&>)
  multi_guard lock_all(const Keys& keys) { return lock_each(keys, wait_forever); }
  multi_guard lock_all(std::initializer_list<Key> keys) { return lock_all(std::vector<Key>(keys)); }
  template <std::ranges::input_range Keys>
    requires(std::convertible_to<std::ranges::range_reference_t<Keys>, const Key&>)
  multi_guard lock_all(const Keys& keys, lease l) { return lock_each(keys, {.lease = l.duration.count()}); }
  multi_guard lock_all(std::initializer_list<Key> keys, lease l) { return lock_all(std::vector<Key>(keys), l); }

  // Thread-safe. lock_all with one wait time for all the keys: all of them by the deadline
  // (`d` from now, or `t`), or none. Takes the keys in lock_all's order, each waiting in
  // its FIFO queue until the common deadline; if one is not granted by then, releases
  // those already taken (in reverse order) and returns an empty multi_guard (owns_lock()
  // false, size() 0). A deadline already passed tries each key without waiting. With a
  // lease: each key's, as for lock_all. Same errors as lock(); a throw leaves nothing held.
  template <std::ranges::input_range Keys, class Rep, class Period>
    requires(std::convertible_to<std::ranges::range_reference_t<Keys>, const Key&>)
  multi_guard try_lock_all_for(const Keys& keys, std::chrono::duration<Rep, Period> d) {
    return lock_each(keys, {.mode = wait_mode::until, .deadline = deadline_in(d)});
  }
  template <std::ranges::input_range Keys, class Rep, class Period>
    requires(std::convertible_to<std::ranges::range_reference_t<Keys>, const Key&>)
  multi_guard try_lock_all_for(const Keys& keys, std::chrono::duration<Rep, Period> d, lease l) {
    return lock_each(keys, {.mode = wait_mode::until, .deadline = deadline_in(d), .lease = l.duration.count()});
  }
  template <class Rep, class Period>
  multi_guard try_lock_all_for(std::initializer_list<Key> keys, std::chrono::duration<Rep, Period> d) {
    return try_lock_all_for(std::vector<Key>(keys), d);
  }
  template <class Rep, class Period>
  multi_guard try_lock_all_for(std::initializer_list<Key> keys, std::chrono::duration<Rep, Period> d, lease l) {
    return try_lock_all_for(std::vector<Key>(keys), d, l);
  }
  template <std::ranges::input_range Keys, class Clock, class Dur>
    requires(std::convertible_to<std::ranges::range_reference_t<Keys>, const Key&>)
  multi_guard try_lock_all_until(const Keys& keys, std::chrono::time_point<Clock, Dur> t) {
    return lock_each(keys, {.mode = wait_mode::until, .deadline = steady_deadline(t)});
  }
  template <class Clock, class Dur>
  multi_guard try_lock_all_until(std::initializer_list<Key> keys, std::chrono::time_point<Clock, Dur> t) {
    return try_lock_all_until(std::vector<Key>(keys), t);
  }

  // Thread-safe. `co_await m.async_lock(key)` yields a guard, suspending the coroutine (never blocking
  // a thread) while the key is held; FIFO with every other waiter. With a wait time, the
  // guard does not own the lock if it timed out. The coroutine is resumed by the thread
  // that hands the key over (or, at its wait timeout, the completion thread: see the
  // overview). The key is copied.
  [[nodiscard]] auto async_lock(Key key) { return lock_awaiter(*this, std::move(key), detail::no_deadline, 0); }
  [[nodiscard]] auto async_lock(Key key, lease l) {
    return lock_awaiter(*this, std::move(key), detail::no_deadline, l.duration.count());
  }
  template <class Rep, class Period>
  [[nodiscard]] auto async_lock(Key key, std::chrono::duration<Rep, Period> wait) {
    return lock_awaiter(*this, std::move(key), deadline_in(wait), 0);
  }

  // Thread-safe. Callback form: calls f(guard) once the key is granted, on this thread now if the key
  // is free, else on the thread that hands the key over. Exceptions thrown by f are
  // reported to stderr (the guard is released). Never blocks.
  template <class F>
    requires(std::invocable<std::decay_t<F>&, guard>)
  void lock_async(const Key& key, F&& f) { callback::start(*this, key, std::forward<F>(f)); }

  // Thread-safe. Keys with live state: held, waited for, or still referred to by a guard
  // whose lease expired. 0 when no guard or waiter is alive. Takes each shard's lock in
  // turn: a snapshot, not atomic across shards.
  [[nodiscard]] std::size_t size() const noexcept { return table_.size(); }

  // Thread-safe, never blocks on a key. Lock requests queued behind a holder now, summed
  // shard by shard like size() (approximate: a waiter that just timed out counts until the
  // holder skips it).
  [[nodiscard]] std::size_t waiting() const noexcept { return table_.waiting(); }

  // Thread-safe, never blocks on a key; allocates the list. A snapshot for a health
  // endpoint (keyed_mutex_options.hpp): size() and waiting(), the counts since
  // construction, and the keys with the longest waits since the previous stats() call,
  // which this call takes: each call starts a new window, so give the mutex one reader.
  [[nodiscard]] keyed_mutex_stats<Key> stats() {
    keyed_mutex_stats<Key> out;
    out.keys = table_.size();
    out.waiters = table_.waiting();
    const detail::lock_counters& c = table_.counters();  // relaxed: statistics, each on its own
    out.waits = c.waits.load(std::memory_order_relaxed);
    out.timeouts = c.timeouts.load(std::memory_order_relaxed);
    out.lease_expiries = c.lease_expiries.load(std::memory_order_relaxed);
    out.longest_waits = longest_.take();
    return out;
  }

 private:
  friend struct detail::lock_table_access;  // tests: the table's manual clock
  using wait_mode = detail::lock_request::wait_mode;
  // The requests of lock(key) and try_lock(key), as constants: the slow path takes them by
  // reference, so that the fast path builds none.
  static constexpr detail::lock_request wait_forever{};
  // lock()'s: under eventual fairness, a hot key's waiter parks on the stripe's word
  // (detail/keyed_thin.hpp) before it queues.
  static constexpr detail::lock_request wait_parking{.may_park = true};
  static constexpr detail::lock_request never_wait{.mode = wait_mode::none};

  using entry = detail::keyed_entry<Key>;
  // The table path (detail/keyed_lookup.hpp); lock_entry_of: the async requests' lookup.
  detail::keyed_lookup<Key, Eq> lookup() noexcept { return {table_, eq_}; }
  detail::lock_entry* lock_entry_of(detail::lock_shard& s, std::size_t h, const Key& key) {
    return lookup().lock_entry_of(s, h, key);
  }

  // Every blocking and try request. A key that fits a record (detail/thin_key.hpp), with no
  // lease and no test scheduler, takes the thin path inline: one CAS on its stripe's word
  // (false: the table's path, inline too: a call out of lock() for a key too long to be
  // thin cost it about 30 instructions).
  [[gnu::always_inline]] bool thin_grant(const Key& key, const detail::lock_request& r, detail::grant& g) {
    if constexpr (detail::thin_capable<Key>) {
      if (r.lease == 0 && detail::thin_fits(key) && !table_.driven()) [[likely]] {
        const std::size_t h = detail::mix_hash(hash_(key));
        detail::lock_shard& s = table_.shard_for(h);
        detail::thin_record* rec = detail::pop_thin_record();
        std::uintptr_t w;
        if (!detail::try_lock_thin(s, key, h, rec, w, g)) [[unlikely]]
          g = lookup().acquire_contended(key, r, h, s, rec, w);
        return true;
      }
    }
    return false;
  }
  [[gnu::always_inline]] guard acquire(const Key& key, const detail::lock_request& r) {
    detail::grant g;
    if (thin_grant(key, r, g)) [[likely]]
      return guard({}, &table_, g);
    return guard({}, &table_, acquire_entry_inline(key, r));
  }
  detail::grant grant_of(const Key& key, const detail::lock_request& r) {  // lock_all's
    detail::grant g;
    return thin_grant(key, r, g) ? g : acquire_entry_inline(key, r);
  }
  // A key without the thin path.
  [[gnu::always_inline]] detail::grant acquire_entry_inline(const Key& key, const detail::lock_request& r) {
    if (r.lease != 0) return acquire_grant(key, r);
    const std::size_t h = detail::mix_hash(hash_(key));
    return lookup().acquire(key, r, h, table_.shard_for(h));
  }
  [[gnu::noinline]] detail::grant acquire_grant(const Key& key, const detail::lock_request& r) {
    if (r.lease != 0) table_.start_timer();
    const std::size_t h = detail::mix_hash(hash_(key));
    detail::lock_shard& s = table_.shard_for(h);
    detail::lock_inflated<Key>(s);
    return lookup().acquire_locked(key, r, h, s, lookup().find_locked(s, h, key));
  }

  // lock_all and try_lock_all_*: every key of `keys` with request r, in lock_all's order
  // (detail::lock_in_order); a key not granted (r's deadline passed) releases the others.
  // Guards are built in place, never moved: self-deadlock detection stays on for each key.
  template <class Keys>
  multi_guard lock_each(const Keys& keys, const detail::lock_request& r) {
    return detail::lock_in_order<Key, guard>(keys, eq_, [this, &r](std::vector<guard>& out, const Key& k) {
      const detail::grant g = grant_of(k, r);
      if (g.token == 0) return false;
      out.emplace_back(guard::pass_key{}, &table_, g);
      return true;
    });
  }

  // Deadlines on the table's clock (detail/clock.hpp: saturating, no_deadline = never).
  template <class Rep, class Period>
  [[nodiscard]] std::int64_t deadline_in(std::chrono::duration<Rep, Period> d) const noexcept {
    return detail::deadline_after(table_.now(), d);
  }
  template <class Clock, class Dur>
  [[nodiscard]] std::int64_t steady_deadline(std::chrono::time_point<Clock, Dur> t) const noexcept {
    return detail::deadline_at(table_.now(), t);
  }

  // co_await async_lock(key): detail/keyed_awaiter.hpp.
  using lock_awaiter = detail::keyed_lock_awaiter<keyed_mutex>;
  friend lock_awaiter;
  // lock_async's callback waiter: detail/keyed_callback.hpp.
  using callback = detail::keyed_callback<keyed_mutex>;
  friend callback;
  // A guard of a grant, for the awaiter and the callback (only keyed_mutex may make one).
  static guard make_guard(detail::lock_table* t, const detail::grant& g) noexcept { return guard({}, t, g); }

  [[no_unique_address]] Hash hash_;
  [[no_unique_address]] Eq eq_;
  detail::longest_waits<Key, Eq> longest_;  // before table_: outlives the completions it joins
  detail::lock_table table_{&entry::destroy, &entry::keep, &entry::describe};
};

}  // namespace handoff
