// Each thread's recycled lock entry (detail/entry_cache.hpp).
#include "handoff/detail/entry_cache.hpp"

#include <utility>

#include "../runtime/thread_exit.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/tls_model.hpp"

namespace handoff::detail {

HANDOFF_TLS_MODEL constinit thread_local entry_cache cached_entry{};

namespace {
// Frees the thread's cached entry when the thread exits.
void free_cached_entry() noexcept {
  entry_cache& c = cached_entry;
  if (c.entry != nullptr) c.destroy(std::exchange(c.entry, nullptr));
  c.dead = true;
}

// Registers free_cached_entry on the thread's first cached entry (a cold path).
void arm_entry_reaper() noexcept {
  run_at_thread_exit<&free_cached_entry>();
  cached_entry.reaper_armed = true;
}
}  // namespace

void lock_table::recycle(lock_entry* e) noexcept {
  entry_cache& c = cached_entry;
  if (c.dead || !keep_(e)) return destroy_(e);  // exiting, or its key owns too much memory
  if (c.entry != nullptr) {
    if (c.destroy == destroy_) return destroy_(e);  // one is enough
    c.destroy(c.entry);                             // another key type: keep the newest
  }
  if (!c.reaper_armed) arm_entry_reaper();
  c.entry = e;
  c.destroy = destroy_;
}

}  // namespace handoff::detail
