// The chunks of message slots behind an actor's mailbox (detail/ownership.hpp), and their
// pool (lib/runtime/chunk_pool.cpp).
//
// A chunk serves `slots_per_chunk` consecutive message tickets from `base`. Chunks are named
// by a 24-bit index into one process-wide arena that only grows, so that an index fits in
// the mailbox's head word beside a ticket, and a chunk's memory stays a chunk for the life
// of the process (a reader that holds a stale index reads a chunk, never freed memory; the
// mailbox protocol makes sure it never acts on one). Free chunks go back to a lock-free
// stack shared by all threads: the steady state makes no allocator call, and the arena
// keeps its peak (at most `max_chunks`, 4 GiB) until the process exits.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "handoff/detail/mpsc_queue.hpp"

namespace handoff::detail {

// A power of two, so that chunk bases stay aligned when 32-bit tickets wrap.
inline constexpr std::uint32_t slots_per_chunk = 32;
inline constexpr std::uint32_t chunk_index_bits = 24;
inline constexpr std::uint32_t max_chunks = (std::uint32_t{1} << chunk_index_bits) - 1;  // index 0: none

struct slot_chunk {
  // Written by the installer before it publishes the chunk (release on the head word or
  // on `prev`), immutable while the chunk is in use.
  std::atomic<std::uint32_t> base;
  // The chunk of the tickets before `base`, or 0: set by the installer (or by the CAS that
  // puts a chunk in front of one installed with none), cleared by the owner once it has
  // passed that chunk. Never names a chunk back in the pool.
  std::atomic<std::uint32_t> prev;
  // The chunk of the tickets after this one, or 0 until its installer links it (release;
  // pairs with the owner's acquire). In the pool: the free stack's link.
  std::atomic<std::uint32_t> next;
  // The first chunk of the owner's turn this chunk was installed in, where a new owner
  // starts: itself when installed on an empty head, its predecessor's when appended; a
  // detaching owner names its own chunk, for the turn after it if a sender takes it back.
  // Published with the chunk (or, for the detach, by the word's release).
  std::atomic<std::uint32_t> first;
  // nullptr until the sender of that ticket stores its message (release; pairs with the
  // owner's acquire load). Emptied when the chunk is taken from the pool.
  std::atomic<mailbox_node*> slots[slots_per_chunk];
};

// The arena: segments of `chunk_segment_size` chunks, each allocated once (release; pairs
// with the acquire in chunk_at()) and never freed. Defined in lib/runtime/chunk_pool.cpp.
inline constexpr std::uint32_t chunk_segment_bits = 10;
inline constexpr std::uint32_t chunk_segment_size = std::uint32_t{1} << chunk_segment_bits;
inline constexpr std::uint32_t chunk_segment_count = (max_chunks >> chunk_segment_bits) + 1;
extern std::atomic<slot_chunk*> chunk_segments[chunk_segment_count];

// The chunk of index i (1 <= i <= max_chunks, allocated at least once). Thread-safe.
[[nodiscard]] inline slot_chunk& chunk_at(std::uint32_t i) noexcept {
  return chunk_segments[i >> chunk_segment_bits].load(std::memory_order_acquire)[i & (chunk_segment_size - 1)];
}

// A chunk from the pool (or a new one), with `base`, `prev` set, `next` 0 and every slot
// empty; its writes are published by whatever publishes its index (the caller's release).
// Thread-safe, lock-free once the arena has grown to the working set. Terminates when the
// arena is full or the allocator fails: it runs after a message was counted, where
// throwing would strand the actor's owner waiting for that message.
[[nodiscard]] std::uint32_t allocate_chunk(std::uint32_t base, std::uint32_t prev) noexcept;

// Returns chunk i to the pool. Its slots must be empty or already read. Thread-safe.
void free_chunk(std::uint32_t i) noexcept;

// Chunks allocated and not freed, process-wide (tests: memory returned).
[[nodiscard]] std::uint64_t chunks_in_use() noexcept;

}  // namespace handoff::detail
