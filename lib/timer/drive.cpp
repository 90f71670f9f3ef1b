// Driving a timer service: run_due, its thread, the test scheduler's time events, and
// handoff::timer_service's out-of-line members (lib/timer/timer_core.hpp has the design).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <semaphore>
#include <stdexcept>
#include <thread>

#include "driver_interface.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/timer_service.hpp"
#include "timer_core.hpp"

namespace handoff::detail {

bool timer_core::driving_here() noexcept {
  std::lock_guard g(lock_);
  return firing_thread_ == std::this_thread::get_id();
}

std::size_t timer_core::run_due(std::int64_t now) {
  lock_.lock();
  ++pins_;  // a handler may destroy the service (close): the core stays until we return
  lock_.unlock();
  const std::size_t sent = run_due_pinned(now);
  lock_.lock();
  HANDOFF_ASSERT(pins_ != 0);
  --pins_;
  unlock_and_maybe_delete();
  return sent;
}

std::size_t timer_core::run_due_pinned(std::int64_t now) {
  const bool drain = driver_ == nullptr && tls.top == nullptr;
  const std::size_t sent = send_due(now);
  if (drain) run_queued();  // the actors its sends won
  return sent;
}

std::size_t timer_core::send_due(std::int64_t now) {
  // The drive mutex is ours below on this stack: a nested run would deadlock on it, and
  // two runs would share firing_.
  if (driving_here()) throw std::logic_error("handoff::timer_service::run_due: called from a handler it runs");
  std::unique_lock driving(drive_mutex_);
  // A send that wins an idle actor queues it on this thread's run queue, as inside a
  // handler, instead of draining it here: firing_ covers the enqueue only, so a cancel
  // never waits for a handler and the rest of the batch goes out first. The caller runs
  // the queue once the batch is over (under a test scheduler its sends are events
  // already).
  drain_frame sentinel{nullptr, 0, tls.top};
  const bool framed = driver_ == nullptr && tls.top == nullptr;
  if (framed) tls.top = &sentinel;
  metrics_sink* const sink = lateness_.sink();
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
      const bool accepted = e->ops(this, e, gen, timer_op::send);  // queues a won actor: runs nothing
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
      lateness_.record(late);
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
      e->deadline = add_saturating(deadline_now(), e->period);
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
      destroy_payload(e);  // pinned: the core stays
    }
  }
  firing_thread_ = {};
  lock_.unlock();
  if (framed) tls.top = nullptr;
  return sent;  // the drive mutex goes before the caller's pin: it is not destroyed while held
}

std::int64_t timer_core::next_deadline() noexcept {
  std::lock_guard g(lock_);
  std::uint64_t t = wheel_.next_tick();
  if (t != ~std::uint64_t{0} && t <= wheel_.now()) t = wheel_.now() + 1;  // a retry: the next tick
  wake_tick_ = t;
  return t == ~std::uint64_t{0} ? no_deadline : wheel_.time_of(t);
}

void timer_core::set_wakeup(work w) noexcept {
  std::lock_guard g(lock_);
  wakeup_ = w;
  notify_ = threaded_ || wakeup_.fn != nullptr;
}

void timer_core::wake() noexcept {
  {
    std::lock_guard g(m_);
    notified_ = true;
  }
  cv_.notify_all();  // a thread stopped from a handler may still wait here beside the new one
  if (wakeup_.fn != nullptr) wakeup_();
}

void timer_core::start(executor_ref ex) {
  if (driver_ != nullptr) return;  // the scheduler's time events drive it
  if (thread_.joinable()) throw std::logic_error("handoff::timer_service: already started");
  {
    std::lock_guard g(lock_);
    threaded_ = true;
    notify_ = true;
    ++pins_;  // the thread's: it may outlive the service (stopped from a handler it runs)
  }
  try {
    // Under m_, which the thread takes first: thread_ is set before a handler it runs
    // can call stop().
    std::lock_guard g(m_);
    stop_ = false;
    const std::uint64_t epoch = ++epoch_;
    thread_ = std::thread([this, epoch, ex] { run_thread(epoch, ex); });
  } catch (...) {
    lock_.lock();
    --pins_;
    threaded_ = false;
    notify_ = wakeup_.fn != nullptr;
    lock_.unlock();
    throw;
  }
}

