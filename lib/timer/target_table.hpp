// target_table: the timers of one service by target actor. Private to lib/timer/. Not
// thread-safe: its shard's lock guards it.
//
// Each target with entries not over has a slot in an open-addressing table (linear
// probing, deletion by backward shift, Knuth's Algorithm R), keyed by the actor's address:
// the head of the list of its entries, threaded through them (timer_entry::target_next,
// target_prev, as pool indices), and whether the actor's destruction was seen. So a
// schedule, a cancel and the end of a timer find their target in O(1) without allocating,
// and forgetting a destroyed actor visits its own entries only.
//
// The table grows when three quarters of its slots are used and shrinks below an eighth:
// a steady number of targets, however many distinct actors pass through, allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "entry_pool.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/timer_entry.hpp"

namespace handoff::detail {

class target_table {
 public:
  static constexpr std::uint32_t none = timer_entry::no_index;

  struct slot {
    const void* target = nullptr;  // nullptr: the slot is empty
    std::uint32_t head = none;     // its first entry
    std::uint32_t forgotten = 0;   // the actor's destruction was seen; a schedule resets it
  };

  target_table() : slots_(min_slots) {}

  // The slot of `target`, or nullptr.
  [[nodiscard]] slot* find(const void* target) noexcept {
    for (std::size_t i = home(target);; i = (i + 1) & mask()) {
      slot& s = slots_[i];
      if (s.target == target) return &s;
      if (s.target == nullptr) return nullptr;
    }
  }
  // Makes sure add() will not allocate (grows the table: throws std::bad_alloc).
  void reserve_one() {
    if ((used_ + 1) * 4 > slots_.size() * 3) [[unlikely]]
      rehash(slots_.size() * 2);
  }
  // Links e (its target set, in no list) at the head of its target's list, adding the
  // slot if new. Precondition: reserve_one().
  void add(entry_pool& pool, timer_entry* e) noexcept {
    slot* s = find_or_add(e->target);
    const std::uint32_t i = entry_pool::index_of(e);
    e->target_prev = none;
    e->target_next = s->head;
    if (s->head != none) pool.at(s->head)->target_prev = i;
    s->head = i;
    s->forgotten = 0;
  }
  // Unlinks e from its target's list; the slot goes with the last entry.
  void remove(entry_pool& pool, timer_entry* e) noexcept {
    if (e->target_next != none) pool.at(e->target_next)->target_prev = e->target_prev;
    if (e->target_prev != none) {
      pool.at(e->target_prev)->target_next = e->target_next;
    } else {
      slot* s = find(e->target);
      HANDOFF_ASSERT(s != nullptr && s->head == entry_pool::index_of(e));
      s->head = e->target_next;
      if (s->head == none) erase(s);
    }
    e->target_next = none;
    e->target_prev = none;
  }
  [[nodiscard]] std::size_t size() const noexcept { return used_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return slots_.capacity() * sizeof(slot); }

 private:
  static constexpr std::size_t min_slots = 64;

  [[nodiscard]] std::size_t mask() const noexcept { return slots_.size() - 1; }
  // Fibonacci hashing: the high bits of the address times 2^64 / phi.
  [[nodiscard]] std::size_t home(const void* target) const noexcept {
    const std::uint64_t h = reinterpret_cast<std::uintptr_t>(target) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> (64 - bits_));
  }
  slot* find_or_add(const void* target) noexcept {
    for (std::size_t i = home(target);; i = (i + 1) & mask()) {
      slot& s = slots_[i];
      if (s.target == target) return &s;
      if (s.target == nullptr) {
        HANDOFF_ASSERT((used_ + 1) * 4 <= slots_.size() * 3);
        s.target = target;
        ++used_;
        return &s;
      }
    }
  }
  void erase(slot* s) noexcept;
  void rehash(std::size_t n);

  std::vector<slot> slots_;  // a power of two of them
  unsigned bits_ = 6;        // log2(slots_.size())
  std::size_t used_ = 0;
};

}  // namespace handoff::detail
