// The slot-chunk arena, the per-thread chunk caches in front of its shared stack, and the
// detach marks (detail/slot_chunk.hpp, detail/chunk_depot.hpp).
//
// The arena is a table of segments of 16384 chunks each (chunk_segments), a segment
// allocated the first time an index in it is carved and never freed; chunks are carved a
// batch at a time.
//
// The caches are magazines (J. Bonwick and J. Adams, "Magazines and Vmem: Extending the
// Slab Allocator to Many CPUs and Arbitrary Resources", USENIX 2001): a thread holds a
// `loaded` list of up to `chunk_batch_size` free chunks and at most one full `spare`
// batch. It allocates from `loaded`, swapping in the spare when `loaded` is empty, and only
// then pops a full batch from the shared stack (or carves one); it frees into `loaded`,
// moving a full `loaded` to the spare, and only when the spare is full already pushes the
// spare to the shared stack. A thread that alternates between taking and freeing (the
// request/response pattern) never reaches the stack; one that only takes or only frees
// reaches it once per batch.
//
// Each thread also has a record in a process-wide list (records are never freed; a thread
// that exits leaves its record for the next thread to claim): its count of chunks in use
// and of stack operations, summed when read, and its detach mark.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <new>
#include <type_traits>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/chunk_depot.hpp"
#include "handoff/detail/slot_chunk.hpp"
#include "handoff/detail/tls_model.hpp"
#include "thread_exit.hpp"

