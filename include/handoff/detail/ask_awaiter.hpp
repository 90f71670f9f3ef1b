// handoff::actor<State>::async_ask's awaiter (see actor.hpp): the mailbox node of the
// request itself, so that awaiting allocates nothing. A friend of the actor it asks.
#pragma once

#include <coroutine>
#include <exception>
#include <future>
#include <optional>
#include <type_traits>
#include <utility>
#include <variant>

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/actor_turn.hpp"

namespace handoff::detail {

// Throws handoff::mailbox_full for an async_ask that found a bounded mailbox full
// (lib/actor/mailbox_room.cpp: detail/ headers do not include the facade that defines it).
[[noreturn]] void throw_async_ask_full();

template <class Actor, class Fn>
class [[nodiscard]] ask_awaiter final : message {
  using result = std::remove_cvref_t<typename Actor::template result_of<Fn>>;  // returned by value: never a reference
                                                                               // into the state
  using stored = std::conditional_t<std::is_void_v<result>, std::monostate, result>;

 public:
  template <class A>
  ask_awaiter(Actor& target, A&& a) : target_(target), fn_(std::forward<A>(a)) {
    invoke = &run;
  }
  ask_awaiter(const ask_awaiter&) = delete;
  ask_awaiter& operator=(const ask_awaiter&) = delete;
  ~ask_awaiter() = default;

  [[nodiscard]] bool await_ready() const noexcept { return false; }

  bool await_suspend(std::coroutine_handle<> h) noexcept {
    waiter_.handle = h;
    const auto a = target_.template admit<true>(nullptr);
    switch (a) {
      case lockfree_ownership::admission::full:
        full_ = true;  // await_resume throws: a coroutine never waits for room
        return false;
      case lockfree_ownership::admission::queued:
      case lockfree_ownership::admission::offered:  // a coroutine never takes over: it suspends
        target_.enqueue(this);                      // the owner resumes us; touch nothing of *this after this line
        return true;
      case lockfree_ownership::admission::owner:
        break;
    }
    if (tls.top != nullptr) {
      target_.run_after_current(this);  // drained by this thread after its current handler
      return true;
    }
    auto body = [this] { answer(); };
    target_.run_inline(body);
    return false;  // answered: continue without suspending
  }

  result await_resume() {
    if (full_) throw_async_ask_full();
    if (error_) std::rethrow_exception(error_);
    if constexpr (!std::is_void_v<result>) return std::move(*value_);
  }

 private:
  void answer() noexcept {
    try {
      if constexpr (std::is_void_v<result>) {
        Actor::call(fn_, target_);
        value_.emplace();
      } else {
        value_.emplace(Actor::call(fn_, target_));
      }
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  static bool run(message* m, actor_base* /*a: target_*/, turn_tally* turn) {
    auto* self = static_cast<ask_awaiter*>(m);
    if (turn != nullptr) {
      self->answer();
    } else {
      self->error_ = std::make_exception_ptr(std::future_error(std::future_errc::broken_promise));
    }
    schedule(&self->waiter_);  // runs after this drain (the owner is inside it)
    return true;
  }

  Actor& target_;
  Fn fn_;
  resumable waiter_;
  std::optional<stored> value_;
  std::exception_ptr error_;
  bool full_ = false;
};

}  // namespace handoff::detail
