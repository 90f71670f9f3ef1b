// lock_shard: one shard of the keyed mutex's table, a spin lock and a linear-probing hash
// table of lock entries in one cache line. mix_hash spreads a user hash over its bits.
#pragma once

#include <cstddef>
#include <cstdint>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/spin_lock.hpp"

namespace handoff::detail {

// Mixes a user hash so that shard and slot bits are spread (std::hash of an integer is
// the identity). Any result is fine, 0 included.
// Folding the high half in first makes every input bit reach the multiply; the shift after
// it brings the product's well-mixed high bits down to the slot bits (the low ones).
inline std::size_t mix_hash(std::size_t h) noexcept {
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

// One shard: a lock, a linear-probing table of entries, and the token floor of the keys
// that left it, in one cache line: the table starts in the line itself (two slots, room
// for one entry at load 1/2), so an uncontended lock/unlock touches the shard's line and
// the entry's, nothing else. Everything here is touched only under `lock`.
struct alignas(cache_line_bytes) lock_shard {
  // Two 16-byte slots are what is left of the 64-byte line after the lock and counters.
  static constexpr std::size_t inline_slots = 2;
  // Grow beyond load 1/2: linear probing's expected probe count stays under 2.5 there.
  static constexpr std::size_t grow_below = 2;  // capacity >= grow_below * size
  // Shrink under load 1/8 (a quarter of the growth threshold), so that a table hovering at
  // one size does not resize on every insert and erase.
  static constexpr std::size_t shrink_above = 8;  // shrink when capacity > shrink_above * size

  spin_lock lock;
  std::uint32_t size = 0;               // entries (4 bytes, so that two slots fit in the line)
  std::size_t mask = inline_slots - 1;  // capacity - 1; capacity is a power of two
  // Tokens of removed entries never exceed this; a new entry starts from it, so tokens
  // stay monotonic per key across the entry's lives.
  std::uint64_t token_floor = 0;
  table_slot* slots = inline_table;  // inline_table, or a heap table of more than inline_slots
  table_slot inline_table[inline_slots] = {};

  // The entry with hash h for which match(entry) is true, or nullptr. Propagates what
  // match throws (a user's operator==), changing nothing.
  template <class Match>
  lock_entry* find(std::size_t h, Match&& match) const {
    if (size == 0) return nullptr;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const table_slot& s = slots[i];
      if (s.entry == nullptr) return nullptr;
      if (s.hash == h && match(s.entry)) return s.entry;
    }
  }
  // Adds e (not present). May allocate a bigger table: throws std::bad_alloc.
  void insert(lock_entry* e) {
    if ((std::size_t{size} + 1) * grow_below > mask + 1) resize((mask + 1) * 2);
    place(slots, mask, e);
    ++size;
  }
  // Removes e (present). Shrinks the table when it is mostly empty. Inline: every
  // uncontended unlock removes its key.
  void erase(lock_entry* e) noexcept {
    HANDOFF_ASSERT(size > 0);
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
    // Give memory back after a burst.
    if (std::size_t{size} * shrink_above < mask + 1 && mask + 1 > inline_slots) shrink();
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
static_assert(sizeof(lock_shard) == cache_line_bytes, "a shard is one cache line");

}  // namespace handoff::detail
