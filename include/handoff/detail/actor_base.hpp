// The hand-off protocol, shared by every actor type.
//
// State of an actor: its ownership word, the number of messages accepted and not yet run,
// and its mailbox. A non-zero count means exactly one thread owns it (it alone runs handlers).
//
//   send:    prev = count.fetch_add(1)          (acquire)
//            prev != 0 -> mailbox.push(m), return: the owner will run it
//            prev == 0 -> this thread is the owner: run m inline, then drain
//   drain:   pop and run until the mailbox looks empty, X = messages run this round;
//            count.fetch_sub(X) == X -> released  (release)
//            otherwise messages were counted meanwhile: X = 0 and keep draining; if the
//            mailbox is empty with X == 0, a sender is between its fetch_add and its push:
//            wait for it (pause, then yield) and never release.
//   budget:  spent -> fetch_sub(X) first; only if the count is still non-zero hand the
//            still-owned actor to the executor (posting first would let the continuation
//            run while our subtraction reaches 0: two owners). No executor: offer the
//            drain to the next top-level sender (the hand-over, detail/ownership.hpp).
//
// The count is incremented before the enqueue, so a drainer never runs a message not yet
// counted. `fetch_sub` releases once per round and cannot fail spuriously (a weak CAS could
// reach 0 while the owner still drains); both in lockfree_ownership (detail/ownership.hpp).
//
// Nested sends: a thread that wins an actor while draining one (inside a handler) does not
// recurse: the actor joins its run queue (detail/run_queue.hpp), drained after the current
// one. The won message travels in the thread's carry slot (no node, no push) when the slot
// is free and the message fits it; else it goes in front of the mailbox through the owner's
// end (no atomic). The slot is free again once that actor's turn starts, so a forwarding
// chain carries every hop and a fan-out carries its first send.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>

#include "handoff/actor_options.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/message.hpp"
#include "handoff/detail/node_pool.hpp"
#include "handoff/detail/ownership.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/detail/tls_model.hpp"

namespace handoff::detail {

// The budget of an unbounded actor without an executor whose options set none.
inline constexpr std::uint32_t default_max_messages = 256;

// How long a claimant waits for the hand-over before it withdraws (design.md); tests set it.
inline std::atomic<std::int64_t> successor_wait_ns{1'000'000};

// A runnable of the run queue (detail/run_queue.hpp): its base is the queue's link word.
class actor_base : public runnable {
 public:
  actor_base(const actor_base&) = delete;
  actor_base& operator=(const actor_base&) = delete;

  // The run queue's interface (run_runnable(), which the run queue calls on this thread
  // with tls.top == the current frame): drains the actor, which this thread owns, or, when
  // more work waits on the queue and its executor reports idle workers, hands it to that
  // executor (spreading work over a pool) and returns false.
  // Inline in lib/actor/actor_base.cpp: called only by run_runnable() there.
  bool run_from_queue() noexcept;

 protected:
  using admission = lockfree_ownership::admission;

  actor_base() noexcept {
    if (tls.driver != nullptr) [[unlikely]]
      name_under_driver();
  }
  // Both throw std::invalid_argument: a negative time, a bounded actor's budget without an executor.
  explicit actor_base(actor_options options);
  explicit actor_base(std::shared_ptr<const actor_options> options);
  ~actor_base() = default;

  // --- protocol steps, each one atomic; small so that tests can drive them one by one ---

  // Counts one message: `owner` (the caller won the 0 -> 1 hand-off) or `queued`.
  // acquire; pairs with the release in try_release(): everything the previous
  // owner's handlers wrote is visible to the handlers this thread runs.
  [[nodiscard]] admission try_acquire() noexcept { return core_.try_acquire(); }

  // Owner only. Uncounts `ran` messages that were run; true if that released the actor.
  // release; pairs with the acquire in try_acquire() of the next owner. A bounded actor's
  // release to half its capacity wakes the oldest sender waiting for room, which wakes the
  // next while the mailbox stays at most half full (lib/actor/mailbox_room.cpp).
  [[nodiscard]] bool try_release(std::uint64_t ran) noexcept {
    if (options_ != nullptr && options_->capacity != 0) [[unlikely]]
      return try_release_bounded(ran);
    return core_.try_release(ran);
  }
  // try_release() where the actor is known to be unbounded (nobody waits for room).
  [[nodiscard]] bool try_release_unbounded(std::uint64_t ran) noexcept { return core_.try_release(ran); }

  // Loser of the hand-off: hand the (already counted) message to the owner; then hand a
  // bounded actor's room on (wait_or_throw_full()), or try to take the drain over (offered_to()).
  void enqueue(message* m) noexcept {
    core_.enqueue(m);
    if (tls.after_push != nullptr) [[unlikely]]
      after_push();
  }
  // After an `offered` admission: the push's after_push() calls take_over(). Cold, out of line.
  [[gnu::cold, gnu::noinline]] void offered_to() noexcept;
  // `offered` and enqueued: at top level, claim the drain, wait for the old owner's last handler
  // (at most successor_wait_ns, then withdraw), drain. In a handler or a test scheduler: stay queued.
  void take_over() noexcept;