namespace handoff::detail {

namespace {

[[noreturn]] void out_of_chunks(const char* why) noexcept {
  std::fprintf(stderr, "handoff: cannot allocate a mailbox chunk (%s)\n", why);
  std::terminate();
}

// A thread's counts, read by chunk_pool_stats() and wait_for_detaching() on any thread.
// Written only by the thread that claimed the record (load + store: no read-modify-write),
// except `orphans`, shared by threads that have already returned theirs (fetch_add).
struct alignas(64) thread_record {
  // The actor whose head this thread may still touch after releasing it, or nullptr.
  // Set relaxed (ordered before the release of the actor's word by that release); cleared
  // with release order, which pairs with the acquire in wait_for_detaching().
  std::atomic<const void*> detaching{nullptr};
  std::atomic<std::int64_t> in_use{0};  // allocated - freed by the threads of this record
  std::atomic<std::uint64_t> stack_pops{0};
  std::atomic<std::uint64_t> stack_pushes{0};
  std::atomic<std::uint64_t> carves{0};
  // true while a thread holds the record. acquire on claim; pairs with the release when its
  // last thread gave it up: that thread's counts are visible to the next one.
  std::atomic<bool> claimed{false};
  thread_record* next_record = nullptr;  // the list's link: immutable once published
};

// Relaxed load + store: the record's own thread is its only writer.
template <class T>
void add(std::atomic<T>& counter, T delta) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
}

struct arena {
  std::mutex grow_mutex;  // serializes the allocation of a segment
  // Indices handed out at least once (the next new chunk is carved + 1). Relaxed: a carved
  // index is published with the chunk it names.
  std::atomic<std::uint32_t> carved{0};
  chunk_depot stack;  // full batches of free chunks, shared by every thread
  // Every thread record (release on push; pairs with the acquire of the walkers).
  std::atomic<thread_record*> records{nullptr};
  thread_record orphans;  // counts of threads that returned their cache (fetch_add)
};

// Constant-initialized and trivially destructible: usable before main and while static
// destructors run (threads may still send then).
constinit arena pool;
static_assert(std::is_trivially_destructible_v<arena>);

// A thread's cache of free chunks, linked through their `next`. Trivial, so that the hot
// path reaches it with one %fs-relative access and no TLS-wrapper check. Touched only by
// its thread.
struct thread_chunks {
  thread_record* record;      // nullptr until the thread's first chunk, and after its exit
  std::uint32_t loaded;       // the chunks allocated from and freed into (0: none)
  std::uint32_t loaded_size;  // how many
  std::uint32_t spare;        // a full batch (its first chunk's `base` = its length), or 0
  bool dead;                  // the thread is exiting and returned its cache
};
HANDOFF_TLS_MODEL constinit thread_local thread_chunks cache{};

void ensure_segment(std::uint32_t i) noexcept {
  std::atomic<slot_chunk*>& segment = chunk_segments[i >> chunk_segment_bits];
  if (segment.load(std::memory_order_acquire) != nullptr) return;
  const std::lock_guard<std::mutex> lock(pool.grow_mutex);
  if (segment.load(std::memory_order_relaxed) != nullptr) return;
  // Zeroed pages from the system: a segment costs memory only as its chunks are carved.
  // slot_chunk is an aggregate of atomics, which zeroed memory represents as zero.
  // NOLINTNEXTLINE(cppcoreguidelines-no-malloc): never freed (a stale index must still read a chunk)
  void* s = std::calloc(chunk_segment_size, sizeof(slot_chunk));
  if (s == nullptr) out_of_chunks("out of memory");
  segment.store(static_cast<slot_chunk*>(s), std::memory_order_release);  // pairs with chunk_at()
}

// Carves a batch of new chunks: the first one's index, the rest linked behind it.
std::uint32_t carve_batch() noexcept {
  const std::uint32_t first = pool.carved.fetch_add(chunk_batch_size, std::memory_order_relaxed) + 1;
  if (first > max_chunks - chunk_batch_size + 1) out_of_chunks("the arena's 2^31 - 1 chunks are all in use");
  for (std::uint32_t i = first; i < first + chunk_batch_size; ++i) {
    ensure_segment(i);
    chunk_at(i).next.store(i + 1 == first + chunk_batch_size ? 0 : i + 1, std::memory_order_relaxed);
  }
  chunk_at(first).base.store(chunk_batch_size, std::memory_order_relaxed);
  return first;
}

// Hands the list `first` of `size` chunks to the shared stack as one batch.
void push_batch(std::uint32_t first, std::uint32_t size) noexcept {
  chunk_at(first).base.store(size, std::memory_order_relaxed);  // published by the push
  pool.stack.push(first);
}

thread_record* claim_record() noexcept {
  arena& a = pool;
  for (thread_record* r = a.records.load(std::memory_order_acquire); r != nullptr; r = r->next_record) {
    if (!r->claimed.load(std::memory_order_relaxed) && !r->claimed.exchange(true, std::memory_order_acquire)) {
      return r;
    }
  }
  auto* r = new (std::nothrow) thread_record;
  if (r == nullptr) out_of_chunks("out of memory");
  r->claimed.store(true, std::memory_order_relaxed);
  thread_record* head = a.records.load(std::memory_order_relaxed);
  do {
    r->next_record = head;
  } while (!a.records.compare_exchange_weak(head, r, std::memory_order_release, std::memory_order_relaxed));
  return r;
}

// At thread exit: hands the cache to the shared stack and gives the record up.
void return_cache() noexcept {
  thread_chunks& t = cache;
  t.dead = true;
  if (t.record == nullptr) return;
  if (t.loaded_size != 0) {
    push_batch(t.loaded, t.loaded_size);
    add(t.record->stack_pushes, std::uint64_t{1});
  }
  if (t.spare != 0) {
    pool.stack.push(t.spare);  // full: its length is set
    add(t.record->stack_pushes, std::uint64_t{1});
  }
  t.loaded = t.loaded_size = t.spare = 0;
  HANDOFF_ASSERT(t.record->detaching.load(std::memory_order_relaxed) == nullptr);
  t.record->claimed.store(false, std::memory_order_release);  // pairs with claim_record()
  t.record = nullptr;
}

// The thread's first use of the pool (a cold path): a record, and the hook that returns
// its cache. False once the thread has returned it.
bool arm(thread_chunks& t) noexcept {
  if (t.dead) return false;
  t.record = claim_record();
  run_at_thread_exit<&return_cache>();
  return true;
}

// `loaded` is empty: the spare, a batch from the shared stack, or a new batch.
bool refill(thread_chunks& t) noexcept {
  if (t.record == nullptr && !arm(t)) return false;
  if (t.spare != 0) {
    t.loaded = t.spare;
    t.loaded_size = chunk_batch_size;
    t.spare = 0;
    return true;
  }
  std::uint32_t batch = pool.stack.pop();
  if (batch != 0) {
    add(t.record->stack_pops, std::uint64_t{1});
  } else {
    batch = carve_batch();
    add(t.record->carves, std::uint64_t{1});
  }
  t.loaded = batch;
  t.loaded_size = chunk_at(batch).base.load(std::memory_order_relaxed);
  HANDOFF_ASSERT(t.loaded_size >= 1 && t.loaded_size <= chunk_batch_size);
  return true;
}

// `loaded` is full (or the thread has no record yet): makes room for one chunk.
bool make_room(thread_chunks& t) noexcept {
  if (t.record == nullptr && !arm(t)) return false;
  if (t.loaded_size < chunk_batch_size) return true;
  if (t.spare != 0) {
    pool.stack.push(t.spare);
    add(t.record->stack_pushes, std::uint64_t{1});
  }
  chunk_at(t.loaded).base.store(chunk_batch_size, std::memory_order_relaxed);  // a full batch
  t.spare = t.loaded;
  t.loaded = 0;
  t.loaded_size = 0;
  return true;
}

// A thread that returned its cache: one chunk at a time through the shared stack.
std::uint32_t orphan_take() noexcept {
  thread_record& o = pool.orphans;
  std::uint32_t batch = pool.stack.pop();
  if (batch != 0) {
    o.stack_pops.fetch_add(1, std::memory_order_relaxed);
  } else {
    batch = carve_batch();
    o.carves.fetch_add(1, std::memory_order_relaxed);
  }
  const std::uint32_t size = chunk_at(batch).base.load(std::memory_order_relaxed);
  if (size > 1) {
    push_batch(chunk_at(batch).next.load(std::memory_order_relaxed), size - 1);
    o.stack_pushes.fetch_add(1, std::memory_order_relaxed);
  }
  o.in_use.fetch_add(1, std::memory_order_relaxed);
  return batch;
}

void orphan_free(std::uint32_t i) noexcept {
  thread_record& o = pool.orphans;
  chunk_at(i).next.store(0, std::memory_order_relaxed);
  push_batch(i, 1);
  o.stack_pushes.fetch_add(1, std::memory_order_relaxed);
  o.in_use.fetch_sub(1, std::memory_order_relaxed);
}

// Puts chunk i in front of `loaded`, which has room.
void put_loaded(thread_chunks& t, std::uint32_t i) noexcept {
  // Relaxed: the cache is this thread's; whatever other threads did with the chunk (their
  // slot stores) happens-before this free through the caller's acquire loads.
  chunk_at(i).next.store(t.loaded, std::memory_order_relaxed);
  t.loaded = i;
  ++t.loaded_size;
  add(t.record->in_use, std::int64_t{-1});
}

// free_chunk() with `loaded` full, or no record: out of line, so that the common path
// saves no registers.
[[gnu::noinline]] void free_chunk_slow(std::uint32_t i) noexcept {
  thread_chunks& t = cache;
  if (!make_room(t)) return orphan_free(i);
  put_loaded(t, i);
}

}  // namespace

