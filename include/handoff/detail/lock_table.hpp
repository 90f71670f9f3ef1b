// The keyed mutex's core: the sharded table of per-key lock entries and the ownership
// hand-off between holders. Key-independent; keyed_mutex.hpp adds the key. The pieces:
// detail/lock_entry.hpp (entry, waiter), detail/lock_shard.hpp (a shard's table),
// detail/entry_cache.hpp (the per-thread recycled entry), detail/keyed_entry.hpp (the
// entry with its key); in lib/keyed/: lock_protocol.cpp (this protocol), lock_parking.cpp
// (blocking and completing waiters), lease_timer.hpp and lib/runtime/task_thread.hpp
// (leases and async wait times on a timer service, and where their completions run),
// lock_shard.cpp, entry_cache.cpp.
//
// A key's entry follows the actor's hand-off rule with a word and a queue of its own
// (lock_word, detail/lock_entry.hpp): owning the entry's word is holding the lock (design
// (b) in docs/design.md). Its count is the lock requests accepted and not finished (the
// holder plus the queued waiters), and its queue holds the requests that found it held.
// Requests take and join it under the shard lock; holders release it by CAS without it.
//
//   lock:    under the shard lock, find or create the entry, then
//            count 0 -> 1 (a load and a store: see lock_word): the caller holds the key
//            else count += 1; found 0 (released meanwhile): held; else push a waiter
//            node (still under the lock), unlock, wait
//   unlock:  (the holder, no table lock) nobody queued and the entry may stay idle: CAS
//            count 1 -> 0, done (the uncontended unlock: one CAS). Else pop the next
//            waiter; count -= uncounted; CAS waiting -> granted: the key is handed over.
//            A waiter that gave up (the CAS finds `cancelled`) is skipped and counted as
//            `uncounted` for the next round. Queue empty: CAS count uncounted -> 0; a
//            failure means a request was counted, whose node is pushed once the shard
//            lock is taken: pop it under that lock. An entry that may not stay idle is
//            released under the shard lock instead, where an empty queue means count ==
//            uncounted: count = 0, and it leaves the table unless an expired guard refers
//            to it.
//
// Eventual fairness (keyed_mutex_options::fairness; fair_after_ != 0 here) changes only
// what an unlock does with a blocked thread's waiter that has waited less than fair_after:
//
//   unlock:  pop the oldest waiter w (`front` first, then the mailbox), as above. If w is a
//            thread and has waited less than fair_after: under the shard lock, mark w
//            woken, keep it in `front`, set `open` (no holder) and wake it; the count keeps
//            one for the free key. Else hand w the key, as under fifo.
//   lock:    under the shard lock, an `open` key is taken at once (the count does not
//            change: the free key's one becomes the holder's). A barger takes it so.
//   woken w: under the shard lock, takes the key if still `open` (w's count goes), else
//            goes back to waiting in `front` (or gives up, its deadline passed), and waits.
//
// Waiters keep their order: only `front` is ever woken, and the mailbox behind it is
// popped only after it holds the key or gives up. Its queued_at is kept across wake-ups,
// so the first unlock after it has waited fair_after in all hands it the key. Coroutine
// and callback waiters are always handed the key: they would need a wake-up on another
// thread's run queue to compete, for a barging window nobody but a thread could use.
//
// Why the lookup and the 0 -> 1 transition share one critical section, while the release
// needs none: the table must be locked to find the entry anyway, and taking the word
// inside that section keeps the entry from being reclaimed between the lookup and the
// take (a reclaim is under the same lock and needs count == 0), and lets the take be a
// load and a store (no other writer of a count of 0 exists without that lock). The
// release's CAS is the holder's last touch of the entry, so an uncontended lock/unlock
// makes two locked instructions, the shard lock's and the release's (a striped mutex:
// two). Hand-offs between holders (the contended path) take no table lock either.
//
// Entry lifetime: the entry lives while count > 0 (a holder, or a queued request, live or
// given up) or refs > 0 (guards whose lease expired: they no longer count, but still read
// the entry), and after that, idle, while its table keeps it: an entry inserted while its
// shard held fewer than lock_shard::kept_idle entries (kept_idle_thin for a key that can
// be thin) stays (lock_entry::may_idle), until the lock of a new key in a full shard
// reclaims it (lock_shard::evict_idle, under the shard lock, only with count == 0 and
// refs == 0), a calm shard deflates (deflate_if_calm) or the table goes. The others leave at
// their last release, under the shard lock. Idle entries are so at most shard_count() *
// kept_idle per mutex. Tokens of reclaimed entries go to the shard's token floor, from
// which a new entry starts, so a key's tokens rise across its entries.
//
// Threads: none of the table's own. Its leases and async wait times fire on a timer
// service's driver (lease_timer.hpp: one entry per table, joined by the first of them),
// which only runs this protocol; the coroutines and callbacks it grants or times out run
// on the process-wide completion thread, so user code that blocks there never delays a
// lease. Everywhere else, completions run through the completing thread's run queue
// (detail/run_queue.hpp).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/entry_cache.hpp"
#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/lock_shard.hpp"
#include "handoff/detail/lock_stats.hpp"
#include "handoff/detail/node_pool.hpp"
#include "handoff/detail/wait_mode.hpp"
#include "handoff/metrics.hpp"

