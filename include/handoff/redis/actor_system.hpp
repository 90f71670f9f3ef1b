// handoff::redis::actor_system: actors across processes, with their mailboxes and counts on
// one Redis server or a Redis Cluster (found by itself, as for keyed_mutex; each actor on
// the primary of its slot group, docs/redis_actor.md). Any process posts a message (bytes)
// to an actor key such as "room:7"; processes register handlers for key families (key
// prefixes). The messages of one key are handled one at a time across all processes, in
// each sender's order, by whichever process is free: no process runs a consumer per key.
//
//   handoff::redis::actor_system actors(opts, {.lease = handoff::lease{2s}});
//   actors.on("room:", [](handoff::redis::delivery& d) { apply(d.key(), d.body()); });
//   actors.post("room:7", "join alice");  // may handle room:7's messages here, see post()
//
// The protocol is the in-process actor's hand-off with the mailbox on the server, its
// length the count (each step one Lua script; lib/redis/actor/scripts.hpp gives the data
// layout):
//   post:    append the message; the post whose append takes the mailbox from empty to
//            one message (count 0 -> 1) becomes the owner and drains on the caller's thread: at
//            once at top level, after the current work inside a handler or callback. With
//            an executor, that drain runs only the post's own message; its dequeue (and
//            the rest of the drain) goes to the executor, in one round trip with the
//            other actors' dequeues waiting there.
//   drain:   peek a batch from the head (each delivery count + 1), run the handlers in
//            order, then dequeue those that returned with the next peek (at-least-once:
//            a message is removed only after its handler returned); the step that empties
//            the mailbox releases the actor (count 0). Ownership
//            is a token with a lease, renewed by every step and, while a handler runs,
//            by this process's renewal thread.
//   budget:  after max_messages messages or max_time, the owner dequeues what it ran
//            and hands the actor on: to actor_options::executor if set (still owned),
//            otherwise by announcing it, so that a sweeping process continues it.
//   crash:   an owner that dies leaves its lease to run out; then a sweeper (within
//            sweep_interval) takes the actor over and re-runs what was not dequeued (the dead
//            owner's batch, each message flagged as redelivered).
//   failure: a message delivered more than max_attempts times (its handler threw, or
//            its owner died while handling it) moves to the key's dead-letter list.
//   delayed: post_after/post_at store a message beside the pending set until it is due;
//            a sweep moves the due ones to their mailboxes (see post_after()).
//
// Guarantees (one Redis server or Redis Cluster, no failover; clocks need not agree across
// processes):
// - Mutual exclusion: at most one handler of a key runs at a time across all processes,
//   as long as every handler returns within the lease of the process running it (a
//   handler paused or stalled past the lease may overlap with the next owner's; its
//   dequeue and state commit are then refused, see delivery::set_state).
// - At-least-once: every accepted message is handled until one handler returns for it, or
//   it goes to the dead letters. A message runs again only after a handler threw, or after
//   its owner lost ownership (crash, stall, a Redis error) before the dequeue; the
//   delivery says so (delivery::attempt() > 1).
// - Per-sender FIFO: the messages one thread posts to a key are handled in the order
//   posted (a re-run keeps its place at the head).
// Not promised: exactly-once side effects outside Redis (use remember_handled and
// delivery::set_state for state kept with the actor); order across senders; anything
// after a Redis failover or with an evicting server; progress of a handed-on or crashed
// actor when no process sweeps (a post queues behind it, as behind a live owner).
//
// Errors: every Redis failure is handoff::redis::error, within options::command_timeout of
// each command (a dead or stalled server never hangs a caller). A full mailbox is
// handoff::mailbox_full, the in-process actors' error (handoff/mailbox_full.hpp): it is
// the actor's bound, not a Redis failure, so it is not a redis::error.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "handoff/executor.hpp"
#include "handoff/lease.hpp"
#include "handoff/mailbox_full.hpp"
#include "handoff/redis/options.hpp"