constinit std::atomic<slot_chunk*> chunk_segments[chunk_segment_count]{};

std::uint32_t allocate_chunk(std::uint32_t base, std::uint32_t prev) noexcept {
  thread_chunks& t = cache;
  std::uint32_t i = 0;
  if (t.loaded_size != 0 || refill(t)) [[likely]] {
    i = t.loaded;
    t.loaded = chunk_at(i).next.load(std::memory_order_relaxed);
    --t.loaded_size;
    add(t.record->in_use, std::int64_t{1});
  } else {
    i = orphan_take();
  }
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
  thread_chunks& t = cache;
  if (t.record == nullptr || t.loaded_size == chunk_batch_size) [[unlikely]]
    return free_chunk_slow(i);
  put_loaded(t, i);
}

chunk_pool_counters chunk_pool_stats() noexcept {
  arena& a = pool;
  std::int64_t in_use = 0;
  chunk_pool_counters s{};
  auto sum = [&](const thread_record& r) {
    in_use += r.in_use.load(std::memory_order_relaxed);
    s.stack_pops += r.stack_pops.load(std::memory_order_relaxed);
    s.stack_pushes += r.stack_pushes.load(std::memory_order_relaxed);
    s.carves += r.carves.load(std::memory_order_relaxed);
  };
  for (const thread_record* r = a.records.load(std::memory_order_acquire); r != nullptr; r = r->next_record) sum(*r);
  sum(a.orphans);
  s.in_use = static_cast<std::uint64_t>(in_use);
  s.carved = a.carved.load(std::memory_order_relaxed);
  return s;
}

std::uint64_t chunks_in_use() noexcept { return chunk_pool_stats().in_use; }

bool mark_detaching(const void* actor) noexcept {
  thread_chunks& t = cache;
  if (t.record == nullptr && !arm(t)) [[unlikely]]
    return false;
  HANDOFF_ASSERT(t.record->detaching.load(std::memory_order_relaxed) == nullptr);
  // Relaxed: the caller's release of the actor's word comes after it and publishes it.
  t.record->detaching.store(actor, std::memory_order_relaxed);
  return true;
}

void clear_detaching() noexcept {
  // release; pairs with the acquire in wait_for_detaching(): the last touch of the actor
  // comes before its destruction.
  cache.record->detaching.store(nullptr, std::memory_order_release);
}

void wait_for_detaching(const void* actor) noexcept {
  for (const thread_record* r = pool.records.load(std::memory_order_acquire); r != nullptr; r = r->next_record) {
    for (unsigned spins = 0; r->detaching.load(std::memory_order_acquire) == actor; ++spins) {
      backoff(spins < spins_before_yield ? spins : spins_before_yield);
    }
  }
}

}  // namespace handoff::detail
