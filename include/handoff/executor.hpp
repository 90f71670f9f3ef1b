// Executors: where an actor continues draining once its owner has spent its budget.
//
//   handoff::work         a trivially copyable, noexcept unit of work (function + argument)
//   handoff::executor     concept: anything with `execute(handoff::work)`
//   handoff::executor_ref non-owning, type-erased reference to an executor
//
// handoff never creates threads of its own; an executor is how a user lends some.
// `handoff::thread_pool` is one; adapting Asio is three lines:
//
//   struct asio_executor {
//     asio::io_context& io;
//     void execute(handoff::work w) const { asio::post(io, w); }
//   };
#pragma once

#include <concepts>
#include <memory>

namespace handoff {

// One unit of work. Invoking it never throws; precondition: fn != nullptr. Copying it is copying two pointers, so any
// executor can store it without allocating (it fits std::function's small buffer too).
struct work {
  void (*fn)(void*) noexcept = nullptr;
  void* arg = nullptr;

  void operator()() const noexcept { fn(arg); }
};

// An executor runs each work item it is given exactly once, on some thread, eventually.
// `execute` may be called from any thread, including from inside work it is running, and
// from an actor's drain loop, which is noexcept: an execute() that throws there (say,
// bad_alloc) terminates the program. It must keep accepting work until every actor that
// uses it is destroyed. Running the work inline inside execute() is allowed (the actor
// then continues on this thread's run queue, without recursion); execute's result, if
// any, is ignored.
template <class E>
concept executor = requires(E& e, work w) {
  e.execute(w);
};

// Non-owning reference to an executor; the executor must outlive every actor using it.
class executor_ref {
 public:
  executor_ref() noexcept = default;

  // (clang-format 14 splits `noexcept` off a constructor after a requires-clause)
  // clang-format off
  template <executor E>
    requires(!std::same_as<std::remove_cvref_t<E>, executor_ref>)
  executor_ref(E& e) noexcept  // NOLINT(google-explicit-constructor): a reference wrapper
      : target_(const_cast<void*>(static_cast<const void*>(std::addressof(e)))),
        execute_([](void* t, work w) { static_cast<E*>(t)->execute(w); }) {}
  // clang-format on

  // Thread-safe if the referenced executor's execute() is. Precondition: not empty.
  // Throws what the referenced execute() throws.
  void execute(work w) const { execute_(target_, w); }

  [[nodiscard]] explicit operator bool() const noexcept { return target_ != nullptr; }

 private:
  void* target_ = nullptr;
  void (*execute_)(void*, work) = nullptr;
};

}  // namespace handoff
