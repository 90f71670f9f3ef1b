// timer_wheel: the hierarchical timing wheel of a timer service (Varghese and Lauck,
// "Hashed and hierarchical timing wheels", SOSP 1987; the cascading layout of Linux's
// classic timer wheel). Private to lib/timer/. Not thread-safe: its shard's lock
// guards it.
//
// Time is counted in ticks (one resolution step). Level L (0..3) has 256 slots of 256^L
// ticks each; an entry due at tick t, `delta = t - now` ticks away, sits at level L for
// 256^L <= delta < 256^(L+1), in slot (t >> 8L) & 255 (entries further than 2^32 ticks sit
// in level 3 and are placed again when their slot cascades). When now crosses a multiple
// of 256^L, level L's slot for the new block is emptied into the levels below
// (cascade); level 0's slot for now holds exactly the entries due now. Entries at or
// before now go to the due list. advance() moves what is due onto the batch list, which the
// driver empties one entry at a time (pop_batch) while it sends, unlocking between sends:
// a cancel meanwhile unlinks the entry from the batch like from any list. Slots are
// intrusive doubly-linked lists (next, pprev): insert and unlink are O(1). Advancing skips
// whole blocks of empty lower levels.
#pragma once

#include <array>
#include <cstdint>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/timer_entry.hpp"

namespace handoff::detail {

class timer_wheel {
 public:
  static constexpr unsigned levels = 4;
  static constexpr unsigned slot_bits = 8;
  static constexpr unsigned slots = 1U << slot_bits;
  // timer_entry::where
  static constexpr std::uint8_t due_list = levels;
  static constexpr std::uint8_t batch_list = levels + 1;
  static constexpr std::uint8_t nowhere = 0xff;

  // Ticks are resolution steps since `epoch` ns; `shift`: log2 of the resolution in ns.
  timer_wheel(std::int64_t epoch, unsigned shift) noexcept : epoch_(epoch), shift_(shift) {}

  // The tick a deadline falls in, rounded up: a tick is never before its deadline.
  [[nodiscard]] std::uint64_t tick_of(std::int64_t deadline) const noexcept {
    if (deadline <= epoch_) return 0;
    const auto d = static_cast<std::uint64_t>(deadline - epoch_);
    return (d + (std::uint64_t{1} << shift_) - 1) >> shift_;
  }
  // The last tick wholly at or before `now`.
  [[nodiscard]] std::uint64_t tick_at(std::int64_t now) const noexcept {
    return now <= epoch_ ? 0 : static_cast<std::uint64_t>(now - epoch_) >> shift_;
  }
  // The instant a tick ends: the earliest `now` at which tick_at(now) >= t. Saturating:
  // the tick of a deadline at or near no_deadline (after(hours::max()), a "never") ends at
  // no_deadline, never at an instant wrapped into the past.
  [[nodiscard]] std::int64_t time_of(std::uint64_t t) const noexcept {
    if (t > (static_cast<std::uint64_t>(no_deadline) >> shift_)) return no_deadline;
    std::int64_t at = 0;
    if (__builtin_add_overflow(epoch_, static_cast<std::int64_t>(t << shift_), &at)) return no_deadline;
    return at;
  }
  [[nodiscard]] std::uint64_t now() const noexcept { return now_; }

  // Links e by e->deadline. Precondition: e is in no list. (Inline, below: they are most
  // of a schedule and a cancel.)
  void insert(timer_entry* e) noexcept;
  // Unlinks e from its list, if any.
  void unlink(timer_entry* e) noexcept;
  // Sets e's deadline and links it by it. When the new deadline falls in the slot of
  // levels 0-2 that e is in already, only the deadline changes: the usual re-arm of a
  // timeout by less than a slot's span moves nothing.
  void move(timer_entry* e, std::int64_t deadline) noexcept;
  // Moves now to `target` (never back), cascading, and moves every due entry onto the
  // batch list. Due entries linked later (a retry, a rearm to the past) wait in the due
  // list for the next advance.
  void advance(std::uint64_t target) noexcept;
  // Unlinks and returns an entry of the batch list; nullptr when it is empty.
  timer_entry* pop_batch() noexcept {
    timer_entry* e = batch_;
    if (e != nullptr) unlink(e);
    return e;
  }
  // Unlinks every entry onto the front of *out (the service is closing).
  void take_all(timer_entry*& out) noexcept;
  // The earliest tick with an entry: now() if the due list has one; UINT64_MAX if empty.
  [[nodiscard]] std::uint64_t next_tick() const noexcept;
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  static void push(timer_entry*& head, timer_entry* e) noexcept {
    e->next = head;
    e->pprev = &head;
    if (head != nullptr) head->pprev = &e->next;
    head = e;
  }
  // The level of an entry `delta` ticks ahead: 256^L <= delta < 256^(L+1), capped at 3.
  // A loop, not one std::bit_width: fewer instructions for levels 0 and 1, the common ones
  // (docs/notebook.md, "Timers, first and second rounds").
  static unsigned level_of(std::uint64_t delta) noexcept {
    unsigned level = 0;
    while (level + 1 < levels && delta >= (std::uint64_t{1} << (slot_bits * (level + 1)))) ++level;
    return level;
  }
  void cascade(unsigned level) noexcept;

  std::array<std::array<timer_entry*, slots>, levels> slot_{};
  std::array<std::size_t, levels + 2> count_{};  // per level, then the due and batch lists
  timer_entry* due_ = nullptr;
  timer_entry* batch_ = nullptr;
  std::size_t size_ = 0;
  std::uint64_t now_ = 0;  // every tick up to now has been processed
  std::int64_t epoch_;
  unsigned shift_;
};

inline void timer_wheel::insert(timer_entry* e) noexcept {
  HANDOFF_ASSERT(e->where == nowhere);
  const std::uint64_t t = tick_of(e->deadline);
  ++size_;
  if (t <= now_) {
    e->where = due_list;
    ++count_[due_list];
    push(due_, e);
    return;
  }
  const std::uint64_t delta = t - now_;
  const unsigned level = level_of(delta);
  // Beyond level 3's reach: placed at its last block, placed again when that cascades.
  const std::uint64_t reach = std::uint64_t{1} << (slot_bits * levels);
  const std::uint64_t at = delta >= reach ? now_ + reach - 1 : t;
  e->where = static_cast<std::uint8_t>(level);
  ++count_[level];
  push(slot_[level][(at >> (slot_bits * level)) & (slots - 1)], e);
}

inline void timer_wheel::unlink(timer_entry* e) noexcept {
  if (e->where == nowhere) return;
  HANDOFF_ASSERT(count_[e->where] != 0 && size_ != 0);
  --count_[e->where];
  --size_;
  *e->pprev = e->next;
  if (e->next != nullptr) e->next->pprev = e->pprev;
  e->where = nowhere;
  e->next = nullptr;
  e->pprev = nullptr;
}

}  // namespace handoff::detail
