// The lock table's side of thin keys (detail/thin_record.hpp): inflating a stripe around
// its thin holder, the holder's unlock once inflated, and forgetting a moved guard's thread.
#include <algorithm>
#include <atomic>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/lock_table.hpp"

namespace handoff::detail {

std::uintptr_t lock_table::seize(lock_shard& s) noexcept {
  std::uintptr_t w = s.word.load(std::memory_order_relaxed);
  // seq_cst: acquires the holder's record (its CAS released it), and orders this CAS
  // before the load of the holder's thread in adopt(), against forget_thin_holder()'s
  // store then load (one of the two sees the other's write).
  while (!s.word.compare_exchange_weak(w, thin_inflated, std::memory_order_seq_cst, std::memory_order_relaxed)) {
  }
  HANDOFF_ASSERT(w != thin_inflated);  // the caller checked, under s's lock
  s.calm = 0;
  if (w != 0) {
    const auto* holder = reinterpret_cast<const thin_record*>(w);  // NOLINT(performance-no-int-to-ptr): a record
    // The holder publishes its token a few instructions after its CAS. acquire; pairs with
    // take_thin_token's release (the token counter's increment comes with it).
    for (unsigned spins = 0; holder->token.load(std::memory_order_acquire) == 0; ++spins) backoff(spins);
  }
  return w;
}

void lock_table::adopt(lock_entry* e, thin_record* r) noexcept {
  [[maybe_unused]] const bool took = e->own.try_take();
  HANDOFF_ASSERT(took);                                 // just created: free
  e->token = r->token.load(std::memory_order_relaxed);  // seize() acquired it
  e->holder_thread.store(r->thread.load(std::memory_order_seq_cst), std::memory_order_relaxed);
  r->entry = e;  // read by the holder's unlock, under s's lock
}

bool lock_table::deflate_if_calm(lock_shard& s) noexcept {
  if (++s.calm < lock_shard::deflate_after) return false;
  s.calm = 0;
  // Idle entries are may_idle ones (the others leave at their last release): at most
  // kept_idle of them.
  lock_entry* idle[lock_shard::kept_idle];
  std::size_t n = 0;
  bool all_idle = s.size() <= lock_shard::kept_idle;
  s.for_each([&](lock_entry* e) {
    all_idle = all_idle && lock_shard::reclaimable(e);
    if (all_idle) idle[n++] = e;
  });
  if (!all_idle) return false;
  for (std::size_t i = 0; i < n; ++i) {
    s.token_floor = std::max(s.token_floor, idle[i]->token);
    s.erase(idle[i]);
    destroy_(idle[i]);  // rare (once per deflate_after calm locks): under the lock
  }
  deflate_if_empty(s);
  return true;
}

void lock_table::release_thin_inflated(thin_record* r) noexcept {
  lock_shard& s = shard_for(r->hash.load(std::memory_order_relaxed));
  for (;;) {
    s.lock.lock();
    lock_entry* e = r->entry;
    s.lock.unlock();
    if (e != nullptr) {
      r->entry = nullptr;  // free records have none (fill_thin_record leaves it)
      release(e);
      break;
    }
    // An inflation put the word back (the key's copy threw): ours again.
    auto w = reinterpret_cast<std::uintptr_t>(r);
    if (s.word.compare_exchange_strong(w, 0, std::memory_order_release, std::memory_order_relaxed)) break;
  }
  push_thin_record(r);
}

void lock_table::forget_thin_holder(thin_record* r) noexcept {
  r->thread.store(0, std::memory_order_seq_cst);  // see seize()
  lock_shard& s = shard_for(r->hash.load(std::memory_order_relaxed));
  if (s.word.load(std::memory_order_seq_cst) != thin_inflated) return;  // a later inflation reads 0
  s.lock.lock();
  if (r->entry != nullptr) r->entry->holder_thread.store(0, std::memory_order_relaxed);
  s.lock.unlock();
}

}  // namespace handoff::detail
