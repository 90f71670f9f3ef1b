// The timer service's table of targets (lib/timer/target_table.hpp).
#include "target_table.hpp"

#include <bit>
#include <utility>

namespace handoff::detail {

void target_table::erase(slot* s) noexcept {
  // Backward shift: each later slot of the run that may sit at the hole moves into it,
  // so that a find never meets an empty slot before its target's.
  auto hole = static_cast<std::size_t>(s - slots_.data());
  for (std::size_t i = (hole + 1) & mask();; i = (i + 1) & mask()) {
    slot& next = slots_[i];
    if (next.target == nullptr) break;
    const std::size_t h = home(next.target);
    // Movable unless its home lies cyclically in (hole, i].
    if (((i - h) & mask()) >= ((i - hole) & mask())) {
      slots_[hole] = next;
      hole = i;
    }
  }
  slots_[hole] = slot{};
  --used_;
  if (slots_.size() > min_slots && used_ * 8 < slots_.size()) [[unlikely]] {
    try {
      rehash(slots_.size() / 2);
    } catch (...) {  // non-binding: a larger table works as well
    }
  }
}

void target_table::rehash(std::size_t n) {
  std::vector<slot> old(n);  // may throw: nothing changed yet
  old.swap(slots_);
  bits_ = static_cast<unsigned>(std::countr_zero(n));
  for (const slot& s : old) {
    if (s.target == nullptr) continue;
    std::size_t i = home(s.target);
    while (slots_[i].target != nullptr) i = (i + 1) & mask();
    slots_[i] = s;
  }
}

}  // namespace handoff::detail
