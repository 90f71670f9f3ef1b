// handoff::actor<State>: a State object that handlers reach one at a time, run by
// whichever thread sends to it. No thread of its own, no polling.
//
//   handoff::actor<Account> a{100};                  // State constructed in place
//   a.post([](Account& s) { s.deposit(5); });        // fire and forget
//   std::future<int> f = a.ask([](Account& s) { return s.balance(); });
//   int b = co_await a.async_ask([](Account& s) { return s.balance(); });
//   int c = a.ask_for([](Account& s) { return s.balance(); }, 50ms);  // or ask_timeout
//   a.post([](Account& s, handoff::actor<Account>& self) { ... });  // a handler may take its actor
//   a.defer([](Account& s) { s.audit(); });          // never runs on this thread now
//   bool sent = a.try_post([](Account& s) { ... });  // false: a bounded mailbox is full
//   a.post_all(handlers);                             // a range of handlers, one atomic for all
//
// Every handler is invoked as f(state) or f(state, self), self being the actor running it
// (to send to itself, hand itself out, or time itself: handoff/timer_scope.hpp's after).
// State may be incomplete where actor<State> is only named (a message type can hold an
// actor<State>* of the state that handles it).
//
// Who runs a handler: the sender whose message finds the actor idle becomes its owner and
// runs that message, then every message that arrived meanwhile, then releases it. Other
// senders only enqueue and return. See detail/actor_base.hpp for the protocol.
//
// Guarantees:
//  - Mutual exclusion: at most one handler of an actor runs at a time, and everything a
//    handler wrote is visible to the next handler of the same actor, on whatever thread.
//  - Exactly once: every message accepted by post/ask/async_ask runs exactly once (unless
//    the actor is destroyed by one of its own handlers; see ~actor).
//  - Causal FIFO: if one send happens-before another to the same actor (the same thread,
//    or threads synchronized through a latch, a mutex or an atomic), they run in that
//    order. Per-sender FIFO is the special case of one thread.
//  - No dedicated threads: without an executor, handlers run only on sending threads.
//
// Not promised: any order between concurrent sends (neither happens-before the other); fairness between actors
// (an owner under a steady stream keeps draining unless a budget hands it off); that the
// caller of post() returns quickly (it may become the owner and drain for a while).
#pragma once

#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <ranges>
#include <type_traits>
#include <utility>
#include <variant>

#include "handoff/actor_options.hpp"
#include "handoff/ask_timeout.hpp"
#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/actor_turn.hpp"
#include "handoff/detail/ask_awaiter.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/run_deferred.hpp"

namespace handoff {

template <class State>
class actor : private detail::actor_base {
 public:
  // What post, ask, async_ask and defer take: a callable invoked as f(state, self) or f(state).
  template <class F>
  static constexpr bool is_handler = std::invocable<F&, State&, actor&> || std::invocable<F&, State&>;
  // What post_all takes: a range's iterator to handlers, each message built from *it.
  template <class It>
  static constexpr bool batchable =
      is_handler<std::iter_value_t<It>>&& std::constructible_from<std::iter_value_t<It>, std::iter_reference_t<It>>;

 private:
  template <class, class>
  friend class detail::ask_awaiter;  // async_ask's awaiter: a mailbox node of this actor

  template <class F>
  static decltype(auto) call(F& f, actor& self) {
    if constexpr (std::invocable<F&, State&, actor&>) {
      return std::invoke(f, self.state_, self);
    } else {
      return std::invoke(f, self.state_);
    }
  }
  template <class F>
  using result_of = decltype(call(std::declval<F&>(), std::declval<actor&>()));

 public:
  using state_type = State;

  // Constructs State from args. Allocates nothing (an actor is sizeof(State) + 56 bytes
  // before padding: 64 for actor<int>).
  template <class... Args>
    requires std::constructible_from<State, Args...>
  explicit actor(Args&&... args) : state_(std::forward<Args>(args)...) {}