namespace handoff::redis {

namespace detail {
struct actor_core;
}  // namespace detail

// One delivery of a message to a handler. Valid only during the handler call.
class delivery {
 public:
  delivery(std::string_view key, std::string_view id, std::string_view body, std::uint32_t attempt,
           std::string_view last_id, std::string_view state) noexcept
      : key_(key), id_(id), body_(body), last_id_(last_id), state_(state), attempt_(attempt) {}

  [[nodiscard]] std::string_view key() const noexcept { return key_; }
  // Unique across processes and posts ("<sender>-<sequence>"), the same on every re-run.
  [[nodiscard]] std::string_view id() const noexcept { return id_; }
  [[nodiscard]] std::string_view body() const noexcept { return body_; }
  // 1 for the first delivery; above 1 when an earlier one did not end in a dequeue (its
  // handler threw, or its process died or lost ownership while handling it).
  [[nodiscard]] std::uint32_t attempt() const noexcept { return attempt_; }
  [[nodiscard]] bool redelivered() const noexcept { return attempt_ > 1; }

  // With actor_options::remember_handled (else empty): the id of the message handled
  // before this one and the state it left: committed with its dequeue, or set earlier in
  // this batch (then committed with this message's dequeue, or re-run with it).
  [[nodiscard]] std::string_view last_handled_id() const noexcept { return last_id_; }
  [[nodiscard]] std::string_view state() const noexcept { return state_; }
  // With remember_handled: stores `value` as the key's state atomically with this
  // message's dequeue, and only if this process still owns the actor then. A handler that
  // computes its state from state() and body() therefore changes it exactly once per
  // message, re-runs included. Without remember_handled: ignored. Not thread-safe.
  void set_state(std::string value) {
    new_state_ = std::move(value);
    has_state_ = true;
  }

  // For the library: the state set by the handler, if any.
  [[nodiscard]] const std::string* staged_state() const noexcept { return has_state_ ? &new_state_ : nullptr; }

