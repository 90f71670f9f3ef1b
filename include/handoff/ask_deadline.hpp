// handoff::async_ask_for and async_ask_until: `co_await` an actor's answer with a
// deadline that a handoff::timer_service enforces, for coroutines (handoff::task, or any
// other coroutine type).
//
//   handoff::timer_service timers;  // started (or ticked) by the program
//   int b = co_await handoff::async_ask_for(a, [](Account& s) { return s.balance(); }, 50ms, timers);
//   // ... or handoff::ask_timeout, thrown from co_await once 50 ms passed without an answer
//
// How: one shared state per call holds the outcome. The request goes to the actor as a
// message that runs f (exactly once, whatever the deadline) and offers its result; a
// one-shot timer of the given service offers "expired" at the deadline. The first offer
// wins and resumes the coroutine; the other is dropped (a late result is destroyed unread
// with the state). The timer sends its expiry to one process-wide actor with no state, so
// the service's thread (or its executor) runs it at once: only expiries meet there.
//
// Where the coroutine resumes: answered, as after async_ask (from the run queue of the
// thread that ran f, after it finished draining the actor); expired, on the thread that
// drives the timer service (its own thread, its executor's, or the caller of run_due()),
// after the expiry ran. Keep what follows an expiry short there, or hop to an executor.
#pragma once

#include <atomic>
#include <chrono>
#include <coroutine>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "handoff/actor.hpp"
#include "handoff/ask_timeout.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/mailbox_full.hpp"
#include "handoff/timer.hpp"
#include "handoff/timer_service.hpp"

namespace handoff {
namespace detail {

// What the deadlines' timers send to: an actor with no state, idle but while an expiry
// runs. Function-local static: it outlives every timer service a program destroys before
// it exits.
struct deadline_sink {};
inline actor<deadline_sink>& deadline_actor() {
  static actor<deadline_sink> sink;
  return sink;
}

// One async_ask_for: the race between the answer and the deadline.
template <class R>
struct deadline_race {
  using stored = std::conditional_t<std::is_void_v<R>, std::monostate, R>;
  enum : unsigned char { open, answered, expired };

  // The first offer wins (acq_rel: the winner's writes to value/error happen-before the
  // loser's, and before the resume that follows the second arrival).
  bool claim(unsigned char how) noexcept {
    unsigned char expected = open;
    return outcome.compare_exchange_strong(expected, how, std::memory_order_acq_rel);
  }
  // Called once by the winner (after it stored the outcome) and once by await_suspend
  // (after it sent the request): the second of the two resumes the coroutine, through
  // this thread's run queue. acq_rel: pairs the two arrivals.
  void arrive() noexcept {
    if (arrivals.fetch_add(1, std::memory_order_acq_rel) == 1) schedule(&waiter);
  }

  std::atomic<unsigned char> outcome{open};
  std::atomic<unsigned char> arrivals{0};
  resumable waiter;             // the coroutine; set before anything can arrive
  std::optional<stored> value;  // written by the answer that won, read by await_resume
  std::exception_ptr error;     // likewise
  timer deadline;               // owned by the awaiter: armed in await_suspend, cancelled in await_resume
};

template <class State, class Fn>
class [[nodiscard]] deadline_ask_awaiter {
  using result = std::remove_cvref_t<std::invoke_result_t<Fn&, State&>>;
  using race = deadline_race<result>;

 public:
  // f is built into fn_ in place, as async_ask's awaiter does.
  template <class A>
  deadline_ask_awaiter(actor<State>& target, A&& f, std::int64_t deadline, timer_service& timers)
      : target_(target), fn_(std::forward<A>(f)), deadline_(deadline), timers_(timers),
        race_(std::make_shared<race>()) {}
  deadline_ask_awaiter(const deadline_ask_awaiter&) = delete;
  deadline_ask_awaiter& operator=(const deadline_ask_awaiter&) = delete;
  ~deadline_ask_awaiter() = default;

  [[nodiscard]] bool await_ready() const noexcept { return false; }