  // With options (budget, executor, error hook); throws std::invalid_argument for a budget
  // without an executor or a negative max_time. The shared_ptr form lets many actors
  // share one options object; a null pointer means no options.
  template <class... Args>
    requires std::constructible_from<State, Args...>
  explicit actor(actor_options options, Args&&... args)
      : actor_base(std::move(options)), state_(std::forward<Args>(args)...) {}
  template <class... Args>
    requires std::constructible_from<State, Args...>
  explicit actor(std::shared_ptr<const actor_options> options, Args&&... args)
      : actor_base(std::move(options)), state_(std::forward<Args>(args)...) {}

  // Destroying an actor (sending to it concurrently with its destruction is a precondition
  // violation, as for any object):
  //  - idle: returns at once;
  //  - busy on another thread or an executor: blocks until every message sent before the
  //    destructor started has run;
  //  - owned by this thread but not running (queued on its run queue by a nested send):
  //    runs those messages here first;
  //  - from one of its own handlers: the messages still queued are destroyed without
  //    running (their ask() futures and async_ask awaiters report
  //    std::future_error(broken_promise)), and the handler must not touch the state after
  //    the destructor returns.
  // With an executor, destroying a busy actor needs that executor still running.
  // Two actors whose handlers, on two threads, destroy each other deadlock (not detected).
  ~actor() { shut_down(); }
  actor(const actor&) = delete;
  actor& operator=(const actor&) = delete;

  // Thread-safe. Runs f(state) once, eventually, under the actor's mutual exclusion. May
  // run f and other queued messages on the calling thread before returning (never from
  // inside a handler: there it only enqueues): at top level, a post that becomes the owner
  // drains the actor, then runs this thread's run queue (actors it won in nested sends,
  // coroutines it answered, granted keyed waiters); a budget bounds the actor's turn. The
  // owner may spin, then yield, while another sender is between counting and enqueueing.
  // Allocates a pooled node (per-thread slabs, no allocator call in the steady state)
  // only if the actor is busy, the caller is inside a handler, or building decay_t<F>
  // from f may throw (then the node is built first). Inside a handler, a post that wins an
  // idle actor needs no node either when decay_t<F> fits the thread's carry slot (64
  // bytes, built and moved without throwing) and the slot is free: one message per
  // thread at a time, so a forwarding chain carries every hop and a fan-out its first. Exceptions thrown by f go to the
  // error hook. Throws if building the message throws, and mailbox_full when a bounded
  // mailbox is full (see actor_options::capacity: under full_policy::block, a top-level
  // caller first waits for room); after a throw nothing was sent. Otherwise never throws,
  // and running out of memory for a node terminates.
  template <class F>
    requires(is_handler<std::decay_t<F>>)
  void post(F&& f) {
    submit<build_first<F>>(
        make_post_node<F>(f), [&] { call(f, *this); }, carry_of<F>(f));
  }

  // Thread-safe. post(), except on a full bounded mailbox: returns false at once, having
  // run and sent nothing (f is left as it was unless building decay_t<F> from it may
  // throw: then it was moved into a node that was destroyed). Never waits for room and
  // never throws mailbox_full; an unbounded actor always accepts (true).
  template <class F>
    requires(is_handler<std::decay_t<F>>)
  [[nodiscard]] bool try_post(F&& f) {
    return submit<build_first<F>, true>(
        make_post_node<F>(f), [&] { call(f, *this); }, carry_of<F>(f));
  }

