// The shard table's resizing (detail/lock_shard.hpp).
#include "handoff/detail/lock_shard.hpp"

#include <algorithm>
#include <new>

namespace handoff::detail {

// `mask` says which member of the table's union is live.
// NOLINTBEGIN(cppcoreguidelines-pro-type-union-access)

void lock_shard::resize(std::size_t capacity) {
  table_slot* const from = slots();  // read before inline_table overwrites `heap`
  const std::size_t from_mask = mask;
  const bool from_heap = from_mask + 1 > inline_slots;
  if (capacity > inline_slots) {
    auto* to = new table_slot[capacity]();
    for (std::size_t i = 0; i <= from_mask; ++i) {
      if (from[i].entry != nullptr) place(to, capacity - 1, from[i].entry);
    }
    if (from_heap) delete[] from;
    heap = to;
  } else {  // back into the line, from a heap table
    std::fill_n(inline_table, inline_slots, table_slot{0, nullptr});
    for (std::size_t i = 0; i <= from_mask; ++i) {
      if (from[i].entry != nullptr) place(inline_table, capacity - 1, from[i].entry);
    }
    if (from_heap) delete[] from;  // always: only a heap table shrinks
  }
  mask = static_cast<std::uint32_t>(capacity - 1);
}

void lock_shard::shrink() noexcept {
  std::size_t capacity = mask + 1;
  while (capacity > inline_slots && std::size_t{size()} * shrink_above < capacity) capacity /= 2;
  try {
    resize(capacity);
  } catch (const std::bad_alloc&) {
    // keep the bigger table
  }
}

lock_shard::~lock_shard() {
  if (mask + 1 > inline_slots) delete[] heap;
}

// NOLINTEND(cppcoreguidelines-pro-type-union-access)

}  // namespace handoff::detail