namespace handoff::detail {

// What a lock request wants.
struct lock_request {
  using wait_mode = detail::wait_mode;
  wait_mode mode = wait_mode::forever;
  std::int64_t deadline = 0;  // steady_clock ns, for `until` (no_deadline: never)
  std::int64_t lease = 0;     // ns; 0: no lease; no_deadline: never runs out
  bool may_park = false;      // lock() alone: may park on a thin word (eventual fairness)
  std::int64_t since = 0;     // a wait begun parked on a thin word: the table counts from it
};

class lease_timer;
class test_driver;
}  // namespace handoff::detail
namespace handoff {
class timer_service;
}
namespace handoff::detail {

// The key-independent part of a keyed_mutex: shards, protocol, timer.
class lock_table {
 public:
  using destroy_fn = destroy_entry_fn;
  using keep_fn = entry_keep_fn;
  using describe_fn = std::string (*)(const lock_entry*);  // the key, as a trace shows it
  // Made under a test scheduler (handoff/testing.hpp), the table runs on its virtual clock
  // and every request goes through it (see detail/test_driver.hpp).
  lock_table(destroy_fn destroy, keep_fn keep, describe_fn describe = nullptr);
  // Terminates with a message if a key still has live state (a guard or a waiter outlived
  // the mutex): continuing would leave them pointing into freed memory. Leaves the timer
  // service, and waits for the completions its expiries queued, first.
  ~lock_table();
  lock_table(const lock_table&) = delete;
  lock_table& operator=(const lock_table&) = delete;
  lock_table(lock_table&&) = delete;
  lock_table& operator=(lock_table&&) = delete;

  [[gnu::always_inline]] lock_shard& shard_for(std::size_t h) noexcept { return shards_[h >> (64 - shard_bits)]; }
  [[nodiscard]] std::size_t size() const noexcept;
  // Entries in the table, idle ones included (at most shard_count() * lock_shard::kept_idle
  // of them idle), summed shard by shard under each shard's lock.
  [[nodiscard]] std::size_t entries() const noexcept;

  // Called with s locked and e in the table (possibly just created): performs the request,
  // unlocks s, and waits when the mode allows (blocking the thread). token == 0 in the
  // result: not acquired (busy, or the deadline passed); retry: call again after a new
  // lookup (a lease of this thread's expired meanwhile). Throws
  // std::system_error(resource_deadlock_would_occur) when a waiting request finds the key
  // held by this thread; std::bad_alloc. On a throw nothing changed.
  grant acquire(lock_shard& s, lock_entry* e, const lock_request& r);

  // Async forms, with s locked and e in the table; unlock s. w is a fresh waiter of the
  // given kind (handle or complete set). A token in the result: acquired now, and w is
  // untouched (the caller frees it, or hands it to grant_at_once); token 0: w queued, with
  // its references (the requester's, the queue's, and with a `deadline` the timer's), and
  // completed later through complete_waiter. `deadline`: no_deadline for none; with one,
  // the caller started the timer (start_timer). Never blocks, and the same with or without
  // a test scheduler (the caller made the request a scheduling point first).
  grant acquire_or_enqueue(lock_shard& s, lock_entry* e, waiter* w, std::int64_t deadline);

  // A callback request acquired at once (g from acquire_or_enqueue): w becomes a granted
  // waiter that never queued, the caller's reference its only one, ready to run as a
  // completion (complete_waiter, or its complete function directly).
  void grant_at_once(waiter* w, const grant& g) noexcept {
    w->table = this;
    w->entry = g.entry;
    w->token = g.token;
    w->refs.store(1, std::memory_order_relaxed);                 // not shared: this thread's only
    w->state.store(waiter::granted, std::memory_order_relaxed);  // likewise
  }

