// Driving a timer service: run_due, its thread, the test scheduler's time events, and
// handoff::timer_service's out-of-line members (lib/timer/timer_core.hpp has the design).
#include <algorithm>
#include <array>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "driver_interface.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/message.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/timer_service.hpp"
#include "timer_core.hpp"

namespace handoff::detail {

std::size_t timer_core::run_due(std::int64_t now) {
  pin();  // a handler may destroy the service (close): the core stays until we return
  std::size_t sent = 0;
  try {
    sent = run_due_pinned(now);
  } catch (...) {
    release();
    throw;
  }
  release();
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
  // two runs would share the shards' firing entries.
  if (driving_here()) throw std::logic_error("handoff::timer_service::run_due: called from a handler it runs");
  std::unique_lock driving(drive_mutex_);
  // A send that wins an idle actor queues it on this thread's run queue, as inside a
  // handler, instead of draining it here: a shard's firing entry covers the enqueue only,
  // so a cancel never waits for a handler and the rest of the batch goes out first. The
  // caller runs the queue once the batch is over (under a test scheduler its sends are
  // events already).
  drain_frame sentinel{nullptr, 0, tls.top};
  const bool framed = driver_ == nullptr && tls.top == nullptr;
  if (framed) tls.top = &sentinel;
  driving_thread_.store(std::this_thread::get_id(), std::memory_order_relaxed);  // see driving_here
  std::size_t sent = 0;
  metrics_sink* const sink = lateness_.sink();
  try {
    for_each_shard([&](timer_shard& s) { sent += s.send_due(now, lateness_, sink); });
  } catch (...) {
    driving_thread_.store({}, std::memory_order_relaxed);
    if (framed) tls.top = nullptr;
    throw;
  }
  driving_thread_.store({}, std::memory_order_relaxed);
  if (framed) tls.top = nullptr;
  return sent;  // the drive mutex goes before the caller's pin: it is not destroyed while held
}

std::int64_t timer_core::next_deadline() noexcept {
  // Each shard wakes the driver for a tick before its own earliest from its next_tick on,
  // then before the earliest of all: a schedule meanwhile wakes it at worst needlessly.
  std::uint64_t t = ~std::uint64_t{0};
  timer_shard* any = nullptr;
  for_each_shard([&](timer_shard& s) {
    t = std::min(t, s.next_tick());
    any = &s;
  });
  if (any == nullptr || t == ~std::uint64_t{0}) return no_deadline;
  for_each_shard([&](timer_shard& s) { s.wake_below(t); });
  return any->time_of(t);  // every shard's wheel has the core's epoch and resolution
}

void timer_core::notify_shards() noexcept {
  const bool on = threaded_ || wakeup_.fn != nullptr;
  for_each_shard([&](timer_shard& s) { s.set_notify(on); });
}

void timer_core::set_wakeup(work w) noexcept {
  std::lock_guard g(config_m_);
  wakeup_ = w;
  notify_shards();
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
    std::lock_guard g(config_m_);
    threaded_ = true;
    notify_shards();
  }
  pin();  // the thread's: it may outlive the service (stopped from a handler it runs)
  try {
    // Under m_, which the thread takes first: thread_ is set before a handler it runs
    // can call stop().
    std::lock_guard g(m_);
    stop_ = false;
    const std::uint64_t epoch = ++thread_epoch_;
    thread_ = std::thread([this, epoch, ex] { run_thread(epoch, ex); });
  } catch (...) {
    {
      std::lock_guard g(config_m_);
      threaded_ = false;
      notify_shards();
    }
    release();  // the service's hold is still there
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
  std::lock_guard g(config_m_);
  threaded_ = false;
  notify_shards();
}

namespace {
// Where the service's thread marks its carry slot taken while it sends a batch for an
// executor: never an actor's address.
constinit runnable carry_held{};

// The job of a batch sent for an executor: runs the actors the batch won (take_queue()
// of the service's thread), on the worker, or after the work running on this thread.
void run_won(void* list) noexcept {
  adopt_queue(reinterpret_cast<std::uintptr_t>(list));
  if (tls.top == nullptr) run_queued();
}
}  // namespace

void timer_core::send_batch(std::int64_t now, executor_ref ex) {
  if (!ex) {
    (void)run_due_pinned(now);  // the thread's pin keeps the core
    return;
  }
  // The batch is sent here (a send only enqueues), and the actors it won go to the
  // executor as one job: this thread never waits for a worker, so one that starts a long
  // handler, or a core that handler holds, delays no later batch. The carry slot is held
  // meanwhile, so that each won actor's message is in its mailbox and the queue can move.
  HANDOFF_ASSERT(carried.actor == nullptr && tls.top == nullptr);
  carried.actor = &carry_held;
  try {
    (void)send_due(now);
  } catch (...) {
    carried.actor = nullptr;
    throw;
  }
  carried.actor = nullptr;
  const std::uintptr_t won = take_queue();
  if (won == 0) return;
  try {
    ex.execute(work{&run_won, reinterpret_cast<void*>(won)});  // NOLINT(performance-no-int-to-ptr): a tagged list
  } catch (...) {
    adopt_queue(won);  // the executor refused: they run here
    run_queued();
  }
}

void timer_core::run_thread(std::uint64_t epoch, executor_ref ex) noexcept {
#if defined(__linux__)
  // The kernel may end a timed wait up to the thread's timer slack late (the default adds
  // it to every wake-up), and each batch is as late as the wake-up: this thread wakes only
  // when something is due, so it asks to be woken on time.
  (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
#endif
  drive_until_stopped(epoch, ex);
  release();  // the thread's pin, taken by start()
}

void timer_core::drive_until_stopped(std::uint64_t epoch, executor_ref ex) noexcept {
  // Stopped: by stop_, or by a start() since, whose thread took over (epoch_).
  auto stopped = [&] { return stop_ || thread_epoch_ != epoch; };
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
  // Registered until nothing is pending: an actor destroyed meanwhile (on another thread,
  // while the service's thread still sends) is forgotten here like anywhere else.
  stop();
  if (driver_ != nullptr) timers_detach(*driver_, this);
  // From a handler the service runs, that run_due holds the drive mutex below us on this
  // stack and pins the core: drop everything now, and it finds nothing more to send.
  std::unique_lock driving(drive_mutex_, std::defer_lock);
  if (!driving_here()) driving.lock();
  std::array<timer_entry*, max_shards> dropped{};
  for (unsigned i = 0; i < max_shards; ++i) {
    if (timer_shard* s = shards_[i].load(std::memory_order_acquire)) dropped[i] = s->close();
  }
  if (driving.owns_lock()) driving.unlock();
  for (unsigned i = 0; i < max_shards; ++i) {
    if (timer_shard* s = shards_[i].load(std::memory_order_acquire)) s->destroy_dropped(dropped[i]);
  }
  unregister_core(this);  // a hook that pinned it goes on: its pin keeps the core
  release();              // the service's hold
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
