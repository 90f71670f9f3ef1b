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

#include "handoff/detail/mpsc_queue.hpp"
#include "handoff/detail/ownership.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::detail {

// One deadline in the lease timer's heap: a lease (owner: a lock_entry) or an async wait
// time (owner: a waiter). Touched only under the timer's mutex.
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
  std::atomic<std::uint32_t> refs{2};                 // requester + queue (+ timer); see release_waiter
  kind type = kind::thread;                           // set by the requester before the push
  std::uint64_t token = 0;                            // written by the granter before its CAS, read after `granted`
  lock_entry* entry = nullptr;                        // set by the requester before the push
  lock_table* table = nullptr;                        // set by the requester before the push
  timer_node timeout;                                 // async waits with a deadline; timer mutex
  std::coroutine_handle<> handle;                     // kind::coroutine
  void (*complete)(waiter*, bool granted) = nullptr;  // kind::callback: runs the callable
  void (*destroy)(waiter*) noexcept = nullptr;        // frees a derived node; nullptr: a plain waiter
  // The table's now() before the push, set by the requester: its wait for the statistics,
  // and under eventual fairness how long it has waited (read by the releasing holder). Kept
  // across the wake-ups of an eventual wait. not_queued for a request granted at once.
  static constexpr std::int64_t not_queued = std::numeric_limits<std::int64_t>::max();
  std::int64_t queued_at = not_queued;
};

// Completes a waiter that was granted or timed out: resumes its coroutine or runs its
// callback. The ONE place a coroutine or callback waiter is scheduled to run: on this
// thread, after any completion already running here (no recursion), except on the lease
// timer's thread, which hands it to the mutex's completion thread (the timer never runs
// user code).
void complete_waiter(waiter* w) noexcept;
// Drops one reference to a waiter node, freeing it with the last.
void release_waiter(waiter* w) noexcept;

// A key's lock state. The keyed part (the Key) follows it in keyed_mutex.hpp's entry type.
struct lock_entry {
  explicit lock_entry(std::size_t h) noexcept : hash(h) {}

  // --- shard lock ---
  std::size_t hash;        // the mixed hash (reset when a cached entry is reused)
  std::uint32_t refs = 0;  // guards whose lease expired and that still refer to the entry
  // Eventual fairness: the key is free although waiters still count (see `front` below).
  // Here, in refs' padding, so that the entry stays two cache lines (128 bytes).
  bool open = false;

  // --- hand-off protocol (lib/keyed/lock_protocol.cpp only) ---
  // The hand-off primitive's storage, driven by the serialized protocol: its count is the
  // requests accepted and not finished (the holder and the queued waiters), its mailbox
  // the waiters. Taken and joined only under the shard lock, released to 0 only under it;
  // the holder's hand-offs subtract outside it (never to 0: the granted waiter is
  // counted). Relaxed throughout: the shard lock or the waiter's `state` publishes what it
  // guards.
  serialized_ownership own;
  // Fencing token of the current (or last) grant. Written by the holder; read under the
  // shard lock when count == 0 (the releasing holder's shard unlock publishes it).
  std::uint64_t token = 0;
  // The thread that holds the key through the blocking API (for deadlock detection), 0
  // otherwise. Relaxed: it is only compared with the reader's own identity.
  std::atomic<std::uintptr_t> holder_thread{0};
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

// The result of a lock request; token == 0: not acquired. retry: look the key up again.
struct grant {
  lock_entry* entry = nullptr;
  std::uint64_t token = 0;
  std::int64_t lease = 0;
  bool retry = false;
};

}  // namespace handoff::detail
