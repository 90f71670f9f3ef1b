// A key's lock state (lock_entry) and a lock request that waits for it (waiter), with the
// timer_node both use for their deadlines. The protocol that changes them is in
// detail/lock_table.hpp (overview) and lib/keyed/lock_protocol.cpp.
//
// waiter::state, one word, the outcome of a queued request:
//   waiting --(requester about to sleep)--> sleeping
//   waiting | sleeping --(holder's hand-off CAS)--> granted     final
//   waiting | sleeping --(requester's or timer's give-up CAS)--> cancelled   final
// The CAS out of waiting/sleeping decides the outcome; nothing leaves granted or cancelled.
// Under eventual fairness a blocked thread's waiter has one more state, `woken`:
//   waiting | sleeping --(unlock that frees the key, under the shard lock)--> woken
//   woken --(the requester takes the free key, under the shard lock)--> granted
//   woken --(the requester finds it taken again, under the shard lock)--> waiting
//   woken --(the same, its deadline passed)--> cancelled
//   woken --(a holder's hand-off CAS, the waiter having waited fair_after)--> granted
// Coroutine and callback waiters are never woken: they are only granted or cancelled.
//
// lock_entry::leased, the lease word: the token of the current leased hold, 0 when none.
//   0 --(arm_lease, by the new holder)--> token
//   token --(the holder's unlock, or the timer's expiry: one CAS wins)--> 0
#pragma once

#include <atomic>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/mpsc_queue.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::detail {

// One deadline in the mutex's heap (lib/keyed/lease_timer.hpp): a lease (owner: a
// lock_entry) or an async wait time (owner: a waiter). Touched only under the heap's mutex.
struct timer_node {
  std::int64_t deadline = 0;  // steady_clock nanoseconds
  std::size_t index = npos;   // position in the heap, npos when not scheduled
  std::uint64_t seq = 0;      // schedule order: breaks ties between equal deadlines
  void* owner = nullptr;
  bool is_lease = false;
  static constexpr std::size_t npos = ~std::size_t{0};
};

struct lock_entry;
class lock_table;
struct thin_record;

// A lock request that found its key held. Allocated from the node pool; shared by the
// requester and the holder that pops it (and the timer, for an async wait with a
// deadline), each holding one of `refs`. As a task, it is its own entry in the run queue
// of the thread that completes it.
struct waiter : task, mailbox_node {
  // state encodings (see the overview above).
  enum : std::uint32_t {
    waiting = 0,    // queued, requester running (spinning or about to suspend)
    sleeping = 1,   // queued, requester blocked in futex_wait: a grant must wake it
    granted = 2,    // the holder handed the key over: the requester now holds it
    cancelled = 3,  // the requester gave up (timeout): never granted, skipped by the holder
    woken = 4,      // eventual fairness: the key was freed and the requester must compete for it
  };
  enum class kind : std::uint8_t { thread, coroutine, callback };

  std::atomic<std::uint32_t> state{waiting};
  std::atomic<std::uint32_t> refs{2};           // requester + queue (+ timer); see release_waiter
  kind type = kind::thread;                     // set by the requester before the push
  std::uint64_t token = 0;                      // written by the granter before its CAS, read after `granted`
  lock_entry* entry = nullptr;                  // set by the table before the push
  lock_table* table = nullptr;                  // set by the table before the push
  timer_node timeout;                           // async waits with a deadline; timer mutex
  std::coroutine_handle<> handle;               // kind::coroutine
  void (*complete)(waiter*) = nullptr;          // kind::callback: runs the callable
  void (*destroy)(waiter*) noexcept = nullptr;  // frees a derived node; nullptr: a plain waiter
  // The table's now() before the push, set by the table: the request's wait for the statistics,
  // and under eventual fairness how long it has waited (read by the releasing holder). Kept
  // across the wake-ups of an eventual wait. not_queued for a request granted at once.
  static constexpr std::int64_t not_queued = std::numeric_limits<std::int64_t>::max();
  std::int64_t queued_at = not_queued;
};

// Completes a waiter that was granted or timed out: resumes its coroutine or runs its
// callback. The ONE place a coroutine or callback waiter is scheduled to run: on this
// thread, after any completion already running here (no recursion), except where a timer
// service fires the mutex's deadlines, which hands it to the process-wide completion
// thread (the timer never runs user code).
void complete_waiter(waiter* w) noexcept;
// Drops one reference to a waiter node, freeing it with the last.
void release_waiter(waiter* w) noexcept;

