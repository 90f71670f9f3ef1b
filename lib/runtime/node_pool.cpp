// Message-node memory: per-thread slabs of one size class each, carved by bumping a
// pointer and returned whole. Nodes are mostly allocated by senders and freed by a drainer,
// often on another thread and in the order they were allocated (a mailbox is FIFO), so a
// slab counts the nodes it still has out and is reused when the last one comes back: no
// allocator call per node, no per-node free list to trade between threads, and a burst's
// memory comes back once the burst has drained. Under AddressSanitizer the pool is
// bypassed, so that a use-after-free of a node is reported instead of hidden by recycling.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/node_pool.hpp"
#include "handoff/detail/tls_model.hpp"
#include "thread_annotations.hpp"
#include "thread_exit.hpp"

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
node_pool_counters node_pool_stats() noexcept { return {false, 0, 0}; }

#else

namespace {

constexpr std::size_t class_count = 5;  // 32, 64, 128, 256, 512 bytes
constexpr std::size_t class_size(std::size_t c) { return std::size_t{32} << c; }

int class_of(std::size_t size) noexcept {
  for (std::size_t c = 0; c < class_count; ++c) {
    if (size <= class_size(c)) return static_cast<int>(c);
  }
  return -1;
}

// 16 KiB, aligned to its size, so that a node finds its slab by masking its address. A
// thread holds at most one slab per class it uses and four spares: 144 KiB.
constexpr std::size_t slab_size = std::size_t{16} << 10;
// Free slabs kept for any thread to reuse; beyond them, slabs go back to the allocator.
// 4 MiB: a burst of up to about 130,000 small queued messages comes back without an
// allocator call, and no more than that is held after a larger one.
constexpr std::size_t max_free_slabs = 256;

struct alignas(64) slab {
  // Nodes handed out and not yet freed, plus 1 while a thread still carves the slab.
  // acq_rel: each free releases what it did with its node; the subtraction that reaches 0
  // acquires them all before the slab is reused.
  std::atomic<std::uint64_t> outstanding;
  slab* next_free;  // link in a list of free slabs
};
constexpr std::size_t header = sizeof(slab);  // the nodes start on the next cache line
static_assert(header == 64);

slab* slab_of(void* node) noexcept {
  auto* p = static_cast<char*>(node);
  return reinterpret_cast<slab*>(p - (reinterpret_cast<std::uintptr_t>(p) & (slab_size - 1)));
}

slab* new_slab() { return static_cast<slab*>(::operator new (slab_size, std::align_val_t{slab_size})); }
void delete_slab(slab* s) noexcept { ::operator delete (s, std::align_val_t{slab_size}); }

// Free slabs, shared by every thread, moved in batches of up to `spare_batch`: a thread
// that only frees nodes carved elsewhere (an owner draining another thread's sends) hands
// over four slabs per lock, and a thread that only carves takes four, so the list's lock
// is taken once per 4 slabs (about 2,000 small messages) on each side. Never destroyed:
// nodes may be freed after static destruction has begun.
constexpr std::uint32_t spare_batch = 4;

struct free_slab_list {
  annotated_mutex mutex;
  slab* head HANDOFF_GUARDED_BY(mutex) = nullptr;
  std::size_t size HANDOFF_GUARDED_BY(mutex) = 0;
  std::uint64_t operations HANDOFF_GUARDED_BY(mutex) = 0;  // pushes and pops: node_pool_stats()

  // Up to `n` slabs, linked through next_free (nullptr: none); their number in `taken`.
  slab* pop(std::uint32_t n, std::uint32_t& taken) noexcept {
    scoped_lock lock(mutex);
    ++operations;
    slab* first = head;
    slab* last = nullptr;
    for (taken = 0; taken < n && head != nullptr; ++taken) {
      last = head;
      head = head->next_free;
      --size;
    }
    if (last != nullptr) last->next_free = nullptr;
    return first;
  }
  // The list from `s` through next_free (nullptr-terminated); past max_free_slabs, the rest
  // go back to the allocator.
  void push(slab* s) noexcept {
    {
      scoped_lock lock(mutex);
      ++operations;
      while (s != nullptr && size < max_free_slabs) {
        slab* next = s->next_free;
        s->next_free = head;
        head = s;
        ++size;
        s = next;
      }
    }
    while (s != nullptr) {
      slab* next = s->next_free;
      delete_slab(s);
      s = next;
    }
  }
};
free_slab_list& free_slabs() {
  static auto* list = new free_slab_list;
  return *list;
}

// One size class of one thread: the slab it carves.
struct lane {
  slab* current;
  char* bump;                 // next node
  char* end;                  // past the last node
  std::uint64_t local_freed;  // nodes of `current` freed by this thread: counted without an atomic
};

// Per-thread state. Trivial, so that the hot path reaches it with one %fs-relative access
// and no TLS-wrapper initialisation check.
struct thread_slabs {
  lane lanes[class_count];
  slab* spares;               // free slabs kept for this thread's next ones, through next_free
  std::uint32_t spare_count;  // at most spare_batch
  bool reaper_armed;          // the thread-exit hook below is registered
  bool dead;                  // the thread is exiting and returned its slabs: carve from the orphan lanes

  // Out of line: free_node()'s fast path then saves no registers.
  [[gnu::noinline]] void recycle(slab* s) noexcept {
    if (dead) {  // past the exit hook, which gave the spares back
      s->next_free = nullptr;
      return free_slabs().push(s);
    }
    if (!reaper_armed) arm();  // a thread that only frees keeps spares too: the hook gives them back
    if (spare_count == spare_batch) give_spares();
    s->next_free = spares;
    spares = s;
    ++spare_count;
  }
  // A free slab for a refill: a spare, or a batch from the shared list (nullptr: none).
  slab* take_spare() noexcept {
    if (spares == nullptr) spares = free_slabs().pop(spare_batch, spare_count);
    slab* s = spares;
    if (s != nullptr) {
      spares = s->next_free;
      --spare_count;
    }
    return s;
  }
  void arm() noexcept;  // registers the exit hook that returns the slabs (below)
  void give_spares() noexcept {
    free_slabs().push(spares);
    spares = nullptr;
    spare_count = 0;
  }
};

HANDOFF_TLS_MODEL constinit thread_local thread_slabs slabs{};

// Subtracts n freed (or never carved) nodes from s's count; the subtraction that reaches 0
// recycles the slab.
void uncount(slab* s, std::uint64_t n) noexcept {
  const std::uint64_t before = s->outstanding.fetch_sub(n, std::memory_order_acq_rel);
  HANDOFF_ASSERT(before >= n);  // less: a node freed twice
  if (before == n) slabs.recycle(s);
}

// The carver is done with l.current: it uncounts the nodes it will never hand out, those
// it freed itself, and its hold.
void retire(lane& l, std::size_t size) noexcept {
  slab* s = l.current;
  if (s == nullptr) return;
  const std::uint64_t n = static_cast<std::uint64_t>(l.end - l.bump) / size + l.local_freed + 1;
  l.current = nullptr;
  l.bump = l.end = nullptr;
  l.local_freed = 0;
  uncount(s, n);
}

// Retires l.current and starts carving a free or new slab (may throw std::bad_alloc).
void refill(lane& l, std::size_t size) {
  retire(l, size);
  slab* s = slabs.take_spare();
  if (s == nullptr) s = new_slab();
  const std::size_t capacity = (slab_size - header) / size;
  // Relaxed: nothing else refers to a free slab; publishing a node publishes its slab.
  s->outstanding.store(capacity + 1, std::memory_order_relaxed);
  l.current = s;
  l.bump = reinterpret_cast<char*>(s) + header;
  l.end = l.bump + capacity * size;
}

void* carve(lane& l, std::size_t size) {
  if (l.bump == l.end) refill(l, size);
  void* p = l.bump;
  l.bump += size;
  return p;
}

// Lanes for threads that have exited (their thread_local state is gone), under a mutex.
struct orphan_lanes {
  annotated_mutex mutex;
  lane lanes[class_count] HANDOFF_GUARDED_BY(mutex) = {};
};
orphan_lanes& orphans() {
  static auto* o = new orphan_lanes;
  return *o;
}

// Returns the thread's slabs when it exits. A node of them still out comes back through
// its slab's count like any other thread's free.
void return_slabs() noexcept {
  slabs.dead = true;
  for (std::size_t c = 0; c < class_count; ++c) retire(slabs.lanes[c], class_size(c));
  slabs.give_spares();
}

// Registers return_slabs on the thread's first node or first recycled slab (a cold path).
void thread_slabs::arm() noexcept {
  run_at_thread_exit<&return_slabs>();
  reaper_armed = true;
}

// allocate_node() past its fast path: a new slab, a large node, a thread that is exiting
// or has not armed its exit hook yet. Out of line, so that the fast path saves no
// registers (inlined, every call pushed and popped registers for the refill it rarely
// makes; the counts are in docs/notebook.md, "After the gate: the Vyukov queue's costs
// cut").
[[gnu::noinline]] void* allocate_slow(std::size_t size) {
  const int c = class_of(size);
  if (c < 0) return ::operator new(size);
  const std::size_t cs = class_size(static_cast<std::size_t>(c));
  if (slabs.dead) [[unlikely]] {
    orphan_lanes& o = orphans();
    scoped_lock lock(o.mutex);
    return carve(o.lanes[c], cs);
  }
  if (!slabs.reaper_armed) [[unlikely]]
    slabs.arm();
  return carve(slabs.lanes[c], cs);
}

}  // namespace

void* allocate_node(std::size_t size) {
  const int c = class_of(size);
  // An armed, live thread carving a slab with room left: bump the pointer.
  if (c >= 0 && slabs.reaper_armed && !slabs.dead) [[likely]] {
    lane& l = slabs.lanes[c];
    if (l.bump != l.end) [[likely]] {
      void* p = l.bump;
      l.bump += class_size(static_cast<std::size_t>(c));
      return p;
    }
  }
  return allocate_slow(size);
}

node_pool_counters node_pool_stats() noexcept {
  free_slab_list& l = free_slabs();
  scoped_lock lock(l.mutex);
  return {true, l.operations, l.size};
}

void free_node(void* p, std::size_t size) noexcept {
  const int c = class_of(size);
  if (c < 0) return ::operator delete(p);
  slab* s = slab_of(p);
  lane& l = slabs.lanes[c];
  if (s == l.current) {  // carved by this thread: it uncounts the node when it retires the slab
    ++l.local_freed;
    return;
  }
  uncount(s, 1);
}

#endif

}  // namespace handoff::detail
