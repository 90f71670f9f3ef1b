// The lock table's side of thin keys (detail/thin_record.hpp): inflating a stripe around
// its thin holder, the holder's unlock once parked on or inflated, parking on a thin word
// (eventual fairness), and forgetting a moved guard's thread.
#include <algorithm>
#include <atomic>
#include <cstdint>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "handoff/detail/assert.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_table.hpp"
#include "lock_parking.hpp"

namespace handoff::detail {

namespace {

// A stripe's waiters on its word (lock_table::park_due_): their count in the low bits,
// the earliest deadline above, in units of 2^10 ns rounded up (never early).
constexpr unsigned due_shift = 16;
constexpr std::uint64_t count_mask = (std::uint64_t{1} << due_shift) - 1;
std::uint64_t due_units(std::int64_t due) noexcept { return (static_cast<std::uint64_t>(due) + 1023) >> 10; }

// Counts a waiter in (by 1, or 0 for one counted already) with its deadline, kept if the
// earliest; `leave` counts it out, and its deadline goes with it if kept (the others'
// come back as they park again), so that a kept deadline is always a waiting thread's.
// Relaxed: hints for fairness; the word alone decides who holds the key.
void count_waiter(std::atomic<std::uint64_t>& slot, std::uint64_t due, bool join) noexcept {
  std::uint64_t v = slot.load(std::memory_order_relaxed);
  for (;;) {
    const std::uint64_t d = v >> due_shift;
    const std::uint64_t n = (v & count_mask) + (join ? 1 : 0);
    HANDOFF_ASSERT(n <= count_mask);
    const std::uint64_t to = (d == 0 || due < d ? due : d) << due_shift | n;
    if (to == v || slot.compare_exchange_weak(v, to, std::memory_order_relaxed)) return;
  }
}
void leave(std::atomic<std::uint64_t>& slot, std::uint64_t due) noexcept {
  std::uint64_t v = slot.load(std::memory_order_relaxed);
  for (;;) {
    HANDOFF_ASSERT((v & count_mask) != 0);
    const std::uint64_t n = (v & count_mask) - 1;
    const std::uint64_t d = v >> due_shift;
    const std::uint64_t to = (n == 0 || d == due ? 0 : d) << due_shift | n;
    if (slot.compare_exchange_weak(v, to, std::memory_order_relaxed)) return;
  }
}

#if defined(__x86_64__)
// A thread's last clock read for thin_waiter_due: the counter, then steady_clock (ns).
struct tsc_base {
  std::uint64_t tsc;
  std::int64_t ns;
};
constinit thread_local tsc_base tl_tsc_base{};
#endif

}  // namespace

std::uintptr_t lock_table::seize(lock_shard& s) noexcept {
  std::uintptr_t w = s.word.load(std::memory_order_relaxed);
  // seq_cst: acquires the holder's record (its CAS released it), and orders this CAS
  // before the load of the holder's thread in adopt(), against forget_thin_holder()'s
  // store then load (one of the two sees the other's write).
  while (!s.word.compare_exchange_weak(w, thin_inflated, std::memory_order_seq_cst, std::memory_order_relaxed)) {
  }
  HANDOFF_ASSERT(w != thin_inflated);  // the caller checked, under s's lock
  s.calm = 0;
  if ((w & thin_parked) != 0) wake_word(s.word);  // the sleepers find it inflated: the table serves them
  w &= ~thin_flags;                               // the holder's record, if any
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
  for (;;) {
    std::uintptr_t w = s.word.load(std::memory_order_relaxed);
    if (w != thin_inflated) {
      // Waiters on the word (or an inflation that put the word back, the key's copy having
      // thrown): free it, keeping W while any are counted, so that a lock that finds it
      // takes the slow path and leaves it to them once one is due; then wake the sleepers
      // (P), to take it or park again. release; pairs with the next owner's CAS.
      HANDOFF_ASSERT(thin_holder(w) == r);
      const bool counted =
          park_due_ &&
          (park_due_[static_cast<std::size_t>(&s - shards_.get())].load(std::memory_order_relaxed) & count_mask) != 0;
      if (!s.word.compare_exchange_strong(w, counted ? thin_waiters : 0, std::memory_order_release,
                                          std::memory_order_relaxed))
        continue;
      if ((w & thin_parked) != 0) wake_word(s.word);
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
  std::atomic<std::uint64_t>& slot = park_due_[static_cast<std::size_t>(&s - shards_.get())];
  const bool first = since == 0;
  if (first) {
    since = now();
    counters_.parked.fetch_add(1, std::memory_order_relaxed);  // a statistic, read by waiting()
  }
  const std::int64_t due = since + fair_after_;
  if (!first && now() >= due) return false;
  // Counted before W is set, so that the unlock that finds W counts this thread (a
  // deadline that a leaving waiter took with it is written again here).
  count_waiter(slot, due_units(due), first);
  // A CAS from the word this thread saw, never a blind set: on a word that changed
  // meanwhile the bits would promise a wake-up nobody owes; then look at the word again.
  // release; pairs with a locker's acquire of the word, before it reads the deadline;
  // acquire: a waiter's leaving before the unlock that freed the word, for the check below.
  const std::uintptr_t want = w | thin_flags;
  if (w != want && !s.word.compare_exchange_strong(w, want, std::memory_order_acq_rel, std::memory_order_relaxed))
    return true;
  // A free word is left to a due waiter, which takes it with P and so wakes this thread at
  // its unlock. Looked at after P is set: a due waiter that took the word and left before
  // (its deadline gone with it) is seen here, and this thread takes the word instead of
  // sleeping on it with nobody to wake it.
  if (thin_holder(w) == nullptr && !thin_waiter_due(s)) return true;
  park_on_word(s.word, want, due);
  // Woken due (its deadline's timeout, say): to the table now, not after another spin,
  // which on a loaded machine lets waiters due later queue there first.
  return now() < due;
}

bool lock_table::thin_waiter_due(const lock_shard& s) const noexcept {
  if (!park_due_) return false;
  const std::uint64_t d =
      park_due_[static_cast<std::size_t>(&s - shards_.get())].load(std::memory_order_relaxed) >> due_shift;
  if (d == 0) return false;
  const auto due = static_cast<std::int64_t>(d << 10);  // at or after the waiter's deadline
  if (manual_clock_) return now() >= due;
#if defined(__x86_64__)
  // A lock of a waited-on word asks at every take, and steady_clock costs a system call
  // on some VMs: the time-stamp counter bounds the time since this thread last read the
  // clock from above (at most 2 ns a tick: a counter of 500 MHz or more), so the clock is
  // read only once that bound reaches the deadline. Never late: the base's clock read
  // follows its counter read.
  tsc_base& b = tl_tsc_base;
  const std::uint64_t dt = __rdtsc() - b.tsc;  // a counter behind the base wraps: read the clock
  if (b.ns != 0 && dt < (std::uint64_t{1} << 40) && b.ns + static_cast<std::int64_t>(2 * dt) < due) return false;
  b.tsc = __rdtsc();
  b.ns = now_ns();
  return b.ns >= due;
#else
  return now_ns() >= due;
#endif
}

void lock_table::thin_wait_granted(lock_shard& s, std::int64_t since) noexcept {
  thin_wait_to_table(s, since);
  note_wait(nullptr, since);
}

void lock_table::thin_wait_to_table(lock_shard& s, std::int64_t since) noexcept {
  leave(park_due_[static_cast<std::size_t>(&s - shards_.get())], due_units(since + fair_after_));
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