  bool await_suspend(std::coroutine_handle<> h) {
    race_->waiter.handle = h;
    const auto at = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline_));
    if (deadline_ != no_deadline) {
      race_->deadline = timers_.at(at, deadline_actor(), [r = race_](deadline_sink&) {
        if (r->claim(race::expired)) r->arrive();
      });
    }
    request req(race_, std::move(fn_));
    if (!target_.try_post(std::move(req))) {
      race_->deadline.cancel();
      throw mailbox_full("handoff: async_ask_for on a full mailbox");
    }
    // Second arrival: decided already, go on without suspending; first: the winner resumes.
    return race_->arrivals.fetch_add(1, std::memory_order_acq_rel) == 0;
  }

  result await_resume() {
    race_->deadline.cancel();  // answered first: it must not fire; expired: it is over (never waits on this thread)
    if (race_->outcome.load(std::memory_order_acquire) == race::expired) throw ask_timeout();
    if (race_->error) std::rethrow_exception(race_->error);
    if constexpr (!std::is_void_v<result>) return std::move(*race_->value);
  }

 private:
  // The message: runs f exactly once, even after the deadline (it was accepted), and
  // offers the outcome. Destroyed without running (its actor destroyed by one of its own
  // handlers), it offers std::future_error(broken_promise), as async_ask reports.
  class request {
   public:
    request(std::shared_ptr<race> r, Fn f) : r_(std::move(r)), fn_(std::move(f)) {}
    request(request&& o) noexcept(std::is_nothrow_move_constructible_v<Fn>)
        : r_(std::move(o.r_)), fn_(std::move(o.fn_)) {}
    request(const request&) = delete;
    request& operator=(const request&) = delete;
    request& operator=(request&&) = delete;
    ~request() {
      if (r_ != nullptr) offer({}, std::make_exception_ptr(std::future_error(std::future_errc::broken_promise)));
    }
    void operator()(State& s) {
      std::optional<typename race::stored> v;
      std::exception_ptr e;
      try {
        if constexpr (std::is_void_v<result>) {
          std::invoke(fn_, s);
          v.emplace();
        } else {
          v.emplace(std::invoke(fn_, s));
        }
      } catch (...) {
        e = std::current_exception();
      }
      offer(std::move(v), e);
    }

   private:
    void offer(std::optional<typename race::stored> v, const std::exception_ptr& e) noexcept {
      std::shared_ptr<race> r = std::move(r_);
      if (!r->claim(race::answered)) return;  // too late: dropped with the state
      r->value = std::move(v);
      r->error = e;
      r->arrive();
    }
    std::shared_ptr<race> r_;  // null once it offered (or moved from)
    Fn fn_;
  };

  actor<State>& target_;
  Fn fn_;
  std::int64_t deadline_;
  timer_service& timers_;
  std::shared_ptr<race> race_;  // shared with the request and the timer
};

}  // namespace detail

// `co_await async_ask_for(a, f, d, timers)`: async_ask with a deadline `d` from now (or
// `t`, async_ask_until), enforced by `timers`, which must be running (start(), an
// executor, or run_due() calls) and outlive the wait. Yields f's result (copied, as
// async_ask does) or rethrows f's exception; throws ask_timeout if the deadline passed
// before f answered. f is sent either way and runs exactly once; a late result or
// exception is destroyed unread. Allocates the shared state, the request's node and a
// timer entry; throws mailbox_full at once on a full bounded mailbox (as async_ask), and
// what arming the timer throws, with nothing sent. Never blocks a thread. Not supported:
// destroying the coroutine while it waits here (as for async_ask).
template <class State, class F, class Rep, class Period>
  requires(std::invocable<std::decay_t<F>&, State&>)
[[nodiscard]] auto async_ask_for(actor<State>& a, F&& f, std::chrono::duration<Rep, Period> d, timer_service& timers) {
  return detail::deadline_ask_awaiter<State, std::decay_t<F>>(a, std::forward<F>(f),
                                                              detail::deadline_after(detail::now_ns(), d), timers);
}
template <class State, class F, class Clock, class Dur>
  requires(std::invocable<std::decay_t<F>&, State&>)
[[nodiscard]] auto async_ask_until(actor<State>& a, F&& f, std::chrono::time_point<Clock, Dur> t,
                                   timer_service& timers) {
  return detail::deadline_ask_awaiter<State, std::decay_t<F>>(a, std::forward<F>(f),
                                                              detail::deadline_at(detail::now_ns(), t), timers);
}

}  // namespace handoff
