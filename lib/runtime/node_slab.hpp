// The node pool's slab (node_pool.cpp): its size classes, its layout (header, free map,
// nodes), its count with a holder's share, and the threshold at which a free adopts it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

namespace handoff::detail::pool {

inline constexpr std::size_t class_count = 5;  // 32, 64, 128, 256, 512 bytes
constexpr std::size_t class_size(std::size_t c) { return std::size_t{32} << c; }

// 16 KiB, aligned to its size, so that a node finds its slab by masking its address.
inline constexpr std::size_t slab_size = std::size_t{16} << 10;
// Free slabs kept for any thread to reuse; beyond them, free slabs go back to the allocator.
// 4 MiB: a burst of up to about 130,000 small queued messages comes back without an
// allocator call, and no more than that is held after a larger one.
inline constexpr std::size_t max_free_slabs = 256;

// A holder's share of a slab's count: while a carver or a list holds the slab its count
// stays above every threshold, so that no free can adopt it (uncount, node_pool.cpp).
inline constexpr std::uint64_t hold = std::uint64_t{1} << 32;

// The slab's header; its free map follows (one byte per node-sized piece of the slab, the
// first few unused), then its nodes, the first on a 64-byte line.
struct slab {
  // Nodes handed out and not yet uncounted, plus `hold` while a carver or a list holds the
  // slab. acq_rel: each free releases what it did with its node; the subtraction that
  // crosses the adoption threshold acquires them all before the slab is carved again.
  std::atomic<std::uint64_t> outstanding;
  slab* next_free;  // link in a list of held slabs (spares, the shared list)
};
inline constexpr std::size_t map_offset = sizeof(slab);
static_assert(map_offset == 16);

// Nodes per slab of class c: those that fit after the map, the first on a 64-byte line.
constexpr std::size_t first_node(std::size_t c) {
  const std::size_t a = class_size(c) < 64 ? 64 : class_size(c);
  return (map_offset + slab_size / class_size(c) + a - 1) / a * a;
}
constexpr std::size_t capacity(std::size_t c) { return (slab_size - first_node(c)) / class_size(c); }
// A slab whose nodes out fall to this many is adopted again by the subtraction that gets
// there: about half free, so that a slab nobody holds has more than half its nodes live,
// and a long-queued node keeps alive at most one other node's worth of memory.
constexpr std::uint64_t adopt_at(std::size_t c) { return capacity(c) / 2; }
static_assert(capacity(0) == 494 && capacity(1) == 251 && capacity(4) == 31);

// map[i]: 1 when node i is free and no carver has claimed it. Written 1 by the node's free
// (release; pairs with the acquire load in next_run, which reuses the node) and by a
// carver giving back the nodes it did not carve; 0 by the carver that claims it.
inline std::atomic<std::uint8_t>* free_map(slab* s) noexcept {
  return reinterpret_cast<std::atomic<std::uint8_t>*>(reinterpret_cast<char*>(s) + map_offset);
}
// Map entries are indexed by a node's offset in the slab over its size, so that free_node
// needs no table: node i of class c is entry first_entry(c) + i.
constexpr std::size_t first_entry(std::size_t c) { return first_node(c) / class_size(c); }
inline char* node_at(slab* s, std::size_t c, std::size_t i) noexcept {
  return reinterpret_cast<char*>(s) + first_node(c) + i * class_size(c);
}

inline slab* new_slab(std::size_t c) {
  void* p = ::operator new (slab_size, std::align_val_t{slab_size});
  auto* s = ::new (p) slab{{hold}, nullptr};
  for (std::size_t i = 0; i < slab_size / class_size(c); ++i) ::new (free_map(s) + i) std::atomic<std::uint8_t>{0};
  return s;
}
inline void delete_slab(slab* s) noexcept { ::operator delete (s, std::align_val_t{slab_size}); }
// No node out and no free on its way: the holder may give the slab back or reclaim it whole.
// Acquire: pairs with the frees' release subtractions.
inline bool all_free(slab* s) noexcept { return s->outstanding.load(std::memory_order_acquire) == hold; }

}  // namespace handoff::detail::pool
