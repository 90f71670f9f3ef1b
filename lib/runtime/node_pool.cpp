// Message-node memory: per-thread slabs of one size class each, carved by bumping a
// pointer. Nodes are mostly allocated by senders and freed by a drainer, often on another
// thread and in the order they were allocated (a mailbox is FIFO), so a slab counts the
// nodes it still has out instead of keeping a free list that threads would trade: no
// allocator call per node, and a burst's memory comes back once the burst has drained. A
// free also marks its node in the slab's free map (a byte per node), so that a slab half
// free is carved again around the nodes still out: a long-queued node keeps no more than
// about its own size of other memory alive. Under AddressSanitizer the pool is bypassed, so
// that a use-after-free of a node is reported instead of hidden by recycling.
//
// A slab's life: carved by a thread (held: its count carries `hold`), then retired
// (nobody holds it; its count only falls as its nodes come back), until the subtraction
// that leaves at most adopt_at() nodes out adopts it (takes `hold` again) into that
// thread's spares; spares move to a shared list and back to a carver, which claims the
// free nodes, all at once if none is out, else run by run from the map. Model:
// tests/model/node_pool.pml.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/node_pool.hpp"
#include "handoff/detail/tls_model.hpp"
#include "node_slab.hpp"
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

using namespace pool;  // NOLINT(google-build-using-namespace): the slab's own file pair

int class_of(std::size_t size) noexcept {
  for (std::size_t c = 0; c < class_count; ++c) {
    if (size <= class_size(c)) return static_cast<int>(c);
  }
  return -1;
}

// Held slabs that threads gave up, one list per size class (a slab keeps its class while
// any of its nodes may be out), shared by every thread, moved in batches of up to
// `spare_batch`: a thread that only frees nodes carved elsewhere (an owner draining another
// thread's sends) hands over four slabs per lock, and a thread that only carves takes four,
// so the lock is taken once per 4 slabs (about 2,000 small messages) on each side. Never
// destroyed: nodes may be freed after static destruction has begun.
constexpr std::uint32_t spare_batch = 4;

struct free_slab_list {
  annotated_mutex mutex;
  slab* heads[class_count] HANDOFF_GUARDED_BY(mutex) = {};
  std::size_t size HANDOFF_GUARDED_BY(mutex) = 0;
  std::uint64_t operations HANDOFF_GUARDED_BY(mutex) = 0;  // pushes and pops: node_pool_stats()

  // Up to `n` slabs of class c, linked through next_free (nullptr: none); their number in `taken`.
  slab* pop(std::size_t c, std::uint32_t n, std::uint32_t& taken) noexcept {
    scoped_lock lock(mutex);
    ++operations;
    slab*& head = heads[c];
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
  // The list of class c from `s` through next_free (nullptr-terminated). Past
  // max_free_slabs, the free ones go back to the allocator; one with nodes out stays
  // listed (it cannot be freed, and is carved again before any new slab).
  void push(std::size_t c, slab* s) noexcept {
    slab* surplus = nullptr;
    {
      scoped_lock lock(mutex);
      ++operations;
      while (s != nullptr) {
        slab* next = s->next_free;
        if (size < max_free_slabs || !all_free(s)) {
          s->next_free = heads[c];
          heads[c] = s;
          ++size;
        } else {
          s->next_free = surplus;
          surplus = s;
        }
        s = next;
      }
    }
    while (surplus != nullptr) {
      slab* next = surplus->next_free;
      delete_slab(surplus);
      surplus = next;
    }
  }
};
free_slab_list& free_slabs() {
  static auto* list = new free_slab_list;
  return *list;
}

// One size class of one thread: the slab it carves, and its spares of that class.
struct lane {
  slab* current;
  char* bump;                 // next node of the run being carved
  char* end;                  // past the run's last node
  std::uint64_t local_freed;  // nodes of `current` freed by this thread: counted without an atomic
  std::uint32_t scan;         // where next_run looks for the current slab's next free run
  std::uint32_t spare_count;  // at most spare_batch
  slab* spares;               // held slabs kept for this lane's next ones, through next_free

  void give_spares(std::size_t c) noexcept {
    if (spares != nullptr) free_slabs().push(c, spares);
    spares = nullptr;
    spare_count = 0;
  }
};

// Per-thread state. Trivial, so that the hot path reaches it with one %fs-relative access
// and no TLS-wrapper initialisation check.
struct thread_slabs {
  lane lanes[class_count];
  bool reaper_armed;  // the thread-exit hook below is registered
  bool dead;          // the thread is exiting and returned its slabs: carve from the orphan lanes