 private:
  std::string_view key_, id_, body_, last_id_, state_;
  std::string new_state_;
  std::uint32_t attempt_;
  bool has_state_ = false;
};

// A message that was moved to a key's dead-letter list.
struct dead_letter {
  dead_letter(std::string i, std::string b) : id(std::move(i)), body(std::move(b)) {}
  std::string id;
  std::string body;
};

// The names, types and meanings of capacity, max_messages, max_time and executor are
// handoff::actor_options' (actor_options.hpp); the defaults differ where noted.
struct actor_options {
  // The largest actor_options::batch.
  static constexpr std::uint32_t max_batch = 1024;
  // Ownership lease on the server: an owner that dies frees its actors after this long.
  // Renewed every third of it while the owner drains. A handler must return within it.
  // Sent to the server in whole milliseconds (rounded up; at most 2^42 ms, "never").
  handoff::lease lease{std::chrono::seconds(5)};
  // Where an owner's work continues in this process (still owned: no other process can
  // take it meanwhile): a budget hand-on, and the dequeue of a post's own message and the
  // rest of that drain (see post()). Those steps are sent together: one executor job sends
  // every step waiting, in one round trip, runs the next batch of each actor that has more
  // messages, and sends their steps in the next round. Empty: a post's owner drains on its
  // own thread, and a budget hand-on announces the actor so that a sweeping process
  // continues it (unlike an in-process actor, a budget without an executor is accepted).
  // The executor must outlive the actor_system's last job (each holds the system's state).
  executor_ref executor{};
  // Budget of one drain turn on one thread: after this many messages (0: no message
  // budget) or this much time (0: no time budget), the owner hands the actor on instead of
  // holding its caller longer. With both 0 a drain runs until the mailbox is empty.
  // Defaults 64 messages and 50 ms (in-process: 0, 0): without an executor a post that
  // wins the actor drains on the caller's thread, and other processes' messages should not
  // hold it for long. On the executor's rounds the message budget also caps each batch.
  std::uint32_t max_messages = 64;
  std::chrono::nanoseconds max_time{std::chrono::milliseconds(50)};  // negative: std::invalid_argument
  // The most messages an owner takes from the mailbox in one round trip, runs in order,
  // and dequeues together with the next batch's peek (1 to max_batch; else
  // std::invalid_argument). A larger batch saves round trips on a busy actor; a crash
  // mid-batch re-runs the messages of the batch not dequeued yet, each flagged as
  // redelivered. Default 16, measured (docs/redis_actor.md).
  std::uint32_t batch = 16;
  // The most messages a key's mailbox holds at once, the one being handled included (0:
  // unbounded); post() beyond throws handoff::mailbox_full, try_post returns std::nullopt,
  // post_for waits. Default 100,000 (in-process: 0): the mailboxes live in the memory of
  // the server every process shares, where an actor nobody drains would otherwise grow
  // until the server refuses writes, the locks' included.
  std::uint32_t capacity = 100000;
  std::size_t max_message_bytes = 1U << 20U;  // body bytes; more: std::invalid_argument
  std::uint32_t max_attempts = 5;             // deliveries before a message is dead-lettered
  bool remember_handled = false;              // keep {last handled id, state} per key
  // This process takes over actors whose owner's lease ran out or that were announced,
  // for the families it has handlers for, checking this often (0: never; then only calls
  // of sweep() do: a post never takes an actor over). A check reads one pending set on
  // one server, 256 on a cluster (one write per primary).
  std::chrono::milliseconds sweep_interval{100};
  // A handler's exception, a lost ownership or a Redis failure while draining: called with
  // the key and the error (on the draining thread; must not throw). Empty: printed to stderr.
  std::function<void(std::string_view key, std::exception_ptr error)> on_error{};
};

// Thread-safe. Owns a connection pool (one per primary on a cluster), a renewal thread and
// (with sweep_interval > 0) a sweeper thread; handlers run on posting threads, the executor
// and the sweeper.
class actor_system {
 public:
  using handler = std::function<void(delivery&)>;

  // Connects to check the options, the server (or every primary of a cluster) and its
  // eviction policy (as keyed_mutex does), and starts its threads. Throws
  // std::invalid_argument for bad options, error when the server cannot be used.
  explicit actor_system(options o = {}, actor_options a = {});
  // Stops the threads (after the drain each is running, if any, ends its round); drains in
  // progress on posting threads or the executor finish their round. A continuation already
  // queued on the executor or on a thread's run queue still runs (it holds the system's
  // state): the handlers' captures must outlive it. Actors this process owned and did not
  // finish are taken over by others after their lease.
  ~actor_system();
  actor_system(const actor_system&) = delete;
  actor_system& operator=(const actor_system&) = delete;

  // Thread-safe. Handlers for every key that starts with `family` (the longest matching
  // family wins; "" matches every key). Replaces an earlier handler of the same family.
  // A handler's exception is reported (on_error) and the message delivered again, until
  // max_attempts. Allocates.
  void on(std::string family, handler h);

  // Thread-safe. Appends `body` to `key`'s mailbox (keys and bodies are any bytes); one
  // round trip. If the mailbox was empty, the caller becomes the actor's owner. At top level
  // (the thread runs nothing of the library) it drains the actor here. Without an
  // executor, that runs handlers (its own message's and others') until the mailbox is
  // empty or the budget is spent: post may block that long. With an executor it runs only
  // its own message's handler and returns: the message's dequeue and the actor's release
  // (or its next messages) follow on the executor, so for a moment after post returns the
  // message still counts in pending() and the actor stays owned (and renewed); a crash
  // then re-runs it, flagged, like any message not yet dequeued. Inside work of the
  // library on this thread (an in-process actor's handler, a keyed-mutex callback, a
  // coroutine the library resumed, a Redis handler) it never drains there: the drain
  // continues on the executor if there is one, else on this thread's run queue, after the
  // current work returns (docs/runtime.md), and post returns after the one round trip. A
  // post for a key this process has no handler for announces the actor for a sweeper.
  // Each handler runs as work of the library: what it makes runnable on this thread (an
  // in-process send, a keyed grant, another Redis actor won) runs after it returns.
  // Returns the message's id. Allocates. Throws handoff::mailbox_full when the mailbox
  // holds `capacity` messages (nothing posted), std::invalid_argument for a body over
  // max_message_bytes, error on Redis failure (the message may or may not be queued).
  // Errors while draining (after the message was queued) go to on_error, not to the
  // caller.
  std::string post(std::string_view key, std::string_view body);

