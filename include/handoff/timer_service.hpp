// handoff::timer_service: delayed and periodic sends to actors, from a service the user
// owns and drives. The handle, options and counts are in handoff/timer.hpp.
//
//   handoff::timer_service timers;                    // one per program, or per shard
//   timers.start();                                   // a thread of its own, or ...
//   timers.run_due();                                 // ... ticked by the user's loop
//   handoff::timer t = timers.after(10s, room, [](Room& r) { r.offer_expired(); });
//   auto tick = timers.every(50ms, room, [](Room& r) { r.tick(); });
//   auto idle = timers.after(30s, room, [](Room& r, auto& self) { r.drop_silent(); });
//   idle.rearm(30s);                                  // on each message: push it out
//   auto ping = timers.after(1s, typed, ping_message{});  // basic_actor: a Message
//
// Where time comes from (no thread per actor, nor per timer):
//   start()          one thread of the service's: it sleeps until the next deadline (or a
//                    schedule that makes it earlier) and sends the due messages itself;
//   start(executor)  the same thread sends each due batch, and the actors it won run as
//                    one job on the executor (a thread_pool, an Asio adapter);
//   run_due()        the user's loop (a game server's tick) sends what is due; with
//                    next_deadline() and set_wakeup() an event loop (Asio's steady_timer,
//                    epoll's timerfd) waits exactly as long as needed (docs/timers.md).
// Pending timers live in a hierarchical timing wheel (4 levels of 256 slots, Varghese
// and Lauck; the resolution is the power of two nanoseconds at or above
// options.resolution: 2^20 ns = 1.05 ms by default): scheduling, re-arming and cancelling
// are O(1) under a spin lock of the calling thread's shard of the service (threads do not
// share one while each works on its own timers), with no allocation in the steady state, however
// many distinct actors the timers aim at (96-byte entries from the service's pool, in
// chunks returned to the allocator once wholly free; a table of the actors with timers,
// grown only past its highest count). Due
// messages are sent with try_post / try_send from the driving thread, as from inside a
// handler: an idle actor the send wins joins the driving thread's run queue, and runs
// there once the whole batch is sent and the service's locks let go (with start(executor),
// on the executor's worker, while the service's thread waits for the next deadline: it
// never waits for a worker; an actor with an executor may be handed to it). A send refused by a full bounded mailbox is
// retried at the next run and counted (stats().retried): the driver never blocks on an actor.
//
// Guarantees:
//  - Never early: a message is sent at or after its deadline on the service's clock.
//  - actor<State>: the message is a delivery that runs the callable in place only if the
//    timer was not cancelled or re-armed since it was sent: a cancel() that happens
//    before the delivery starts (one made by a handler of the same actor always does)
//    keeps it from running. A periodic timer has at most one delivery pending.
//  - After cancel() returns (or the handle is destroyed), or once the target's destructor
//    has begun, the service never touches the target again: a send of that timer in
//    progress on another thread is waited for.
//  - Destroying the service drops the pending timers (counted in stats().dropped before
//    it goes; their callables are destroyed, never sent). Deliveries already posted run
//    (or do nothing, if cancelled) as usual.
// Not promised: that a basic_actor's message, once sent, can be stopped (it is the user's
// own value in the mailbox); periodic timers for basic_actor (re-arm a one-shot instead).
//
// Actor lifetime: an actor may be destroyed with timers pending. Its destructor, first
// thing, has every live service cancel the timers aimed at it, wait for a send of one of
// them in progress on another thread, and destroy their callables; from then on no
// service touches it. Handles anywhere (also inside the actor's own State) stay valid and
// report the timer over. An actor costs nothing for this: no field, and one relaxed load
// of a null hook while no service exists (docs/timers.md has the cost with services).
//
// Under a handoff::testing::scheduler (a service made while one is in scope on the
// thread), the clock is the scheduler's virtual clock, time events run the wheel (the
// sends become actor events), and start() does nothing.
#pragma once

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

