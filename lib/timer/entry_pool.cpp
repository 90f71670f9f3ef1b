// The timer service's entry pool (lib/timer/entry_pool.hpp).
#include "entry_pool.hpp"

#include <memory>
#include <new>

#include "wheel.hpp"

namespace handoff::detail {

entry_pool::entry_pool(void* owner) : owner_(owner) { grow(); }

entry_pool::~entry_pool() {
  for (chunk* c : chunks_) {
    if (c == nullptr) continue;
    c->~chunk();
    ::operator delete (c, std::align_val_t{chunk_bytes});
  }
}

void entry_pool::grow() {
  while (first_hole_ < chunks_.size() && chunks_[first_hole_] != nullptr) ++first_hole_;
  const std::size_t number = first_hole_;
  if (number >= (std::size_t{1} << (32 - index_shift))) throw std::bad_alloc();  // indices are 32-bit
  if (number == chunks_.size()) chunks_.push_back(nullptr);                      // may throw: nothing changed yet
  void* p = ::operator new (sizeof(chunk), std::align_val_t{chunk_bytes});
  auto* c = ::new (p) chunk;
  c->owner = owner_;
  c->number = static_cast<std::uint32_t>(number);
  c->free = chunk_entries;
  for (std::uint32_t i = chunk_entries; i-- > 0;) {
    timer_entry* e = &c->entries[i];
    e->where = timer_wheel::nowhere;
    e->next = free_;
    e->pprev = &free_;
    if (free_ != nullptr) free_->pprev = &e->next;
    free_ = e;
  }
  chunks_[number] = c;
  ++chunks_held_;
  ++first_hole_;
}

void entry_pool::wholly_free(chunk* c) noexcept {
  if (spare_ == nullptr) {
    spare_ = c;
    return;
  }
  // Two wholly free: keep the lower-numbered, so that chunks_ can shrink from its end.
  if (c->number < spare_->number) std::swap(c, spare_);
  release(c);
}

void entry_pool::release(chunk* c) noexcept {
  for (timer_entry& e : c->entries) {  // out of the free list
    *e.pprev = e.next;
    if (e.next != nullptr) e.next->pprev = e.pprev;
  }
  const std::size_t number = c->number;
  c->~chunk();
  ::operator delete (c, std::align_val_t{chunk_bytes});
  chunks_[number] = nullptr;
  --chunks_held_;
  if (number < first_hole_) first_hole_ = number;
  while (!chunks_.empty() && chunks_.back() == nullptr) chunks_.pop_back();
  if (first_hole_ > chunks_.size()) first_hole_ = chunks_.size();
  if (chunks_.capacity() >= 64 && chunks_.size() <= chunks_.capacity() / 4) {
    try {
      chunks_.shrink_to_fit();  // a million timers leave a 47 KiB table of chunks otherwise
    } catch (...) {             // non-binding: keeping the capacity is fine
    }
  }
}

}  // namespace handoff::detail