  // Winner of the hand-off: its own message goes in front, through the owner's end (no atomic).
  void enqueue_first(message* m) noexcept { core_.push_front(m); }

  // Winner of the hand-off while this thread is inside a handler: no recursion, the
  // actor joins this thread's run queue carrying `m`, its first message.
  void run_after_current(message* m) noexcept;
  // The same once its first message is in place: the actor joins the run queue (push_now).
  void queue_now() noexcept { push_now(entry_of(this), &ready_next); }

  // A send that never runs here (defer), counted as `a` by admit(): a loser enqueues `m`; the
  // winner puts it in front and continues on its executor, else at the FIFO end of this thread's
  // run queue (its next top-level send or grant, run_deferred(), a blocking call, or its exit).
  void submit_deferred(message* m, admission a) noexcept;

  // Counts one message for a send: owner (the caller won the actor) or queued. A bounded
  // actor's full mailbox counts nothing: with TryOnly that is `full` (and `built`, if any,
  // is destroyed unrun); otherwise the send waits or throws mailbox_full by the actor's
  // policy (admit_bounded). Always inlined, as the other steps of a send (at -O3 GCC
  // otherwise calls them). `k` messages: a batch, linked from `built`; all or none. `offered`
  // reads `queued`; with MayTakeOver (post, send, their batches; never defer, ask, async_ask)
  // the push that follows may take the drain over (offered_to()).
  template <bool TryOnly, bool MayTakeOver = false>
  [[gnu::always_inline]] admission admit(message* built, std::uint64_t k = 1) {
    if (options_ == nullptr || options_->capacity == 0) [[likely]] {
      const admission a = core_.try_acquire(k);
      if (a == admission::offered) [[unlikely]] {
        if constexpr (MayTakeOver) offered_to();
        return admission::queued;
      }
      return a;
    }
    if constexpr (TryOnly) {
      const admission a = core_.try_acquire_below(options_->capacity, k);
      if (a == admission::full) {
        discard_built(built);
        count_full();
      }
      return a;
    } else {
      return admit_bounded(built, k);
    }
  }

  // Sends a batch (see actor::post_all), one node: one atomic counts its messages, one exchange
  // pushes it; a winner puts it in front and drains (inside a handler: queues the actor).
  // Bounded: all or none (admit_batch). False only with TryOnly and no room: destroyed unrun.
  template <bool TryOnly>
  bool submit_batch(message_batch b) {
    if (b.size == 0) return true;
    const admission a = admit_batch<TryOnly>(b);
    if (a == admission::full) return false;
    if (a == admission::queued) {
      enqueue(b.node);
      return true;
    }
    enqueue_first(b.node);
    if (tls.top != nullptr) {
      queue_now();
    } else {
      drain_now(0);
    }
    return true;
  }

  // Sends one message: counts it, then either hands it to the owner or, having become the
  // owner, runs it. `make()` builds the mailbox node (only needed when the actor is busy
  // or this thread is inside a handler); `run()` runs the message inline; `carry(storage)`,
  // unless no_carry, moves the message into the carry slot's storage and returns the slot's
  // run function (a winner inside a handler, when the slot is free). Building a node can
  // throw (bad_alloc, a throwing move): when BuildFirst, it is built before counting, so a
  // throw loses nothing; otherwise a throw after counting would strand the owner, so it
  // terminates (only a noexcept move and memory exhaustion reach that path).
  // False only with TryOnly, when a bounded mailbox is full (nothing was sent).
  template <bool BuildFirst, bool TryOnly = false, class Make, class Run, class Carry = no_carry>
  bool submit(Make&& make, Run&& run, Carry&& carry = Carry{}) {
    if constexpr (BuildFirst) {
      message* m = make();
      const admission a = admit<TryOnly, true>(m);
      switch (a) {
        case admission::full:
          return false;
        case admission::offered:  // admit() reports it as queued
        case admission::queued:
          enqueue(m);
          return true;
        case admission::owner:
          break;
      }
      if (tls.top != nullptr) {
        run_after_current(m);
      } else {
        enqueue_first(m);
        drain_now(0);
      }
    } else {
      // Read before counting (only this thread writes it, and the count's atomic would make
      // the compiler read it again): inlined into a carried turn, which has just set it,
      // the test folds away, and with it the top-level path and the registers it keeps.
      const bool nested = tls.top != nullptr;
      const admission a = admit<TryOnly, true>(nullptr);
      switch (a) {
        case admission::full:
          return false;
        case admission::offered:  // admit() reports it as queued
        case admission::queued:
          enqueue(build_counted(make));
          return true;
        case admission::owner:
          break;
      }
      if (nested) {
        if constexpr (!std::is_same_v<std::remove_cvref_t<Carry>, no_carry>) {
          if (carried.actor == nullptr) {
            carried.run = carry(static_cast<void*>(carried.storage));
            carried.actor = this;
            queue_now();
            return true;
          }
        }
        run_after_current(build_counted(make));
      } else {
        run_inline(run);
      }
    }
    return true;
  }

