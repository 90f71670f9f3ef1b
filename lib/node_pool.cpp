// Message-node memory. Nodes are freed by the draining thread and allocated by senders, so
// a per-thread cache alone would fill on one side and starve on the other: caches trade
// batches through a mutex-protected central list per size class (the lock is taken once
// per batch, not per message). Under AddressSanitizer the pool is bypassed, so that a
// use-after-free of a node is reported instead of hidden by recycling.
#include <cstddef>
#include <new>

#include "handoff/detail/node_pool.hpp"
#include "handoff/detail/run_queue.hpp"  // HANDOFF_TLS_MODEL
#include "thread_annotations.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define HANDOFF_POOL_BYPASS 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define HANDOFF_POOL_BYPASS 1
#endif
#endif

namespace handoff::detail {

#ifdef HANDOFF_POOL_BYPASS

void* allocate_node(std::size_t size) { return ::operator new(size); }
void free_node(void* p, std::size_t) noexcept { ::operator delete(p); }

#else

namespace {

constexpr std::size_t class_count = 4;  // 64, 128, 256, 512 bytes
// Per thread and class: bounds what a thread keeps to 256 x (64 + 128 + 256 + 512) B =
// 240 KB, enough for a sender that runs ahead of its drainer by a few hundred messages.
constexpr std::size_t max_cached = 256;
// Moved to or from the central list at once: half a cache, so that a thread that fills
// its cache and then empties it touches the central mutex once per 128 nodes, not per node.
constexpr std::size_t batch = 128;
// Per class; beyond it, memory goes back to malloc: at most 64 Ki x 512 B = 32 MB of the
// largest class kept for a burst to come back.
constexpr std::size_t max_central = 1 << 16;

constexpr std::size_t class_size(std::size_t c) { return std::size_t{64} << c; }

int class_of(std::size_t size) noexcept {
  for (std::size_t c = 0; c < class_count; ++c) {
    if (size <= class_size(c)) return static_cast<int>(c);
  }
  return -1;
}

struct free_block {
  free_block* next;
};

struct central_list {
  annotated_mutex mutex;
  free_block* head HANDOFF_GUARDED_BY(mutex) = nullptr;
  std::size_t size HANDOFF_GUARDED_BY(mutex) = 0;
};

// Never destroyed: threads may return their caches after static destruction has begun.
central_list* central() {
  static auto* lists = new central_list[class_count];
  return lists;
}

// The per-thread free lists: trivial, so that the hot path reaches them with one
// %fs-relative access and no TLS-wrapper initialisation check.
struct thread_cache {
  free_block* head[class_count];
  std::size_t size[class_count];
  bool reaper_armed;  // the thread-exit hook below is registered
  bool dead;          // the thread is exiting and its cache was returned: bypass the pool

  // Moves up to n blocks from this cache to the central list (or to malloc when full).
  void give_back(std::size_t c, std::size_t n) noexcept {
    central_list& list = central()[c];
    scoped_lock lock(list.mutex);
    while (n-- != 0 && head[c] != nullptr) {
      free_block* b = head[c];
      head[c] = b->next;
      --size[c];
      if (list.size >= max_central) {
        ::operator delete(b);
        continue;
      }
      b->next = list.head;
      list.head = b;
      ++list.size;
    }
  }

  void refill(std::size_t c) noexcept {
    central_list& list = central()[c];
    scoped_lock lock(list.mutex);
    for (std::size_t i = 0; i < batch && list.head != nullptr; ++i) {
      free_block* b = list.head;
      list.head = b->next;
      --list.size;
      b->next = head[c];
      head[c] = b;
      ++size[c];
    }
  }
};

HANDOFF_TLS_MODEL constinit thread_local thread_cache cache{};

// Returns the thread's cached blocks to the central lists when the thread exits.
struct cache_reaper {
  cache_reaper() = default;
  cache_reaper(const cache_reaper&) = delete;
  cache_reaper& operator=(const cache_reaper&) = delete;
  cache_reaper(cache_reaper&&) = delete;
  cache_reaper& operator=(cache_reaper&&) = delete;
  ~cache_reaper() {
    for (std::size_t c = 0; c < class_count; ++c) cache.give_back(c, cache.size[c]);
    cache.dead = true;
  }
};

// Registers the reaper on the thread's first cached block (a cold path).
void arm_reaper() noexcept {
  static thread_local cache_reaper reaper;
  (void)reaper;
  cache.reaper_armed = true;
}

}  // namespace

void* allocate_node(std::size_t size) {
  const int c = class_of(size);
  if (c < 0 || cache.dead) return ::operator new(size);
  if (cache.head[c] == nullptr) {
    if (!cache.reaper_armed) arm_reaper();
    cache.refill(static_cast<std::size_t>(c));
  }
  if (free_block* b = cache.head[c]) {
    cache.head[c] = b->next;
    --cache.size[c];
    return b;
  }
  return ::operator new(class_size(static_cast<std::size_t>(c)));
}

void free_node(void* p, std::size_t size) noexcept {
  const int c = class_of(size);
  if (c < 0 || cache.dead) return ::operator delete(p);
  if (!cache.reaper_armed) arm_reaper();
  auto* b = static_cast<free_block*>(p);
  b->next = cache.head[c];
  cache.head[c] = b;
  if (++cache.size[c] > max_cached) cache.give_back(static_cast<std::size_t>(c), batch);
}

#endif

}  // namespace handoff::detail
