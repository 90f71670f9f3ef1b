// handoff::basic_actor<Message, Handler>: the typed, low-level actor.
//
//   struct counter { long n = 0; void operator()(int delta) { n += delta; } };
//   handoff::basic_actor<int, counter> a;
//   a.send(5);                                    // runs counter{}(5) under the actor
//   bool sent = a.try_send(5);                    // false: a bounded mailbox is full
//   a.send_all(std::vector{1, 2, 3});             // one atomic for the three, run in order
//
// Messages are stored by value in pooled mailbox nodes: no type erasure and no call to
// the allocator per message in the steady state (nodes are recycled through per-thread
// caches; a send that finds the actor idle, with a Message whose move cannot throw, uses
// no node at all: at top level it runs at once, inside a handler it travels in the thread's
// carry slot when that is free). The Handler is the actor's state: it is invoked as
// `handler(std::move(message), self)` if it accepts that (self: this basic_actor), else
// `handler(std::move(message))`, one message at a time. With self, a handler sends itself
// a message later: handoff::after(1s, self, message) (handoff/timer_scope.hpp).
//
// Message and Handler may be incomplete where the actor is only named, so a message can
// carry a pointer to the actor that handles its own type:
//
//   struct pong;
//   struct ping { handoff::basic_actor<int, pong>* reply_to; };
//
// The requirements (Handler invocable with the message, Message move-constructible) are
// checked where send() and defer() are used.
//
// Same protocol and guarantees as handoff::actor (see actor.hpp): mutual exclusion with
// happens-before between handler runs, exactly once, causal FIFO (per-sender FIFO
// included), no threads of its own. Exceptions thrown by the handler go to the error hook of the options.
#pragma once

#include <concepts>
#include <cstdint>
#include <iterator>
#include <memory>
#include <new>
#include <ranges>
#include <type_traits>
#include <utility>

#include "handoff/actor_options.hpp"
#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/actor_turn.hpp"
#include "handoff/run_deferred.hpp"

namespace handoff {

template <class Message, class Handler>
class basic_actor : private detail::actor_base {
 public:
  using message_type = Message;
  using handler_type = Handler;

  // What send() and defer() need (checked there, so that both types may be incomplete
  // where the actor is only named).
  static constexpr bool accepts_messages() noexcept {
    return std::move_constructible<Message> &&
           (std::invocable<Handler&, Message&&, basic_actor&> || std::invocable<Handler&, Message&&>);
  }

  template <class... Args>
    requires std::constructible_from<Handler, Args...>
  explicit basic_actor(Args&&... args) : handler_(std::forward<Args>(args)...) {}

  // Throws std::invalid_argument for a budget without an executor.
  template <class... Args>
    requires std::constructible_from<Handler, Args...>
  explicit basic_actor(actor_options options, Args&&... args)
      : actor_base(std::move(options)), handler_(std::forward<Args>(args)...) {}
  template <class... Args>
    requires std::constructible_from<Handler, Args...>
  explicit basic_actor(std::shared_ptr<const actor_options> options, Args&&... args)
      : actor_base(std::move(options)), handler_(std::forward<Args>(args)...) {}

  // Same destruction semantics as handoff::actor: waits for, or runs, pending messages.
  ~basic_actor() { shut_down(); }
  basic_actor(const basic_actor&) = delete;
  basic_actor& operator=(const basic_actor&) = delete;

  // Thread-safe, approximate: the messages accepted and not yet finished, the one running
  // included, plus those its owner has run and not yet accounted for (an owner subtracts
  // once per round). 0 means idle at the moment of the load; a snapshot for health checks
  // and metrics, not a synchronization point (relaxed load).
  [[nodiscard]] std::uint64_t pending() const noexcept { return pending_count(); }
  [[nodiscard]] std::size_t blocked_senders() const noexcept { return waiting_senders(); }

  // Thread-safe. Delivers `m` to the handler once, under the actor's mutual exclusion; may
  // run it (and other queued messages) on the calling thread before returning. Uses a
  // pooled node when the actor is busy, the caller is inside a handler, or Message's move
  // may throw (every send, then); inside a handler, a send that wins an idle actor carries
  // the message in the thread's carry slot instead when it fits (64 bytes) and the slot is
  // free (see actor::post). Throws mailbox_full when a bounded mailbox is full (as
  // actor::post does), and, when Message's move constructor may throw, std::bad_alloc or
  // what that move throws; after a throw nothing was sent. With a noexcept move, running
  // out of memory while the actor is busy terminates.
  void send(Message m) requires(accepts_messages()) {
    submit<build_first>(
        make_node(m), [&] { deliver(std::move(m)); }, carry_of(m));
  }

