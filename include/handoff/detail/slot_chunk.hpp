// The chunks of message slots behind an actor's mailbox (detail/ownership.hpp), and their
// pool (lib/runtime/chunk_pool.cpp).
//
// A chunk serves `slots_per_chunk` consecutive message tickets from `base`. Chunks are named
// by a 31-bit index into one process-wide arena that only grows, so that an index fits in
// the mailbox's head word beside a ticket, and a chunk's memory stays a chunk for the life
// of the process (a reader that holds a stale index reads a chunk, never freed memory; the
// mailbox protocol makes sure it never acts on one). 2^31 - 1 chunks are 584 GiB of slots:
// the arena's limit lies past the memory of the machines it runs on.
//
// Free chunks wait in a cache per thread (two batches of `chunk_batch_size`, as the slab
// allocator's magazines do) in front of one process-wide stack of full batches
// (detail/chunk_depot.hpp). A sender takes its chunks from its own cache and an owner
// frees them into its own: a thread that only frees hands a full batch to the stack every
// `chunk_batch_size` chunks, a thread that only takes refills by a batch, and a thread that
// does both touches nothing shared. The steady state makes no allocator call; the arena
// keeps its peak until the process exits, the thread caches at most 2 batches each.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "handoff/detail/mpsc_queue.hpp"

namespace handoff::detail {

// A power of two, so that chunk bases stay aligned when 32-bit tickets wrap.
inline constexpr std::uint32_t slots_per_chunk = 32;
inline constexpr std::uint32_t chunk_index_bits = 31;
inline constexpr std::uint32_t max_chunks = (std::uint32_t{1} << chunk_index_bits) - 1;  // index 0: none
// Chunks a thread moves to or from the shared stack at once (8.5 KiB). 32 batches of 32
// slots: a thread that only takes chunks, or only frees them, touches the stack once per
// 1024 messages sent through them.
inline constexpr std::uint32_t chunk_batch_size = 32;

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
  // Published with the chunk (or, for the detach, by the word's release). In the shared
  // stack, on a batch's first chunk: the batch below (and `base` is the batch's length).
  std::atomic<std::uint32_t> first;
  // nullptr until the sender of that ticket stores its message (release; pairs with the
  // owner's acquire load). Emptied when the chunk is taken from the pool.
  std::atomic<mailbox_node*> slots[slots_per_chunk];
};

// The arena: segments of `chunk_segment_size` chunks (4.25 MiB of address space, zero
// pages until carved), each allocated once (release; pairs with the acquire in chunk_at())
// and never freed. The table of segments is 1 MiB of zero pages in static memory, touched
// one 8-byte entry per segment. Defined in lib/runtime/chunk_pool.cpp.
inline constexpr std::uint32_t chunk_segment_bits = 14;
inline constexpr std::uint32_t chunk_segment_size = std::uint32_t{1} << chunk_segment_bits;
inline constexpr std::uint32_t chunk_segment_count = (max_chunks >> chunk_segment_bits) + 1;
extern std::atomic<slot_chunk*> chunk_segments[chunk_segment_count];

// The chunk of index i (1 <= i <= max_chunks, allocated at least once). Thread-safe.
[[nodiscard]] inline slot_chunk& chunk_at(std::uint32_t i) noexcept {
  return chunk_segments[i >> chunk_segment_bits].load(std::memory_order_acquire)[i & (chunk_segment_size - 1)];
}

// A chunk from the calling thread's cache (refilled from the shared stack, or carved new),
// with `base`, `prev` set, `next` and `first` 0 and every slot empty; its writes are
// published by whatever publishes its index (the caller's release). Thread-safe,
// lock-free once the arena has grown to the working set. Terminates when the arena is full
// or the allocator fails: it runs after a message was counted, where throwing would strand
// the actor's owner waiting for that message.
[[nodiscard]] std::uint32_t allocate_chunk(std::uint32_t base, std::uint32_t prev) noexcept;

// Returns chunk i to the calling thread's cache (a full cache hands a batch to the shared
// stack). Its slots must be empty or already read. Thread-safe.
void free_chunk(std::uint32_t i) noexcept;

// Chunks allocated and not freed, process-wide: the sum of per-thread counts, read
// without stopping their threads (exact when no thread allocates or frees meanwhile).
[[nodiscard]] std::uint64_t chunks_in_use() noexcept;

// What the pool did on process-wide lines, summed over threads like chunks_in_use(): for
// tests, which count them per message, and for operations (free chunks in the shared
// stack and in the threads' caches).
struct chunk_pool_counters {
  std::uint64_t in_use;        // chunks allocated and not freed
  std::uint64_t carved;        // chunks ever carved from the arena (its size)
  std::uint64_t stack_pops;    // batches taken from the shared stack
  std::uint64_t stack_pushes;  // batches handed to the shared stack
  std::uint64_t carves;        // batches carved from the arena (one atomic each)
  std::uint64_t cached;        // free chunks in thread caches
};
[[nodiscard]] chunk_pool_counters chunk_pool_stats() noexcept;

// The detach marks of the actor's mailbox: an owner that releases an actor while
// detaching its chunk (detail/ownership.hpp) touches the actor's head once more after the
// release. It marks the actor in its thread's record first (mark_detaching, before the
// release) and clears the mark after that last touch (clear_detaching, release order);
// the actor's destructor, owning it, waits until no thread's record names it
// (wait_for_detaching: a walk over the threads' records, acquire; pairs with the clear).
// A thread that has already returned its cache at exit has no record: mark_detaching()
// returns false and the owner keeps its chunk instead of detaching it.
[[nodiscard]] bool mark_detaching(const void* actor) noexcept;
void clear_detaching() noexcept;
void wait_for_detaching(const void* actor) noexcept;

}  // namespace handoff::detail