#include "handoff/detail/clock.hpp"
#include "handoff/detail/timer_entry.hpp"
#include "handoff/executor.hpp"
#include "handoff/timer.hpp"

namespace handoff {

template <class State>
class actor;
template <class Message, class Handler>
class basic_actor;
namespace detail {
class timer_callback;
}

class timer_service {
 public:
  // Allocates the wheel (8 KiB) and one pool chunk. Under a test scheduler, uses its clock.
  explicit timer_service(timer_options o = {});
  // Stops the driving thread (waits for a batch it is sending), then drops the pending
  // timers without sending them. Handles stay valid and report the timer over. From a
  // handler the service runs (on its thread, in run_due(), in a batch on the executor) it
  // cannot wait for that batch: it drops the pending timers and the rest of the batch,
  // and the thread ends after the batch on its own; the service's state goes when the
  // batch ends.
  ~timer_service();
  timer_service(const timer_service&) = delete;
  timer_service& operator=(const timer_service&) = delete;

  // Starts the service's thread, also again after stop(); throws std::system_error if it
  // cannot, std::logic_error if already started. With an executor, the thread sends each
  // due batch and the actors it won run as one job there (the thread does not wait for
  // it); the executor must outlive those jobs. Not concurrently with stop().
  void start();
  void start(executor_ref ex);
  // Joins the thread, after the batch it is sending. Idempotent; the destructor calls it.
  // From a handler the service runs, the thread cannot be joined: it sends nothing after
  // that batch and ends on its own; start() may be called right away.
  void stop() noexcept;

  // Sends every message due at `now` (default: the service's clock) from this thread, and
  // returns how many were accepted. One driver at a time: a concurrent call waits. Then
  // (at top level) runs the handlers of the idle actors it won on this thread, after the
  // whole batch is sent; inside a handler they run after that handler. Thread-safe; also
  // from a handler it runs. Throws std::logic_error when called while this service's
  // batch is being sent on this thread (from a payload's destructor, say).
  std::size_t run_due();
  std::size_t run_due(std::chrono::steady_clock::time_point now);
  // The earliest deadline pending (a retry: now), time_point::max() when none, or when
  // only "never" timers are pending (a duration or time point beyond what steady_clock
  // counts, such as hours::max(): they saturate, never wrap into the past). Thread-safe.
  [[nodiscard]] std::chrono::steady_clock::time_point next_deadline() const;
  // w() is called, on a scheduling thread with no lock held, when a schedule makes the
  // earliest deadline earlier than the last next_deadline() returned: an event loop
  // re-arms its wait (call next_deadline() from there). Set before scheduling.
  void set_wakeup(work w) noexcept;
  // The service's clock (steady_clock, or the test scheduler's virtual one).
  [[nodiscard]] std::chrono::steady_clock::time_point now() const noexcept;
  [[nodiscard]] timer_stats stats() const;

