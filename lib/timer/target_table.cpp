// The timer service's table of targets (lib/timer/target_table.hpp).
#include "target_table.hpp"

#include <bit>
#include <cstdlib>
#include <new>

namespace handoff::detail {

namespace {
// An old slot moved to the new array: occupied for a probe of the old one, never matched.
const void* const moved = &moved;

target_table::slot* zeroed_slots(std::size_t n) {
  // Only an empty slot's target is read (nullptr): no pass to set its other fields.
  // calloc: a large array comes as zero pages, with no pass over it.
  void* p = std::calloc(n, sizeof(target_table::slot));  // NOLINT(cppcoreguidelines-no-malloc): freed by its owner
  if (p == nullptr) throw std::bad_alloc();
  return static_cast<target_table::slot*>(p);
}
}  // namespace

target_table::target_table()
    : slots_(zeroed_slots(min_slots)), mask_(min_slots - 1), bits_(static_cast<unsigned>(std::countr_zero(min_slots))),
      grow_at_(min_slots / 2) {}

void target_table::reserve_slow(const void* target) {
  if (old_ != nullptr) step();
  if ((used_ + 1) * 2 > mask_ + 1) resize(2 * (mask_ + 1));
  if (old_ != nullptr) (void)find_old(target);
}

target_table::~target_table() {
  std::free(old_);    // NOLINT(cppcoreguidelines-no-malloc): from zeroed_slots
  std::free(slots_);  // NOLINT(cppcoreguidelines-no-malloc): from zeroed_slots
}

target_table::slot* target_table::find_old(const void* target) noexcept {
  // The old slots before cursor_ hold no target (markers only, perhaps no empty slot
  // left): a probe starts at cursor_ at the earliest and ends where it wraps into them.
  std::size_t i = home(target, old_bits_);
  if (i < cursor_) i = cursor_;
  for (; i <= old_mask_; i = i == old_mask_ ? 0 : i + 1) {
    if (i < cursor_) return nullptr;
    slot& s = old_[i];
    if (s.target == nullptr) return nullptr;
    if (s.target != target) continue;
    std::size_t j = home(target, bits_);
    while (slots_[j].target != nullptr) j = (j + 1) & mask_;
    slots_[j] = s;
    s.target = moved;
    moved_one();
    return &slots_[j];
  }
  return nullptr;  // not reached: i wraps within the bounds
}

void target_table::moved_one() noexcept {
  if (--old_used_ == 0) {
    std::free(old_);  // NOLINT(cppcoreguidelines-no-malloc): from zeroed_slots
    old_ = nullptr;
    grow_at_ = (mask_ + 1) / 2;
  }
}

void target_table::place(const slot& s) noexcept {
  std::size_t i = home(s.target, bits_);
  while (slots_[i].target != nullptr) i = (i + 1) & mask_;
  slots_[i] = s;
}

void target_table::step() noexcept {
  // The slots before cursor_ hold no target; old_used_ reaches 0 by the last one.
  for (std::size_t n = 0; n < step_slots; ++n, ++cursor_) {
    HANDOFF_ASSERT(cursor_ <= old_mask_);
    slot& s = old_[cursor_];
    // An empty one becomes a marker too: a probe that crosses it must go on to later ones.
    const bool target = s.target != nullptr && s.target != moved;
    if (target) place(s);
    s.target = moved;
    if (target) {
      moved_one();
      if (old_ == nullptr) return;
    }
  }
}

void target_table::erase(slot* s) noexcept {
  // Backward shift: each later slot of the run that may sit at the hole moves into it,
  // so that a find never meets an empty slot before its target's.
  auto hole = static_cast<std::size_t>(s - slots_);
  for (std::size_t i = (hole + 1) & mask_;; i = (i + 1) & mask_) {
    slot& next = slots_[i];
    if (next.target == nullptr) break;
    const std::size_t h = home(next.target, bits_);
    // Movable unless its home lies cyclically in (hole, i].
    if (((i - h) & mask_) >= ((i - hole) & mask_)) {
      slots_[hole] = next;
      hole = i;
    }
  }
  slots_[hole] = slot{};
  --used_;
  if (old_ != nullptr) [[unlikely]] {
    step();
  } else if (mask_ + 1 > min_slots && used_ * 8 < mask_ + 1) [[unlikely]] {
    try {
      resize((mask_ + 1) / 2);
    } catch (...) {  // non-binding: a larger table works as well
    }
  }
}

void target_table::resize(std::size_t n) {
  // Not while resizing (see step_slots); were it ever, the last move ends first.
  while (old_ != nullptr) step();
  slot* fresh = zeroed_slots(n);  // may throw: nothing changed yet
  if (used_ == 0) {
    std::free(slots_);  // NOLINT(cppcoreguidelines-no-malloc): from zeroed_slots
    grow_at_ = n / 2;
  } else {
    old_ = slots_;
    grow_at_ = 0;  // every reserve_one steps until the move ends
  }
  old_used_ = used_;
  old_mask_ = mask_;
  old_bits_ = bits_;
  cursor_ = 0;
  slots_ = fresh;
  mask_ = n - 1;
  bits_ = static_cast<unsigned>(std::countr_zero(n));
}

}  // namespace handoff::detail
