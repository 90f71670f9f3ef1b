// The timer service's entries: schedule, cancel, rearm, deliveries, the pool
// (lib/timer/timer_core.hpp has the life of an entry).
#include "timer_core.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <thread>

#include "deadline_clock.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/test_driver.hpp"

namespace handoff::detail {

timer_core::timer_core(std::int64_t resolution_ns, test_driver* driver, metrics_sink* metrics)
    : wheel_([&] { return driver != nullptr ? driver->now() : now_ns(); }(),
             [&] {
               unsigned shift = 0;
               while (shift < 40 && (std::int64_t{1} << shift) < resolution_ns) ++shift;
               return shift;
             }()),
      lateness_(metrics), driver_(driver) {
  if (driver == nullptr) deadline_clock_start();
}

std::int64_t timer_core::now() const noexcept { return driver_ != nullptr ? driver_->now() : now_ns(); }

std::int64_t timer_core::deadline_now() const noexcept {
  return driver_ != nullptr ? driver_->now() : detail::deadline_now();
}

timer_entry* timer_core::schedule(const timer_request& r) {
  lock_.lock();
  try {
    pool_.reserve_one();  // in the steady state neither allocates
    targets_.reserve_one();
  } catch (...) {
    lock_.unlock();
    throw;
  }
  timer_entry* e = pool_.take();
  // next is set by the link below; in_flight is 0 in a pooled entry (recycle).
  HANDOFF_ASSERT(e->in_flight == 0);
  e->deadline = r.deadline;
  e->period = r.period;
  e->ops = r.ops;
  e->target = r.target;
  e->flags = static_cast<std::uint8_t>(live | handle | payload | r.flags);
  targets_.add(pool_, e);
  r.emplace(e, r.source);
  ++stats_.scheduled;
  const bool w = link(e);
  lock_.unlock();
  if (w) wake();
  return e;
}

bool timer_core::cancel(timer_entry* e) noexcept {
  lock_.lock();
  // The common case, what tidy() would find in fewer steps: pending, not being sent, no
  // delivery in flight, a payload whose destruction is a no-op. Over here, back in the pool.
  if ((e->flags & (live | trivial | destroying)) == (live | trivial) && e->where != timer_wheel::nowhere &&
      e->in_flight == 0 && firing_ != e) [[likely]] {
    wheel_.unlink(e);
    ++stats_.cancelled;
    targets_.remove(pool_, e);
    e->flags = 0;  // recycle() bumps the generation: no delivery of it is in flight
    recycle(e);
    unlock_and_maybe_delete();
    return true;
  }
  return cancel_locked(e);
}

bool timer_core::cancel_locked(timer_entry* e) noexcept {
  bool stopped = false;
  if ((e->flags & live) != 0) {
    stopped = true;
    e->flags &= static_cast<std::uint8_t>(~live);
    ++e->gen;  // a delivery not yet started does nothing
    wheel_.unlink(e);
    ++stats_.cancelled;
  }
  // A send of it on another thread may still be touching the target: wait it out. On
  // this thread (a handler run inline by that send) it is below us on the stack.
  while (firing_ == e && firing_thread_ != std::this_thread::get_id()) {
    lock_.unlock();
    std::this_thread::yield();
    lock_.lock();
  }
  e->flags &= static_cast<std::uint8_t>(~handle);
  if (tidy(e)) {
    lock_.unlock();
    destroy_unlocked(e);
    return stopped;
  }
  unlock_and_maybe_delete();
  return stopped;
}

void timer_core::detach(timer_entry* e) noexcept {
  lock_.lock();
  e->flags &= static_cast<std::uint8_t>(~handle);
  if (tidy(e)) {
    lock_.unlock();
    destroy_unlocked(e);
    return;
  }
  unlock_and_maybe_delete();
}

bool timer_core::rearm(timer_entry* e, std::int64_t deadline) noexcept {
  lock_.lock();
  if ((e->flags & live) == 0) {
    lock_.unlock();
    return false;
  }
  ++e->gen;                  // a delivery of the old deadline not yet started does nothing
  wheel_.move(e, deadline);  // also while firing: the driver then leaves it where it is
  const bool w = wake_for(e);
  lock_.unlock();
  if (w) wake();
  return true;
}

bool timer_core::active(timer_entry* e) noexcept {
  std::lock_guard g(lock_);
  return (e->flags & live) != 0;
}

bool timer_core::delivery_begin(timer_entry* e, std::uint64_t gen) noexcept {
  std::lock_guard g(lock_);
  if ((e->flags & live) == 0 || e->gen != gen) return false;
  if (kind_of(e) == timer_kind::once) {
    e->flags &= static_cast<std::uint8_t>(~live);  // over once it starts: cancel says false
    ++e->gen;
  }
  return true;
}

void timer_core::delivery_end(timer_entry* e, bool ran) noexcept {
  lock_.lock();
  HANDOFF_ASSERT(e->in_flight != 0);
  // The next fixed-delay tick. While the entry is still firing (this delivery ran inside
  // the driver's send, or raced it on another thread), the driver links it once the send
  // returns (run_due), as it links a fixed-rate tick: where a firing entry goes next is
  // decided in one place, by the thread that knows the send's outcome.
  if (ran && kind_of(e) == timer_kind::fixed_delay && (e->flags & live) != 0 && e->where == timer_wheel::nowhere &&
      firing_ != e) {
    e->deadline = add_saturating(deadline_now(), e->period);
    if (link(e)) {
      // Wake the driver unlocked, still counted in flight: the core cannot go meanwhile.
      lock_.unlock();
      wake();
      lock_.lock();
    }
  }
  --e->in_flight;
  if (tidy(e)) {
    lock_.unlock();
    destroy_unlocked(e);
  } else {
    unlock_and_maybe_delete();
  }
}

void timer_core::destroy_payload(timer_entry* e) noexcept {
  e->ops(this, e, 0, timer_op::destroy);
  lock_.lock();
  e->flags &= static_cast<std::uint8_t>(~destroying);
  (void)tidy(e);  // recycles it unless a handle still refers to it
}

void timer_core::destroy_unlocked(timer_entry* e) noexcept {
  destroy_payload(e);
  unlock_and_maybe_delete();
}

timer_stats timer_core::stats() noexcept {
  std::lock_guard g(lock_);
  timer_stats s = stats_;
  s.pending = wheel_.size();
  s.lateness = lateness_.take();
  // The entry pool and the table of targets are members: their own heap blocks beside.
  s.bytes = sizeof(timer_core) + pool_.bytes() + targets_.bytes();
  return s;
}

void timer_core::skip_generations(std::uint64_t n) noexcept {
  std::lock_guard g(lock_);
  pool_.for_each_entry([n](timer_entry* e) { e->gen += n; });
}

namespace {
std::atomic<std::uint64_t> forget_visits{0};  // relaxed: a count read by tests only
}  // namespace

std::uint64_t entries_visited_by_forget() noexcept { return forget_visits.load(std::memory_order_relaxed); }

bool timer_core::pin_if_targets(const void* actor) noexcept {
  std::lock_guard g(lock_);
  target_table::slot* s = targets_.find(actor);
  if (s == nullptr || s->forgotten != 0) return false;
  s->forgotten = 1;
  ++pins_;
  return true;
}

void timer_core::forget(const void* actor) noexcept {
  lock_.lock();
  // The actor's list: its entries not over. Cancelling them leaves them in it.
  if (const target_table::slot* s = targets_.find(actor)) {
    for (std::uint32_t i = s->head; i != target_table::none;) {
      timer_entry* e = pool_.at(i);
      i = e->target_next;
      forget_visits.fetch_add(1, std::memory_order_relaxed);
      if ((e->flags & live) == 0) continue;
      e->flags &= static_cast<std::uint8_t>(~live);
      ++e->gen;  // a delivery queued in the actor's mailbox does nothing
      wheel_.unlink(e);
      ++stats_.cancelled;
    }
  }
  // A send of one of them on another thread may still be touching the actor: wait it out.
  while (firing_ != nullptr && firing_->target == actor && firing_thread_ != std::this_thread::get_id()) {
    lock_.unlock();
    std::this_thread::yield();
    lock_.lock();
  }
  // Finish what is over; tidy() takes each out of the list, so the next is read first. The
  // list is looked up again: it may have changed while the lock was dropped.
  timer_entry* to_destroy = nullptr;  // through next: tidy left them unlinked and unpooled
  if (const target_table::slot* s = targets_.find(actor)) {
    for (std::uint32_t i = s->head; i != target_table::none;) {
      timer_entry* e = pool_.at(i);
      i = e->target_next;
      forget_visits.fetch_add(1, std::memory_order_relaxed);
      if (tidy(e)) {
        e->next = to_destroy;
        to_destroy = e;
      }
    }
  }
  while (timer_entry* e = to_destroy) {
    to_destroy = e->next;
    e->next = nullptr;
    lock_.unlock();
    destroy_payload(e);  // locks again; pinned, the core stays (it deletes nothing)
  }
  HANDOFF_ASSERT(pins_ != 0);
  --pins_;
  unlock_and_maybe_delete();
}

// --- the calls of handoff/detail/timer_entry.hpp ---
timer_entry* timer_schedule(timer_core* c, const timer_request& r) { return c->schedule(r); }
bool timer_cancel(timer_core* c, timer_entry* e) noexcept { return c->cancel(e); }
bool timer_rearm(timer_core* c, timer_entry* e, std::int64_t deadline) noexcept { return c->rearm(e, deadline); }
bool timer_active(timer_core* c, timer_entry* e) noexcept { return c->active(e); }
void timer_detach(timer_core* c, timer_entry* e) noexcept { c->detach(e); }
std::int64_t timer_deadline_now(const timer_core* c) noexcept { return c->deadline_now(); }
bool timer_delivery_begin(timer_core* c, timer_entry* e, std::uint64_t gen) noexcept {
  return c->delivery_begin(e, gen);
}
void timer_delivery_end(timer_core* c, timer_entry* e, bool ran) noexcept { c->delivery_end(e, ran); }

}  // namespace handoff::detail
