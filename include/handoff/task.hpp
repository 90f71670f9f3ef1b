// handoff::task<T>: a lazy coroutine that produces a T (or throws), for code that awaits
// async_ask and async_lock; and handoff::sync_wait, which runs one to completion from a
// thread that may block (main, a test).
//
//   handoff::task<int> balance(handoff::actor<Account>& a) {
//     co_return co_await a.async_ask([](Account& s) { return s.balance(); });
//   }
//   handoff::task<> pay(handoff::keyed_mutex<>& m, handoff::actor<Account>& a) {
//     auto g = co_await m.async_lock("account:7");   // suspends, never blocks a thread
//     int b = co_await balance(a);                   // a task awaits a task
//   }
//   int b = handoff::sync_wait(balance(a));           // blocks this thread until done
//
// Lazy: calling a task function allocates its frame and runs nothing; `co_await t` starts
// it and resumes the awaiting coroutine when it finishes, by symmetric transfer (a chain
// of tasks that finish synchronously does not grow the stack where the compiler makes
// that transfer a tail call: optimized builds; not GCC at -O0 or under a sanitizer). Its result is returned
// (moved out of `co_await std::move(t)`, a reference from `co_await t`), or the exception
// it threw is rethrown there. Move-only; the task object owns the frame and destroys it
// with itself, whether it ran, finished, or never started. No allocation beyond the
// coroutine frame (the compiler's operator new).
//
// Where a task runs: on the thread that awaits it, until its first suspension; after
// that, on whatever thread resumes it (async_ask: the thread that ran the handler, after
// it finished draining; async_lock: the thread that unlocked the key, or the keyed
// mutexes' completion thread at a wait timeout). A task has no scheduler of its own.
//
// Not promised: destroying a task while it is suspended inside an awaiter that will still
// resume it (async_ask, async_lock: the same rule as for any coroutine awaiting them);
// awaiting one task twice, or from two coroutines (a precondition, asserted in Debug).
#pragma once

#include <condition_variable>
#include <coroutine>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <type_traits>
#include <utility>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff {

template <class T = void>
class task;

namespace detail {

// What every task's promise has: the continuation to resume at the end, by symmetric
// transfer from final_suspend. Touched only by the task's own coroutine and the one
// coroutine that awaits it (which sets it before starting the task).
struct task_promise_base {
  std::coroutine_handle<> continuation = std::noop_coroutine();

  // Members, not static: the compiler calls them on the promise (and awaiter) object.
  // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
  std::suspend_always initial_suspend() noexcept { return {}; }
  struct final_awaiter {
    // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
    [[nodiscard]] bool await_ready() const noexcept { return false; }
    template <class P>
    std::coroutine_handle<> await_suspend(std::coroutine_handle<P> h) noexcept {
      return h.promise().continuation;  // the awaiter resumes; this frame stays, done
    }
    void await_resume() const noexcept {}
  };
  // NOLINTNEXTLINE(readability-convert-member-functions-to-static)
  final_awaiter final_suspend() noexcept { return {}; }
};

// The outcome: the value (a pointer for a reference), or the exception. Written by the
// task's coroutine, read by its awaiter after the task finished.
template <class T>
struct task_promise : task_promise_base {
  using stored = std::conditional_t<std::is_reference_v<T>, std::add_pointer_t<T>, T>;
  std::optional<stored> value;
  std::exception_ptr error;

  handoff::task<T> get_return_object() noexcept;
  void unhandled_exception() noexcept { error = std::current_exception(); }
  // A throw from building the value goes to unhandled_exception, as any throw in the body.
  template <class V>
    requires(std::is_convertible_v<V&&, T>)
  void return_value(V&& v) {
    if constexpr (std::is_reference_v<T>) {
      value.emplace(std::addressof(static_cast<T>(v)));
    } else {
      value.emplace(std::forward<V>(v));
    }
  }
  T& lvalue() {
    if (error) std::rethrow_exception(error);
    HANDOFF_ASSERT(value.has_value());  // read only once the task finished
    if constexpr (std::is_reference_v<T>) {
      return **value;
    } else {
      return *value;
    }
  }
  T rvalue() {
    if constexpr (std::is_reference_v<T>) {
      return lvalue();
    } else {
      return std::move(lvalue());
    }
  }
};

template <>
struct task_promise<void> : task_promise_base {
  std::exception_ptr error;
  handoff::task<void> get_return_object() noexcept;
  void unhandled_exception() noexcept { error = std::current_exception(); }
  void return_void() noexcept {}
  void lvalue() const {
    if (error) std::rethrow_exception(error);
  }
  void rvalue() const { lvalue(); }
};

template <class T>
class sync_wait_runner;

}  // namespace detail

template <class T>
class [[nodiscard]] task {
 public:
  using promise_type = detail::task_promise<T>;
  using value_type = T;

