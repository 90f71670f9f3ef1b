// The drain loop and the destructor protocol (see detail/actor_base.hpp).
#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/actor_turn.hpp"

#include <chrono>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <system_error>

#include "../runtime/thread_exit.hpp"
#include "handoff/detail/actor_destroy_hook.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/test_driver.hpp"

namespace handoff::detail {

HANDOFF_TLS_MODEL constinit thread_local carry_slot carried{};

namespace {

// An owner that finds the mailbox empty with messages still counted waits for a sender
// that is between its fetch_add and its push: a few instructions, unless that sender was
// preempted. Spin briefly, then yield; with an executor, hand off instead of yielding on.
// 16 yields (a few microseconds on the machines measured; docs/design.md, "The hand-off
// protocol"): longer than a sender's window by far, short against an executor's hand-off
// latency.
constexpr unsigned yields_before_hand_off = 16;
constexpr unsigned spins_before_hand_off = spins_before_yield + yields_before_hand_off;

// An offering owner looks for a successor once per this many messages: a successor waits
// at most this many handlers, and the owner's drain loop keeps its one test per message
// (docs/design.md, "The hand-over").
constexpr std::uint64_t offer_check_interval = 16;

// The destructor's message: when the owner reaches it, every message posted before the
// destructor started has run; the owner signals and stops touching the actor.
struct destroy_marker final : message {
  std::promise<void> done;

