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
// The table doubles when half its slots are used and halves below an eighth: a steady
// number of targets, however many distinct actors pass through, allocates nothing. (Half
// full, not three quarters: the probes of an add and of a removal's backward shift are
// short, which repays the larger array even when it misses the cache.)
// A resize is incremental, so that no schedule or cancel waits for a whole table's move:
// the new array (zeroed by calloc, whose large blocks are fresh pages: no pass over them)
// becomes the table, and the old one is kept beside it, read-only but for its slots moved
// out, which become `moved` markers that a probe steps over. Each schedule (reserve_one)
// and each removal of a target moves the next few old slots (step_slots); reserve_one also
// moves the scheduled target's own slot, and a find that meets its target in the old
// array moves that one, so every slot a caller holds is in the new array. The move ends
// long before the new array could need a resize of its own (see step_slots).
#pragma once

#include <cstddef>
#include <cstdint>

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

  target_table();  // throws std::bad_alloc
  target_table(const target_table&) = delete;
  target_table& operator=(const target_table&) = delete;
  ~target_table();

  // The slot of `target`, or nullptr.
  [[nodiscard]] slot* find(const void* target) noexcept {
    for (std::size_t i = home(target, bits_);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.target == target) return &s;
      if (s.target == nullptr) break;
    }
    if (old_ != nullptr) [[unlikely]]
      return find_old(target);
    return nullptr;
  }
  // Makes sure add() of an entry aimed at `target` will not allocate (starts a resize:
  // throws std::bad_alloc); while resizing, moves the next old slots and target's own, so
  // that add() looks in the new array only (the old one only loses slots meanwhile).
  void reserve_one(const void* target) {
    if (used_ >= grow_at_) [[unlikely]]
      reserve_slow(target);
  }
  // The same guarantee again after the caller let go of the lock since reserve_one(target)
  // (another schedule may have started a resize meanwhile); room is left by then anyway.
  void settle(const void* target) noexcept {
    if (old_ != nullptr) [[unlikely]]
      (void)find_old(target);
  }
  // Links e (its target set, in no list) at the head of its target's list, adding the
  // slot if new. Precondition: reserve_one(e->target).
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
  [[nodiscard]] std::size_t bytes() const noexcept {
    return (mask_ + 1 + (old_ != nullptr ? old_mask_ + 1 : 0)) * sizeof(slot);
  }
  // For tests: whether a resize is still moving slots.
  [[nodiscard]] bool resizing() const noexcept { return old_ != nullptr; }

 private:
  static constexpr std::size_t min_slots = 64;
  // Old slots moved per schedule (reserve_one) or removal of a target while resizing. A doubling starts at
  // n / 2 targets in n slots and ends within n / step_slots adds, before n more make the 2n
  // new slots half full; a halving starts below n / 8 and ends within n / step_slots calls,
  // before n / 8 more make the n / 2 new slots half full.
  static constexpr std::size_t step_slots = 16;

  // Fibonacci hashing: the high bits of the address times 2^64 / phi.
  [[nodiscard]] static std::size_t home(const void* target, unsigned bits) noexcept {
    const std::uint64_t h = reinterpret_cast<std::uintptr_t>(target) * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h >> (64 - bits));
  }
  slot* find_or_add(const void* target) noexcept {
    for (std::size_t i = home(target, bits_);; i = (i + 1) & mask_) {
      slot& s = slots_[i];
      if (s.target == target) return &s;
      if (s.target == nullptr) {
        HANDOFF_ASSERT(used_ < mask_);  // a schedule that let go of the lock may pass half full
        s.target = target;
        s.head = none;  // a fresh array's slots are all zero bits
        ++used_;
        return &s;
      }
    }
  }
  void reserve_slow(const void* target);
  // Probes the old array; a hit moves to the new one, and that slot is returned.
  slot* find_old(const void* target) noexcept;
  // Moves the next step_slots old slots; frees the old array once none is left there.
  void step() noexcept;
  void moved_one() noexcept;
  // Places a slot taken from the old array (its target absent from the new one).
  void place(const slot& s) noexcept;
  void erase(slot* s) noexcept;
  void resize(std::size_t n);

  slot* slots_;  // a power of two of them, mask_ + 1
  std::size_t mask_;
  unsigned bits_;         // log2(mask_ + 1)
  std::size_t used_ = 0;  // targets in both arrays
  // reserve_one's one test: the count at which the array is half full, 0 while resizing.
  std::size_t grow_at_;
  slot* old_ = nullptr;  // while resizing: the array being moved out, else nullptr
  std::size_t old_mask_ = 0;
  unsigned old_bits_ = 0;
  std::size_t cursor_ = 0;    // the next old slot to move
  std::size_t old_used_ = 0;  // targets still in the old array: at 0 it goes
};

}  // namespace handoff::detail