  // Thread-safe, from any thread or handler. Sends f (invoked as f(state, self) or
  // f(state), as by actor::post) to `a` after d, at t, or every period (the first tick a
  // period from now). O(1): this thread's shard's spin lock, the clock, and moving f into the entry (a
  // callable up to 24 bytes, 8-aligned, whose move cannot throw, is stored inline; a
  // larger one is moved to the heap, one allocation). Throws std::bad_alloc when the
  // pool or the table of targets must grow, or this thread's shard is made (its first
  // schedule here), and memory is out, or what moving f throws; then nothing is scheduled.
  template <class State, class F, class Rep, class Period>
    requires(actor<State>::template is_handler<std::decay_t<F>>)
  [[nodiscard]] timer after(std::chrono::duration<Rep, Period> d, actor<State>& a, F&& f) {
    return make<on_actor<State, std::decay_t<F>>>(deadline_after(d), 0, detail::timer_kind::once, &a,
                                                  std::forward<F>(f));
  }
  template <class State, class F>
    requires(actor<State>::template is_handler<std::decay_t<F>>)
  [[nodiscard]] timer at(std::chrono::steady_clock::time_point t, actor<State>& a, F&& f) {
    return make<on_actor<State, std::decay_t<F>>>(deadline_at(t), 0, detail::timer_kind::once, &a, std::forward<F>(f));
  }
  template <class State, class F, class Rep, class Period>
    requires(actor<State>::template is_handler<std::decay_t<F>>)
  [[nodiscard]] timer every(std::chrono::duration<Rep, Period> period, actor<State>& a, F&& f,
                            repeat how = repeat::fixed_rate) {
    const std::int64_t p = std::max<std::int64_t>(1, detail::to_ns_saturating(period));
    const auto kind = how == repeat::fixed_rate ? detail::timer_kind::fixed_rate : detail::timer_kind::fixed_delay;
    return make<on_actor<State, std::decay_t<F>>>(deadline_after(period), p, kind, &a, std::forward<F>(f));
  }
  // basic_actor: sends m (moved in now, moved out once) with try_send after d or at t.
  // Message's move must not throw. Thread-safe; allocates as above.
  template <class Message, class Handler, class Rep, class Period>
  [[nodiscard]] timer after(std::chrono::duration<Rep, Period> d, basic_actor<Message, Handler>& a, Message m) {
    return make<on_basic<Message, Handler>>(deadline_after(d), 0, detail::timer_kind::once, &a, std::move(m));
  }
  template <class Message, class Handler>
  [[nodiscard]] timer at(std::chrono::steady_clock::time_point t, basic_actor<Message, Handler>& a, Message m) {
    return make<on_basic<Message, Handler>>(deadline_at(t), 0, detail::timer_kind::once, &a, std::move(m));
  }

 private:
  friend class detail::timer_callback;  // the keyed mutex's deadlines (lib/timer/timer_callback.hpp)

  template <class Rep, class Period>
  [[nodiscard]] std::int64_t deadline_after(std::chrono::duration<Rep, Period> d) const noexcept {
    return detail::deadline_after(detail::timer_deadline_now(core_), d);
  }
  // A steady_clock time point converts without the clock: no read of it.
  static std::int64_t deadline_at(std::chrono::steady_clock::time_point t) noexcept {
    return detail::deadline_at(0, t);
  }

  // The payload: F itself when it fits inline (moved in under the lock), else F on the heap.
  template <class F>
  // NOLINTNEXTLINE(misc-redundant-expression): clang-tidy 14 misreads the instantiated sizeof test
  static constexpr bool inline_payload = sizeof(F) <= detail::timer_entry::payload_size &&
                                         alignof(F) <= alignof(std::int64_t) && std::is_nothrow_move_constructible_v<F>;
  template <class F>
  static F& payload(detail::timer_entry* e) noexcept {
    if constexpr (inline_payload<F>) {
      return *std::launder(reinterpret_cast<F*>(e->payload));
    } else {
      return **std::launder(reinterpret_cast<F**>(e->payload));
    }
  }
  template <class F>
  static void destroy(detail::timer_entry* e) noexcept {
    if constexpr (inline_payload<F>) {
      payload<F>(e).~F();
    } else {
      delete &payload<F>(e);
    }
  }