  // Thread-safe. send(), except on a full bounded mailbox: returns false at once, having
  // sent nothing, and `m` is left as it was (unless Message's move may throw: then it was
  // moved from). Never waits for room and never throws mailbox_full.
  [[nodiscard]] bool try_send(Message&& m) requires(accepts_messages()) {
    return submit<build_first, true>(
        make_node(m), [&] { deliver(std::move(m)); }, carry_of(m));
  }
  [[nodiscard]] bool try_send(const Message& m) requires(accepts_messages() && std::copy_constructible<Message>) {
    return try_send(Message(m));
  }

  // Thread-safe. Sends a range of messages (or [first, last)), in order, as one batch: actor::post_all's
  // contract (see actor.hpp): one node built first, counted with one atomic, run one after
  // another (the rest stays first in the mailbox after a throw or a spent budget), all or
  // none on a bounded mailbox. try_send_all(): as actor::try_post_all.
  template <std::ranges::input_range R>
    requires(accepts_messages() && std::constructible_from<Message, std::ranges::range_reference_t<R>>)
  void send_all(R&& messages) { send_all(std::ranges::begin(messages), std::ranges::end(messages)); }
  template <std::input_iterator It, std::sentinel_for<It> End>
    requires(accepts_messages() && std::constructible_from<Message, std::iter_reference_t<It>>)
  void send_all(It first, End last) { submit_batch<false>(build_nodes(std::move(first), std::move(last))); }
  template <std::ranges::input_range R>
    requires(accepts_messages() && std::constructible_from<Message, std::ranges::range_reference_t<R>>)
  [[nodiscard]] bool try_send_all(R&& messages) {
    return try_send_all(std::ranges::begin(messages), std::ranges::end(messages));
  }
  template <std::input_iterator It, std::sentinel_for<It> End>
    requires(accepts_messages() && std::constructible_from<Message, std::iter_reference_t<It>>)
  [[nodiscard]] bool try_send_all(It first, End last) {
    return submit_batch<true>(build_nodes(std::move(first), std::move(last)));
  }

  // Thread-safe. Like send(), but never runs the handler on the calling thread now: the
  // same contract as actor::defer (see actor.hpp). Always uses a pooled node. Throws
  // mailbox_full as send() does, std::bad_alloc or what Message's move throws; then
  // nothing was sent.
  void defer(Message m) requires(accepts_messages()) {
    detail::message* n = make_node(m)();
    submit_deferred(n, admit<false>(n));
  }

 private:
  // Building the node may throw: build it before counting (see actor_base::submit).
  static constexpr bool build_first = !std::is_nothrow_move_constructible_v<Message>;
  static auto make_node(Message& m) {
    return [&m] { return static_cast<detail::message*>(detail::new_node<node>(std::move(m))); };
  }

  // A batch is one node (detail/batch_node.hpp) holding its messages by value.
  template <class It, class End>
  static detail::message_batch build_nodes(It first, End last) {
    return detail::build_batch<Message, &deliver_batched>(std::move(first), std::move(last));
  }
  static void deliver_batched(detail::actor_base* a, Message& m) {
    static_cast<basic_actor*>(a)->deliver(std::move(m));
  }

  // How a nested send that wins an idle actor carries m with it (see actor_base::submit).
  static auto carry_of(Message& m) {
    if constexpr (detail::carriable<Message>()) {
      return [&m](void* at) {
        ::new (at) Message(std::move(m));
        return &run_carried;
      };
    } else {
      return detail::no_carry{};
    }
  }
  static void handle_carried(detail::actor_base* a) {
    static_cast<basic_actor*>(a)->deliver(detail::take_carried<Message>());
  }
  static bool run_carried(detail::actor_base* a) noexcept {
    return static_cast<basic_actor*>(a)->run_carried_turn(&handle_carried);
  }

  void deliver(Message&& m) {
    if constexpr (std::invocable<Handler&, Message&&, basic_actor&>) {
      handler_(std::move(m), *this);
    } else {
      handler_(std::move(m));
    }
  }

  struct node final : detail::message {
    explicit node(Message&& m) : msg(std::move(m)) { invoke = &run; }
    Message msg;

    static bool run(detail::message* m, detail::actor_base* a, detail::turn_tally* turn) {
      detail::node_guard<node> guard{static_cast<node*>(m)};
      if (turn != nullptr) static_cast<basic_actor*>(a)->deliver(std::move(guard.node->msg));
      return true;
    }
  };

  Handler handler_;
};

}  // namespace handoff