// A key's request count and the queue of its waiters: the hand-off rule of the actor (the
// request that takes the count from 0 to 1 holds the key; later ones are counted, then
// queued, and the holder hands over to them), with a word and a queue of its own. Encoding:
// `count_` is the requests accepted and not finished, the holder's included (0: free).
//
//   take:      count 0 -> 1, load and store   under the shard lock (a lookup that found the
//                                             entry keeps it from being reclaimed meanwhile)
//   join:      count += 1; was 0: holds it;   under the shard lock; counted before pushed,
//              else push the waiter           and pushed before that lock is let go
//   release:   count 1 -> 0 by CAS            the holder, no lock: nobody waits (uncontended)
//   hand-off:  uncount(X), then grant the     the holder, no lock, with a waiter popped; X =
//              popped waiter                  its own and skipped waiters' counts (never to 0)
//   drain:     count X -> 0 by CAS            the holder, having popped nothing; failing, the
//                                             new requests are pushed once the shard lock is
//                                             taken (join pushes under it)
//
// Counting before pushing is what makes the lock-free release safe: a CAS from X to 0 fails
// while any request the holder has not consumed is counted. The CASes are strong: a
// spurious failure would send an uncontended unlock to the slow path for nothing.
class lock_word {
 public:
  lock_word() noexcept = default;
  lock_word(const lock_word&) = delete;
  lock_word& operator=(const lock_word&) = delete;
  lock_word(lock_word&&) = delete;
  lock_word& operator=(lock_word&&) = delete;
  ~lock_word() = default;

  // Requests accepted and not finished: the holder plus the queued waiters; a snapshot
  // unless the caller is the holder under the shard lock. 0: free.
  [[nodiscard]] std::uint64_t pending() const noexcept { return count_.load(std::memory_order_relaxed); }
  // Under the shard lock, deciding whether to reclaim an idle entry: acquire, pairing with
  // the release of the last holder's CAS, so that its writes (the token) are visible.
  [[nodiscard]] bool idle() const noexcept { return count_.load(std::memory_order_acquire) == 0; }

  // Under the shard lock: takes a free word (0 -> 1: true), else counts nothing (false), so
  // that a try-lock can decline to wait before join(). A load and a store, not a CAS:
  // while the count is 0 nobody but a thread holding the shard lock writes it (a holder's
  // release needs a count, takers and joiners the lock), and a locked instruction fewer
  // is what an uncontended lock saves most (it drains the store buffer). acquire; pairs
  // with the release of the last holder's release CAS (its writes and the token).
  [[nodiscard]] bool try_take() noexcept {
    if (count_.load(std::memory_order_acquire) != 0) return false;
    count_.store(1, std::memory_order_relaxed);
    return true;
  }

  // Under the shard lock: counts a request; if the key was released since try_take() found
  // it held, the caller now holds it (true; n is not queued), else n is queued (false).
  // acquire: as try_take().
  [[nodiscard]] bool join(mailbox_node* n) noexcept {
    if (count_.fetch_add(1, std::memory_order_acquire) == 0) return true;
    mailbox_.push(n);
    return false;
  }

  // The holder: releases the key if `consumed` (its own request and the skipped waiters')
  // is all that is counted: true; false when more are counted, which are queued or about to
  // be (under the shard lock). release; pairs with try_take(), join() and idle().
  [[nodiscard]] bool try_release(std::uint64_t consumed) noexcept {
    HANDOFF_ASSERT(consumed >= 1);
    return count_.compare_exchange_strong(consumed, 0, std::memory_order_release, std::memory_order_relaxed);
  }

  // The holder, handing the key to a request it popped (still counted): uncounts what it
  // consumed before; never reaches 0. Relaxed: the hand-off itself (the waiter's state)
  // publishes the holder's writes.
  void uncount(std::uint64_t consumed) noexcept {
    [[maybe_unused]] const std::uint64_t before = count_.fetch_sub(consumed, std::memory_order_relaxed);
    HANDOFF_ASSERT(before > consumed);
  }

  // The holder: the oldest queued request, or nullptr when none is linked yet (a join()
  // between the queue's two steps: see mpsc_queue).
  [[nodiscard]] mailbox_node* pop() noexcept { return mailbox_.pop(); }
  // The holder: true when pop() would return nullptr now (two loads, no write).
  [[nodiscard]] bool looks_empty() const noexcept { return mailbox_.looks_empty(); }

