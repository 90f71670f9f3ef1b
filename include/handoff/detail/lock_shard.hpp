// lock_shard: one stripe of the keyed mutex, in one cache line: the thin-lock word its
// uncontended keys take (detail/thin_record.hpp), and, for the keys that inflated, a spin
// lock and a linear-probing hash table of lock entries. mix_hash spreads a user hash over
// its bits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/spin_lock.hpp"
#include "handoff/detail/thin_record.hpp"

namespace handoff::detail {

// Mixes a user hash so that shard and slot bits are spread (std::hash of an integer is
// the identity). Any result is fine, 0 included.
// Folding the high half in first makes every input bit reach the multiply; the shift after
// it brings the product's well-mixed high bits down to the slot bits (the low ones).
[[gnu::always_inline]] inline std::size_t mix_hash(std::size_t h) noexcept {
  h ^= h >> 32;
  h *= 0x9E3779B97F4A7C15ull;  // 2^64 / golden ratio (Fibonacci hashing)
  return h ^ (h >> 29);        // shard bits are the top 8, slot bits the bottom: both mixed
}

// The cache line of x86-64 and of the common ARM64 cores: one shard fills one.
inline constexpr std::size_t cache_line_bytes = 64;

// A slot of a shard's open-addressing table: the entry's hash and pointer.
struct table_slot {
  std::size_t hash;
  lock_entry* entry;  // nullptr: empty
};

// One shard (a stripe): the thin-lock word, a lock, a linear-probing table of entries, and
// the stripe's token counter, in one cache line. An uncontended lock/unlock touches the
// word and the counter only (and the holder's record). The table serves the stripe's keys
// while the word is `thin_inflated`, and starts in the line itself (two slots, room for
// one entry at load 1/2); past one entry it moves to the heap. Everything but the word is
// touched only under `lock`, or by the word's thin owner (the counter).
//
// Entries may stay in the table while idle (no holder, no waiter), keeping the stripe
// inflated, so that a lock of a key used recently finds its entry instead of creating
// one. Which ones may, and how many, the inserting lock decides (lock_entry::may_idle,
// detail/keyed_entry.hpp). A stripe whose entries are all idle deflates at the
// deflate_after-th calm lock of a thin-capable key (lock_table::deflate_if_calm).
struct alignas(cache_line_bytes) lock_shard {
  // Two 16-byte slots are what is left of the 64-byte line after the lock and counters.
  static constexpr std::size_t inline_slots = 2;
  // Grow beyond load 1/2: linear probing's expected probe count stays under 2.5 there.
  static constexpr std::size_t grow_below = 2;  // capacity >= grow_below * size
  // Shrink under load 1/8 (a quarter of the growth threshold), so that a table hovering at
  // one size does not resize on every insert and erase.
  static constexpr std::size_t shrink_above = 8;  // shrink when capacity > shrink_above * size
  // The most entries of a shard that stay once idle: an entry inserted while its shard
  // holds fewer may stay (lock_entry::may_idle), and an insert into a shard that holds this
  // many first takes over an idle one (evict_idle). Idle entries are so at most 256 shards
  // * 16 = 4,096 per mutex (about 1 MB with short keys). 16: 1,024 keys in use spread
  // over 256 shards leave about one shard in 100,000 with more (Poisson, mean 4).
  static constexpr std::uint32_t kept_idle = 16;
  // The same for an entry of a key that can be thin (detail/thin_key.hpp): one that was
  // contended, kept across its hand-offs; two, so that a colliding key's may stay too. The
  // entries of many keys of a stripe held at once (by one thread, say) leave but two.
  static constexpr std::uint32_t kept_idle_thin = 2;
  // Slots an insert into a full shard looks at for an idle entry to take over, from the
  // clock hand on: a few, so that a shard full of held keys costs an insert little.
  static constexpr std::uint32_t evict_scan = 4;
  // Calm locks (see `calm`) before an inflated stripe deflates: an entry outlives the
  // hand-offs of a key that stays contended, instead of leaving at each one and being
  // made again by the next inflation.
  static constexpr std::uint16_t deflate_after = 64;

  spin_lock lock;
  // Locks of thin-capable keys that found the stripe inflated since it last saw a wait
  // or an inflation: at deflate_after, a lock deflates it if every entry is idle. Under
  // `lock` (in the line's padding after it).
  std::uint16_t calm = 0;
  std::uint32_t entries = 0;              // idle ones included (4 bytes, so that two slots fit in the line)
  std::uint32_t mask = inline_slots - 1;  // capacity - 1; capacity is a power of two
  std::uint32_t hand = 0;                 // the clock hand: where evict_idle() looks first
  // The thin-lock word (encodings in detail/thin_record.hpp): 0, a holder's record, or
  // thin_inflated. Thin lockers CAS it without `lock`; it turns inflated and back to 0
  // only under `lock`.
  std::atomic<std::uintptr_t> word{0};
  // The stripe's last token: a thin holder's is ++token_floor, and tokens of removed
  // entries never exceed it; a new entry starts from it, so a key's tokens rise across
  // its entries and its thin holds. Owned by the word's owner: a thin holder (from its
  // CAS until it publishes its token), else `lock`.
  std::uint64_t token_floor = 0;
  union {
    table_slot* heap;                       // the table, past inline_slots
    table_slot inline_table[inline_slots];  // the table, up to inline_slots
  };

