// timer_callback (lib/timer/timer_callback.hpp).
#include "timer_callback.hpp"

#include "handoff/detail/clock.hpp"
#include "handoff/timer_service.hpp"

namespace handoff::detail {

timer_callback::timer_callback(timer_service& s, fn on_due, fn on_dropped, void* arg)
    : on_due_(on_due), on_dropped_(on_dropped), arg_(arg), core_(s.core_) {
  // fixed_rate with a period of "never": a tick leaves it live, pending at no_deadline,
  // unless arm() moved it meanwhile. Not trivial: the service's close reaches ops(destroy).
  const timer_request r{no_deadline,
                        no_deadline,
                        timer_flag::of(timer_kind::fixed_rate, false, false),
                        &timer_callback::ops,
                        this,
                        [](timer_entry*, void*) noexcept {},  // no payload: the state is here
                        nullptr};
  entry_ = timer_schedule(core_, r);
}

timer_callback::~timer_callback() {
  cancelling_.store(true, std::memory_order_relaxed);  // ordered by the cancel's lock (see the member)
  (void)timer_cancel(core_, entry_);
}

void timer_callback::arm(std::int64_t deadline) noexcept { (void)timer_rearm(core_, entry_, deadline); }

bool timer_callback::ops(timer_core*, timer_entry* e, std::uint64_t, timer_op op) noexcept {
  auto* self = static_cast<timer_callback*>(e->target);
  if (op == timer_op::send) {
    self->on_due_(self->arg_);
  } else if (!self->cancelling_.load(std::memory_order_relaxed)) {
    self->on_dropped_(self->arg_);
  }
  return true;
}

}  // namespace handoff::detail
