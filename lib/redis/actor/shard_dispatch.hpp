// The in-process half of a shard owner (shard_dispatch.cpp; private to lib/redis): runs
// the entries the owner read from its shards' queues per key, and says what it may
// acknowledge to the server.
//
//   shard_entry      one entry read from a shard's queue, numbered by `seq`
//   finished_entry   an entry that ran, how it ended and the state it staged
//   shard_ack        what the owner sends the server for one shard: how many entries to
//                    trim at the head, which ids to add to and remove from the shard's set
//                    of entries done past the head
//   ack_window       the bookkeeping behind shard_ack, for one shard (no threads: a test
//                    drives it step by step)
//   shard_dispatch   one in-process actor per key with unfinished entries: the entries of a
//                    key run one at a time in queue order, different keys concurrently on
//                    the executor, so a slow key holds only itself, never its shard
//
// Why acknowledge by prefix plus ids: a shard's queue is a list, which the owner can only
// trim at its head. An entry finished behind an unfinished one stays in the list; its id
// goes to the shard's done set on the server, so that an owner that takes the shard over
// after a crash skips it instead of running it twice. Once the head entries before it
// finish, the trim covers it and its id leaves the set.
//
// Per entry (each a message to its key's actor, sent by dispatch()):
//   counted   dispatch() counts it (room, its shard's window, its key) before sending it;
//   skipped   its shard was dropped since: it never runs, and only uncounts its key;
//   running   its shard's `running` count covers it: drop() and ~shard_dispatch wait;
//   finished  into the window, uncounted; the key's actor is freed by the owner thread
//             once the key has no counted entry left.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "../../runtime/thread_annotations.hpp"
#include "handoff/actor.hpp"
#include "handoff/executor.hpp"

namespace handoff::redis::detail {

// One entry read from a shard's queue.
struct shard_entry {
  std::uint64_t seq = 0;  // its place in the shard's queue, counted by the owner from its first read: +1 per entry
  std::string key, id, body;
  std::uint32_t attempt = 1;  // deliveries including this one (1: the first)
};

enum class entry_end : std::uint8_t { handled, dead };

struct finished_entry {
  std::uint64_t seq = 0;
  std::string key, id, body;
  entry_end end = entry_end::handled;
  std::optional<std::string> state;  // what the handler staged (kept for remembered entries)
};

// What the owner acknowledges for one shard, since its last take_ack.
struct shard_ack {
  std::uint64_t trim = 0;                // finished entries at the head, not trimmed before: trim that many
  std::vector<finished_entry> finished;  // every entry finished since, in finishing order (per key: queue order)
  std::vector<std::string> done_add;     // ids finished past the first unfinished entry, each reported once
  std::vector<std::string> done_remove;  // ids reported in an earlier done_add that this trim covers
  [[nodiscard]] bool empty() const noexcept {
    return trim == 0 && finished.empty() && done_add.empty() && done_remove.empty();
  }
};

// The acknowledgement bookkeeping of one shard: one slot per entry from the first one not
// trimmed to the last one dispatched. Not thread-safe (shard_dispatch guards it).
class ack_window {
 public:
  // The seq the next appended entry must carry; any seq before the first append.
  [[nodiscard]] bool started() const noexcept { return started_; }
  [[nodiscard]] std::uint64_t next_seq() const noexcept { return head_ + slots_.size(); }
  // Entries appended and not trimmed yet (finished or not).
  [[nodiscard]] std::size_t size() const noexcept { return slots_.size(); }

  // Precondition: seq == next_seq(), or this is the first append.
  void append(std::uint64_t seq);
  // Takes back the last `n` appends (entries that were never sent). Precondition: none of
  // them finished.
  void unappend(std::size_t n) noexcept;
  // Precondition: e.seq was appended, not finished, not trimmed.
  void finish(finished_entry e);
  // The acknowledgement since the last take(); the trimmed slots leave the window.
  shard_ack take();

 private:
  struct slot {
    bool finished = false;
    bool reported = false;  // its id went out in a done_add (kept here for the done_remove)
    std::string id;         // only once reported
  };
  bool started_ = false;
  std::uint64_t head_ = 0;                // seq of slots_.front()
  std::deque<slot> slots_;                // head_, head_ + 1, ...
  std::vector<finished_entry> finished_;  // since the last take()
};

// Runs a shard owner's entries per key on in-process actors and keeps its
// acknowledgements. dispatch, take_ack, drop, wait_idle and the destructor are owner-only:
// one thread at a time, each call happens-before the next (the owner thread). The other
// calls are thread-safe. Handlers run on the executor's threads; without an executor
// (an empty executor_ref) they run on the owner thread inside dispatch(), one key after
// another, so a slow key then holds the owner and every other key with it.
//
// Happens-before: dispatch() of an entry happens-before its run; an entry's run
// happens-before the next entry of its key runs, and before the take_ack() that reports it
// (and the on_finished call that follows it).
//
// Preconditions: the executor outlives the dispatcher (the destructor waits for the
// dropped entries to pass through their actors there); run and on_finished never wait for
// the owner thread (the owner may wait for them: drop, freeing a key's actor). Running
// out of memory while recording an entry's end terminates: a handler has nobody to tell.
class shard_dispatch {
 public:
  // Runs one entry: the handler, with its re-runs up to the attempt limit (the caller's
  // logic); returns how it ended, and fills `state` with what it staged. Called for one
  // key at a time, never concurrently. Should not throw: an exception it throws goes to
  // on_error, and the entry counts as dead with no state (it goes to the dead letters
  // rather than run again).
  using run_fn = std::function<entry_end(const shard_entry&, std::optional<std::string>& state)>;