  // A completed waiter's outcome (a coroutine's or callback's, granted or given up), read
  // once: acquire, pairing with the holder's grant (try_grant's release: the token and the
  // last holder's writes) or with the cancel. Granted: its entry and token (lease 0), and
  // the wait is counted if it queued; else token 0. The caller still drops its reference.
  [[nodiscard]] grant outcome(const waiter* w) noexcept {
    if (w->state.load(std::memory_order_acquire) != waiter::granted) return {};
    if (w->queued_at != waiter::not_queued) note_wait(w->entry, w->queued_at);
    return {w->entry, w->token, 0};
  }

  // The holder's release of e (its unlock, or a lease expiry). Hands the key to
  // the next live waiter or releases it; may complete async waiters (complete_waiter).
  void release(lock_entry* e) noexcept {
    if (!release_uncontended(e)) release_contended(e);
  }
  // release() after release_uncontended() declined (waiters, or an entry that leaves).
  void release_contended(lock_entry* e) noexcept;
  // A guard whose lease expired lets go of the entry.
  void drop_ref(lock_entry* e) noexcept;

  // Thin keys (detail/thin_record.hpp; lib/keyed/thin_lock.cpp). take_thin_token: the
  // thin holder of s's word, right after its CAS: the grant's token, published in r.
  [[gnu::always_inline]] static std::uint64_t take_thin_token(lock_shard& s, thin_record* r) noexcept {
    const std::uint64_t token = ++s.token_floor;
    r->token.store(token, std::memory_order_release);  // pairs with seize()'s acquire
    return token;
  }
  // With s locked and its word not inflated: makes it inflated and returns what it was (0,
  // or a thin holder's record, whose token is published by then). The holder's key must
  // then become a held entry (adopt), or the word be put back (a failed inflation).
  [[nodiscard]] static std::uintptr_t seize(lock_shard& s) noexcept;
  // With s locked: e, just created for the key of the thin holder r, becomes its hold
  // (count 1, r's token and thread), and r names it for the holder's unlock.
  static void adopt(lock_entry* e, thin_record* r) noexcept;
  // The unlock of a thin hold whose stripe has threads waiting on its word (frees it to W
  // while they are counted, waking any sleeper) or inflated (the entry's release, through
  // the table).
  void release_thin_inflated(thin_record* r) noexcept;
  // Eventual fairness: whether a blocking lock that found its key held thin may park on
  // the stripe's word rather than queue in the table (not under the manual clock, whose
  // time a futex cannot wait for).
  [[nodiscard]] bool parks_thin() const noexcept { return fair_after_ != 0 && !manual_clock_; }
  // A blocking lock that waits for the word w of s (held by its key's thin holder, or free
  // with W while a waiter is due): sets W and P and sleeps while the word keeps them.
  // `since` is the wait's start (0 before its first park: set here, counting the thread
  // among the stripe's waiters and in waiting()). True: look at the word again; false:
  // the thread has waited fair_after, the table must serve it.
  bool park_thin(lock_shard& s, std::uintptr_t w, std::int64_t& since) noexcept;
  // Whether a waiter on s's word has waited fair_after: a free word with W is then left
  // to the waiters.
  [[nodiscard]] bool thin_waiter_due(const lock_shard& s) const noexcept;
  // A thread that parked stops waiting on the word: it took the key thin (a wait, for the
  // statistics), or goes to the table (which counts it from then on).
  void thin_wait_granted(lock_shard& s, std::int64_t since) noexcept;
  void thin_wait_to_table(lock_shard& s, std::int64_t since) noexcept;
  // A thin hold's guard moved: deadlock detection forgets the thread (the record's, and
  // its entry's if the stripe inflated).
  void forget_thin_holder(thin_record* r) noexcept;
  // With s locked and inflated, by a lock of a thin-capable key: counts a calm lock; at
  // the lock_shard::deflate_after-th, if every entry of s is idle, removes them (their
  // tokens into the floor) and deflates s (true: the caller takes the word thin).
  bool deflate_if_calm(lock_shard& s) noexcept;
  // With s locked: deflates s when no entry is left (the word back to 0).
  static void deflate_if_empty(lock_shard& s) noexcept {
    if (s.size() == 0 && s.word.load(std::memory_order_relaxed) == thin_inflated) {
      s.word.store(0, std::memory_order_release);  // pairs with the next thin locker's CAS
    }
  }

