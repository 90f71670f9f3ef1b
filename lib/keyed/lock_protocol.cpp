// The keyed mutex's hand-off protocol (overview in include/handoff/detail/lock_table.hpp):
// acquiring, queueing, handing off and releasing a key, and arming and disarming its
// lease. The only code that touches a key's ownership word and mailbox (`own`), with the
// inline fast path, lock_table::try_acquire_fast.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <mutex>
#include <system_error>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/detail/test_driver.hpp"
#include "lease_timer.hpp"
#include "lock_parking.hpp"

namespace handoff::detail {

lock_table::lock_table(destroy_fn destroy, keep_fn keep, describe_fn describe)
    : shards_(std::make_unique<lock_shard[]>(shard_count())), driver_(tls.driver), destroy_(destroy), keep_(keep),
      describe_(describe) {
  if (driver_ == nullptr) return;
  use_manual_clock(driver_->now());
  driver_->attach(this);
}

lock_table::~lock_table() {
  if (driver_ != nullptr) {
    driver_->settle();  // the grants and timeouts still queued refer to this table
    abandon_driven();
    driver_->detach(this);
  }
  // Leaves the timer service and waits for the completions the timer queued before
  // anything they might touch goes away (a completion may still be unlocking through this
  // table).
  if (timer_) timer_->stop();
  timer_.reset();
  if (const std::size_t live = size(); live != 0) {
    std::fprintf(stderr,
                 "handoff: keyed_mutex destroyed while %zu key(s) still have a guard or a waiter; "
                 "they would refer to freed memory\n",
                 live);
    std::terminate();
  }
  for (std::size_t i = 0; i < shard_count(); ++i) shards_[i].for_each(destroy_);  // idle entries
}

std::size_t lock_table::size() const noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < shard_count(); ++i) {
    lock_shard& s = shards_[i];
    s.lock.lock();
    s.for_each([&](const lock_entry* e) { n += lock_shard::reclaimable(e) ? 0 : 1; });
    // A thin holder: a record in the word. acquire: its record was published by that CAS.
    if (const std::uintptr_t w = s.word.load(std::memory_order_acquire);
        w != thin_inflated && thin_holder(w) != nullptr)
      ++n;
    s.lock.unlock();
  }
  return n;
}

std::size_t lock_table::entries() const noexcept {
  return sum_entries([](const lock_entry*) -> std::size_t { return 1; });
}

lease_timer& lock_table::timer() {
  std::call_once(timer_once_, [this] {
    timer_service* on = nullptr;  // the manual clock: advance_manual_clock() fires
    if (!manual_clock_) on = timers_ != nullptr ? timers_ : &default_lease_service();
    timer_ = std::make_unique<lease_timer>(*this, on);
    timer_started_.store(true, std::memory_order_release);  // pairs with timer_if_started()
  });
  return *timer_;
}

void lock_table::advance_manual_clock(std::int64_t to) { timer().advance(manual_now_, to); }

lease_timer* lock_table::timer_if_started() noexcept {
  return timer_started_.load(std::memory_order_acquire) ? timer_.get() : nullptr;
}

std::int64_t lock_table::now() const noexcept {
  return manual_clock_ ? manual_now_.load(std::memory_order_relaxed) : now_ns();
}

grant lock_table::acquire(lock_shard& s, lock_entry* e, const lock_request& r) {
  const std::uintptr_t me = this_thread_id();
  // Free: the last holder's release (its CAS, or opening the key under this lock) made its
  // writes, the token included, visible to the taker.
  auto hold = [&] {
    const std::uint64_t token = ++e->token;
    e->holder_thread.store(me, std::memory_order_relaxed);
    s.lock.unlock();
    if (r.lease != 0) arm_lease(e, token, r.lease);
    return grant{e, token, r.lease};
  };
  if (e->own.try_take() || take_open(e)) return hold();
  s.calm = 0;  // contended: the stripe stays inflated (deflate_if_calm)
  if (r.mode == lock_request::wait_mode::none || (r.mode == lock_request::wait_mode::until && r.deadline <= now())) {
    s.lock.unlock();
    if (r.mode == lock_request::wait_mode::until) note_timeout();
    return {};
  }
  if (e->holder_thread.load(std::memory_order_relaxed) == me) {
    s.lock.unlock();
    // Unless our lease has just expired: the timer clears holder_thread under its mutex
    // when it takes the key from us, so look again under that mutex (not under the shard
    // lock: the timer takes the two in the other order). The entry may be gone by then:
    // the caller looks it up again.
    if (lease_timer* t = timer_if_started()) {
      std::lock_guard lock(t->mutex());
      if (e->holder_thread.load(std::memory_order_relaxed) != me) return {.retry = true};
    }
    throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                            "handoff::keyed_mutex: this thread already holds the key");
  }
  if (driver_ == nullptr && must_run_before_blocking()) {
    // Inside a handler that owns queued work: run it before standing in this key's queue,
    // not after (queued work that locks this key would wait behind this thread's own
    // waiter, which cannot be granted until that work returns). Then look the key up again.
    s.lock.unlock();
    run_before_blocking();
    return {.retry = true};
  }
  waiter* w;
  try {
    w = new_node<waiter>();
  } catch (...) {
    s.lock.unlock();
    throw;
  }
  w->entry = e;
  w->table = this;
  // Before the push: a releasing holder reads it (eventual fairness). A wait begun parked
  // on a thin word counts from its start, so that fair_after bounds the whole wait.
  w->queued_at = r.since != 0 ? r.since : now();
  if (e->own.join(w)) {  // released since try_take(): ours, and w was not queued
    delete_node(w);
    return hold();
  }
  s.lock.unlock();

  const std::int64_t deadline = r.mode == lock_request::wait_mode::until ? r.deadline : no_deadline;
  auto wait = [&] { return driver_ == nullptr ? wait_for_turn(w, deadline) : wait_driven(e, w, deadline); };
  std::uint32_t outcome = wait();
  // Woken (eventual fairness only): the key was freed; compete, and wait again if a barger took it.
  while (outcome == waiter::woken && (outcome = compete(e, w, deadline)) == waiter::waiting) {
    outcome = wait();
  }
  const bool granted = outcome == waiter::granted;
  const std::uint64_t token = granted ? w->token : 0;  // written before the grant; racy otherwise
  const std::int64_t since = w->queued_at;
  release_waiter(w);
  if (!granted) {  // cancelled: still counted, the holder skips and uncounts it
    HANDOFF_ASSERT(outcome == waiter::cancelled);
    note_timeout();
    return {};
  }
  HANDOFF_ASSERT(e->own.pending() >= 1);  // held by us
  e->holder_thread.store(me, std::memory_order_relaxed);
  note_wait(e, since);
  if (r.lease != 0) arm_lease(e, token, r.lease);
  return {e, token, r.lease};
}

grant lock_table::acquire_or_enqueue(lock_shard& s, lock_entry* e, waiter* w, std::int64_t deadline) {
  bool free = e->own.try_take() || take_open(e);
  if (!free) {
    s.calm = 0;  // see acquire()
    w->entry = e;
    w->table = this;
    w->queued_at = now();  // before the push: read by the waiter's completion
    if (deadline != no_deadline) {
      w->timeout.owner = w;  // before the push: the granter reads it
      // The timer's reference too. Relaxed: w is not shared until the push, which the
      // shard lock publishes.
      w->refs.store(3, std::memory_order_relaxed);
    }
    free = e->own.join(w);  // true: released meanwhile, w not queued
  }
  if (free) {
    e->holder_thread.store(0, std::memory_order_relaxed);  // an async hold: no thread to name
    const std::uint64_t token = ++e->token;
    s.lock.unlock();
    return {e, token, 0};
  }
  s.lock.unlock();
  if (driver_ != nullptr) [[unlikely]]
    keep_driven(w);
  if (deadline != no_deadline) {
    // After the push, w may be granted at any moment. A grant cancels the timeout under
    // the timer mutex, so check under it: granted before we got here, there is nothing to
    // schedule and the timer's reference is ours to drop.
    lease_timer& t = *timer_;  // started by the caller (start_timer)
    std::lock_guard lock(t.mutex());
    if (w->state.load(std::memory_order_relaxed) == waiter::waiting) {
      t.schedule(&w->timeout, deadline);
    } else {
      release_waiter(w);
    }
  }
  return {};
}

bool lock_table::take_open(lock_entry* e) noexcept {
  if (!e->open) return false;
  HANDOFF_ASSERT(e->front != nullptr && e->own.pending() >= 2);  // the free key's count and front's
  e->open = false;                                               // the free key's count is now the taker's hold
  return true;
}

// Inlined into release(): as a call of its own, it added instructions to every uncontended
// unlock (callgrind; docs/design.md, "Eventual fairness").
[[gnu::always_inline]] inline waiter* lock_table::next_waiter(lock_entry* e, std::uint64_t uncounted) noexcept {
  if (waiter* f = e->front) {  // the oldest: woken before, lost to a barger (or gave up)
    e->front = nullptr;
    return f;
  }
  auto* w = e->own.looks_empty() ? nullptr : static_cast<waiter*>(e->own.pop());
  if (w != nullptr) return w;
  // Nothing queued: release, the entry staying in its table (idle) if it may.
  lock_shard& s = shard_for(e->hash);
  if (e->may_idle && e->own.try_release(uncounted)) return nullptr;
  s.lock.lock();
  // Requests are counted and pushed under this lock: the mailbox is exact here.
  w = e->own.looks_empty() ? nullptr : static_cast<waiter*>(e->own.pop());
  if (w == nullptr) {
    [[maybe_unused]] const bool released = e->own.try_release(uncounted);  // nobody else is counted
    HANDOFF_ASSERT(released);
    // Only an entry that may not stay comes here empty: the CAS above failing means a
    // request was counted, and its node is pushed under this lock.
    HANDOFF_ASSERT(!e->may_idle);
    lock_entry* dead = remove_if_unused(s, e);
    s.lock.unlock();
    if (dead != nullptr) recycle(dead);
    return nullptr;
  }
  s.lock.unlock();
  return w;
}

void lock_table::release_contended(lock_entry* e) noexcept {
  HANDOFF_ASSERT(e->own.pending() >= 1);  // the releasing holder is counted
  HANDOFF_ASSERT(!e->open);               // held: not free
  // Before any hand-off: until the next holder names itself, a relock by this thread must
  // not take the key for its own.
  e->holder_thread.store(0, std::memory_order_relaxed);
  std::uint64_t uncounted = 1;  // ours
  while (waiter* w = next_waiter(e, uncounted)) {
    // Eventual fairness passes over a blocked thread that has not waited fair_after yet.
    const bool pass_over = fair_after_ != 0 && w->type == waiter::kind::thread && now() - w->queued_at < fair_after_;
    if (pass_over ? free_for(e, w, uncounted) : hand_over(e, w, uncounted)) return;
    release_waiter(w);  // it gave up: the queue's reference
  }
}

bool lock_table::hand_over(lock_entry* e, waiter* w, std::uint64_t& uncounted) noexcept {
  e->own.uncount(uncounted);                 // w is counted: stays >= 1
  uncounted = 1;                             // w's own, should it turn out to have given up
  const std::uint64_t token = e->token + 1;  // tokens of skipped waiters are burnt: still monotonic
  e->token = token;
  w->token = token;
  if (!try_grant(w)) return false;
  if (w->type != waiter::kind::thread) {
    if (w->timeout.owner != nullptr) {
      lease_timer& t = *timer_;  // started before w was queued with a wait time
      std::lock_guard lock(t.mutex());
      if (t.cancel(&w->timeout)) release_waiter(w);  // the timer's reference
    }
    complete_waiter(w);
  }
  release_waiter(w);  // the holder's (queue's) reference
  return true;
}

bool lock_table::free_for(lock_entry* e, waiter* w, std::uint64_t& uncounted) noexcept {
  lock_shard& s = shard_for(e->hash);
  s.lock.lock();
  const std::uint32_t before = try_wake(w);
  if (before == waiter::cancelled) {
    s.lock.unlock();
    ++uncounted;  // w's own
    return false;
  }
  // One count stays for the free key (a barger's hold, or w's own once it takes the key);
  // w's keeps it counted as a waiter.
  if (uncounted > 1) e->own.uncount(uncounted - 1);
  e->front = w;  // with the queue's reference
  e->open = true;
  // A sleeping w may take the key and free its node as soon as the lock is let go: hold a
  // reference across the futex wake. Relaxed: w's own reference keeps it alive until then.
  if (before == waiter::sleeping) w->refs.fetch_add(1, std::memory_order_relaxed);
  s.lock.unlock();
  if (before == waiter::sleeping) {
    wake_sleeper(w);
    release_waiter(w);
  }
  return true;
}

std::uint32_t lock_table::compete(lock_entry* e, waiter* w, std::int64_t deadline) noexcept {
  lock_shard& s = shard_for(e->hash);
  s.lock.lock();
  if (e->open) {
    // Still free: nobody holds it, so nobody else changes w's state now.
    HANDOFF_ASSERT(e->front == w && w->state.load(std::memory_order_relaxed) == waiter::woken);
    e->open = false;
    e->front = nullptr;
    e->own.uncount(1);  // w's own: the free key's count is now w's hold
    w->token = ++e->token;
    w->state.store(waiter::granted, std::memory_order_relaxed);  // read by this thread only now
    s.lock.unlock();
    release_waiter(w);  // front's (the queue's) reference; ours keeps the node
    return waiter::granted;
  }
  // Taken by a barger: wait behind it, still first (front), unless its holder handed us the
  // key meanwhile (w waited fair_after), which this CAS finds.
  std::uint32_t seen = waiter::woken;
  const bool late = deadline != no_deadline && now() >= deadline;
  const std::uint32_t next = late ? waiter::cancelled : waiter::waiting;
  // acquire on failure: a grant's token and the holder's writes become visible.
  if (!w->state.compare_exchange_strong(seen, next, std::memory_order_acquire)) {
    HANDOFF_ASSERT(seen == waiter::granted);
    s.lock.unlock();
    return waiter::granted;
  }
  s.lock.unlock();
  return next;
}

void lock_table::drop_ref(lock_entry* e) noexcept {
  lock_shard& s = shard_for(e->hash);
  s.lock.lock();
  HANDOFF_ASSERT(e->refs > 0);
  --e->refs;
  lock_entry* dead = e->own.idle() && !e->may_idle ? remove_if_unused(s, e) : nullptr;
  s.lock.unlock();
  if (dead != nullptr) recycle(dead);
}

lock_entry* lock_table::remove_if_unused(lock_shard& s, lock_entry* e) noexcept {
  HANDOFF_ASSERT(e->own.idle());
  HANDOFF_ASSERT(e->front == nullptr && !e->open);  // eventual fairness: nobody woken is left
  HANDOFF_ASSERT(e->own.looks_empty());             // released: every waiter was consumed
  if (e->refs != 0) return nullptr;
  // Freed only without a lease running: an armed lease is a hold (count >= 1) or counted
  // in refs by the expired guard it left behind.
  HANDOFF_ASSERT(e->leased.load(std::memory_order_relaxed) == 0);
  s.token_floor = std::max(s.token_floor, e->token);
  s.erase(e);
  deflate_if_empty(s);
  return e;
}

void lock_table::arm_lease(lock_entry* e, std::uint64_t token, std::int64_t lease) noexcept {
  const std::int64_t deadline = add_saturating(now(), lease);  // no_deadline: a lease that never runs out
  lease_timer& t = *timer_;                                    // started by the request (start_timer)
  std::lock_guard lock(t.mutex());
  HANDOFF_ASSERT(token != 0 && e->leased.load(std::memory_order_relaxed) == 0);  // 0 -> token
  e->lease.owner = e;
  e->lease.is_lease = true;
  e->lease_token = token;
  e->leased.store(token, std::memory_order_relaxed);  // read by the holder and under this mutex
  if (deadline != no_deadline) t.schedule(&e->lease, deadline);
}

bool lock_table::disarm_lease(lock_entry* e, std::uint64_t token) noexcept {
  HANDOFF_ASSERT(token != 0);
  lease_timer& t = *timer_;  // armed before, so the timer exists
  std::lock_guard lock(t.mutex());
  // acq_rel; pairs with the timer's CAS in fire(): exactly one of them releases the key.
  if (!e->leased.compare_exchange_strong(token, 0, std::memory_order_acq_rel)) return false;
  t.cancel(&e->lease);
  return true;
}

bool lock_table::extend_lease(lock_entry* e, std::uint64_t token, std::int64_t lease) {
  const std::int64_t deadline = add_saturating(now(), lease);
  lease_timer& t = *timer_;
  std::lock_guard lock(t.mutex());
  if (e->leased.load(std::memory_order_relaxed) != token) return false;  // under the mutex: exact
  if (deadline == no_deadline) {
    (void)t.cancel(&e->lease);  // never runs out now
  } else {
    t.schedule(&e->lease, deadline);
  }
  return true;
}

}  // namespace handoff::detail
