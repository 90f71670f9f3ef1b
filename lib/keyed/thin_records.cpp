// The thin records' global list and the per-thread caches' cold halves
// (detail/thin_record.hpp).
#include <mutex>

#include "../runtime/thread_exit.hpp"
#include "handoff/detail/thin_record.hpp"

namespace handoff::detail {

// Every record here is free: its union's live member is `next`.
// NOLINTBEGIN(cppcoreguidelines-pro-type-union-access)

HANDOFF_TLS_MODEL constinit thread_local thin_record_cache thin_records{};

namespace {

// Records nobody uses, shared by all threads. Slabs are never freed: records are
// type-stable (a contender may read a record after its holder let it go).
struct global_records {
  std::mutex m;
  thin_record* head = nullptr;  // guarded by m
  std::size_t allocated = 0;    // guarded by m
};
global_records& global() noexcept {
  static global_records g;  // constructed at the first record: never destroyed before use ends
  return g;
}

// Records a refill moves to the thread's cache at once, and a slab's size.
constexpr std::uint32_t refill_batch = thin_cache_max / 2;
constexpr std::size_t slab_records = 64;

// An exiting thread's cache goes back to the global list, so that short-lived threads
// leave no records behind.
void give_back_cache() noexcept {
  thin_record_cache& c = thin_records;
  c.dead = true;
  global_records& g = global();
  std::lock_guard lock(g.m);
  while (thin_record* r = c.head) {
    c.head = r->next;
    r->next = g.head;
    g.head = r;
  }
  c.count = thin_cache_max;  // every later push spills (see `dead`)
}

}  // namespace

thin_record* refill_thin_records() {
  thin_record_cache& c = thin_records;
  if (!c.armed && !c.dead) {
    run_at_thread_exit<&give_back_cache>();
    c.armed = true;
  }
  global_records& g = global();
  std::lock_guard lock(g.m);
  for (std::uint32_t i = 0; i < refill_batch; ++i) {
    if (g.head == nullptr) {
      auto* slab = new thin_record[slab_records];  // type-stable: never deleted
      g.allocated += slab_records;
      for (std::size_t j = 0; j < slab_records; ++j) {
        slab[j].next = g.head;
        g.head = &slab[j];
      }
    }
    thin_record* r = g.head;
    g.head = r->next;
    if (c.dead) return r;  // an exiting thread's thread-locals unlocking: cache nothing
    r->next = c.head;
    c.head = r;
    ++c.count;
  }
  thin_record* r = c.head;
  c.head = r->next;
  --c.count;
  return r;
}

std::size_t thin_records_allocated() noexcept {
  global_records& g = global();
  std::lock_guard lock(g.m);
  return g.allocated;
}

void spill_thin_records(thin_record* r) noexcept {
  thin_record_cache& c = thin_records;
  global_records& g = global();
  std::lock_guard lock(g.m);
  r->next = g.head;
  g.head = r;
  while (!c.dead && c.count > thin_cache_max / 2) {
    thin_record* x = c.head;
    c.head = x->next;
    --c.count;
    x->next = g.head;
    g.head = x;
  }
}

// NOLINTEND(cppcoreguidelines-pro-type-union-access)

}  // namespace handoff::detail