  // Owner only: runs the actor's first message on this thread, then releases or drains.
  // TopLevel: a top-level send, which then runs this thread's queue; false: a carried
  // message, whose turn the run queue started. Exceptions from `run` go to the error hook.
  // (The owner's turns are defined in detail/actor_turn.hpp.)
  template <bool TopLevel = true, class Run>
  void run_inline(Run& run) noexcept;

  // A carry slot's run function (carry_slot::run): the turn the run queue starts for an
  // actor whose first message is in the carry slot. `message` moves it out (freeing the
  // slot) and runs it; then the actor is released or drained. Without options (no budget,
  // no capacity) this is all inline, so that a forwarding chain's hop is one jump from the
  // run queue into the message's own code; otherwise run_inline<false>. Always true (the
  // run queue's "ran here").
  [[gnu::always_inline]] inline bool run_carried_turn(void (*message)(actor_base*)) noexcept;

  // Owner only, after the winner ran its own message inline: release if nothing else
  // arrived (the uncontended path), else drain; at top level, then run the queue.
  template <bool TopLevel = true>
  void finish_inline(std::int64_t turn_start) noexcept;

  // Owner only: the uncontended release after one inline message. False: still owned, and
  // `uncounted` says how many run messages the drain must still subtract (1, or 0 when
  // the failed release already subtracted it). Unbounded: known to have no capacity.
  template <bool Unbounded = false>
  [[nodiscard, gnu::always_inline]] inline bool try_release_inline(std::uint64_t& uncounted) noexcept;

  // Owner only: drain (having already run `ran` uncounted messages in a turn that began at
  // `turn_start`, 0: now) until released, handed off or destroyed; at top level, then the run queue.
  void drain_now(std::uint64_t ran, std::int64_t turn_start = 0) noexcept;

  // ask() under a test scheduler: `m` (counted as `a`) is an event; waits until ready(answer).
  void ask_driven(message* m, admission a, bool (*ready)(const void*) noexcept, const void* answer);
  // Called before counting an ask(): throws std::system_error(resource_deadlock_would_occur)
  // if this thread is draining this actor, where waiting for the answer could never end.
  void check_not_draining() const;

  // Destructor protocol (see actor.hpp): runs or waits for pending messages, or, when
  // called from one of this actor's own handlers, discards them. Afterwards nothing
  // refers to *this.
  void shut_down() noexcept;

  // Messages accepted, not yet accounted for by the owner (approximate: see pending()).
  [[nodiscard]] std::uint64_t pending_count() const noexcept { return core_.pending(); }
  [[nodiscard]] std::size_t waiting_senders() const noexcept;  // linked in wait_for_room()

  // Reports an exception thrown by a post handler to the error hook.
  void report_error(const std::exception_ptr& e) noexcept;
  // In a catch block, `frame`'s handler threw: to the error hook, or to stderr when it destroyed its actor.
  void report_handler_error(const drain_frame& frame) noexcept {
    if ((frame.stop & stop_destroyed) != 0) {
      report_to_stderr(std::current_exception(), handler_source);
    } else {
      report_error(std::current_exception());
    }
  }

  // Executor continuation: drain `a` (or defer it when the executor runs work inline in a handler).
  static void resume(void* a) noexcept;

 private:
  friend struct actor_core_access;  // tests
  template <class E, void (*)(actor_base*, E&)>
  friend class batch_node;  // a partly run batch: enqueue_first

  template <class Make>
  static message* build_counted(Make& make) noexcept {
    return make();
  }
  void discard_built(message* m) noexcept {  // a send's node, if built, never counted: destroy unrun
    if (m != nullptr) m->invoke(m, this, nullptr);
  }
  // Counts a batch of b.size > 0 messages, as admit() counts one. Bounded: all or none;
  // more than the capacity, or under full_policy::block more than half of it, throws
  // std::invalid_argument (such a batch could wait for room forever); otherwise as admit().
  template <bool TryOnly>
  admission admit_batch(const message_batch& b) {
    if (options_ != nullptr && options_->capacity != 0) check_batch_fits(b);
    return admit<TryOnly, true>(b.node, b.size);
  }
  // Bounded: throws std::invalid_argument (having destroyed the batch) when it can never fit.
  void check_batch_fits(const message_batch& b);
  void name_under_driver() noexcept;  // tls.driver set: the test scheduler's trace names actors