  // s, now held by this thread, joins lane c's spares. Out of line: free_node()'s fast path
  // then saves no registers.
  [[gnu::noinline]] void keep(slab* s, std::size_t c) noexcept {
    if (dead) {  // past the exit hook, which gave the spares back
      s->next_free = nullptr;
      return free_slabs().push(c, s);
    }
    if (!reaper_armed) arm();  // a thread that only frees keeps spares too: the hook gives them back
    lane& l = lanes[c];
    if (l.spare_count == spare_batch) l.give_spares(c);
    s->next_free = l.spares;
    l.spares = s;
    ++l.spare_count;
  }
  void arm() noexcept;  // registers the exit hook that returns the slabs (below)
};

HANDOFF_TLS_MODEL constinit thread_local thread_slabs slabs{};

// A held slab for lane l's refill: a spare, or a batch from the shared list (nullptr: none).
slab* take_spare(lane& l, std::size_t c) noexcept {
  if (l.spares == nullptr) l.spares = free_slabs().pop(c, spare_batch, l.spare_count);
  slab* s = l.spares;
  if (s != nullptr) {
    l.spares = s->next_free;
    --l.spare_count;
  }
  return s;
}

// The subtraction that crossed s's threshold: this thread holds the slab now and keeps it as a
// spare. Relaxed: that subtraction acquired the frees before it.
void adopt(slab* s, std::size_t c) noexcept {
  s->outstanding.fetch_add(hold, std::memory_order_relaxed);
  slabs.keep(s, c);
}

// Subtracts n freed (or never carved) nodes, and the hold if the holder lets go, from s's
// count. The count only falls while nobody holds the slab, so exactly one subtraction
// crosses adopt_at(c): it takes the slab back (its hold) and keeps it as a spare.
void uncount(slab* s, std::size_t c, std::uint64_t n) noexcept {
  const std::uint64_t before = s->outstanding.fetch_sub(n, std::memory_order_acq_rel);
  HANDOFF_ASSERT(before >= n);  // less: a node freed twice
  if (before > adopt_at(c) && before - n <= adopt_at(c)) adopt(s, c);
}

// The carver is done with l.current: it marks free the nodes of its run it will never hand
// out, and uncounts them, those it freed itself, and its hold.
void retire(lane& l, std::size_t c) noexcept {
  slab* s = l.current;
  if (s == nullptr) return;
  const std::size_t size = class_size(c);
  std::uint64_t n = l.local_freed + hold;
  for (char* p = l.bump; p != l.end; p += size, ++n) {
    free_map(s)[static_cast<std::size_t>(p - reinterpret_cast<char*>(s)) / size].store(
        1, std::memory_order_relaxed);  // published by uncount's release
  }
  l.current = nullptr;
  l.bump = l.end = nullptr;
  l.local_freed = 0;
  l.scan = 0;
  uncount(s, c, n);
}

// Claims the next run of free nodes of l.current from l.scan on, to carve by bumping; false
// if there is none left.
bool next_run(lane& l, std::size_t c) noexcept {
  slab* s = l.current;
  std::atomic<std::uint8_t>* map = free_map(s) + first_entry(c);
  const std::size_t cap = capacity(c);
  std::size_t i = l.scan;
  while (i < cap && map[i].load(std::memory_order_acquire) == 0) ++i;
  if (i == cap) {
    l.scan = static_cast<std::uint32_t>(cap);
    return false;
  }
  std::size_t j = i;
  for (; j < cap && map[j].load(std::memory_order_acquire) == 1; ++j) map[j].store(0, std::memory_order_relaxed);
  // Relaxed: the nodes are published by the sends that carry them, after this.
  s->outstanding.fetch_add(j - i, std::memory_order_relaxed);
  l.scan = static_cast<std::uint32_t>(j);
  l.bump = node_at(s, c, i);
  l.end = node_at(s, c, j);
  return true;
}

// Carves the rest of the current slab's free nodes, or retires it and starts a held or a
// new slab (may throw std::bad_alloc).
void refill(lane& l, std::size_t c) {
  if (l.current != nullptr && next_run(l, c)) return;
  retire(l, c);
  slab* s = take_spare(l, c);
  if (s == nullptr || all_free(s)) {
    // Whole: nothing else touches a slab with no node out, so its map is cleared in one go.
    if (s == nullptr) s = new_slab(c);
    std::memset(static_cast<void*>(free_map(s) + first_entry(c)), 0, capacity(c));
    s->outstanding.fetch_add(capacity(c), std::memory_order_relaxed);
    l.current = s;
    l.scan = static_cast<std::uint32_t>(capacity(c));
    l.bump = node_at(s, c, 0);
    l.end = node_at(s, c, capacity(c));
    return;
  }
  l.current = s;
  l.scan = 0;
  // A held slab has more than half its nodes marked free: its adopter acquired their frees.
  const bool found = next_run(l, c);
  HANDOFF_ASSERT(found);
  (void)found;
}

void* carve(lane& l, std::size_t c) {
  if (l.bump == l.end) refill(l, c);
  void* p = l.bump;
  l.bump += class_size(c);
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
  for (std::size_t c = 0; c < class_count; ++c) {
    retire(slabs.lanes[c], c);
    slabs.lanes[c].give_spares(c);
  }
}

// Registers return_slabs on the thread's first node or first kept slab (a cold path).
void thread_slabs::arm() noexcept {
  run_at_thread_exit<&return_slabs>();
  reaper_armed = true;
}

// allocate_node() past its fast path: a run used up, a large node, a thread that is exiting
// or has not armed its exit hook yet (its lanes are empty, so it comes here). Out of line,
// so that the fast path saves no registers (inlined, every call pushed and popped registers
// for the refill it rarely makes; the counts are in docs/notebook.md, "After the gate: the
// Vyukov queue's costs cut").
[[gnu::noinline]] void* allocate_slow(std::size_t size) {
  const int c = class_of(size);
  if (c < 0) return ::operator new(size);
  const auto uc = static_cast<std::size_t>(c);
  if (slabs.dead) [[unlikely]] {
    orphan_lanes& o = orphans();
    scoped_lock lock(o.mutex);
    return carve(o.lanes[uc], uc);
  }
  if (!slabs.reaper_armed) [[unlikely]]
    slabs.arm();
  return carve(slabs.lanes[uc], uc);
}

// The fast paths, one per class so that its sizes, shifts and threshold are constants.
template <std::size_t C>
[[gnu::always_inline]] inline void* allocate_in(std::size_t size) {
  // A run with room left: bump the pointer. A thread that has not armed its exit hook, or
  // has run it, has empty lanes.
  lane& l = slabs.lanes[C];
  if (l.bump != l.end) [[likely]] {
    void* p = l.bump;
    l.bump += class_size(C);
    return p;
  }
  return allocate_slow(size);
}

template <std::size_t C>
[[gnu::always_inline]] inline void free_in(void* p) noexcept {
  const std::uintptr_t offset = reinterpret_cast<std::uintptr_t>(p) & (slab_size - 1);
  auto* s = reinterpret_cast<slab*>(static_cast<char*>(p) - offset);
  // Marked before it is uncounted, so that a slab's adopter finds it (see free_map).
  free_map(s)[offset / class_size(C)].store(1, std::memory_order_release);
  lane& l = slabs.lanes[C];
  if (s == l.current) {  // carved by this thread: it uncounts the node when it retires the slab
    ++l.local_freed;
    return;
  }
  uncount(s, C, 1);
}

}  // namespace

void* allocate_node(std::size_t size) {
  static_assert(class_count == 5);
  if (size <= class_size(0)) return allocate_in<0>(size);
  if (size <= class_size(1)) return allocate_in<1>(size);
  if (size <= class_size(2)) return allocate_in<2>(size);
  if (size <= class_size(3)) return allocate_in<3>(size);
  if (size <= class_size(4)) return allocate_in<4>(size);
  return ::operator new(size);
}

node_pool_counters node_pool_stats() noexcept {
  free_slab_list& l = free_slabs();
  scoped_lock lock(l.mutex);
  return {true, l.operations, l.size};
}

void free_node(void* p, std::size_t size) noexcept {
  if (size <= class_size(0)) return free_in<0>(p);
  if (size <= class_size(1)) return free_in<1>(p);
  if (size <= class_size(2)) return free_in<2>(p);
  if (size <= class_size(3)) return free_in<3>(p);
  if (size <= class_size(4)) return free_in<4>(p);
  ::operator delete(p);
}

#endif

}  // namespace handoff::detail
