// Executors: where an actor continues draining once its owner has spent its budget.
//
//   handoff::work         a trivially copyable, noexcept unit of work (function + argument)
//   handoff::job          a move-only callable (small ones stored inline): what
//                         thread_pool::execute takes
//   handoff::executor     concept: anything with `execute(handoff::work)`
//   handoff::executor_ref non-owning, type-erased reference to an executor
//   handoff::execute(e, f) runs any callable on any executor
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
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "handoff/detail/report.hpp"

namespace handoff {

// One unit of work. Invoking it never throws; precondition: fn != nullptr. Copying it is copying two pointers, so any
// executor can store it without allocating (it fits std::function's small buffer too).
struct work {
  void (*fn)(void*) noexcept = nullptr;
  void* arg = nullptr;

  void operator()() const noexcept { fn(arg); }
};

// A move-only callable run at most once: any `void()` callable, a lambda with move-only
// captures included. Callables of up to three pointers whose move cannot throw are stored
// inline (no allocation; a `work` always is); larger ones are moved to the heap.
// Exceptions thrown by the callable propagate from operator().
class job {
 public:
  job() noexcept = default;
  // NOLINTNEXTLINE(google-explicit-constructor): a work item is a job
  job(work w) noexcept {
    if (w.fn != nullptr) emplace<work>(w);
  }
  // Throws what moving or copying f into the job throws, or std::bad_alloc.
  template <class F>
    requires(!std::same_as<std::decay_t<F>, job> && !std::same_as<std::decay_t<F>, work> &&
             std::invocable<std::decay_t<F>&> && std::constructible_from<std::decay_t<F>, F&&>)
  // NOLINTNEXTLINE(google-explicit-constructor,bugprone-forwarding-reference-overload): any callable is a job
  job(F&& f) { emplace<std::decay_t<F>>(std::forward<F>(f)); }
  job(job&& o) noexcept { take(o); }
  job& operator=(job&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  job(const job&) = delete;
  job& operator=(const job&) = delete;
  ~job() { reset(); }

  // Runs the callable. Precondition: not empty.
  void operator()() { run_(storage_); }
  [[nodiscard]] explicit operator bool() const noexcept { return run_ != nullptr; }

 private:
  static constexpr std::size_t inline_size = 3 * sizeof(void*);
  // NOLINTBEGIN(misc-redundant-expression): a constant per F, true for some and not others
  template <class F>
  static constexpr bool stored_inline = sizeof(F) <= inline_size &&
                                        alignof(F) <= alignof(void*) && std::is_nothrow_move_constructible_v<F>;
  // NOLINTEND(misc-redundant-expression)

  template <class F, class A>
  void emplace(A&& a) {
    if constexpr (stored_inline<F>) {
      ::new (static_cast<void*>(storage_)) F(std::forward<A>(a));
      run_ = [](void* s) { (*std::launder(static_cast<F*>(s)))(); };
      // A trivially copyable callable moves with a copy of the bytes: no call at all.
      if constexpr (!std::is_trivially_copyable_v<F>) {
        move_or_destroy_ = [](void* from, void* to) noexcept {
          F* f = std::launder(static_cast<F*>(from));
          if (to != nullptr) ::new (to) F(std::move(*f));
          f->~F();
        };
      }
    } else {
      F* p = new F(std::forward<A>(a));
      std::memcpy(storage_, &p, sizeof p);
      run_ = [](void* s) { (*heap<F>(s))(); };
      move_or_destroy_ = [](void* from, void* to) noexcept {
        if (to != nullptr) {
          std::memcpy(to, from, sizeof(F*));
        } else {
          delete heap<F>(from);
        }
      };
    }
  }
  template <class F>
  static F* heap(void* s) noexcept {
    F* p;
    std::memcpy(&p, s, sizeof p);
    return p;
  }
  void take(job& o) noexcept {
    if (o.move_or_destroy_ != nullptr) {
      o.move_or_destroy_(o.storage_, storage_);
    } else {
      std::memcpy(storage_, o.storage_, inline_size);
    }
    run_ = std::exchange(o.run_, nullptr);
    move_or_destroy_ = std::exchange(o.move_or_destroy_, nullptr);
  }
  void reset() noexcept {
    if (move_or_destroy_ != nullptr) move_or_destroy_(storage_, nullptr);
    run_ = nullptr;
    move_or_destroy_ = nullptr;
  }

  alignas(void*) unsigned char storage_[inline_size]{};
  void (*run_)(void*) = nullptr;
  void (*move_or_destroy_)(void* from, void* to) noexcept = nullptr;  // to == nullptr: destroy
};

// An executor runs each work item it is given exactly once, on some thread, eventually.
// `execute` may be called from any thread, including from inside work it is running, and
// from an actor's drain loop. An execute() that throws there (say, bad_alloc) loses
// nothing: the actor it was handing on goes to the FIFO end of the calling thread's run
// queue instead and runs there. It must keep accepting work until every actor that uses
// it is destroyed. Running the work inline inside execute() is allowed (the actor
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
        execute_([](void* t, work w) { static_cast<E*>(t)->execute(w); }),
        idle_(idle_query<E>()) {}
  // clang-format on

