// The timing wheel (lib/timer/wheel.hpp).
#include "wheel.hpp"

#include <algorithm>
#include <limits>

#include "handoff/detail/assert.hpp"

namespace handoff::detail {

void timer_wheel::move(timer_entry* e, std::int64_t deadline) noexcept {
  if (e->where < levels - 1) {  // level 3 may hold an entry placed short of its tick
    const unsigned level = e->where;
    const std::uint64_t t = tick_of(deadline);
    const unsigned shift = slot_bits * level;
    if (t > now_ && level_of(t - now_) == level &&
        ((t >> shift) & (slots - 1)) == ((tick_of(e->deadline) >> shift) & (slots - 1))) {
      e->deadline = deadline;  // insert() would put it in this very list
      return;
    }
  }
  unlink(e);
  e->deadline = deadline;
  insert(e);
}

void timer_wheel::cascade(unsigned level) noexcept {
  timer_entry*& head = slot_[level][(now_ >> (slot_bits * level)) & (slots - 1)];
  timer_entry* e = head;
  head = nullptr;
  while (e != nullptr) {
    timer_entry* next = e->next;
    --count_[level];
    --size_;
    e->where = nowhere;
    insert(e);  // a lower level, the due list, or (too far still) level 3 again
    e = next;
  }
}

void timer_wheel::advance(std::uint64_t target) noexcept {
  auto take = [&](timer_entry*& head, unsigned where) {
    while (timer_entry* e = head) {
      HANDOFF_ASSERT(e->where == where);
      unlink(e);
      e->where = batch_list;
      ++count_[batch_list];
      ++size_;
      push(batch_, e);
    }
  };
  take(due_, due_list);
  while (now_ < target) {
    if (count_[0] + count_[1] + count_[2] + count_[3] == 0) {  // nothing in the slots
      now_ = target;
      break;
    }
    // Skip the ticks before the next cascade of the lowest level that holds anything.
    unsigned lowest = 0;
    while (lowest < levels && count_[lowest] == 0) ++lowest;
    if (lowest > 0) {
      const std::uint64_t block = (std::uint64_t{1} << (slot_bits * std::min(lowest, levels - 1))) - 1;
      const std::uint64_t last = now_ | block;  // the tick before that cascade
      if (last >= target) {
        now_ = target;
        break;
      }
      now_ = std::max(now_, last);
    }
    ++now_;
    for (unsigned level = 1; level < levels; ++level) {
      if (((now_ >> (slot_bits * (level - 1))) & (slots - 1)) != 0) break;
      // Higher levels first: their entries may land in the slot cascaded next.
      unsigned top = level;
      while (top + 1 < levels && ((now_ >> (slot_bits * top)) & (slots - 1)) == 0) ++top;
      for (unsigned l = top; l >= level; --l) cascade(l);
      break;
    }
    take(slot_[0][now_ & (slots - 1)], 0);
    take(due_, due_list);  // what the cascade found due
  }
}

void timer_wheel::take_all(timer_entry*& out) noexcept {
  auto take = [&](timer_entry*& head) {
    while (timer_entry* e = head) {
      unlink(e);
      e->next = out;
      out = e;
    }
  };
  take(due_);
  take(batch_);
  for (auto& level : slot_) {
    for (timer_entry*& head : level) take(head);
  }
}

std::uint64_t timer_wheel::next_tick() const noexcept {
  if (count_[due_list] != 0) return now_;
  std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
  for (unsigned level = 0; level < levels; ++level) {
    if (count_[level] == 0) continue;
    const unsigned shift = slot_bits * level;
    const std::uint64_t block = now_ >> shift;
    for (std::uint64_t i = 1; i <= slots; ++i) {  // slot i blocks ahead; 256: the current one again
      const timer_entry* e = slot_[level][(block + i) & (slots - 1)];
      if (e == nullptr) continue;
      for (; e != nullptr; e = e->next) best = std::min(best, std::max(tick_of(e->deadline), now_ + 1));
      break;
    }
  }
  return best;
}

}  // namespace handoff::detail
