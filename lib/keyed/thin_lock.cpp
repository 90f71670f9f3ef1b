// The lock table's side of thin keys (detail/thin_record.hpp): inflating a stripe around
// its thin holder, the holder's unlock once parked on or inflated, parking on a thin word
// (eventual fairness), and forgetting a moved guard's thread.
#include <algorithm>
#include <atomic>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/lock_table.hpp"
#include "lock_parking.hpp"

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
  if ((w & thin_parked) != 0) {
    wake_word(s.word);  // the parked threads find the stripe inflated: the table serves them
    w &= ~thin_parked;
  }
  if (w != 0) {
    const thin_record* holder = thin_holder(w);
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
  const auto mine = reinterpret_cast<std::uintptr_t>(r);
  for (;;) {
    std::uintptr_t w = s.word.load(std::memory_order_relaxed);
    if (w != thin_inflated) {
      // Parked threads (or an inflation that put the word back, the key's copy having
      // thrown): free the word, then wake them to barge for it; once one of them has
      // waited fair_after, reserve it for them instead, so that no barger passes it over
      // while it wakes up. release; pairs with the next owner's CAS.
      HANDOFF_ASSERT(w == mine || w == (mine | thin_parked));
      const bool parked = (w & thin_parked) != 0;
      const std::uintptr_t to = parked && parker_due(s) ? thin_reserved : 0;
      if (!s.word.compare_exchange_strong(w, to, std::memory_order_release, std::memory_order_relaxed)) continue;
      if (parked) wake_word(s.word);
      break;
    }
    s.lock.lock();
    lock_entry* e = r->entry;
    s.lock.unlock();
    if (e != nullptr) {
      r->entry = nullptr;  // free records have none (fill_thin_record leaves it)
      release(e);
      break;
    }
    // Inflated, not adopted yet (its inflater holds s's lock), or put back: look again.
  }
  push_thin_record(r);
}

bool lock_table::park_thin(lock_shard& s, std::uintptr_t w, std::int64_t& since) noexcept {
  if (since == 0) {
    since = now();
    counters_.parked.fetch_add(1, std::memory_order_relaxed);  // a statistic, read by waiting()
  }
  const std::int64_t due = since + fair_after_;
  if (now() >= due) return false;
  // Relaxed: the word's modification order decides alone. A CAS from the word this thread
  // saw, never a blind set: on a word that changed meanwhile (freed, another holder,
  // inflated) the bit would promise a wake-up nobody owes; then look at the word again.
  if ((w & thin_parked) == 0 &&
      !s.word.compare_exchange_strong(w, w | thin_parked, std::memory_order_relaxed, std::memory_order_relaxed))
    return true;
  // The stripe's earliest parker deadline, for the unlock. Relaxed: a hint; one lost to a
  // racing unlock is written again at this thread's next park, one left stale makes an
  // unlock reserve the word early, for a parker all the same (the bit says one exists).
  std::atomic<std::int64_t>& first_due = park_due_[static_cast<std::size_t>(&s - shards_.get())];
  for (std::int64_t d = first_due.load(std::memory_order_relaxed);
       (d == 0 || due < d) && !first_due.compare_exchange_weak(d, due, std::memory_order_relaxed);) {
  }
  park_on_word(s.word, w | thin_parked, due);
  return true;
}

bool lock_table::parker_due(lock_shard& s) noexcept {
  if (!park_due_) return false;
  // Relaxed: a hint (see park_thin). The parkers woken now register again as they park.
  const std::int64_t d = park_due_[static_cast<std::size_t>(&s - shards_.get())].exchange(0, std::memory_order_relaxed);
  return d != 0 && now() >= d;
}

void lock_table::thin_wait_granted(lock_shard& s, std::int64_t since, bool took_reserved) noexcept {
  if (took_reserved) wake_word(s.word);
  thin_wait_to_table();
  note_wait(nullptr, since);
}

void lock_table::thin_wait_to_table() noexcept {
  counters_.parked.fetch_sub(1, std::memory_order_relaxed);  // a statistic, read by waiting()
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