  // What an actor<State> receives: runs the payload in place if the timer still wants it.
  template <class State, class F>
  class delivery {
   public:
    delivery(detail::timer_core* c, detail::timer_entry* e, std::uint64_t gen) noexcept : core_(c), e_(e), gen_(gen) {}
    delivery(delivery&& o) noexcept : core_(std::exchange(o.core_, nullptr)), e_(o.e_), gen_(o.gen_) {}
    delivery& operator=(delivery&&) = delete;
    delivery(const delivery&) = delete;
    delivery& operator=(const delivery&) = delete;
    ~delivery() {
      if (core_ != nullptr) detail::timer_delivery_end(core_, e_, false);  // destroyed unrun
    }
    void operator()(State& s, actor<State>& self) {
      detail::timer_core* c = std::exchange(core_, nullptr);
      if (!detail::timer_delivery_begin(c, e_, gen_)) {
        detail::timer_delivery_end(c, e_, false);
        return;
      }
      struct end_guard {  // also when the callable throws (then the error hook takes it)
        detail::timer_core* c;
        detail::timer_entry* e;
        end_guard(detail::timer_core* core, detail::timer_entry* entry) noexcept : c(core), e(entry) {}
        end_guard(const end_guard&) = delete;
        end_guard& operator=(const end_guard&) = delete;
        end_guard(end_guard&&) = delete;
        end_guard& operator=(end_guard&&) = delete;
        ~end_guard() { detail::timer_delivery_end(c, e, true); }
      } guard{c, e_};
      F& f = payload<F>(e_);
      if constexpr (std::invocable<F&, State&, actor<State>&>) {
        std::invoke(f, s, self);
      } else {
        std::invoke(f, s);
      }
    }

   private:
    detail::timer_core* core_;
    detail::timer_entry* e_;
    std::uint64_t gen_;
  };

  template <class State, class F>
  struct on_actor {
    using stored = F;
    static constexpr bool delivers = true;
    static bool ops(detail::timer_core* c, detail::timer_entry* e, std::uint64_t gen, detail::timer_op op) noexcept {
      if (op == detail::timer_op::destroy) {
        destroy<F>(e);
        return true;
      }
      return static_cast<actor<State>*>(e->target)->try_post(delivery<State, F>(c, e, gen));
    }
  };
  template <class Message, class Handler>
  struct on_basic {
    static_assert(std::is_nothrow_move_constructible_v<Message>, "a timer's Message must move without throwing");
    using stored = Message;
    static constexpr bool delivers = false;
    static bool ops(detail::timer_core*, detail::timer_entry* e, std::uint64_t, detail::timer_op op) noexcept {
      if (op == detail::timer_op::destroy) {
        destroy<Message>(e);
        return true;
      }
      // Left as it was when refused (a noexcept move): retried as it is.
      return static_cast<basic_actor<Message, Handler>*>(e->target)->try_send(std::move(payload<Message>(e)));
    }
  };

  template <class On, class A, class T>
  timer make(std::int64_t deadline, std::int64_t period, detail::timer_kind kind, A* target, T&& value) {
    using stored = typename On::stored;
    detail::timer_request r{
        deadline,
        period,
        detail::timer_flag::of(kind, std::is_trivially_destructible_v<stored> && inline_payload<stored>, On::delivers),
        &On::ops,
        target,
        nullptr,
        nullptr};
    if constexpr (inline_payload<stored>) {
      stored f(std::forward<T>(value));  // built outside the lock: its constructor may throw
      r.emplace = [](detail::timer_entry* e, void* src) noexcept {
        ::new (static_cast<void*>(e->payload)) stored(std::move(*static_cast<stored*>(src)));
      };
      r.source = &f;
      if constexpr (!std::is_trivially_move_constructible_v<stored>) {
        return timer(core_, detail::timer_schedule_moving(core_, r));  // its move is user code
      } else {
        return timer(core_, detail::timer_schedule(core_, r));
      }
    } else {
      auto* boxed = new stored(std::forward<T>(value));
      r.emplace = [](detail::timer_entry* e, void* src) noexcept {
        ::new (static_cast<void*>(e->payload)) stored*(static_cast<stored*>(src));
      };
      r.source = boxed;
      try {
        return timer(core_, detail::timer_schedule(core_, r));
      } catch (...) {
        delete boxed;
        throw;
      }
    }
  }

  detail::timer_core* core_;  // outlives the service while handles or deliveries refer to it
};

}  // namespace handoff
