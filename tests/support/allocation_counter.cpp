// Replaces the global operator new of the unit test binary with one that counts, so that
// tests can show a path does not allocate (handoff::test::allocations_so_far()).
#include <atomic>
#include <cstdlib>
#include <new>

#include "test_support.hpp"

namespace {
std::atomic<long> allocations{0};
}  // namespace

long handoff::test::allocations_so_far() noexcept { return allocations.load(std::memory_order_relaxed); }

// GCC cannot see that these replace the global operators as a matched pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {  // the node pool's slabs
  allocations.fetch_add(1, std::memory_order_relaxed);
  const auto align = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }
