// The keyed mutex under a test scheduler (handoff/testing.hpp, detail/test_driver.hpp): a
// table made under one runs on its virtual clock, makes every request a scheduling point,
// waits through it, and keeps its queued async requests so that its destructor can give up
// the ones never granted. Nothing here runs without a scheduler.
#include <exception>
#include <mutex>
#include <string>

#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/test_driver.hpp"
#include "lease_timer.hpp"
#include "lock_parking.hpp"

namespace handoff::detail {

void lock_table::schedule_point(lock_shard& s, const lock_entry* e) {
  std::string what;
  try {
    what = "lock " + describe(e);  // while s is locked: e may go once it is not
  } catch (...) {
    s.lock.unlock();
    throw;
  }
  s.lock.unlock();
  driver_->yield(what);
}

std::uint32_t lock_table::wait_driven(lock_entry* e, waiter* w, std::int64_t deadline) {
  auto ready = [](const void* p) noexcept {
    // acquire; pairs with try_grant (the token, the last holder's writes).
    const std::uint32_t s = static_cast<const waiter*>(p)->state.load(std::memory_order_acquire);
    return s == waiter::granted || s == waiter::woken;
  };
  bool ready_now = false;
  try {
    ready_now = driver_->block_until(ready, w, deadline, "lock " + describe(e), true);
  } catch (...) {
    // The run failed (a deadlock, a failed check): give the request up and let the failure
    // go on. Granted meanwhile, the key is handed on first.
    std::uint32_t s = w->state.load(std::memory_order_acquire);
    if (s == waiter::waiting && cancel_wait(w, waiter::waiting)) {
      release_waiter(w);
      note_timeout();
      throw;
    }
    s = w->state.load(std::memory_order_acquire);
    if (s == waiter::woken) s = compete(e, w, 0);  // past its deadline: takes the key only if free
    release_waiter(w);
    if (s == waiter::granted) release(e);
    throw;
  }
  if (ready_now || !cancel_wait(w, waiter::waiting)) return w->state.load(std::memory_order_acquire);
  return waiter::cancelled;  // the deadline passed first
}

void lock_table::keep_driven(waiter* w) noexcept {
  w->refs.fetch_add(1, std::memory_order_relaxed);  // ours, until abandon_driven
  try {
    driven_waiters_.push_back(w);
  } catch (...) {
    release_waiter(w);  // out of memory: this one is simply not watched
  }
}

void lock_table::abandon_driven() noexcept {
  std::string never_granted;
  for (waiter* w : driven_waiters_) {
    if (w->state.load(std::memory_order_acquire) != waiter::waiting || !cancel_wait(w, waiter::waiting)) continue;
    never_granted += (never_granted.empty() ? "" : ", ") + describe(w->entry);
    if (w->timeout.owner != nullptr) {
      lease_timer& t = *timer_;  // started before w was queued with a wait time
      std::lock_guard lock(t.mutex());
      if (t.cancel(&w->timeout)) release_waiter(w);  // the timer's reference
    }
    complete_waiter(w);  // resumed without the key, as after a timeout; the holder skips it
  }
  if (!never_granted.empty()) {
    driver_->fail("deadlock: async lock requests never granted (keys " + never_granted +
                  ") when the keyed_mutex was destroyed");
    driver_->settle();  // runs what they resume, which lets go of what they held
  }
  for (waiter* w : driven_waiters_) release_waiter(w);
  driven_waiters_.clear();
}

std::string lock_table::describe(const lock_entry* e) const { return describe_ != nullptr ? describe_(e) : "(key)"; }

std::int64_t lock_table::next_deadline() noexcept {
  lease_timer* t = timer_if_started();
  return t != nullptr ? t->next_deadline() : no_deadline;
}

}  // namespace handoff::detail
