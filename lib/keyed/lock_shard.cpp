// The shard table's resizing (detail/lock_shard.hpp).
#include "handoff/detail/lock_shard.hpp"

#include <algorithm>
#include <new>

namespace handoff::detail {

void lock_shard::resize(std::size_t capacity) {
  table_slot* const from = slots;
  const std::size_t from_mask = mask;
  table_slot* to = inline_table;
  if (capacity > inline_slots) to = new table_slot[capacity]();  // else from a heap table: inline_table is empty
  for (std::size_t i = 0; i <= from_mask; ++i) {
    if (from[i].entry != nullptr) place(to, capacity - 1, from[i].entry);
  }
  if (from != inline_table) {
    delete[] from;
  } else {
    std::fill_n(inline_table, inline_slots, table_slot{0, nullptr});  // unused until a shrink refills it
  }
  slots = to;
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
  if (slots != inline_table) delete[] slots;
}

}  // namespace handoff::detail
