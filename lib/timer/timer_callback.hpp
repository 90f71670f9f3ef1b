// timer_callback: one entry of a timer_service that calls a function of the library
// instead of sending to an actor (the keyed mutex's deadlines, lib/keyed/lease_timer.hpp).
// Private to lib/.
//
// The entry stays live from construction to destruction and is moved by arm(): a
// periodic entry whose period never comes round, so that firing leaves it live and only
// arm() decides its next deadline. on_due(arg) runs where the service sends (its thread,
// a batch on its executor, a run_due() caller), one call at a time, with no lock of the
// service held; it must run no user code. If the service is destroyed while the entry
// lives, on_dropped(arg) runs inside the service's destructor (the owner terminates: its
// deadlines would never fire).
#pragma once

#include <atomic>
#include <cstdint>

#include "handoff/detail/timer_entry.hpp"

namespace handoff {
class timer_service;
}

namespace handoff::detail {

class timer_callback {
 public:
  using fn = void (*)(void* arg) noexcept;
  // Pending at "never". Throws std::bad_alloc (see timer_service::after).
  timer_callback(timer_service& s, fn on_due, fn on_dropped, void* arg);
  // Cancels: a call of on_due in progress on another thread is waited for, so none runs
  // after this returns. Not from inside on_due.
  ~timer_callback();
  timer_callback(const timer_callback&) = delete;
  timer_callback& operator=(const timer_callback&) = delete;
  timer_callback(timer_callback&&) = delete;
  timer_callback& operator=(timer_callback&&) = delete;

  // Thread-safe, also from inside on_due. The next call at `deadline` (steady_clock ns,
  // the service's clock; no_deadline: never), replacing the one pending.
  void arm(std::int64_t deadline) noexcept;

 private:
  static bool ops(timer_core* c, timer_entry* e, std::uint64_t gen, timer_op op) noexcept;

  fn on_due_;
  fn on_dropped_;
  void* arg_;
  // Set before our own cancel: a payload destroyed without it was dropped by the service.
  // The cancel's lock orders it before the destroy op, whichever thread runs that.
  std::atomic<bool> cancelling_{false};
  timer_core* core_;
  timer_entry* entry_ = nullptr;
};

}  // namespace handoff::detail