  // Thread-safe. Posts a range of handlers (or [first, last)), in order, as one batch: one node
  // holds them all (copies; move iterators move; a single-pass range is gathered first), 32 +
  // k * sizeof(handler) bytes, pooled up to 512, else from operator new. One atomic counts
  // them, one exchange links them: they run one after another, no other sender's message
  // between them, each exactly once as by post(); a throw or a spent budget leaves the rest
  // first in the mailbox. A caller that finds the actor idle runs them as post() runs its one.
  // Bounded mailbox: all or none (counting messages), waiting for room for the whole batch
  // (or mailbox_full) as post() does; a batch larger than the capacity, or under block than
  // half of it (one message always may), throws std::invalid_argument. After a throw nothing
  // was sent. try_post_all(): false instead of waiting or mailbox_full, having sent nothing.
  template <std::ranges::input_range R>
    requires(batchable<std::ranges::iterator_t<R>>)
  void post_all(R&& handlers) { post_all(std::ranges::begin(handlers), std::ranges::end(handlers)); }
  template <std::input_iterator It, std::sentinel_for<It> End>
    requires(batchable<It>)
  void post_all(It first, End last) { submit_batch<false>(build_posts(std::move(first), std::move(last))); }
  template <std::ranges::input_range R>
    requires(batchable<std::ranges::iterator_t<R>>)
  [[nodiscard]] bool try_post_all(R&& handlers) {
    return try_post_all(std::ranges::begin(handlers), std::ranges::end(handlers));
  }
  template <std::input_iterator It, std::sentinel_for<It> End>
    requires(batchable<It>)
  [[nodiscard]] bool try_post_all(It first, End last) {
    return submit_batch<true>(build_posts(std::move(first), std::move(last)));
  }

  // Thread-safe. Like post(), but never runs f on the calling thread now: if the actor is
  // busy, its owner runs f; if it is idle, the caller becomes its owner and hands it over
  // at once: to the actor's executor, or, without one, to this thread's run queue, behind
  // the work already queued there (FIFO). That queue runs at this thread's next drain:
  // after the current handler when called from one, else the next send this thread runs
  // at top level, handoff::run_deferred(), a blocking call (ask(), a keyed lock, ~actor),
  // or the thread's exit. Every message sent before f runs before it, as for post().
  // From one of this actor's own handlers, defer() also yields: the actor's turn ends
  // after that handler and goes on later (on its executor, or behind the work already on
  // this thread's run queue), so a handler that continues its work in deferred steps
  // lets other actors run in between; the actors it filled up, for instance.
  // Use it to start many actors before any runs, or to leave a handler's caller free.
  // Allocates a pooled node. Throws only what building decay_t<F> throws, or
  // std::bad_alloc; then nothing was sent. If the executor's execute() throws, the actor
  // goes to this thread's run queue instead.
  // Throws mailbox_full as post() does.
  template <class F>
    requires(is_handler<std::decay_t<F>>)
  void defer(F&& f) {
    detail::message* m = make_post_node<F>(f)();
    submit_deferred(m, admit<false>(m));
  }

  // Thread-safe. Runs f(state) once under the actor's mutual exclusion; the future holds its
  // result (not decayed: a reference returned by f stays a reference into the state) or
  // its exception. If the actor is idle, f runs on the calling thread before ask()
  // returns, even from inside another actor's handler, so waiting on the future there is
  // safe; at top level the caller then goes on draining, as for post(). If the actor is
  // busy and the caller is inside a handler, the caller first runs its run queue (actors
  // it owns without running them included), since it may block on the answer. Allocates a
  // pooled node and the promise's shared state. Throws
  // std::system_error(resource_deadlock_would_occur) when called from a handler of this
  // same actor (the answer could never be waited for), mailbox_full as post() does,
  // std::bad_alloc, or what building decay_t<F> throws; after a throw nothing was sent.
  // Hazard: handlers of two actors on two threads waiting on each other's ask() deadlock.
  template <class F>
    requires(is_handler<std::decay_t<F>>)
  [[nodiscard]] std::future<result_of<std::decay_t<F>>> ask(F&& f) {
    if (detail::tls.top != nullptr) check_not_draining();
    auto* m = detail::new_node<ask_node<std::decay_t<F>>>(std::forward<F>(f));
    auto answer = m->promise.get_future();
    const admission a = admit<false>(m);
    if (detail::tls.driver != nullptr) [[unlikely]] {
      ask_driven(m, a, &answered<result_of<std::decay_t<F>>>, &answer);  // a test scheduler's event
      return answer;
    }
    if (a != admission::owner) {  // queued, or offered: an ask never takes over (it waits for its answer)
      enqueue(m);
      // The caller may block on the answer: first run what this thread owns through its
      // run queue (the target itself, perhaps), which nobody else can run.
      detail::run_before_blocking();
      return answer;
    }
    enqueue_first(m);
    drain_now(0);  // idle: answer now, even when nested inside another handler
    return answer;
  }