  // A bounded send (lib/actor/mailbox_room.cpp): one try below the capacity (small: inlined,
  // it lengthened other sends at -O2), else wait_or_throw_full(): at top level under
  // full_policy::block, runs this thread's queue, then waits for room until max_block; else
  // (or past it) destroys `built` and throws mailbox_full. Never `full`; `k`: all or none.
  admission admit_bounded(message* built, std::uint64_t k = 1);
  [[gnu::noinline]] admission wait_or_throw_full(message* built, std::uint64_t k);
  // Reports a send that found the mailbox full to the process-wide metrics sink, if any.
  static void count_full() noexcept;
  struct room_wait;  // a send's place and wake-up across its waits for room (mailbox_room.cpp)
  // Sleeps until a bounded mailbox has room for `k`, this sender is woken (true), or
  // `deadline` passes without that room (false).
  bool wait_for_room(room_wait& wait, std::int64_t deadline, std::uint64_t k);
  // try_release() of a bounded actor, out of line so that an unbounded one's release (the
  // uncontended post's) saves no registers around the wake-up's call.
  [[nodiscard]] bool try_release_bounded(std::uint64_t ran) noexcept;
  // Wake the oldest sender sleeping in wait_for_room() for this actor (wake_senders), or for
  // tls.after_push if room_owed, then unlock its bucket (pass_room): callable after a release.
  void wake_senders() noexcept;
  static void pass_room() noexcept;
  // A push found tls.after_push set: take_over() or pass_room().
  static void after_push() noexcept;

  // The drain loop, one protocol action per drain_step(), so that tests interleave it with senders (interleaving_test).
  enum class drain_status {
    running,  // ran a message or uncounted a round: call again
    waiting,  // a counted message is not linked yet: back off, call again
    done,     // released, handed on or over, or the actor was destroyed
  };
  struct drain_cursor : turn_tally {  // drain_limits() runs once turn >= limit
    drain_frame* frame;
    std::int64_t turn_start;     // for a time budget
    std::uint32_t max_messages;  // the budget: the options' or the default; 0: none
    unsigned idle_spins;         // consecutive `waiting` steps
    bool budgeted;               // max_messages or a time budget
    bool bounded;                // give back room after every message
    bool stepped;                // under a test scheduler: one message per turn (each an event)
    bool hands_over;             // a spent budget offers the drain to senders (no executor)
    bool offered;                // the offer is out: look for a successor every few messages
  };
  [[nodiscard]] drain_cursor start_turn(std::uint64_t ran, std::int64_t turn_start, drain_frame& frame) const noexcept;
  drain_status drain_step(drain_cursor& c) noexcept;
  void drain(std::uint64_t ran, std::int64_t turn_start) noexcept;
  void run_carried_limited(void (*message)(actor_base*)) noexcept;  // run_inline<false>: with options
  // After a turn's handler set frame.stop: hand the actor on unless it was destroyed.
  void after_stopped_turn(unsigned char stop) noexcept;
  void drain_turn(std::uint64_t ran, std::int64_t turn_start) noexcept;  // drain()'s body, inlined
  // run_from_queue() past the carried hop: spread to idle workers, or drain.
  bool run_from_queue_slow() noexcept;
  // The FIFO end of this thread's run queue (see continue_elsewhere()).
  void queue_later() noexcept;
  // Owner only, the actor counted (not idle): the owner stops draining and the actor goes
  // on elsewhere, later: to its executor or, without one or if execute() throws, to the
  // FIFO end of this thread's run queue, which a thread at top level runs before it
  // returns or exits. The one way an owner hands on a still-owned actor: budget spent, a
  // sender preempted, a defer, spreading to idle workers.
  void continue_elsewhere() noexcept;
  // Owner only, after a handler deferred to its own actor (a counted message waits):
  // uncounts `ran`, then continues elsewhere, so that this thread's other work runs first.
  void yield_turn(std::uint64_t ran) noexcept;
  // Run-queue pop of an actor with more work queued behind it: hands it to its executor
  // if that executor reports idle workers (spreading work over a pool). True if handed.
  [[nodiscard]] bool hand_to_idle_executor() noexcept;
  [[nodiscard]] bool budget_spent(const drain_cursor& c) const noexcept;
  // drain_step()'s slow path: budget, room, events, the offer. True: the turn is over.
  bool drain_limits(drain_cursor& c) noexcept;
  // yield_turn() for an offering owner: hand over to a claimant, else withdraw the offer.
  void yield_offered(std::uint64_t ran) noexcept;

  // The ownership word (messages accepted and not yet run) and the mailbox: see above.
  lockfree_ownership core_;
  std::shared_ptr<const actor_options> options_;  // immutable after construction; may be null
};

}  // namespace handoff::detail
