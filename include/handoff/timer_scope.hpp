// Timers from inside a handler without carrying the service around: the program names a
// timer service once, process-wide or per thread, and a handler schedules on it through
// its own actor (`self`), as CAF's delayed_send or Akka's per-actor timers do.
//
//   handoff::timer_service timers;
//   timers.start();
//   handoff::set_default_timer_service(&timers);      // once, for every thread
//   ...
//   session.post([](Session& s, handoff::actor<Session>& self) {
//     s.idle = handoff::after(30s, self, [](Session& x) { x.close(); });
//     s.tick = handoff::every(50ms, self, [](Session& x) { x.tick(); });
//   });
//   handoff::set_default_timer_service(nullptr);      // before `timers` goes
//
// Which service: the innermost timer_scope alive on the calling thread, else the process
// default, else none: the call throws std::logic_error (nothing is scheduled). The
// functions are timer_service::after/at/every on that service, with their contracts
// (thread-safe, O(1), a handle that cancels when destroyed); they work from any thread,
// not only from handlers. Under a handoff::testing::scheduler, a service made while the
// scheduler is in scope runs on its virtual clock, and so do these timers.
//
// Lifetime: the service must outlive every call that may find it: clear the default
// (set_default_timer_service(nullptr)) or end the scope before destroying it. The timers
// it scheduled follow the service's own rules (its destructor drops them; handles stay
// valid). A default set before a send is seen by the handler the send runs, on any thread
// (release/acquire). Not promised: which of the two services a call racing
// set_default_timer_service finds; nor a scope on the threads a service or an executor
// runs handlers on (those find the default, unless the program made a scope there).
#pragma once

#include <chrono>
#include <type_traits>
#include <utility>

#include "handoff/timer.hpp"
#include "handoff/timer_service.hpp"

namespace handoff {

// Thread-safe, never blocks or allocates. Sets the process-wide default (nullptr: none).
void set_default_timer_service(timer_service* s) noexcept;
// Thread-safe. The calling thread's service (its innermost timer_scope, else the process
// default); throws std::logic_error when there is none.
[[nodiscard]] timer_service& current_timer_service();

// Makes `s` the calling thread's service while it lives (a network thread's loop, a
// test). Scopes nest; destroy them in reverse order, on the thread that made them. Made on
// a handoff::testing::scheduler's thread, it also covers the events the scheduler runs
// (then it allocates, and may throw std::bad_alloc); otherwise never allocates or throws.
class timer_scope {
 public:
  explicit timer_scope(timer_service& s);
  ~timer_scope();
  timer_scope(const timer_scope&) = delete;
  timer_scope& operator=(const timer_scope&) = delete;
  timer_scope(timer_scope&&) = delete;
  timer_scope& operator=(timer_scope&&) = delete;

 private:
  timer_service* previous_;
};

// current_timer_service().after/at/every(..., self, ...): see timer_service.
template <class State, class F, class Rep, class Period>
  requires(actor<State>::template is_handler<std::decay_t<F>>)
[[nodiscard]] timer after(std::chrono::duration<Rep, Period> d, actor<State>& self, F&& f) {
  return current_timer_service().after(d, self, std::forward<F>(f));
}
template <class State, class F>
  requires(actor<State>::template is_handler<std::decay_t<F>>)
[[nodiscard]] timer at(std::chrono::steady_clock::time_point t, actor<State>& self, F&& f) {
  return current_timer_service().at(t, self, std::forward<F>(f));
}
template <class State, class F, class Rep, class Period>
  requires(actor<State>::template is_handler<std::decay_t<F>>)
[[nodiscard]] timer every(std::chrono::duration<Rep, Period> period, actor<State>& self, F&& f,
                          repeat how = repeat::fixed_rate) {
  return current_timer_service().every(period, self, std::forward<F>(f), how);
}
// basic_actor: sends m to self after d or at t.
template <class Message, class Handler, class Rep, class Period>
[[nodiscard]] timer after(std::chrono::duration<Rep, Period> d, basic_actor<Message, Handler>& self, Message m) {
  return current_timer_service().after(d, self, std::move(m));
}
template <class Message, class Handler>
[[nodiscard]] timer at(std::chrono::steady_clock::time_point t, basic_actor<Message, Handler>& self, Message m) {
  return current_timer_service().at(t, self, std::move(m));
}

}  // namespace handoff
