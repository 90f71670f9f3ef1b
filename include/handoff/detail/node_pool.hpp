// Pooled node memory for messages and waiters (lib/runtime/node_pool.cpp): per-thread slabs of
// fixed size classes (32 to 512 bytes), carved by bumping, and carved again around the nodes
// still out once half of a slab is free, so that steady-state sends and lock waits call no
// allocator and a long-queued node keeps little else alive. Shared by the actors and the
// keyed mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace handoff::detail {

// Node memory; recycled per thread, so steady-state sends do not call malloc. Thread-safe.
[[nodiscard]] void* allocate_node(std::size_t size);
void free_node(void* p, std::size_t size) noexcept;

// The pool's process-wide state, for tests and operations: its list of free slabs, the one
// line every thread shares (a mutex, taken once per batch of slabs).
struct node_pool_counters {
  bool pooled;                    // false: nodes come from operator new (AddressSanitizer builds)
  std::uint64_t list_operations;  // batches pushed to or popped from the list, ever
  std::uint64_t free_slabs;       // slabs on the list now (16 KiB each; some may have nodes out)
};
[[nodiscard]] node_pool_counters node_pool_stats() noexcept;

// Builds a node in pooled memory; propagates what Node's constructor or the allocation throws.
template <class Node, class... Args>
Node* new_node(Args&&... args) {
  static_assert(alignof(Node) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "over-aligned message types are not supported");
  void* p = allocate_node(sizeof(Node));
  try {
    return ::new (p) Node(std::forward<Args>(args)...);
  } catch (...) {
    free_node(p, sizeof(Node));
    throw;
  }
}

template <class Node>
void delete_node(Node* n) noexcept {
  n->~Node();
  free_node(n, sizeof(Node));
}

// Frees a node when a handler returns or throws.
template <class Node>
struct node_guard {
  explicit node_guard(Node* n) noexcept : node(n) {}
  node_guard(const node_guard&) = delete;
  node_guard& operator=(const node_guard&) = delete;
  ~node_guard() { delete_node(node); }
  Node* node;
};

}  // namespace handoff::detail