  // The timer service that fires leases and async wait times, before the mutex is used;
  // nullptr: the library's own (see lib/keyed/lease_timer.hpp). Not owned.
  void use_timers(timer_service* s) noexcept { timers_ = s; }
  // Joins the timer service if not yet done: called before any request with a lease or a
  // wait time changes state, so that a failure (std::system_error, std::bad_alloc) changes
  // nothing.
  void start_timer() { (void)timer(); }

  // Leases (durations in ns, saturating: no_deadline never runs out): arm after a grant
  // with a lease (the timer is running); disarm (true) by the holder's unlock, which must
  // then release; false when the timer expired the hold first.
  void arm_lease(lock_entry* e, std::uint64_t token, std::int64_t lease) noexcept;
  [[nodiscard]] bool disarm_lease(lock_entry* e, std::uint64_t token) noexcept;
  [[nodiscard]] bool extend_lease(lock_entry* e, std::uint64_t token, std::int64_t lease);

  // The fairness mode, before the mutex is used: 0 for fifo, else eventual fairness with
  // this fair_after in ns (see the overview).
  // Allocates the stripes' park deadlines (eventual only; throws std::bad_alloc).
  void use_fairness(std::int64_t fair_after) {
    fair_after_ = fair_after > 0 ? fair_after : 0;
    if (fair_after_ != 0) park_due_ = std::make_unique<std::atomic<std::uint64_t>[]>(shard_count());
  }

  // Statistics and metrics (detail/lock_stats.hpp), on slow paths only. observe(), before
  // the mutex is used: the sink events go to (nullptr: the process-wide one, looked up at
  // each event) and who keeps the longest waits (nullptr: nobody).
  void observe(metrics_sink* sink, wait_recorder* recorder) noexcept {
    sink_ = sink;
    recorder_ = recorder;
  }
  // A request that joined e's queue at `since` (now()) was granted, and holds e; e null:
  // one that parked on a thin word took it thin (counted, not among the longest waits).
  void note_wait(const lock_entry* e, std::int64_t since) noexcept;
  // A timed request ended without the key.
  void note_timeout() noexcept;
  [[nodiscard]] const lock_counters& counters() const noexcept { return counters_; }
  // Requests queued behind a holder, summed shard by shard under each shard's lock.
  [[nodiscard]] std::size_t waiting() const noexcept;

  // The table's clock: steady_clock ns (detail/clock.hpp), or the manual clock below.
  [[nodiscard]] std::int64_t now() const noexcept;

  // Tests only (the fuzz target): a manual clock starting at `start`, no timer service.
  // Call before the mutex is first used. Leases and async wait times then fire only in
  // advance_manual_clock(), on the caller's thread (completions too); blocking timed waits
  // are not supported.
  void use_manual_clock(std::int64_t start) noexcept {
    manual_clock_ = true;
    manual_now_.store(start, std::memory_order_relaxed);  // read by now(): same thread, before use
  }
  void advance_manual_clock(std::int64_t to);
  // The earliest deadline the manual clock's timer holds; no_deadline: none.
  [[nodiscard]] std::int64_t next_deadline() noexcept;
  // The key of e as a test scheduler's trace shows it.
  [[nodiscard]] std::string describe(const lock_entry* e) const;

  // The current thread's identity for deadlock detection (never 0): the address of its
  // scheduler state, an initial-exec TLS access.
  static std::uintptr_t this_thread_id() noexcept { return reinterpret_cast<std::uintptr_t>(&tls); }

  // With s locked and e in the table: the uncontended lock, inline (part of the protocol
  // in lib/keyed/lock_protocol.cpp). Holds the key and unlocks s if e is free and no lease is
  // asked for; else leaves both to acquire().
  [[nodiscard]] static bool try_acquire_fast(lock_shard& s, lock_entry* e, grant& g) noexcept {
    if (!e->own.try_take()) return false;
    g = {e, ++e->token, 0};
    e->holder_thread.store(this_thread_id(), std::memory_order_relaxed);
    s.lock.unlock();
    return true;
  }

  // Under a test scheduler (handoff/testing.hpp), every request, blocking or async, is
  // first a scheduling point: with s locked and e in the table, unlocks s and lets the
  // scheduler run other events; the caller then looks the key up again and runs the
  // request as it would without a scheduler. Throws as test_driver::yield does, with s
  // unlocked.
  [[nodiscard]] bool driven() const noexcept { return driver_ != nullptr; }
  void schedule_point(lock_shard& s, const lock_entry* e);

  // Shards: 256, one cache line each (16 KB, within L1). Threads on different keys rarely
  // meet in a shard's lock: with 16 shards instead, the 2-thread uncontended benchmark
  // spent a large share of its time spinning there (docs/design.md, "Table and memory").
  static constexpr unsigned shard_bits = 8;
  static constexpr std::size_t shard_count() noexcept { return std::size_t{1} << shard_bits; }

