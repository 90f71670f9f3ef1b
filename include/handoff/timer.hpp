// handoff::timer: the handle of one timer of a handoff::timer_service
// (handoff/timer_service.hpp, which has the overview), its options and its counts.
//
//   handoff::timer t = timers.after(10s, room, [](Room& r) { r.offer_expired(); });
//   t.rearm(10s);   // push the deadline out
//   t.cancel();     // or let the handle go: destroying it cancels
//   t.detach();     // let it run on without a handle
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "handoff/detail/clock.hpp"
#include "handoff/detail/timer_entry.hpp"
#include "handoff/metrics.hpp"

namespace handoff {

struct timer_options {
  // Rounded up to a power of two nanoseconds; lateness is at most one resolution step
  // plus the driver's own delay.
  std::chrono::nanoseconds resolution = std::chrono::milliseconds(1);
  // Where each send's lateness goes (metric_wait::timer_lateness); nullptr: the
  // process-wide sink, if any (handoff/metrics.hpp). Must outlive the service.
  metrics_sink* metrics = nullptr;
};

enum class repeat : unsigned char {
  fixed_rate,   // ticks at start + k * period; a tick whose previous one is pending is skipped
  fixed_delay,  // the next tick is `period` after the previous one finished running
};

// How late the messages were sent: the driving batch's clock reading minus each accepted
// message's deadline (a rearm's or a retry's deadline included). The time a delivery then
// waits in its actor's mailbox is not in it. Quantiles are read from log-linear buckets
// (at most a quarter above the true value, never above max); max is exact.
struct timer_lateness {
  std::uint64_t count = 0;  // messages measured in the window
  std::chrono::nanoseconds p50{0};
  std::chrono::nanoseconds p99{0};
  std::chrono::nanoseconds max{0};
};

// Counts since the service was made (snapshot, under the lock).
struct timer_stats {
  std::uint64_t scheduled = 0;  // timers made
  std::uint64_t sent = 0;       // messages accepted by their actor
  std::uint64_t cancelled = 0;  // cancel() or a handle's destruction that stopped a timer
  std::uint64_t retried = 0;    // sends refused by a full bounded mailbox, retried later
  std::uint64_t skipped = 0;    // fixed-rate ticks not sent: the previous one was pending
  std::uint64_t dropped = 0;    // pending at stop of service: destroyed, never sent
  std::size_t pending = 0;      // timers in the wheel now
  std::size_t bytes = 0;        // what the service holds: wheel and entry pool
  // Since the previous stats() call on this service (each call starts a new window: let
  // one reader look, or the readers split the window between them).
  timer_lateness lateness;
};

// A handle on one timer. Move-only; destroying it cancels the timer (detach() first to
// let it run on). Owner only: one thread at a time uses a handle (any thread). A handle
// keeps the service's internal state alive, so it may outlive the service and the target
// actor (cancel() and rearm() then return false: the service dropped its timers, or the
// actor's destructor cancelled them). A handle may live in the target's own State.
class timer {
 public:
  timer() noexcept = default;
  timer(timer&& o) noexcept : core_(std::exchange(o.core_, nullptr)), entry_(std::exchange(o.entry_, nullptr)) {}
  timer& operator=(timer&& o) noexcept {
    if (this != &o) {
      cancel();
      core_ = std::exchange(o.core_, nullptr);
      entry_ = std::exchange(o.entry_, nullptr);
    }
    return *this;
  }
  timer(const timer&) = delete;
  timer& operator=(const timer&) = delete;
  ~timer() { cancel(); }

  // Stops the timer and empties the handle. True if this call stopped something: a send
  // not yet made, or (actor<State>) a delivery that had not started; false if the
  // one-shot's message already started running, the timer was already over, or the
  // handle is empty. Waits for a send of this timer in progress on another thread (an
  // enqueue: the driver never runs a handler inside it); never waits on this thread, nor
  // for a handler. Never allocates, never throws.
  bool cancel() noexcept {
    if (core_ == nullptr) return false;
    return detail::timer_cancel(std::exchange(core_, nullptr), std::exchange(entry_, nullptr));
  }

  // Moves the next send to now + d (rearm) or to t (rearm_at), also when the one-shot
  // already fired and its delivery has not started (that delivery then does nothing).
  // A periodic timer goes on with its period from there. False, changing nothing, if the
  // timer is over (a one-shot whose message started running, a cancelled one) or the
  // handle is empty. O(1), never allocates, never blocks but on the spin lock of the
  // timer's shard of the service.
  template <class Rep, class Period>
  bool rearm(std::chrono::duration<Rep, Period> d) noexcept {
    if (core_ == nullptr) return false;
    return detail::timer_rearm(core_, entry_, detail::deadline_after(detail::timer_deadline_now(core_), d));
  }
  bool rearm_at(std::chrono::steady_clock::time_point t) noexcept {
    if (core_ == nullptr) return false;
    return detail::timer_rearm(core_, entry_, detail::deadline_at(0, t));  // steady_clock: no read of the clock
  }

  // Whether the timer will still send or run: pending, or a delivery not yet started.
  [[nodiscard]] bool active() const noexcept { return core_ != nullptr && detail::timer_active(core_, entry_); }
  [[nodiscard]] explicit operator bool() const noexcept { return core_ != nullptr; }

  // Lets the timer run on without a handle (it can no longer be cancelled); empties this.
  void detach() noexcept {
    if (core_ != nullptr) detail::timer_detach(std::exchange(core_, nullptr), std::exchange(entry_, nullptr));
  }

 private:
  friend class timer_service;
  timer(detail::timer_core* c, detail::timer_entry* e) noexcept : core_(c), entry_(e) {}
  detail::timer_core* core_ = nullptr;
  detail::timer_entry* entry_ = nullptr;
};

}  // namespace handoff