void timer_core::stop() noexcept {
  {
    std::lock_guard g(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) {
    // From a handler the service runs (on its thread, or in a batch the thread waits for)
    // the thread cannot be joined: it ends after this batch on its own, its pin keeping
    // the core.
    if (thread_.get_id() == std::this_thread::get_id() || driving_here()) {
      thread_.detach();
    } else {
      thread_.join();
    }
  }
  std::lock_guard g(lock_);
  threaded_ = false;
  notify_ = wakeup_.fn != nullptr;
}

void timer_core::send_batch(std::int64_t now, executor_ref ex) {
  if (!ex) {
    (void)run_due_pinned(now);  // the thread's pin keeps the core
    return;
  }
  struct batch {
    timer_core* core;
    std::int64_t now;
    std::binary_semaphore done{0};  // per batch: a thread stopped earlier may still wait for its own
  } b{this, now};
  try {
    ex.execute(work{[](void* p) noexcept {
                      auto* x = static_cast<batch*>(p);
                      const bool top_level = tls.top == nullptr;
                      try {
                        (void)x->core->send_due(x->now);  // the waiting thread's pin keeps the core
                      } catch (...) {                     // only bad_alloc of the pool: retried next time
                      }
                      x->done.release();  // x is gone from here: the service's thread goes on
                      // The actors the batch won drain here, while the service's thread
                      // waits for the next deadline.
                      if (top_level) run_queued();
                    },
                    &b});
  } catch (...) {
    (void)run_due_pinned(now);  // the executor refused: send from here
    return;
  }
  b.done.acquire();  // b lives on this stack until the job is done
}

void timer_core::run_thread(std::uint64_t epoch, executor_ref ex) noexcept {
  drive_until_stopped(epoch, ex);
  lock_.lock();  // the thread's pin, taken by start()
  HANDOFF_ASSERT(pins_ != 0);
  --pins_;
  unlock_and_maybe_delete();
}

void timer_core::drive_until_stopped(std::uint64_t epoch, executor_ref ex) noexcept {
  // Stopped: by stop_, or by a start() since, whose thread took over (epoch_).
  auto stopped = [&] { return stop_ || epoch_ != epoch; };
  for (;;) {
    {
      std::lock_guard g(m_);
      if (stopped()) return;
      notified_ = false;
    }
    try {
      send_batch(now(), ex);
    } catch (...) {  // nothing sends a batch that throws; keep the thread alive
    }
    const std::int64_t next = next_deadline();  // the spin lock is never taken under m_
    std::unique_lock g(m_);
    if (stopped()) return;
    if (notified_) continue;
    if (next == no_deadline) {
      cv_.wait(g, [&] { return stopped() || notified_; });
    } else {
      const std::chrono::steady_clock::time_point at{std::chrono::nanoseconds(next)};
      cv_.wait_until(g, at, [&] { return stopped() || notified_; });
    }
  }
}

void timer_core::close() noexcept {
  unregister_core(this);  // a hook that pinned it already goes on: gone() waits for it
  stop();
  if (driver_ != nullptr) timers_detach(*driver_, this);
  // From a handler the service runs, that run_due holds the drive mutex below us on this
  // stack and pins the core: drop everything now, and it finds nothing more to send.
  std::unique_lock driving(drive_mutex_, std::defer_lock);
  if (!driving_here()) driving.lock();
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
  if (driving.owns_lock()) driving.unlock();
  while (timer_entry* e = to_destroy) {
    to_destroy = e->next;
    e->next = nullptr;
    e->ops(this, e, 0, timer_op::destroy);
    lock_.lock();
    e->flags &= static_cast<std::uint8_t>(~destroying);
    (void)tidy(e);
    lock_.unlock();
  }
  lock_.lock();
  unlock_and_maybe_delete();
}

// --- the test scheduler's side ---
std::int64_t timers_next_deadline(timer_core* c) noexcept { return c->next_deadline(); }
void timers_run_due(timer_core* c, std::int64_t now) { (void)c->run_due(now); }

}  // namespace handoff::detail

namespace handoff {

namespace {
detail::timer_core* make_core(const timer_options& o) {
  detail::test_driver* d = detail::tls.driver;
  auto* c = new detail::timer_core(std::max<std::int64_t>(1, o.resolution.count()), d, o.metrics);
  try {
    detail::register_core(c);
  } catch (...) {
    delete c;
    throw;
  }
  if (d != nullptr) {
    try {
      detail::timers_attach(*d, c);
    } catch (...) {
      c->close();  // deletes it
      throw;
    }
  }
  return c;
}
}  // namespace

timer_service::timer_service(timer_options o) : core_(make_core(o)) {}
timer_service::~timer_service() { core_->close(); }
void timer_service::start() { core_->start({}); }
void timer_service::start(executor_ref ex) {
  if (!ex) throw std::invalid_argument("handoff::timer_service::start: an empty executor");
  core_->start(ex);
}
void timer_service::stop() noexcept { core_->stop(); }
std::size_t timer_service::run_due() { return core_->run_due(core_->now()); }
std::size_t timer_service::run_due(std::chrono::steady_clock::time_point now) {
  return core_->run_due(detail::deadline_at(core_->now(), now));
}
std::chrono::steady_clock::time_point timer_service::next_deadline() const {
  const std::int64_t t = core_->next_deadline();
  if (t == detail::no_deadline) return std::chrono::steady_clock::time_point::max();
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(t));
}
void timer_service::set_wakeup(work w) noexcept { core_->set_wakeup(w); }
std::chrono::steady_clock::time_point timer_service::now() const noexcept {
  return std::chrono::steady_clock::time_point(std::chrono::nanoseconds(core_->now()));
}
timer_stats timer_service::stats() const { return core_->stats(); }

}  // namespace handoff