  // Thread-safe. ask(f), then blocks until the answer or the deadline (`d` from now, or
  // `t` on any clock): returns f's result (a reference stays one) or rethrows f's
  // exception; throws ask_timeout (ask_timeout.hpp) if the answer is not there by then.
  // f was accepted either way and runs exactly once; a late result or exception is
  // destroyed unread with the request's shared state. An idle actor answers inline, as
  // for ask(), so the deadline only bounds the wait for a busy one (from inside a
  // handler too: a handler waiting on an actor whose handler waits on it gets
  // ask_timeout instead of a deadlock). A deadline already passed still sends f. Waits
  // saturate: duration::max() waits for ever. Allocates and throws as ask() does.
  template <class F, class Rep, class Period>
    requires(is_handler<std::decay_t<F>>)
  result_of<std::decay_t<F>> ask_for(F&& f, std::chrono::duration<Rep, Period> d) {
    return answer_by(ask(std::forward<F>(f)), detail::deadline_after(detail::now_ns(), d));
  }
  template <class F, class Clock, class Dur>
    requires(is_handler<std::decay_t<F>>)
  result_of<std::decay_t<F>> ask_until(F&& f, std::chrono::time_point<Clock, Dur> t) {
    return answer_by(ask(std::forward<F>(f)), detail::deadline_at(detail::now_ns(), t));
  }

  // Thread-safe, approximate: the messages accepted and not yet finished, the one running
  // included, plus those its owner has run and not yet accounted for (an owner subtracts
  // once per round). 0 means idle at the moment of the load; a snapshot for health checks
  // and metrics, not a synchronization point (relaxed load).
  [[nodiscard]] std::uint64_t pending() const noexcept { return pending_count(); }

  // Thread-safe snapshot: the senders waiting for room in this bounded mailbox (0 when
  // unbounded), each asleep or about to sleep. Takes a mutex shared by a few actors.
  [[nodiscard]] std::size_t blocked_senders() const noexcept { return waiting_senders(); }

  // Awaitable form of ask(): `co_await a.async_ask(f)` yields f's result or rethrows its
  // exception; f's run happens-before the code after co_await. Never blocks a thread. If the
  // actor is idle and the caller is not inside a handler, f runs inline and the coroutine
  // does not suspend; otherwise the coroutine is resumed from the run queue of the thread
  // that ran f, after that thread has finished draining the actor (so code after co_await
  // never runs under the actor's exclusion); from inside a handler, an idle target is queued
  // on this thread's run queue, so the coroutine resumes on this thread after the current
  // handler (unless the target's executor takes it over to spread work: see run_queue.hpp;
  // then on the executor's thread). co_await throws std::future_error(broken_promise) if the
  // actor is destroyed by its own handler before f ran, and mailbox_full at once if a bounded
  // mailbox is full (whatever its policy). The awaiter is the mailbox node: no allocation; it
  // is not copyable: await it at once. A reference returned by f is copied. Destroying the
  // coroutine while it is suspended here is not supported (its node is still queued).
  template <class F>
    requires(is_handler<std::decay_t<F>>)
  [[nodiscard]] auto async_ask(F&& f) { return detail::ask_awaiter<actor, std::decay_t<F>>(*this, std::forward<F>(f)); }

