// The keyed mutex's core: per-key lock entries, the sharded table that finds them, and the
// ownership hand-off between holders. Key-independent; keyed_mutex.hpp adds the key.
//
// A key's entry is a small actor whose ownership *is* the lock (design (b) in
// docs/design.md): `count` is the actor's message count, here the lock requests accepted
// and not finished (the holder plus the queued waiters), and `waiters` is its mailbox of
// the requests that found it owned.
//
//   lock:    under the shard lock, find or create the entry, then
//            count == 0 -> count = 1: the caller holds the key (no node, no wait)
//            count != 0 -> count += 1, push a waiter node (still under the lock), wait
//   unlock:  (the holder, no table lock) pop the next waiter; count -= uncounted;
//            CAS waiting -> granted: the key is handed over. A waiter that gave up (the
//            CAS finds `cancelled`) is skipped and counted as `uncounted` for the next round.
//            Mailbox empty: take the shard lock and pop again. Every request is counted and
//            pushed inside that lock, so an empty mailbox there means count == uncounted:
//            count = 0, and the entry leaves the table unless an expired guard refers to it.
//
// Why the 0 -> 1 transition and the final release happen under the shard lock rather than
// through a lock-free count: the table must be locked to find or remove the entry anyway,
// so doing them in the same critical sections makes an uncontended lock/unlock two short
// critical sections and no other atomic (what a striped mutex costs), and it closes the
// race between "the last release removes the entry" and "a new locker finds it" by
// construction: removal and lookup exclude each other, and a locker counts itself before it
// lets go of the lock. Hand-offs between holders (the contended path) take no table lock.
//
// Entry lifetime: the entry lives while count > 0 (a holder, or a queued request, live or
// given up) or refs > 0 (guards whose lease expired: they no longer count, but still read
// the entry). It is freed when both are zero, under the shard lock.
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/mpsc_queue.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::detail {

// Test-and-test-and-set lock for the table shards: critical sections are a few loads and
// stores, never a system call or user code (pool allocation at most).
class spin_lock {
 public:
  void lock() noexcept {
    // acquire; pairs with the release in unlock().
    for (unsigned spins = 0; locked_.exchange(true, std::memory_order_acquire);) {
      while (locked_.load(std::memory_order_relaxed)) backoff(spins++);
    }
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

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
// deadline), each holding one of `refs`.
// As a task: its entry in the run queue of the thread that completes it.
struct waiter : task, mailbox_node {
  // state encodings: the winner of the CAS out of waiting/sleeping decides the outcome.
  enum : std::uint32_t {
    waiting = 0,    // queued, requester running (spinning or about to suspend)
    sleeping = 1,   // queued, requester blocked in futex_wait: a grant must wake it
    granted = 2,    // the holder handed the key over: the requester now holds it
    cancelled = 3,  // the requester gave up (timeout): never granted, skipped by the holder
  };
  enum class kind : std::uint8_t { thread, coroutine, callback };

  std::atomic<std::uint32_t> state{waiting};
  std::atomic<std::uint32_t> refs{2};
  kind type = kind::thread;
  std::uint64_t token = 0;  // written by the granter before its CAS, read after `granted`
  lock_entry* entry = nullptr;
  lock_table* table = nullptr;
  timer_node timeout;                                 // async waits with a deadline
  std::coroutine_handle<> handle;                     // kind::coroutine
  void (*complete)(waiter*, bool granted) = nullptr;  // kind::callback: runs the callable
  void (*destroy)(waiter*) noexcept = nullptr;        // frees a derived node; nullptr: a plain waiter
};

// A key's lock state. The keyed part (the Key) follows it in keyed_mutex.hpp's entry type.
struct lock_entry {
  explicit lock_entry(std::size_t h) noexcept : hash(h) {}

  // --- shard lock ---
  std::size_t hash;        // the mixed hash (reset when a cached entry is reused)
  std::uint32_t refs = 0;  // guards whose lease expired and that still refer to the entry

  // --- hand-off protocol ---
  // Requests accepted and not finished. Incremented only under the shard lock; decremented
  // by the holder when it hands off (fetch_sub, outside the lock: never to 0, the granted
  // waiter is counted) or zeroed under the shard lock on release. Relaxed throughout: the
  // data it guards is published by the shard lock or by the waiter's `state`.
  std::atomic<std::uint64_t> count{0};
  mpsc_queue waiters;  // producers: lockers, under the shard lock; consumer: the holder
  // Fencing token of the current (or last) grant. Written by the holder; read under the
  // shard lock when count == 0 (the releasing holder's shard unlock publishes it).
  std::uint64_t token = 0;
  // The thread that holds the key through the blocking API (for deadlock detection), 0
  // otherwise. Relaxed: it is only compared with the reader's own identity.
  std::atomic<std::uintptr_t> holder_thread{0};

  // --- leases ---
  // Token of the current leased hold, 0 when not leased. The guard's unlock and the timer's
  // expiry both CAS it to 0; the winner releases the key.
  std::atomic<std::uint64_t> leased{0};
  timer_node lease;               // timer mutex
  std::uint64_t lease_token = 0;  // timer mutex: the token `lease` expires
};

// A slot of a shard's open-addressing table: the entry's hash and pointer.
struct table_slot {
  std::size_t hash;
  lock_entry* entry;  // nullptr: empty
};

// One shard: a lock, a linear-probing table of entries, and the token floor of the keys
// that left it, in one cache line: the table starts in the line itself (two slots, room
// for one entry at load 1/2), so an uncontended lock/unlock touches the shard's line and
// the entry's, nothing else. Everything here is touched only under `lock`.
struct alignas(64) lock_shard {
  static constexpr std::size_t inline_slots = 2;

  spin_lock lock;
  std::uint32_t size = 0;               // entries (4 bytes, so that two slots fit in the line)
  std::size_t mask = inline_slots - 1;  // capacity - 1; capacity is a power of two
  // Tokens of removed entries never exceed this; a new entry starts from it, so tokens
  // stay monotonic per key across the entry's lives.
  std::uint64_t token_floor = 0;
  table_slot* slots = inline_table;  // inline_table, or a heap table of more than inline_slots
  table_slot inline_table[inline_slots] = {};

  template <class Match>
  lock_entry* find(std::size_t h, Match&& match) const noexcept {
    if (size == 0) return nullptr;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const table_slot& s = slots[i];
      if (s.entry == nullptr) return nullptr;
      if (s.hash == h && match(s.entry)) return s.entry;
    }
  }
  // Adds e (not present). May allocate a bigger table: throws std::bad_alloc.
  void insert(lock_entry* e) {
    if ((std::size_t{size} + 1) * 2 > mask + 1) resize((mask + 1) * 2);  // load <= 1/2
    place(slots, mask, e);
    ++size;
  }
  // Removes e (present). Shrinks the table when it is mostly empty.
  void erase(lock_entry* e) noexcept {
    std::size_t i = e->hash & mask;
    while (slots[i].entry != e) i = (i + 1) & mask;
    // Backward-shift deletion: move later members of the probe run into the hole so that
    // lookups never need tombstones.
    for (std::size_t j = (i + 1) & mask; slots[j].entry != nullptr; j = (j + 1) & mask) {
      const std::size_t home = slots[j].hash & mask;
      if (((j - home) & mask) >= ((j - i) & mask)) {  // j's home is cyclically outside (i, j]
        slots[i] = slots[j];
        i = j;
      }
    }
    slots[i] = {0, nullptr};
    --size;
    if (std::size_t{size} * 8 < mask + 1 && mask + 1 > inline_slots) shrink();  // give memory back after a burst
  }
  lock_shard() = default;
  lock_shard(const lock_shard&) = delete;
  lock_shard& operator=(const lock_shard&) = delete;
  lock_shard(lock_shard&&) = delete;
  lock_shard& operator=(lock_shard&&) = delete;
  ~lock_shard();

 private:
  static void place(table_slot* to, std::size_t to_mask, lock_entry* e) noexcept {
    std::size_t i = e->hash & to_mask;
    while (to[i].entry != nullptr) i = (i + 1) & to_mask;
    to[i] = {e->hash, e};
  }
  // Rehashes into `capacity` slots (inline_table when it is inline_slots); throws std::bad_alloc.
  void resize(std::size_t capacity);
  void shrink() noexcept;
};
static_assert(sizeof(lock_shard) == 64, "a shard is one cache line");

// Frees an entry of one keyed_mutex instantiation (its key type); identifies the type.
using destroy_entry_fn = void (*)(lock_entry*) noexcept;

// Each thread keeps the last entry it removed, idle (count 0, empty mailbox, no lease, no
// holder, its key still constructed), for the next key it creates: creating and freeing
// an entry per uncontended lock/unlock is most of the table's cost otherwise. Per thread
// rather than per shard, so that the entry's cache line stays on the core that uses it.
// At most one entry per thread, freed when the thread exits; owned by its thread.
struct entry_cache {
  lock_entry* entry;         // nullptr: none
  destroy_entry_fn destroy;  // entry's type: reused only by a mutex with the same function
  bool reaper_armed;         // the thread-exit hook is registered
  bool dead;                 // the thread is exiting: cache nothing more
};
HANDOFF_TLS_MODEL extern constinit thread_local entry_cache cached_entry;

// What a lock request wants.
struct lock_request {
  enum class wait_mode : std::uint8_t { none, until, forever };
  wait_mode mode = wait_mode::forever;
  std::int64_t deadline = 0;  // steady_clock ns, for `until`
  std::int64_t lease = 0;     // ns; 0: no lease
};

// The result of a lock request; token == 0: not acquired. retry: look the key up again.
struct grant {
  lock_entry* entry = nullptr;
  std::uint64_t token = 0;
  std::int64_t lease = 0;
  bool retry = false;
};

class lease_timer;

// The key-independent part of a keyed_mutex: shards, protocol, timer.
class lock_table {
 public:
  using destroy_fn = destroy_entry_fn;
  explicit lock_table(destroy_fn destroy);
  // Terminates with a message if a key still has live state (a guard or a waiter outlived
  // the mutex): continuing would leave them pointing into freed memory.
  ~lock_table();
  lock_table(const lock_table&) = delete;
  lock_table& operator=(const lock_table&) = delete;

  lock_shard& shard_for(std::size_t h) noexcept { return shards_[h >> shard_shift_]; }
  [[nodiscard]] std::size_t size() const noexcept;

  // Called with s locked and e in the table (possibly just created): performs the request,
  // unlocks s, and waits when the mode allows (blocking the thread). token == 0 in the
  // result: not acquired (busy, or the deadline passed); retry: call again after a new
  // lookup (a lease of this thread's expired meanwhile). Throws
  // std::system_error(resource_deadlock_would_occur) when a waiting request finds the key
  // held by this thread; std::bad_alloc. On a throw nothing changed.
  grant acquire(lock_shard& s, lock_entry* e, const lock_request& r);

  // Async forms, with s locked and e in the table; unlock s. w is a fresh waiter of the
  // given kind (handle or complete set). True: acquired now (w unused, freed by the
  // caller); false: w queued, completed later through its kind. `deadline`: no_deadline for none.
  bool acquire_or_enqueue(lock_shard& s, lock_entry* e, waiter* w, std::int64_t deadline);

  // The holder's release of e (its unlock, or the lease timer's expiry). Hands the key to
  // the next live waiter or releases it; may complete async waiters on this thread.
  void release(lock_entry* e) noexcept;
  // A guard whose lease expired lets go of the entry.
  void drop_ref(lock_entry* e) noexcept;

  // Starts the timer thread if it is not running: called before any request with a lease
  // or a wait time changes state, so that a failure to start it (std::system_error)
  // changes nothing.
  void start_timer() { (void)timer(); }

  // Leases (durations in ns): arm after a grant with a lease (the timer is running);
  // disarm (true) by the holder's unlock, which must then release; false when the timer
  // expired the hold first.
  void arm_lease(lock_entry* e, std::uint64_t token, std::int64_t lease) noexcept;
  [[nodiscard]] bool disarm_lease(lock_entry* e, std::uint64_t token) noexcept;
  [[nodiscard]] bool extend_lease(lock_entry* e, std::uint64_t token, std::int64_t lease);

  // The table's clock: steady_clock ns, or the manual clock below.
  [[nodiscard]] std::int64_t now() const noexcept;

  // Tests only (the fuzz target): a manual clock starting at `start`, no timer thread.
  // Call before the mutex is first used. Leases and async wait times then fire only in
  // advance_manual_clock(), on the caller's thread; blocking timed waits are not supported.
  void use_manual_clock(std::int64_t start) noexcept {
    manual_clock_ = true;
    manual_now_.store(start, std::memory_order_relaxed);
  }
  void advance_manual_clock(std::int64_t to);

  // The current thread's identity for deadlock detection (never 0): the address of its
  // scheduler state, an initial-exec TLS access.
  static std::uintptr_t this_thread_id() noexcept { return reinterpret_cast<std::uintptr_t>(&tls); }

  // With s locked and e in the table: the uncontended lock, inline. Holds the key and
  // unlocks s if e is free and no lease is asked for; else leaves both to acquire().
  [[nodiscard]] static bool try_acquire_fast(lock_shard& s, lock_entry* e, grant& g) noexcept {
    if (e->count.load(std::memory_order_relaxed) != 0) return false;
    e->count.store(1, std::memory_order_relaxed);
    g = {e, ++e->token, 0};
    e->holder_thread.store(this_thread_id(), std::memory_order_relaxed);
    s.lock.unlock();
    return true;
  }

  // Shards: 256, one cache line each (16 KB, within L1). Threads on different keys rarely
  // meet in a shard's lock: with 16 shards (the old count on 2 cores) the 2-thread
  // uncontended benchmark spent a quarter of its time spinning there (21.6 ns per
  // operation against 16.1 ns with 256).
  static constexpr unsigned shard_bits = 8;
  [[nodiscard]] std::size_t shard_count() const noexcept { return std::size_t{1} << (64 - shard_shift_); }

 private:
  friend class lease_timer;

  lease_timer& timer();
  lease_timer* timer_if_started() noexcept;
  // With s locked: e has count == 0; removes it if nothing refers to it. Returns the
  // removed entry, for recycle() after unlocking, or nullptr.
  static lock_entry* remove_if_unused(lock_shard& s, lock_entry* e) noexcept;
  // Without a shard lock: keeps e (removed, idle) as this thread's cached entry, or frees it.
  void recycle(lock_entry* e) noexcept;

  unsigned shard_shift_;  // 64 - shard_bits
  std::unique_ptr<lock_shard[]> shards_;
  destroy_fn destroy_;
  bool manual_clock_ = false;  // see use_manual_clock()
  std::atomic<std::int64_t> manual_now_{0};
  std::once_flag timer_once_;
  std::unique_ptr<lease_timer> timer_;
  std::atomic<bool> timer_started_{false};
};

// Completes a waiter that was granted or timed out: resumes its coroutine or runs its
// callback through this thread's run queue: at once at top level, else after the work
// running on this thread (a handler, a coroutine, another completion) returns.
void complete_waiter(waiter* w) noexcept;
// Drops one reference to a waiter node, freeing it with the last.
void release_waiter(waiter* w) noexcept;
// steady_clock now in nanoseconds.
std::int64_t steady_ns() noexcept;
std::int64_t to_ns(std::chrono::steady_clock::time_point t) noexcept;
// Mixes a user hash so that shard and slot bits are spread (std::hash of an integer is
// the identity). Never returns 0 in the top bits' favour: any value is fine.
inline std::size_t mix_hash(std::size_t h) noexcept {
  h ^= h >> 32;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

}  // namespace handoff::detail