  // As post(), but returns std::nullopt instead of throwing handoff::mailbox_full.
  std::optional<std::string> try_post(std::string_view key, std::string_view body);

  // As post(), but waits while the mailbox is full (re-trying every few ms), up to
  // `timeout`; then throws handoff::mailbox_full. Before each wait it runs this thread's run queue
  // (run_before_blocking: what the thread owns only through it, nested under the current
  // work if any), since nobody else can run it while this thread sleeps.
  std::string post_for(std::string_view key, std::string_view body, std::chrono::milliseconds timeout);

  // Thread-safe. Durable delayed posts: `body` is posted to `key` at or after `delay` from
  // now (post_at: at or after `when`, turned into a delay from this process's
  // system_clock), surviving the crash of every process and, with persistence, a restart
  // of the server. One round trip; the message waits on the server beside the actors, not
  // in a mailbox. A sweep (of any process with a handler, each sweep_interval) moves the
  // due messages to the tails of their mailboxes, up to 1,024 per pending set per sweep
  // (the sweeper goes again at once while more are due); from there each is an ordinary
  // message: handled at least once, flagged when re-run, after what the mailbox held
  // before it was moved. Never early: the delay is measured on the server's clock, from
  // when the post reached it (a jump of that clock moves it). Late by up to one sweep
  // interval, plus the drains ahead of it. A due message whose mailbox is full stays
  // delayed and is tried again a sweep interval later (never dropped), the key's later
  // delayed messages queued behind it as they come due (none passes it). Returns the
  // message's id (its delivery::id()), by which cancel_delayed stops it. A zero or
  // negative delay, or a `when` already past (time_point::min() included), is due at the
  // next sweep. Allocates. Throws std::invalid_argument for a
  // body over max_message_bytes, error on Redis failure (the message may or may not be
  // stored).
  std::string post_after(std::string_view key, std::string_view body, std::chrono::nanoseconds delay);
  std::string post_at(std::string_view key, std::string_view body, std::chrono::system_clock::time_point when);

  // Thread-safe. Removes the delayed message `id` (post_after's) of `key` if it has not been
  // moved to the mailbox yet: true. False when it was moved (it runs), was cancelled
  // before, or is no delayed message of `key`. One round trip. Throws error.
  bool cancel_delayed(std::string_view key, std::string_view id);

  // Thread-safe. Moves the due delayed messages (of every family) to their mailboxes, then
  // takes over and drains the actors due for a sweep (owner lease ended, or announced)
  // that this process has handlers for, on this thread; returns how many it took over.
  // The sweeper thread calls it every sweep_interval. A process without handlers does
  // nothing. Throws error (having swept the pending sets that answered).
  std::size_t sweep();

  // Thread-safe. One round trip each. Messages waiting in `key`'s mailbox (the one being
  // handled included); the dead letters of `key`, oldest first. Throw error.
  [[nodiscard]] std::size_t pending(std::string_view key);
  [[nodiscard]] std::vector<dead_letter> dead_letters(std::string_view key);

  [[nodiscard]] const options& config() const noexcept;

 private:
  std::shared_ptr<detail::actor_core> core_;
};

}  // namespace handoff::redis