  // `max_unfinished`: how many entries may be dispatched and not finished at once, over
  // all shards (0: std::invalid_argument). `on_finished`: called on the handler's thread
  // after each entry finished, to wake the owner (empty: none). `on_error`: an exception
  // thrown by run or on_finished (empty: printed to stderr). `executor`: where the keys'
  // actors run; it must outlive this object. Throws std::invalid_argument, std::bad_alloc.
  shard_dispatch(executor_ref executor, std::size_t max_unfinished, run_fn run, std::function<void()> on_finished = {},
                 std::function<void(std::exception_ptr)> on_error = {});
  // Owner only. Drops every shard (entries not started never run), waits for the entries
  // running, then destroys the keys' actors, which waits for the dropped entries to pass
  // through them on the executor (it must still run work).
  ~shard_dispatch();
  shard_dispatch(const shard_dispatch&) = delete;
  shard_dispatch& operator=(const shard_dispatch&) = delete;

  // Thread-safe snapshot: max_unfinished minus the entries dispatched and not finished
  // (a dropped shard's entries no longer count). The owner reads no more than this.
  [[nodiscard]] std::size_t room() const;

  // Owner only, from top level (not inside an actor's handler). Sends `entries` (one
  // shard's, in queue order: seq rising by 1 from the shard's next seq, any first seq for a
  // shard dispatched for the first time or since its drop) to their keys' actors, creating
  // those that are not alive. With an executor the entries run there, never inside this
  // call. Then runs this thread's run queue (handoff::run_deferred()): without an executor
  // the entries run there, inside this call; with one it holds what the executor refused
  // (an actor whose hand-off throws goes to the sending thread's run queue), so an
  // executor that refuses work makes the owner run those keys here rather than stall them.
  // Throws std::logic_error, having dispatched nothing, for more entries than room() or a
  // seq out of order (std::invalid_argument). Throws std::bad_alloc when memory runs out:
  // the entries from some point of the batch on (all of them, if it ran out while counting)
  // were not sent and stay uncounted, the shard's next seq being the first of those; they
  // are gone with `entries`, so the owner reads them again from its queue, or drops the
  // shard.
  void dispatch(std::uint32_t shard, std::vector<shard_entry> entries);

  // Owner only. What to acknowledge for `shard` since its last take_ack (empty for a shard
  // not dispatched, or dropped). Also frees the actors of keys left with nothing to run.
  shard_ack take_ack(std::uint32_t shard);

  // Owner only. The owner lost or gave up `shard`: its entries not started never start,
  // and nothing of it is acknowledged any more. Blocks until none of its entries is
  // running (waits for a running handler, however long it takes). A later dispatch() of
  // the shard starts it afresh. Other shards' entries go on.
  void drop(std::uint32_t shard);

  // Owner only. Blocks until every dispatched entry finished or was dropped, then frees
  // the actors of keys left with nothing to run.
  void wait_idle();

  // Thread-safe snapshot: the keys' actors alive (keys with counted entries, and those
  // the owner has not freed yet).
  [[nodiscard]] std::size_t live_keys() const;

 private:
  struct key_state {};  // the actor serializes; the entries travel in its messages
  // One key with counted entries. `unfinished` and `listed` are guarded by mu_. The actor
  // is destroyed by the owner thread only (reap), never from its own handler, and only at
  // 0 counted messages: only the owner counts up, so nothing is sent to it after that, and
  // ~actor waits for the handler that counted it down to return.
  struct key_slot {
    explicit key_slot(std::string k, const std::shared_ptr<const handoff::actor_options>& options)
        : key(std::move(k)), actor(options) {}
    const std::string key;            // keys_ maps a view of it
    std::size_t unfinished = 0;       // this key's messages not run yet (skipped ones too)
    bool listed = false;              // in idle_, waiting for reap
    handoff::actor<key_state> actor;  // last: destroyed first, after the messages that use the slot
  };
  struct shard_state {
    ack_window window;
    std::uint64_t generation = 0;  // this shard's life since its first dispatch, or last drop
    std::size_t unfinished = 0;    // counted in unfinished_, not finished yet (running included)
    std::size_t running = 0;       // past the drop check, in run: drop() waits for 0
    bool dropped = false;          // its messages no longer start
  };

  // A message's body: runs `e` unless its shard was dropped since, then finishes it.
  void run_entry(key_slot& k, std::uint32_t shard, std::uint64_t generation, shard_entry& e) noexcept;
  // With mu_ held: uncounts one message of `k`; a key left with none goes to idle_.
  void release_key(key_slot& k);
  // Frees the actors of the keys in idle_ that still have nothing to run. Owner only.
  void reap();
  void report(std::exception_ptr e) const noexcept;

  const std::size_t max_unfinished_;
  const run_fn run_;
  const std::function<void()> on_finished_;
  const std::function<void(std::exception_ptr)> on_error_;
  const std::shared_ptr<const handoff::actor_options> options_;  // every key's actor: the executor

  mutable handoff::detail::annotated_mutex mu_;
  // Notified (after mu_ is released) when an entry finishes: drop and wait_idle wait on it.
  std::condition_variable_any changed_;
  std::unordered_map<std::uint32_t, shard_state> shards_ HANDOFF_GUARDED_BY(mu_);
  std::unordered_map<std::string_view, std::unique_ptr<key_slot>> keys_ HANDOFF_GUARDED_BY(mu_);
  std::vector<key_slot*> idle_ HANDOFF_GUARDED_BY(mu_);  // keys whose count fell to 0, for reap
  std::size_t unfinished_ HANDOFF_GUARDED_BY(mu_) = 0;   // over all shards: room()
  std::size_t running_ HANDOFF_GUARDED_BY(mu_) = 0;      // over all shards: the destructor waits for 0
  std::uint64_t generations_ HANDOFF_GUARDED_BY(mu_) = 0;
};

}  // namespace handoff::redis::detail
