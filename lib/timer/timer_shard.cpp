// A shard of a timer service: schedule, cancel, rearm, deliveries, its share of a batch
// and of a close (lib/timer/timer_shard.hpp has the life of an entry; its share of
// forgetting an actor is in registry.cpp, beside the hook).
#include "timer_shard.hpp"

#include <atomic>
#include <mutex>
#include <new>
#include <thread>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "timer_core.hpp"

namespace handoff::detail {

timer_shard::timer_shard(timer_core* core, std::int64_t epoch, unsigned shift, std::int64_t now, bool notify)
    : core_(core), wheel_(epoch, shift), pool_(this), notify_(notify) {
  wheel_.advance(wheel_.tick_at(now));  // empty: nothing comes due; deltas stay small
}

void timer_shard::wake() noexcept { core_->wake(); }
void timer_shard::release_core() noexcept { core_->release(); }

template <bool Moving>
timer_entry* timer_shard::schedule(const timer_request& r) {
  lock_.lock();
  try {
    pool_.reserve_one();  // in the steady state neither allocates
    targets_.reserve_one();
  } catch (...) {
    lock_.unlock();
    throw;
  }
  timer_entry* e = pool_.take();
  if constexpr (Moving) {
    // The payload's move constructor is user code: run it with the lock dropped. The
    // entry is ours alone meanwhile: out of the pool, in no list, no handle.
    lock_.unlock();
    r.emplace(e, r.source);
    lock_.lock();
  }
  // next is set by the link below; in_flight is 0 in a pooled entry (recycle).
  HANDOFF_ASSERT(e->in_flight == 0);
  e->deadline = r.deadline;
  e->period = r.period;
  e->ops = r.ops;
  e->target = r.target;
  e->flags = static_cast<std::uint8_t>(live | handle | payload | r.flags);
  targets_.add(pool_, e);
  if constexpr (!Moving) r.emplace(e, r.source);  // a copy of bytes
  ++stats_.scheduled;
  const bool w = link(e);
  lock_.unlock();
  if (w) wake();
  return e;
}
template timer_entry* timer_shard::schedule<false>(const timer_request& r);
template timer_entry* timer_shard::schedule<true>(const timer_request& r);

bool timer_shard::cancel(timer_entry* e) noexcept {
  lock_.lock();
  // The common case, what tidy() would find in fewer steps: pending, not being sent, no
  // delivery in flight, a payload whose destruction is a no-op. Over here, back in the
  // pool; the pool is not empty after it only if other entries are out, so the core is
  // let go of only if the service is closed (then nothing is pending).
  if ((e->flags & (live | trivial | destroying)) == (live | trivial) && e->where != timer_wheel::nowhere &&
      e->in_flight == 0 && firing_ != e) [[likely]] {
    wheel_.unlink(e);
    ++stats_.cancelled;
    targets_.remove(pool_, e);
    e->flags = 0;  // recycle() bumps the generation: no delivery of it is in flight
    recycle(e);
    lock_.unlock();
    return true;
  }
  return cancel_locked(e);
}

bool timer_shard::cancel_locked(timer_entry* e) noexcept {
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
  unlock_and_maybe_release();
  return stopped;
}

void timer_shard::detach(timer_entry* e) noexcept {
  lock_.lock();
  e->flags &= static_cast<std::uint8_t>(~handle);
  if (tidy(e)) {
    lock_.unlock();
    destroy_unlocked(e);
    return;
  }
  unlock_and_maybe_release();
}

bool timer_shard::rearm(timer_entry* e, std::int64_t deadline) noexcept {
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

bool timer_shard::active(timer_entry* e) noexcept {
  std::lock_guard g(lock_);
  return (e->flags & live) != 0;
}

bool timer_shard::delivery_begin(timer_entry* e, std::uint64_t gen) noexcept {
  std::lock_guard g(lock_);
  if ((e->flags & live) == 0 || e->gen != gen) return false;
  if (kind_of(e) == timer_kind::once) {
    e->flags &= static_cast<std::uint8_t>(~live);  // over once it starts: cancel says false
    ++e->gen;
  }
  return true;
}

void timer_shard::delivery_end(timer_entry* e, bool ran) noexcept {
  lock_.lock();
  HANDOFF_ASSERT(e->in_flight != 0);
  // The next fixed-delay tick. While the entry is still firing (this delivery ran inside
  // the driver's send, or raced it on another thread), the driver links it once the send
  // returns (send_due), as it links a fixed-rate tick: where a firing entry goes next is
  // decided in one place, by the thread that knows the send's outcome.
  if (ran && kind_of(e) == timer_kind::fixed_delay && (e->flags & live) != 0 && e->where == timer_wheel::nowhere &&
      firing_ != e) {
    e->deadline = add_saturating(core_->deadline_now(), e->period);
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
    unlock_and_maybe_release();
  }
}

void timer_shard::destroy_payload(timer_entry* e) noexcept {
  e->ops(core_, e, 0, timer_op::destroy);
  lock_.lock();
  e->flags &= static_cast<std::uint8_t>(~destroying);
  (void)tidy(e);  // recycles it unless a handle still refers to it
}

void timer_shard::destroy_unlocked(timer_entry* e) noexcept {
  destroy_payload(e);
  unlock_and_maybe_release();
}

std::size_t timer_shard::send_due(std::int64_t now, lateness_recorder& lateness, metrics_sink* sink) {
  lock_.lock();
  wheel_.advance(wheel_.tick_at(now));
  firing_thread_ = std::this_thread::get_id();
  std::size_t sent = 0;
  // One entry at a time from the batch list: a cancel made while a send runs unlocked
  // (on another thread, or by a handler that send runs here) unlinks its entry from it.
  while (timer_entry* e = wheel_.pop_batch()) {
    HANDOFF_ASSERT((e->flags & live) != 0);  // cancel unlinks
    const timer_kind kind = kind_of(e);
    if (kind == timer_kind::fixed_rate && e->in_flight != 0) {
      ++stats_.skipped;  // at most one tick pending
    } else {
      const std::uint64_t gen = e->gen;
      if ((e->flags & delivers) != 0) {
        HANDOFF_ASSERT(e->in_flight < timer_entry::max_in_flight);  // see timer_entry::in_flight
        ++e->in_flight;                                             // the delivery ends it, run or destroyed
      }
      const std::int64_t late = now - e->deadline;
      firing_ = e;
      lock_.unlock();
      const bool accepted = e->ops(core_, e, gen, timer_op::send);  // queues a won actor: runs nothing
      if (accepted) report_lateness(sink, late);
      lock_.lock();
      firing_ = nullptr;
      if (!accepted) {
        ++stats_.retried;
        // To the due list: the next run sends it (the deadline is past, so the tick is).
        if ((e->flags & live) != 0 && e->where == timer_wheel::nowhere) wheel_.insert(e);
        if (tidy(e)) {
          lock_.unlock();
          destroy_payload(e);
        }
        continue;
      }
      ++stats_.sent;
      lateness.record(late);
      ++sent;
      if (kind == timer_kind::once && (e->flags & delivers) == 0 && e->gen == gen) {
        e->flags &= static_cast<std::uint8_t>(~live);  // a basic_actor's message: over once sent
        ++e->gen;
      }
    }
    // A fixed-delay tick whose delivery already ended (an idle actor ran it inside the
    // send, or another thread ran it before this lock): its delivery_end saw it firing and
    // left the next tick to us.
    if (kind == timer_kind::fixed_delay && (e->flags & live) != 0 && e->where == timer_wheel::nowhere &&
        e->in_flight == 0) {
      e->deadline = add_saturating(core_->deadline_now(), e->period);
      wheel_.insert(e);
    }
    // Linked again by a rearm made meanwhile: it stays where the rearm put it.
    if (kind == timer_kind::fixed_rate && (e->flags & live) != 0 && e->where == timer_wheel::nowhere) {
      std::int64_t next = add_saturating(e->deadline, e->period);
      if (next <= now) {  // missed ticks are skipped, not sent in a burst
        const std::int64_t missed = (now - next) / e->period + 1;
        stats_.skipped += static_cast<std::uint64_t>(missed);
        next = add_saturating(next, missed * e->period);
      }
      e->deadline = next;
      wheel_.insert(e);
    }
    if (tidy(e)) {
      lock_.unlock();
      destroy_payload(e);  // the caller's pin keeps the core
    }
  }
  firing_thread_ = {};
  unlock_and_maybe_release();  // the caller's pin keeps the core
  return sent;
}

std::uint64_t timer_shard::next_tick() noexcept {
  std::lock_guard g(lock_);
  std::uint64_t t = wheel_.next_tick();
  if (t != ~std::uint64_t{0} && t <= wheel_.now()) t = wheel_.now() + 1;  // a retry: the next tick
  wake_tick_ = t;
  return t;
}

void timer_shard::wake_below(std::uint64_t t) noexcept {
  std::lock_guard g(lock_);
  if (t < wake_tick_) wake_tick_ = t;
}

void timer_shard::set_notify(bool on) noexcept {
  std::lock_guard g(lock_);
  notify_ = on;
}

timer_entry* timer_shard::close() noexcept {
  lock_.lock();
  closed_ = true;
  if (timer_entry* e = firing_; e != nullptr && (e->flags & live) != 0) {
    e->flags &= static_cast<std::uint8_t>(~live);  // the one whose handler runs: not linked again
    ++e->gen;
  }
  timer_entry* all = nullptr;
  wheel_.take_all(all);  // every pending entry, due or not
  timer_entry* to_destroy = nullptr;
  while (timer_entry* e = all) {
    all = e->next;
    e->next = nullptr;
    e->flags &= static_cast<std::uint8_t>(~live);
    ++e->gen;  // its deliveries, if any, do nothing
    ++stats_.dropped;
    if (tidy(e)) {
      e->next = to_destroy;
      to_destroy = e;
    }
  }
  lock_.unlock();
  return to_destroy;
}

void timer_shard::destroy_dropped(timer_entry* list) noexcept {
  while (timer_entry* e = list) {
    list = e->next;
    e->next = nullptr;
    destroy_payload(e);  // locks again; the service's hold keeps the core
    lock_.unlock();
  }
  lock_.lock();
  unlock_and_maybe_release();  // the service's hold keeps the core
}

void timer_shard::add_stats(timer_stats& s) noexcept {
  std::lock_guard g(lock_);
  s.scheduled += stats_.scheduled;
  s.sent += stats_.sent;
  s.cancelled += stats_.cancelled;
  s.retried += stats_.retried;
  s.skipped += stats_.skipped;
  s.dropped += stats_.dropped;
  s.pending += wheel_.size();
  // The entry pool and the table of targets are members: their own heap blocks beside.
  s.bytes += sizeof(timer_shard) + pool_.bytes() + targets_.bytes();
}

void timer_shard::skip_generations(std::uint64_t n) noexcept {
  std::lock_guard g(lock_);
  pool_.for_each_entry([n](timer_entry* e) { e->gen += n; });
}

// --- the calls of handoff/detail/timer_entry.hpp: here, so that each inlines its shard's call ---
timer_entry* timer_schedule(timer_core* c, const timer_request& r) {
  if (timer_shard* s = c->shard_here()) [[likely]]
    return s->schedule<false>(r);
  return c->schedule_first(r, false);  // both tail calls: no register saved on the way
}
timer_entry* timer_schedule_moving(timer_core* c, const timer_request& r) {
  if (timer_shard* s = c->shard_here()) [[likely]]
    return s->schedule<true>(r);
  return c->schedule_first(r, true);
}
bool timer_cancel(timer_core*, timer_entry* e) noexcept { return timer_shard::of(e)->cancel(e); }
bool timer_rearm(timer_core*, timer_entry* e, std::int64_t deadline) noexcept {
  return timer_shard::of(e)->rearm(e, deadline);
}
bool timer_active(timer_core*, timer_entry* e) noexcept { return timer_shard::of(e)->active(e); }
void timer_detach(timer_core*, timer_entry* e) noexcept { timer_shard::of(e)->detach(e); }
bool timer_delivery_begin(timer_core*, timer_entry* e, std::uint64_t gen) noexcept {
  return timer_shard::of(e)->delivery_begin(e, gen);
}
void timer_delivery_end(timer_core*, timer_entry* e, bool ran) noexcept { timer_shard::of(e)->delivery_end(e, ran); }

}  // namespace handoff::detail
