// The slot-chunk arena and its free stack (detail/slot_chunk.hpp).
//
// The arena is a table of segments of 1024 chunks each (chunk_segments), a segment
// allocated the first time an index in it is carved and never freed. Free chunks form a
// Treiber stack (R. K. Treiber, "Systems Programming: Coping with Parallelism", IBM RJ 5118,
// 1986) linked through their `next`, whose top word carries a version beside the index so
// that a pop racing with a pop and a push of the same chunk fails its CAS (the ABA problem).
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <mutex>
#include <new>
#include <type_traits>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/slot_chunk.hpp"

namespace handoff::detail {

namespace {

struct arena {
  std::mutex grow_mutex;  // serializes the allocation of a segment
  // Indices handed out at least once (the next new chunk is carved + 1).
  std::atomic<std::uint32_t> carved{0};
  // The free stack: low 32 bits the top chunk's index (0: empty), high 32 bits a version
  // bumped by every push and pop. acq_rel: a push releases what its pusher did with the
  // chunk; the pop that takes it acquires that before reusing the chunk.
  std::atomic<std::uint64_t> free_top{0};
  std::atomic<std::uint64_t> in_use{0};  // statistics only: relaxed
};

// Constant-initialized and trivially destructible: usable before main and while static
// destructors run (threads may still send then).
constinit arena pool;
static_assert(std::is_trivially_destructible_v<arena>);

[[noreturn]] void out_of_chunks(const char* why) noexcept {
  std::fprintf(stderr, "handoff: cannot allocate a mailbox chunk (%s)\n", why);
  std::terminate();
}

std::uint32_t carve() noexcept {
  arena& a = pool;
  const std::uint32_t i = a.carved.fetch_add(1, std::memory_order_relaxed) + 1;
  if (i > max_chunks) out_of_chunks("the arena's 2^24 chunks are all in use");
  std::atomic<slot_chunk*>& segment = chunk_segments[i >> chunk_segment_bits];
  if (segment.load(std::memory_order_acquire) == nullptr) {
    const std::lock_guard<std::mutex> lock(a.grow_mutex);
    if (segment.load(std::memory_order_relaxed) == nullptr) {
      auto* s = new (std::nothrow) slot_chunk[chunk_segment_size];
      if (s == nullptr) out_of_chunks("out of memory");
      segment.store(s, std::memory_order_release);  // pairs with the acquire in chunk_at()
    }
  }
  return i;
}

}  // namespace

constinit std::atomic<slot_chunk*> chunk_segments[chunk_segment_count]{};

std::uint32_t allocate_chunk(std::uint32_t base, std::uint32_t prev) noexcept {
  arena& a = pool;
  std::uint32_t i = 0;
  std::uint64_t top = a.free_top.load(std::memory_order_acquire);
  while (static_cast<std::uint32_t>(top) != 0) {
    const auto candidate = static_cast<std::uint32_t>(top);
    // May read a chunk another thread has just popped and reuses: the version makes the
    // CAS below fail then, and the chunk is arena memory either way.
    const std::uint32_t below = chunk_at(candidate).next.load(std::memory_order_relaxed);
    const std::uint64_t popped = ((top >> 32) + 1) << 32 | below;
    if (a.free_top.compare_exchange_weak(top, popped, std::memory_order_acquire, std::memory_order_acquire)) {
      i = candidate;
      break;
    }
  }
  if (i == 0) i = carve();
  a.in_use.fetch_add(1, std::memory_order_relaxed);
  slot_chunk& c = chunk_at(i);
  // Relaxed: published by the caller's release of the index (see the header).
  c.base.store(base, std::memory_order_relaxed);
  c.prev.store(prev, std::memory_order_relaxed);
  c.next.store(0, std::memory_order_relaxed);
  c.first.store(0, std::memory_order_relaxed);
  for (auto& s : c.slots) s.store(nullptr, std::memory_order_relaxed);
  return i;
}

void free_chunk(std::uint32_t i) noexcept {
  arena& a = pool;
  slot_chunk& c = chunk_at(i);
  a.in_use.fetch_sub(1, std::memory_order_relaxed);
  std::uint64_t top = a.free_top.load(std::memory_order_relaxed);
  for (;;) {
    c.next.store(static_cast<std::uint32_t>(top), std::memory_order_relaxed);  // published by the CAS
    const std::uint64_t pushed = ((top >> 32) + 1) << 32 | i;
    if (a.free_top.compare_exchange_weak(top, pushed, std::memory_order_release, std::memory_order_relaxed)) return;
  }
}

std::uint64_t chunks_in_use() noexcept { return pool.in_use.load(std::memory_order_relaxed); }

}  // namespace handoff::detail