  static bool run(message* m, actor_base*, turn_tally*) {
    auto* self = static_cast<destroy_marker*>(m);
    self->done.set_value();
    delete self;  // the promise is ours; the destructor holds only the future
    return false;
  }
};

// Under a test scheduler, an actor's name in the trace is freed once the actor is gone
// (its last event has run), so that a new actor at its address gets a new name.
void forget_name(const void* a) noexcept {
  if (tls.driver != nullptr) [[unlikely]]
    tls.driver->actor_destroyed(a);
}

void run_deferred_at_exit() noexcept {
  if (tls.top == nullptr) run_queued();
}

}  // namespace

actor_base::actor_base(actor_options options) : actor_base(std::make_shared<const actor_options>(std::move(options))) {}

actor_base::actor_base(std::shared_ptr<const actor_options> options) : options_(std::move(options)) {
  if (tls.driver != nullptr) [[unlikely]]
    name_under_driver();
  if (options_ == nullptr) return;
  // The hand-over keeps no room accounting: a bounded actor hands a spent budget only to an executor.
  if ((options_->max_messages != 0 || options_->max_time.count() != 0) && !options_->executor &&
      options_->capacity != 0) {
    throw std::invalid_argument("handoff: a drain budget on a bounded actor needs an executor to hand the actor to");
  }
  if (options_->max_time.count() < 0) throw std::invalid_argument("handoff: negative max_time");
  if (options_->max_block.count() < 0) throw std::invalid_argument("handoff: negative max_block");
}

void actor_base::report_error(const std::exception_ptr& e) noexcept {
  if (options_ == nullptr || !options_->on_error) return report_to_stderr(e, handler_source);
  try {
    options_->on_error(e);
  } catch (...) {
    report_to_stderr(std::current_exception(), "an actor's on_error hook");
  }
}

bool actor_base::budget_spent(const drain_cursor& c) const noexcept {
  if (c.max_messages != 0 && c.turn >= c.max_messages) return true;
  const actor_options* o = options_.get();
  return o != nullptr && o->max_time.count() != 0 && now_ns() - c.turn_start >= o->max_time.count();
}

actor_base::drain_cursor actor_base::start_turn(std::uint64_t ran, std::int64_t turn_start,
                                                drain_frame& frame) const noexcept {
  const actor_options* opt = options_.get();
  const bool bounded = opt != nullptr && opt->capacity != 0;
  const bool stepped = tls.driver != nullptr;
  const bool executor = opt != nullptr && static_cast<bool>(opt->executor);
  const bool timed = opt != nullptr && opt->max_time.count() != 0;
  std::uint32_t max_messages = opt != nullptr ? opt->max_messages : 0;
  if (max_messages == 0 && !timed && !executor && !bounded) max_messages = default_max_messages;
  const bool budgeted = max_messages != 0 || timed;
  if (timed && turn_start == 0) turn_start = now_ns();
  const std::uint64_t limit = bounded || stepped || timed ? 0 : max_messages != 0 ? max_messages : UINT64_MAX;
  const bool hands_over = budgeted && !executor;
  const turn_tally tally{ran, ran, limit};
  return drain_cursor{tally, &frame, turn_start, max_messages, 0, budgeted, bounded, stepped, hands_over, false};
}

bool actor_base::drain_limits(drain_cursor& c) noexcept {
  if (c.offered) {
    // Handed over: the successor drains from here on, touch nothing more. Else nobody
    // claimed, or the claimant withdrew: go on.
    if (core_.taken() && core_.try_hand_over(c.uncounted)) return true;
    c.limit = c.turn + offer_check_interval;
    return false;
  }
  if (c.bounded && c.uncounted != 0) {  // room for the senders after every message, not per round
    if (try_release(c.uncounted)) return true;
    c.uncounted = 0;
  }
  if (c.stepped && c.turn != 0) {  // a test scheduler's event is one message: queue again
    if (c.uncounted == 0 || !try_release(c.uncounted)) queue_later();
    return true;
  }
  if (!c.budgeted || c.turn == 0 || !budget_spent(c)) return false;
  // Account first, then hand on: only a still-owned actor may be handed over.
  if (c.uncounted != 0 && try_release(c.uncounted)) return true;
  c.uncounted = 0;
  if (!c.hands_over) {
    continue_elsewhere();
    return true;
  }
  // No executor: offer the drain to the next sender and go on until one takes it.
  core_.offer();
  c.offered = true;
  c.limit = c.turn + offer_check_interval;
  return false;
}

actor_base::drain_status actor_base::drain_step(drain_cursor& c) noexcept {
  const actor_options* opt = options_.get();
  if (c.turn >= c.limit) [[unlikely]] {
    if (drain_limits(c)) return drain_status::done;
  }
  if (auto* m = static_cast<message*>(core_.pop())) {
    c.idle_spins = 0;
    bool keep = true;
    try {
      keep = m->invoke(m, this, &c);
    } catch (...) {
      report_handler_error(*c.frame);
    }
    if (c.frame->stop != 0 || !keep) [[unlikely]] {
      // Destroyed: *this belongs to its destructor now. Else a handler deferred to its own actor.
      if ((c.frame->stop & stop_destroyed) == 0 && keep) {
        if (c.offered) {
          yield_offered(c.uncounted + 1);
        } else {
          yield_turn(c.uncounted + 1);
        }
      }
      return drain_status::done;
    }
    ++c.uncounted;
    ++c.turn;
    return drain_status::running;
  }
  if (c.uncounted != 0) {  // unbounded: a bounded drain has released everything it ran above
    if (c.offered) [[unlikely]] {
      if (core_.release_offered(c.uncounted) != lockfree_ownership::offered_release::kept) return drain_status::done;
    } else if (try_release_unbounded(c.uncounted)) {
      return drain_status::done;
    }
    c.uncounted = 0;  // more were counted meanwhile: still ours, keep draining
    return drain_status::running;
  }
  // count_ > 0 and nothing linked: a sender is between fetch_add and push.
  if (c.offered && core_.taken() && core_.try_hand_over(0)) [[unlikely]] {  // a successor need not wait for that push
    return drain_status::done;
  }
  if (opt != nullptr && opt->executor && c.idle_spins >= spins_before_hand_off) {
    continue_elsewhere();
    return drain_status::done;
  }
  ++c.idle_spins;
  return drain_status::waiting;
}

// Inlined into drain() and, through run_from_queue(), into run_runnable(): called
// through drain(), the run queue's hop into an actor (once per hop of a forwarding chain)
// cost more instructions per hop (callgrind; docs/design.md, "One run queue per thread").
[[gnu::always_inline]] inline void actor_base::drain_turn(std::uint64_t ran, std::int64_t turn_start) noexcept {
  drain_frame frame{this, 0, tls.top};
  tls.top = &frame;
  drain_cursor c = start_turn(ran, turn_start, frame);
  for (drain_status s; (s = drain_step(c)) != drain_status::done;) {
    if (s == drain_status::waiting) backoff(c.idle_spins - 1);
  }
  tls.top = frame.parent;
}

void actor_base::drain(std::uint64_t ran, std::int64_t turn_start) noexcept { drain_turn(ran, turn_start); }

void actor_base::run_carried_limited(void (*message)(actor_base*)) noexcept {
  auto run = [this, message] { message(this); };
  run_inline<false>(run);
}

void actor_base::after_stopped_turn(unsigned char stop) noexcept {
  if ((stop & stop_destroyed) == 0) yield_turn(1);
}

// Inlined into run_runnable(): the carried hop is a jump to the message's own turn
// (carry_slot::run, run_carried_turn()), which releases the actor itself.
[[gnu::always_inline]] inline bool actor_base::run_from_queue() noexcept {
  // The carried message runs here first: the slot belongs to this thread.
  if (carried.actor == this) return carried.run(this);
  return run_from_queue_slow();
}

bool actor_base::run_from_queue_slow() noexcept {
  if (has_queued() && hand_to_idle_executor()) return false;
  drain_turn(0, 0);  // pushes its own frame on the current one
  return true;
}

void actor_base::drain_now(std::uint64_t ran, std::int64_t turn_start) noexcept {
  const bool top_level = tls.top == nullptr;
  drain(ran, turn_start);
  if (top_level) run_queued();
}

void actor_base::queue_later() noexcept { push_later(entry_of(this), &ready_next); }

void actor_base::run_after_current(message* m) noexcept {
  enqueue_first(m);
  queue_now();
}

void actor_base::submit_deferred(message* m, admission a) noexcept {
  if (a != admission::owner) {  // queued, or offered: a deferred send never takes over
    enqueue(m);
    // From one of its own handlers: the actor yields this turn (see actor::defer).
    if (tls.top != nullptr && tls.top->actor == this) tls.top->stop |= stop_yield;
    return;
  }
  enqueue_first(m);
  continue_elsewhere();
}

void actor_base::continue_elsewhere() noexcept {
  // Under a test scheduler the continuation is an event of its own (queue_later).
  if (options_ != nullptr && options_->executor && tls.driver == nullptr) {
    try {
      options_->executor.execute(work{&resume, this});
      return;
    } catch (...) {
      // Still ours and counted: run it here, later, rather than strand it.
    }
  }
  queue_later();
  // A thread that ends with deferred work runs it as it exits: nobody else can.
  if (tls.top == nullptr) run_at_thread_exit<&run_deferred_at_exit>();
}

void actor_base::yield_offered(std::uint64_t ran) noexcept {
  // The deferred message is still counted: never a release.
  if (core_.release_offered(ran, false) == lockfree_ownership::offered_release::handed_over) return;
  continue_elsewhere();
}

void actor_base::offered_to() noexcept {
  tls.after_push = this;
  tls.take_over = true;
}

void actor_base::take_over() noexcept {
  if (tls.top != nullptr || tls.driver != nullptr) return;  // never inline inside other work
  // Before claiming: a successor must not hold the actor while it runs other work that
  // could wait on it (an ask() from a deferred send's handler).
  if (has_queued()) run_before_blocking();
  if (!core_.claim()) return;
  // The old owner hands over after the handler it is running and a few more; it never
  // waits for us. That handler may wait for something this thread holds (a lock around
  // the post): past the bound, withdraw, and the owner goes on as if nobody had claimed.
  const std::int64_t deadline = now_ns() + successor_wait_ns.load(std::memory_order_relaxed);
  for (unsigned spins = 0; !core_.handed_over(); ++spins) {
    if (spins >= spins_before_yield && now_ns() >= deadline && core_.withdraw()) return;
    backoff(spins);
  }
  drain_now(1);  // the unit the hand-over left us, uncounted like a message run
}

void actor_base::yield_turn(std::uint64_t ran) noexcept {
  [[maybe_unused]] const bool released = try_release(ran);
  HANDOFF_ASSERT(!released);  // the deferred message is still counted
  continue_elsewhere();
}

bool actor_base::hand_to_idle_executor() noexcept {
  const actor_options* o = options_.get();
  if (o == nullptr || tls.driver != nullptr || !o->executor.has_idle_workers()) return false;
  try {
    o->executor.execute(work{&resume, this});
    return true;
  } catch (...) {
    return false;  // the run queue that popped it drains it: the same fall-back as continue_elsewhere()
  }
}

bool run_runnable(runnable* r, [[maybe_unused]] drain_frame* parent) noexcept {
  HANDOFF_ASSERT(tls.top == parent);
  return static_cast<actor_base*>(r)->run_from_queue();
}

void actor_base::check_not_draining() const {
  for (const drain_frame* f = tls.top; f != nullptr; f = f->parent) {
    if (f->actor == this) {
      throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                              "handoff: ask() on an actor this thread is draining could never be answered");
    }
  }
}