 private:
  friend class lease_timer;

  lease_timer& timer();
  lease_timer* timer_if_started() noexcept;
  // f(entry) summed over every entry, shard by shard under each shard's lock (size(),
  // entries(), waiting()).
  template <class F>
  [[nodiscard]] std::size_t sum_entries(F f) const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < shard_count(); ++i) {
      lock_shard& s = shards_[i];
      s.lock.lock();
      s.for_each([&](const lock_entry* e) { n += f(e); });
      s.lock.unlock();
    }
    return n;
  }
  // The steps of release(), one protocol action each. next_waiter: the waiter to consider
  // next (`front`, else the mailbox's oldest), or, when none is queued, releases the key
  // (the count, `uncounted`, goes to 0: by CAS, or under the shard lock for an entry that
  // leaves the table) and returns nullptr.
  // hand_over: the fifo hand-off to w; false if w gave up. free_for: eventual fairness,
  // frees the key and wakes w to compete for it; false if w gave up. `uncounted`: the
  // requests consumed and still counted (the releasing holder's, skipped waiters').
  waiter* next_waiter(lock_entry* e, std::uint64_t uncounted) noexcept;
  bool hand_over(lock_entry* e, waiter* w, std::uint64_t& uncounted) noexcept;
  bool free_for(lock_entry* e, waiter* w, std::uint64_t& uncounted) noexcept;
  // Eventual fairness, the woken requester's step: with the shard lock of e free, takes the
  // key if it is still open (granted, w->token set), else puts w back to waiting (or, with
  // `deadline` passed, cancels it). Returns w's state after: granted, waiting, cancelled.
  std::uint32_t compete(lock_entry* e, waiter* w, std::int64_t deadline) noexcept;
  // With s locked: takes e if it is open (eventual fairness: free with waiters queued).
  static bool take_open(lock_entry* e) noexcept;
  // With s locked: e is idle; removes it if nothing refers to it. Returns the
  // removed entry, for recycle() after unlocking, or nullptr.
  static lock_entry* remove_if_unused(lock_shard& s, lock_entry* e) noexcept;
  // Without a shard lock: keeps e (removed, idle) as this thread's cached entry, or frees
  // it (lib/keyed/entry_cache.cpp).
  void recycle(lock_entry* e) noexcept;
  // The lease timer took a key from its holder.
  void note_lease_expiry() noexcept;
  // Under a test scheduler: the wait of a queued blocking request (wait_for_turn's part).
  std::uint32_t wait_driven(lock_entry* e, waiter* w, std::int64_t deadline);
  // An async request queued under a test scheduler: kept (with a reference) so that the
  // table's destructor can give up the ones never granted (a deadlock) instead of leaving
  // them queued.
  void keep_driven(waiter* w) noexcept;
  void abandon_driven() noexcept;

  // All set at construction, except the timer (once, through timer_once_). The first
  // two are read by every lock: one cache line with the table's address.
  std::unique_ptr<lock_shard[]> shards_;
  test_driver* driver_;  // the test scheduler this table was made under; nullptr: none
  destroy_fn destroy_;
  keep_fn keep_;
  describe_fn describe_;
  std::int64_t fair_after_ = 0;  // ns; 0: fifo (see use_fairness())
  // Per stripe, eventual only: the threads waiting on its word (bits 0-15) and, above
  // them, the earliest fair_after deadline among them in units of 2^10 ns (0: none), in
  // one word so that the last one out clears the deadline (lib/keyed/thin_lock.cpp).
  std::unique_ptr<std::atomic<std::uint64_t>[]> park_due_;
  std::atomic<std::int64_t> manual_now_{0};  // relaxed: the manual clock has one thread
  std::once_flag timer_once_;
  bool manual_clock_ = false;               // see use_manual_clock()
  std::atomic<bool> timer_started_{false};  // release in timer(); pairs with timer_if_started()
  timer_service* timers_ = nullptr;         // see use_timers()
  std::unique_ptr<lease_timer> timer_;
  // Statistics: set by observe() before use, read on slow paths only.
  metrics_sink* sink_ = nullptr;
  wait_recorder* recorder_ = nullptr;
  // See keep_driven(); touched only by the one running thread of the test scheduler.
  std::vector<waiter*> driven_waiters_;
  lock_counters counters_;  // its own cache line
};

}  // namespace handoff::detail