  task() noexcept = default;  // empty: valid() is false, awaiting it is a precondition violation
  task(task&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  task& operator=(task&& o) noexcept {
    if (this != &o) {
      if (h_) h_.destroy();
      h_ = std::exchange(o.h_, {});
    }
    return *this;
  }
  task(const task&) = delete;
  task& operator=(const task&) = delete;
  // Destroys the frame (its locals too when the task started and is not finished: see
  // "Not promised"). Never throws.
  ~task() {
    if (h_) h_.destroy();
  }

  // True when this task owns a coroutine frame (it was not moved from).
  [[nodiscard]] bool valid() const noexcept { return static_cast<bool>(h_); }
  // True once the coroutine has finished (returned or thrown).
  [[nodiscard]] bool done() const noexcept { return h_ && h_.done(); }

  // `co_await t` (a reference to the result kept in the task) and `co_await std::move(t)`
  // (the result moved out): starts the task on this thread, suspends the awaiting
  // coroutine, and resumes it when the task finishes, by symmetric transfer; rethrows the
  // task's exception. Awaiting a finished task returns at once. Precondition: valid(), and
  // not awaited by another coroutine.
  auto operator co_await() & noexcept { return awaiter<false>{h_}; }
  auto operator co_await() && noexcept { return awaiter<true>{h_}; }

 private:
  friend promise_type;
  template <class>
  friend class detail::sync_wait_runner;
  explicit task(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}

  template <bool Move>
  struct awaiter {
    std::coroutine_handle<promise_type> h;
    [[nodiscard]] bool await_ready() const noexcept {
      HANDOFF_ASSERT(static_cast<bool>(h));  // not an empty task
      return h.done();
    }
    std::coroutine_handle<> await_suspend(std::coroutine_handle<> awaiting) noexcept {
      h.promise().continuation = awaiting;
      return h;  // start the task: symmetric transfer, no stack growth
    }
    decltype(auto) await_resume() {
      if constexpr (Move) {
        return h.promise().rvalue();
      } else {
        return h.promise().lvalue();
      }
    }
  };

  std::coroutine_handle<promise_type> h_;
};

template <class T>
task<T> detail::task_promise<T>::get_return_object() noexcept {
  return handoff::task<T>(std::coroutine_handle<task_promise>::from_promise(*this));
}
inline task<void> detail::task_promise<void>::get_return_object() noexcept {
  return handoff::task<void>(std::coroutine_handle<task_promise>::from_promise(*this));
}

namespace detail {

// sync_wait's side: starts the task with a continuation that signals this object, which
// lives on the waiting thread's stack. The signal is given under the mutex, so the waiter
// cannot return (and free it) before the signalling thread has let go of it.
template <class T>
class sync_wait_runner {
 public:
  explicit sync_wait_runner(handoff::task<T>& t) noexcept : h_(t.h_) {}
  sync_wait_runner(const sync_wait_runner&) = delete;
  sync_wait_runner& operator=(const sync_wait_runner&) = delete;
  ~sync_wait_runner() = default;

  // The task's result, once run() returned.
  T result() { return h_.promise().rvalue(); }

  void run() {
    HANDOFF_ASSERT(static_cast<bool>(h_));  // not an empty task
    if (!h_.done()) {
      h_.promise().continuation = notify(this).h;
      h_.resume();
      run_before_blocking();  // what this thread queued (a nested async_ask's target) runs here
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return done_; });
    }
  }

 private:
  // A coroutine whose only job is to signal: resumed as the task's continuation.
  struct signal {
    struct promise_type {
      signal get_return_object() noexcept { return {std::coroutine_handle<promise_type>::from_promise(*this)}; }
      std::suspend_always initial_suspend() noexcept { return {}; }
      std::suspend_never final_suspend() noexcept { return {}; }  // frees itself
      void return_void() noexcept {}
      void unhandled_exception() noexcept { std::terminate(); }
    };
    std::coroutine_handle<promise_type> h;
  };
  static signal notify(sync_wait_runner* self) {
    std::lock_guard lock(self->mu_);
    self->done_ = true;
    self->cv_.notify_one();  // under the lock: the waiter wakes only after it is released
    co_return;
  }

  std::coroutine_handle<task_promise<T>> h_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;  // guarded by mu_
};

}  // namespace detail

// Runs t to completion and returns its result (moved out) or rethrows its exception.
// Blocks the calling thread until the task finishes, on whatever thread resumes it; the
// task starts on this thread, and before blocking this thread runs what it queued on its
// run queue (coroutines and actors only it could run). Call it at top level (main, a
// test, a thread of your own), not from inside an actor's handler or a coroutine: a task
// waiting for that handler's actor would never finish. Allocates the frame of a small
// signalling coroutine; throws what the task throws, or std::bad_alloc.
template <class T>
T sync_wait(task<T> t) {
  detail::sync_wait_runner<T> runner(t);
  runner.run();
  return runner.result();
}

}  // namespace handoff