void actor_base::resume(void* a) noexcept {
  auto* self = static_cast<actor_base*>(a);
  if (tls.top != nullptr) return self->queue_later();  // an executor that runs work inline
  self->drain(0, 0);
  run_queued();
}

void actor_base::name_under_driver() noexcept { tls.driver->actor_created(this); }

void actor_base::ask_driven(message* m, admission a, test_driver::ready_fn ready, const void* answer) {
  if (a != admission::owner) {
    enqueue(m);
  } else {
    run_after_current(m);  // an event, even when idle: nothing runs by itself
  }
  tls.driver->block_until(ready, answer, no_deadline, "ask", true);
}

void actor_base::shut_down() noexcept {
  run_actor_destroy_hook(this);  // first: no timer service touches this actor from here on
  bool own_handler = false;
  for (drain_frame* f = tls.top; f != nullptr; f = f->parent) {
    if (f->actor == this) {
      f->stop |= stop_destroyed;
      own_handler = true;
    }
  }
  if (own_handler) {
    // Destroyed by one of its own handlers, which is still running: the messages behind
    // it cannot run any more. Destroying them breaks their ask() promises.
    while (auto* m = static_cast<message*>(core_.pop())) m->invoke(m, this, nullptr);
    return forget_name(this);
  }
  // Idle: nothing pending, and now nobody else can own it.
  if (try_acquire() == admission::owner) return forget_name(this);
  // Out of memory in a destructor that must wait for another thread has no better answer
  // than terminate.
  auto* marker = new destroy_marker;  // NOLINT(bugprone-unhandled-exception-at-new)
  marker->invoke = &destroy_marker::run;
  std::future<void> done = marker->done.get_future();
  enqueue(marker);
  if (tls.driver != nullptr) [[unlikely]] {
    auto ready = [](const void* f) noexcept {
      return static_cast<const std::future<void>*>(f)->wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    };
    tls.driver->block_until(ready, &done, no_deadline, "~actor", false);
  } else {
    run_before_blocking();  // owned by this very thread through its queue: run its messages now
  }
  done.wait();
  forget_name(this);
}

}  // namespace handoff::detail
