// entry_pool: the timer entries of one shard of a service (handoff/detail/timer_entry.hpp),
// in chunks of 170 entries. Private to lib/timer/. Not thread-safe: the shard's lock
// guards it.
//
// A chunk is 16 KiB, aligned to its size, so that an entry finds its chunk's header with
// a mask: its owner (the shard, fixed for the chunk's life: what a cancel on any thread
// finds its lock by), its number (an entry's index is number << 8 | position, what the 32-bit links
// of a target's list hold) and its count of free entries. The free entries of every chunk
// form one doubly-linked list (through next and pprev, which a free entry does not use
// otherwise), so that a chunk whose entries are all free can leave the list in
// chunk_entries steps. One such chunk is kept as a spare (a pool that swings around a
// chunk's edge calls no allocator); a second is returned to the allocator, the one with the
// higher number, so that the table of chunks shrinks from its end after a burst.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <vector>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/timer_entry.hpp"

namespace handoff::detail {

class entry_pool {
 public:
  static constexpr std::size_t chunk_bytes = 16384;
  static constexpr std::uint32_t chunk_entries = 170;  // (16384 - 16-byte header) / 96
  static constexpr unsigned index_shift = 8;           // bits of an index's position

  explicit entry_pool(void* owner);  // one chunk; throws std::bad_alloc
  entry_pool(const entry_pool&) = delete;
  entry_pool& operator=(const entry_pool&) = delete;
  ~entry_pool();

  // Makes sure take() finds an entry: adds a chunk if none is free (throws std::bad_alloc).
  void reserve_one() {
    if (free_ == nullptr) [[unlikely]]
      grow();
  }
  // An entry out of the pool (where == nowhere, flags == 0). Precondition: reserve_one().
  timer_entry* take() noexcept {
    timer_entry* e = free_;
    HANDOFF_ASSERT(e != nullptr);
    free_ = e->next;
    if (free_ != nullptr) free_->pprev = &free_;
    chunk* c = chunk_of(e);
    if (c == spare_) spare_ = nullptr;  // no longer wholly free
    HANDOFF_ASSERT(c->free != 0);
    --c->free;
    ++allocated_;
    return e;
  }
  // Back into the pool; may return its chunk to the allocator.
  void give(timer_entry* e) noexcept {
    e->next = free_;
    e->pprev = &free_;
    if (free_ != nullptr) free_->pprev = &e->next;
    free_ = e;
    HANDOFF_ASSERT(allocated_ != 0);
    --allocated_;
    chunk* c = chunk_of(e);
    if (++c->free == chunk_entries) [[unlikely]]
      wholly_free(c);
  }

  // The owner given to the pool the entry came from. Any thread holding the entry (a
  // handle, a delivery) may call it: the header is written before the chunk's first
  // entry is handed out and never changes.
  [[nodiscard]] static void* owner_of(const timer_entry* e) noexcept { return chunk_of(e)->owner; }
  [[nodiscard]] static std::uint32_t index_of(const timer_entry* e) noexcept {
    const chunk* c = chunk_of(e);
    return c->number << index_shift | static_cast<std::uint32_t>(e - c->entries);
  }
  [[nodiscard]] timer_entry* at(std::uint32_t index) const noexcept {
    HANDOFF_ASSERT(index >> index_shift < chunks_.size() && chunks_[index >> index_shift] != nullptr);
    return &chunks_[index >> index_shift]->entries[index & ((1U << index_shift) - 1)];
  }
  [[nodiscard]] std::size_t allocated() const noexcept { return allocated_; }
  [[nodiscard]] std::size_t chunks() const noexcept { return chunks_held_; }
  // What the pool holds: its chunks and its table of them.
  [[nodiscard]] std::size_t bytes() const noexcept {
    return chunks_held_ * chunk_bytes + chunks_.capacity() * sizeof(void*);  // the table holds pointers
  }
  // f(e) for every entry of every chunk, free or not.
  template <class F>
  void for_each_entry(F f) noexcept {
    for (chunk* c : chunks_) {
      if (c == nullptr) continue;
      for (timer_entry& e : c->entries) f(&e);
    }
  }

 private:
  struct chunk {
    void* owner = nullptr;
    std::uint32_t number = 0;  // its place in chunks_
    std::uint32_t free = 0;    // its entries in the free list
    timer_entry entries[chunk_entries];
  };
  static_assert(sizeof(chunk) <= chunk_bytes && chunk_entries < (1U << index_shift));

  static chunk* chunk_of(const timer_entry* e) noexcept {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): an entry's address masked to its chunk's
    return reinterpret_cast<chunk*>(reinterpret_cast<std::uintptr_t>(e) & ~(std::uintptr_t{chunk_bytes} - 1));
  }
  void grow();
  void wholly_free(chunk* c) noexcept;
  void release(chunk* c) noexcept;

  void* owner_;
  timer_entry* free_ = nullptr;  // the free list's head
  std::vector<chunk*> chunks_;   // by number; nullptr where a chunk was returned
  std::size_t chunks_held_ = 0;
  std::size_t first_hole_ = 0;  // no nullptr in chunks_ before it
  chunk* spare_ = nullptr;      // the one chunk kept whose entries are all free
  std::size_t allocated_ = 0;   // entries out of the pool
};

}  // namespace handoff::detail