 private:
  std::atomic<std::uint64_t> count_{0};  // see the encoding above
  mpsc_queue mailbox_;                   // producers: joiners under the shard lock; consumer: the holder
};

// A key's lock state. The keyed part (the Key) precedes it in keyed_mutex.hpp's entry
// type, which starts a cache line (detail/keyed_entry.hpp): the key and the members an uncontended
// lock/unlock touches (token, holder_thread, may_idle, the word's count) share the entry's
// first line when the key takes 32 bytes or less (a std::string), so that a found key
// costs one line of the entry (with the key in a later line, a lock/unlock of many keys
// missed L1 more often; figures in docs/design.md, "The protocol").
struct lock_entry {
  explicit lock_entry(std::size_t h) noexcept : hash(h) {}

  // --- the uncontended lock/unlock's members, first ---
  // Fencing token of the current (or last) grant. Written by the holder; read under the
  // shard lock when the word is idle (the last holder's release CAS publishes it).
  std::uint64_t token = 0;
  // The thread that holds the key through the blocking API (for deadlock detection), 0
  // otherwise. Written at every grant (0 by an async one), and cleared before a hand-off;
  // an idle entry may keep its last holder's, which nobody reads while the key is free
  // (the check runs only on a held key). Relaxed: it is only compared with the reader's
  // own identity.
  std::atomic<std::uintptr_t> holder_thread{0};
  // Shard lock: guards whose lease expired and that still refer to the entry.
  std::uint32_t refs = 0;
  // Shard lock. Eventual fairness: the key is free although waiters still count (see
  // `front` below).
  bool open = false;
  // Shard lock. Whether the entry stays in the table once idle, set when it is inserted:
  // its key is small enough to keep (entry_keep_fn) and its shard held fewer than the
  // cap's entries (detail/keyed_entry.hpp). Read by its holders; an entry that may not is
  // removed at its last unlock.
  bool may_idle = false;
  // Where the entry sits in its allocation (detail/keyed_entry.hpp: make()); set once.
  std::uint8_t slack = 0;
  // --- hand-off protocol (lib/keyed/lock_protocol.cpp only) ---
  // The count and the waiters (see lock_word): taken and joined under the shard lock,
  // released and handed over by the holder without it. Its count comes first, in the line
  // above; its queue, touched only when a request waits, after it.
  lock_word own;

  // --- the rest: shard lock, waits and leases ---
  std::size_t hash;  // the mixed hash (reset when a cached entry is reused)
  // Eventual fairness only (lock_table::fair_after_ != 0; always null/false under fifo).
  // `front`: the oldest waiter, taken out of the mailbox by an unlock that freed the key and
  // woke it; it stays the next to be considered, ahead of the mailbox, until it holds the
  // key or gives up, and it owns the queue's reference to the node. `open` (above): no
  // holder, the key is free although `front` (and perhaps the mailbox) still count: the
  // first request to take the shard lock takes it. Invariant: open implies front is set
  // and woken. Written under the shard lock; `front` is also read and cleared by the
  // holder, whose taking of the key (under that lock) ordered it after every write.
  waiter* front = nullptr;

  // --- leases ---
  // The lease word (see the overview). The guard's unlock and the timer's expiry both CAS
  // it to 0 under the timer mutex; the winner releases the key.
  std::atomic<std::uint64_t> leased{0};
  timer_node lease;               // timer mutex
  std::uint64_t lease_token = 0;  // timer mutex: the token `lease` expires
};
// The uncontended lock/unlock's members in the entry's first 32 bytes (see above).
static_assert(offsetof(lock_entry, own) + sizeof(std::uint64_t) <= 32, "token, holder, flags and count in 32 bytes");

// The holder's unlock when nobody waits and the entry may stay idle in its table: true if
// it released the key (the entry is idle, and the caller must not touch it again); false:
// lock_table::release_contended() does the rest. Inline: the uncontended unlock is one
// CAS. It leaves holder_thread as it is: every grant writes it (see there).
inline bool release_uncontended(lock_entry* e) noexcept { return e->may_idle && e->own.try_release(1); }

// The result of a lock request; token == 0: not acquired. retry: look the key up again.
// A thin hold has a record and no entry (detail/thin_record.hpp).
struct grant {
  lock_entry* entry = nullptr;
  std::uint64_t token = 0;
  std::int64_t lease = 0;
  bool retry = false;
  thin_record* record = nullptr;
};

}  // namespace handoff::detail