  [[nodiscard]] std::uint32_t size() const noexcept { return entries; }
  [[nodiscard]] table_slot* slots() const noexcept {
    // NOLINTNEXTLINE(cppcoreguidelines-pro-type-union-access): mask says which member is live
    return mask + 1 > inline_slots ? heap : const_cast<table_slot*>(inline_table);
  }

  // The entry with hash h for which match(entry) is true, or nullptr. Propagates what
  // match throws (a user's operator==), changing nothing.
  template <class Match>
  lock_entry* find(std::size_t h, Match&& match) const {
    const table_slot* slots = this->slots();
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const table_slot& s = slots[i];
      if (s.entry == nullptr) return nullptr;
      if (s.hash == h && match(s.entry)) return s.entry;
    }
  }
  // Adds e (not present). May allocate a bigger table: throws std::bad_alloc.
  void insert(lock_entry* e) {
    if ((std::size_t{size()} + 1) * grow_below > std::size_t{mask} + 1) resize((std::size_t{mask} + 1) * 2);
    place(slots(), mask, e);
    ++entries;
  }
  // Removes e (present). Shrinks the table when it is mostly empty.
  void erase(lock_entry* e) noexcept {
    const table_slot* slots = this->slots();
    std::size_t i = e->hash & mask;
    while (slots[i].entry != e) i = (i + 1) & mask;
    erase_at(i);
  }
  // An idle entry (no holder, waiter or expired guard: reclaimable) among the evict_scan
  // slots from the clock hand on, removed from the table; nullptr if none is there. The
  // hand moves past the slots looked at.
  lock_entry* evict_idle() noexcept {
    const table_slot* slots = this->slots();
    std::uint32_t i = hand;
    for (const std::uint32_t end = i + evict_scan; i != end; ++i) {
      lock_entry* e = slots[i & mask].entry;
      if (e != nullptr && reclaimable(e)) {
        hand = i + 1;
        erase_at(i & mask);
        return e;
      }
    }
    hand = i;
    return nullptr;
  }
  // Whether e, in this table, may leave it: idle, and no expired guard refers to it.
  static bool reclaimable(const lock_entry* e) noexcept { return e->refs == 0 && e->own.idle(); }
  // Every entry, for the table's destructor (all idle by then).
  template <class F>
  void for_each(F&& f) const {
    const table_slot* slots = this->slots();
    for (std::size_t i = 0; size() != 0 && i <= mask; ++i) {
      if (slots[i].entry != nullptr) f(slots[i].entry);
    }
  }

  lock_shard() noexcept : inline_table{} {}  // NOLINT(cppcoreguidelines-pro-type-member-init): the union's live member
  lock_shard(const lock_shard&) = delete;
  lock_shard& operator=(const lock_shard&) = delete;
  lock_shard(lock_shard&&) = delete;
  lock_shard& operator=(lock_shard&&) = delete;
  ~lock_shard();

 private:
  // Empties slot i (occupied). Backward-shift deletion: later members of the probe run
  // move into the hole, so that lookups never need tombstones.
  void erase_at(std::size_t i) noexcept {
    table_slot* slots = this->slots();
    HANDOFF_ASSERT(size() > 0 && slots[i].entry != nullptr);
    for (std::size_t j = (i + 1) & mask; slots[j].entry != nullptr; j = (j + 1) & mask) {
      const std::size_t home = slots[j].hash & mask;
      if (((j - home) & mask) >= ((j - i) & mask)) {  // j's home is cyclically outside (i, j]
        slots[i] = slots[j];
        i = j;
      }
    }
    slots[i] = {0, nullptr};
    --entries;
    // Give memory back after a burst.
    if (std::size_t{size()} * shrink_above < std::size_t{mask} + 1 && mask + 1 > inline_slots) shrink();
  }
  static void place(table_slot* to, std::size_t to_mask, lock_entry* e) noexcept {
    std::size_t i = e->hash & to_mask;
    while (to[i].entry != nullptr) i = (i + 1) & to_mask;
    to[i] = {e->hash, e};
  }
  // Rehashes into `capacity` slots (inline_table when it is inline_slots); throws std::bad_alloc.
  void resize(std::size_t capacity);
  void shrink() noexcept;
};
static_assert(sizeof(lock_shard) == cache_line_bytes, "a shard is one cache line");

}  // namespace handoff::detail