  // Thread-safe if the referenced executor's execute() is. Precondition: not empty.
  // Throws what the referenced execute() throws.
  void execute(work w) const { execute_(target_, w); }

  // The executor's hint that some of its threads are idle (an executor may provide
  // `bool has_idle_workers() const noexcept`, as thread_pool does; false otherwise). A
  // thread with other work queued hands a runnable actor that uses this executor to it
  // when the hint is true, so that actors spread over a pool. Thread-safe; approximate.
  [[nodiscard]] bool has_idle_workers() const noexcept { return idle_ != nullptr && idle_(target_); }

  [[nodiscard]] explicit operator bool() const noexcept { return target_ != nullptr; }

 private:
  template <class E>
  static auto idle_query() noexcept -> bool (*)(const void*) noexcept {
    if constexpr (requires(const E& e) {
                    { e.has_idle_workers() }
                    noexcept->std::convertible_to<bool>;
                  }) {
      return [](const void* t) noexcept -> bool { return static_cast<const E*>(t)->has_idle_workers(); };
    } else {
      return nullptr;
    }
  }

  void* target_ = nullptr;
  void (*execute_)(void*, work) = nullptr;
  bool (*idle_)(const void*) noexcept = nullptr;
};

namespace detail {
// Runs f; an exception it throws is printed to stderr, naming `source` (a work item, a
// pool's job: nobody waits for them to report to).
template <class F>
void run_reporting(F& f, const char* source) noexcept {
  try {
    f();
  } catch (...) {
    report_to_stderr(std::current_exception(), source);
  }
}
inline constexpr const char* execute_source = "a callable run by handoff::execute";
}  // namespace detail

// Runs any callable once on `e`. An executor that takes a `job` (thread_pool) gets one,
// which stores small callables inline; for one that takes only `work`, a callable that
// is trivially copyable and fits in a pointer travels in the work's argument, others
// are moved to the heap. Exceptions thrown by f go to stderr (a work item cannot
// throw). Throws what e.execute() throws, or std::bad_alloc; then f does not run.
template <executor E, class F>
  requires(std::invocable<std::decay_t<F>&>&& std::constructible_from<std::decay_t<F>, F&&>)
void execute(E& e, F&& f) {
  using fn_type = std::decay_t<F>;
  if constexpr (requires(job j) { e.execute(std::move(j)); }) {
    e.execute(job(std::forward<F>(f)));
  } else if constexpr (std::same_as<fn_type, work>) {
    e.execute(f);
  } else {
    // NOLINTNEXTLINE(misc-redundant-expression): a constant per F, true for some and not others
    if constexpr (std::is_trivially_copyable_v<fn_type> && sizeof(fn_type) <= sizeof(void*) &&
                  alignof(fn_type) <= alignof(void*)) {
      void* arg = nullptr;
      std::memcpy(&arg, &f, sizeof(fn_type));
      e.execute(work{[](void* a) noexcept {
                       alignas(fn_type) unsigned char bytes[sizeof(fn_type)];
                       std::memcpy(bytes, &a, sizeof(fn_type));
                       detail::run_reporting(*std::launder(reinterpret_cast<fn_type*>(bytes)), detail::execute_source);
                     },
                     arg});
    } else {
      auto box = std::make_unique<fn_type>(std::forward<F>(f));
      e.execute(work{[](void* a) noexcept {
                       std::unique_ptr<fn_type> fn(static_cast<fn_type*>(a));
                       detail::run_reporting(*fn, detail::execute_source);
                     },
                     box.get()});
      (void)box.release();  // the work owns it now
    }
  }
}

}  // namespace handoff