 private:
  // ask_for's wait: the answer of `answer` by `deadline` (detail/clock.hpp), else ask_timeout.
  template <class R>
  static R answer_by(std::future<R> answer, std::int64_t deadline) {
    if (deadline != detail::no_deadline && answer.wait_until(std::chrono::steady_clock::time_point(
                                               std::chrono::nanoseconds(deadline))) != std::future_status::ready) {
      throw ask_timeout();
    }
    return answer.get();
  }

  // Building the node may throw: build it before counting (see actor_base::submit).
  template <class F>
  static constexpr bool build_first = !std::is_nothrow_constructible_v<std::decay_t<F>, F&&>;
  template <class F>
  static auto make_post_node(F& f) {
    return [&f] {
      return static_cast<detail::message*>(detail::new_node<post_node<std::decay_t<F>>>(std::forward<F>(f)));
    };
  }

  template <class It, class End, class Fn = std::iter_value_t<It>>
  static detail::message_batch build_posts(It first, End last) {
    return detail::build_batch<Fn, &run_batched<Fn>>(std::move(first), std::move(last));
  }
  template <class Fn>
  static void run_batched(detail::actor_base* a, Fn& f) {
    call(f, *static_cast<actor*>(a));
  }

  // How a nested post that wins an idle actor carries f with it (see actor_base::submit):
  // when the closure fits the thread's carry slot and building it cannot throw.
  template <class F>
  static auto carry_of(F& f) {
    using closure = std::decay_t<F>;
    if constexpr (detail::carriable<closure>() && std::is_nothrow_constructible_v<closure, F&&>) {
      return [&f](void* at) {
        ::new (at) closure(std::forward<F>(f));
        return &run_carried<closure>;
      };
    } else {
      return detail::no_carry{};
    }
  }
  template <class Fn>
  static void handle_carried(detail::actor_base* a) {
    Fn fn = detail::take_carried<Fn>();
    call(fn, *static_cast<actor*>(a));
  }
  template <class Fn>
  static bool run_carried(detail::actor_base* a) noexcept {
    return static_cast<actor*>(a)->run_carried_turn(&handle_carried<Fn>);
  }

  template <class Fn>
  struct post_node final : detail::message {
    template <class A>
    // NOLINTNEXTLINE(bugprone-forwarding-reference-overload): nodes are never copied or moved
    explicit post_node(A&& a) : fn(std::forward<A>(a)) {
      invoke = &run;
    }
    Fn fn;

    static bool run(detail::message* m, detail::actor_base* a, detail::turn_tally* turn) {
      detail::node_guard<post_node> guard{static_cast<post_node*>(m)};
      if (turn != nullptr) call(guard.node->fn, *static_cast<actor*>(a));
      return true;
    }
  };

  template <class R>
  static bool answered(const void* f) noexcept {
    return static_cast<const std::future<R>*>(f)->wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

  template <class Fn>
  struct ask_node final : detail::message {
    template <class A>
    // NOLINTNEXTLINE(bugprone-forwarding-reference-overload): nodes are never copied or moved
    explicit ask_node(A&& a) : fn(std::forward<A>(a)) {
      invoke = &run;
    }
    Fn fn;
    std::promise<result_of<Fn>> promise;  // destroyed unrun: broken_promise

    static bool run(detail::message* m, detail::actor_base* a, detail::turn_tally* turn) {
      detail::node_guard<ask_node> guard{static_cast<ask_node*>(m)};
      if (turn == nullptr) return true;
      auto& self = *guard.node;
      try {
        if constexpr (std::is_void_v<result_of<Fn>>) {
          call(self.fn, *static_cast<actor*>(a));
          self.promise.set_value();
        } else {
          self.promise.set_value(call(self.fn, *static_cast<actor*>(a)));
        }
      } catch (...) {
        self.promise.set_exception(std::current_exception());
      }
      return true;
    }
  };

  State state_;
};

}  // namespace handoff
