// thin_record: the record of a thin-held key, and the stripe word that points to it.
//
// An uncontended key has no state in the keyed mutex's table: its lock is one CAS on its
// stripe's word (detail/lock_shard.hpp) from free to a record of the locking thread, which
// carries what the slow path needs to know about the holder (the key's bytes, its hash,
// its token, its thread). The word's encodings:
//
//   0            free: no key of the stripe is held or waited for
//   R            thin-held: R is the holder's record (64-byte aligned)
//   R|W          thin-held, and threads wait on the word for R's key (eventual fairness)
//   R|W|P        the same, and some of them may sleep on the word (its unlock wakes them)
//   W, W|P       free, with threads waiting on the word: a lock takes it through the slow
//                path, which lets the waiters first once one has waited fair_after
//   inflated     the stripe's keys are served by its table of entries (exact per key)
//
//   lock:     fill R (key bytes, hash, thread; token 0), CAS 0 -> R (acquire: the last
//             owner's writes and the token counter; release: R's fields, for an inflater)
//             token = ++counter (the word's owner owns the stripe's counter), published
//             in R.token (release; an inflater waits for it); a word with W is taken as
//             R|W (P kept), by a waiter, or by another locker while no waiter is due
//   unlock:   CAS R -> 0 (release); it fails only when waited on or inflated: the table's
//             side (lock_table::release_thin_inflated) then CASes R|W(|P) -> W while the
//             stripe counts waiters (else -> 0), waking the sleepers if P was set, or
//             goes through the table
//   park:     (eventual fairness, a blocking lock of the key R holds, after a spin; or a
//             lock that found the word free with W and a waiter due) counted among the
//             stripe's waiters with its deadline (lock_table::park_thin), CAS w -> w|W|P
//             from the word it saw, then sleep while the word is still that (a futex
//             compare-and-sleep: a change in between is seen); woken, take a free word,
//             or park again; due with the word still held, queue in the table (inflating
//             the stripe). P is cleared only by a change that wakes: no sleeper is lost.
//   inflate:  under the stripe's lock, CAS the word -> inflated, waking the sleepers (P;
//             every waiter goes to the table): R's holder can no longer release without
//             that lock, so R is stable; its key goes into the table as held, with its
//             token, and R.entry names the entry for the holder's unlock
//   deflate:  under the stripe's lock, the table's last entry leaves, or a thin-capable
//             lock finds every entry idle, calm (lock_table::deflate_if_calm): word = 0
//             (release)
//
// Records are type-stable: never freed while the process runs, recycled through a
// per-thread cache in front of a global list, so that a contender reading a holder's
// record (its hash and thread, through atomics) never reads freed memory. A record moves
// to the cache of the thread that unlocks it; an exiting thread's cache goes back to the
// global list.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "handoff/detail/tls_model.hpp"

namespace handoff::detail {

struct lock_entry;

// The stripe word's non-record value, and the waiters' bits of a held or free word
// (records are 64-byte aligned: their low six bits are free).
inline constexpr std::uintptr_t thin_inflated = 1;
inline constexpr std::uintptr_t thin_parked = 2;   // P: threads may sleep on the word
inline constexpr std::uintptr_t thin_waiters = 4;  // W: threads wait on the word
inline constexpr std::uintptr_t thin_flags = thin_parked | thin_waiters;

struct alignas(64) thin_record {
  // The holder's mixed hash: read by contenders (a hint whether they want the same key:
  // the record may be reused meanwhile) and by the inflater. Relaxed: written before the
  // CAS that publishes the record.
  std::atomic<std::uint64_t> hash{0};
  // The grant's token; 0 until the holder published it. release; pairs with the
  // inflater's acquire (which also makes the holder's counter increment visible).
  std::atomic<std::uint64_t> token{0};
  // The locking thread (lock_table::this_thread_id()), for deadlock detection; 0 once the
  // guard moved. Written by the holder, read by contenders and the inflater.
  std::atomic<std::uintptr_t> thread{0};
  union {
    // Held: the stripe's word this record was published in; set before the CAS, read by
    // the holder.
    std::atomic<std::uintptr_t>* word;
    thin_record* next;  // in a free list: its owner's only
  };
  // Held: the entry the inflater made of it (under the stripe's lock), or null. Null
  // whenever the record is free: the unlock that found it set clears it.
  lock_entry* entry = nullptr;
  std::uint8_t len = 0;  // key bytes; written before the publishing CAS
  char key[23] = {};     // the key's bytes (a std::string's characters, or an integer's)

  thin_record() noexcept : word(nullptr) {}  // NOLINT(cppcoreguidelines-pro-type-member-init): the union's live member
};
static_assert(sizeof(thin_record) == 64, "a record is one cache line");
inline constexpr std::size_t max_thin_key = sizeof(thin_record::key);

// The holder's record in a thin word other than inflated; null for a free one.
[[nodiscard]] inline thin_record* thin_holder(std::uintptr_t w) noexcept {
  return reinterpret_cast<thin_record*>(w & ~thin_flags);  // NOLINT(performance-no-int-to-ptr): a record
}

// A thread's cache of free records. Owned by its thread.
struct thin_record_cache {
  thin_record* head;
  std::uint32_t count;
  bool armed;  // the thread-exit hook is registered
  bool dead;   // the thread is exiting: records go to the global list (count is then
               // thin_cache_max, so that every push takes the spill's path)
};
HANDOFF_TLS_MODEL extern constinit thread_local thin_record_cache thin_records;

// The cold halves (lib/keyed/thin_records.cpp): a refill from the global list (allocating
// a slab when it is empty: throws std::bad_alloc), and a spill of half the cache to it.
thin_record* refill_thin_records();
void spill_thin_records(thin_record* r) noexcept;

// Records allocated in the process so far (never freed): for tests of the memory they keep.
[[nodiscard]] std::size_t thin_records_allocated() noexcept;

// The most records a thread keeps; past it, half go back to the global list.
inline constexpr std::uint32_t thin_cache_max = 64;

// A free record of this thread's cache. Throws std::bad_alloc only when the process has
// no free record left and none can be allocated.
[[gnu::always_inline]] inline thin_record* pop_thin_record() {
  thin_record_cache& c = thin_records;
  thin_record* r = c.head;
  if (r == nullptr) [[unlikely]]
    return refill_thin_records();
  c.head = r->next;  // NOLINT(cppcoreguidelines-pro-type-union-access): free, `next` is live
  --c.count;
  return r;
}
// Gives back a record nobody refers to any more.
[[gnu::always_inline]] inline void push_thin_record(thin_record* r) noexcept {
  thin_record_cache& c = thin_records;
  if (c.count >= thin_cache_max) [[unlikely]]
    return spill_thin_records(r);
  r->next = c.head;  // NOLINT(cppcoreguidelines-pro-type-union-access): free from now on
  c.head = r;
  ++c.count;
}

// The thin holder's unlock: CAS R -> 0 and the record back to the cache (true); false when
// threads wait on the word or the stripe was inflated meanwhile
// (lock_table::release_thin_inflated does the rest).
// release; pairs with the next owner's CAS.
[[gnu::always_inline]] inline bool release_thin(thin_record* r) noexcept {
  auto w = reinterpret_cast<std::uintptr_t>(r);
  // NOLINTNEXTLINE(cppcoreguidelines-pro-type-union-access): held, `word` is live
  if (!r->word->compare_exchange_strong(w, 0, std::memory_order_release, std::memory_order_relaxed)) return false;
  push_thin_record(r);
  return true;
}

}  // namespace handoff::detail
