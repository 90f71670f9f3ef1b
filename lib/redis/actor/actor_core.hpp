// lib/redis/actor/: handoff::redis::actor_system: this core, post and the facade
// (actor_system.cpp), the drain loop (drain.cpp), the renewer and the sweeper
// (actor_threads.cpp) and the Lua (scripts.hpp). Built on common/ only, never on the lock client.
//
// The state behind handoff::redis::actor_system (private to lib/redis): the options, the
// servers (one, or a cluster's primaries: common/router.hpp), the scripts (scripts.hpp),
// the handlers, and the two threads: the renewer, which renews the lease of every actor
// this process is draining while its handlers run, and the sweeper, which takes over
// actors whose owner is gone.
//
// Ownership: actor_system holds the core; an executor job continuing a drain holds it too
// (shared_ptr), so a job may outlive the facade. The threads use the core through `this`
// and are joined by stop(), which the facade's destructor calls.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../common/connection.hpp"
#include "../common/format.hpp"
#include "../common/lease_ms.hpp"
#include "../common/names.hpp"
#include "../common/router.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/redis/actor_system.hpp"

namespace handoff::redis::detail {

// On a Redis Cluster every script of an actor touches its keys and a pending set (which
// sweepers read) in one hash slot: the actors are spread over actor_groups slot groups,
// each with a pending set of its own, and an actor's names carry its group's tag instead
// of its key (scripts.hpp gives the layout). A group is the unit a resharding moves, so
// 256 spread the actors over up to 256 primaries, while a sweep reads 256 sets.
constexpr std::size_t actor_groups = 256;
constexpr std::size_t slots_per_group = cluster_slots / actor_groups;

// The first slot of a group: the tag of that group's names is slot_tag(group_slot(g)).
constexpr std::uint16_t group_slot(std::size_t group) noexcept {
  return static_cast<std::uint16_t>(group * slots_per_group);
}

// The names of group `slot`'s keys start with this: prefix + "{" + its slot tag + "}:".
inline std::string group_prefix(std::string_view prefix, std::uint16_t slot) {
  std::string out(prefix);
  out += '{';
  out += slot_tag(slot);
  out += "}:";
  return out;
}

// The names of one actor's keys (scripts.hpp); `cluster`: on a Redis Cluster.
struct actor_names {
  actor_names(std::string_view prefix, std::string_view k, bool cluster) : key(k) {
    std::string base;
    if (cluster) {
      // The group of the slot the escaped key would hash to (it holds no brace).
      const std::string escaped = escape_key(k);
      const std::string group = group_prefix(prefix, group_slot(hash_slot(escaped) / slots_per_group));
      base = group + escaped + ":actor:";
      pending = group + std::string(actor_pending_set);
    } else {
      base = key_name(prefix, k, "actor:");
      pending = std::string(prefix) + std::string(actor_pending_set);
    }
    mailbox = base + "mailbox";
    owner = base + "owner";
    delivered = base + "delivered";
    dead = base + "dead";
    state = base + "state";
  }
  std::string key;  // the actor key itself (raw bytes): the pending set's member
  std::string mailbox, owner, delivered, dead, state;
  std::string pending;  // the pending set the actor is listed in while it has messages
};

// Shared by the actor files.
// True when this thread runs work of the library now: an in-process actor's handler, a
// keyed-mutex callback, a coroutine the library resumed, a task of the run queue, or a
// Redis handler (which runs under a frame of its own, see handler_frame). An actor won
// there never drains inside that work (continue_owned): no network round trip and no
// other actor's handler runs nested in a handler, and a chain of actors posting to each
// other cannot grow the stack.
inline bool inside_work() noexcept { return handoff::detail::tls.top != nullptr; }

inline std::string describe(std::string_view op, std::string_view key) {
  return std::string(op) + ' ' + handoff::detail::key_excerpt(key);
}

// An element "<id> <body>" split in two.
inline std::pair<std::string_view, std::string_view> split(std::string_view element, std::string_view what) {
  const std::size_t space = element.find(' ');
  if (space == std::string_view::npos) unexpected(what);
  return {element.substr(0, space), element.substr(space + 1)};
}

// Keys read per pending set and sweep: a process sees at most this many due actors of a
// set per sweep_interval (due actors of families it has no handler for included).
constexpr int sweep_batch = 256;
// post_for's wait between attempts on a full mailbox: from 1 ms, doubling to 16 ms (a
// drain of a few messages on loopback frees room within a few ms).
constexpr std::chrono::milliseconds post_retry_min{1};
constexpr std::chrono::milliseconds post_retry_max{16};

struct actor_core : std::enable_shared_from_this<actor_core> {
  actor_core(options opts, actor_options a);
  ~actor_core() { stop(); }
  actor_core(const actor_core&) = delete;
  actor_core& operator=(const actor_core&) = delete;

  void start();          // the threads
  void stop() noexcept;  // joins them; idempotent

  // post's work: std::nullopt when the mailbox is full, else the message's id.
  std::optional<std::string> try_post(std::string_view key, std::string_view body);
  std::size_t sweep();
  // A message its post delivered to the post's caller (the post script's reply 2).
  struct first_delivery {
    std::string_view id, body, last_id, state;
  };
  // Owner only: drains `n`'s actor under `token` (actor_system.hpp's protocol), starting
  // with `first` if given (then, with an executor, only `first` runs here and its step is
  // deferred: defer_step), or with the batch of `resumed`, a step's reply of status 1, else
  // with a peek; reports every failure to on_error.
  void drain(const actor_names& n, const std::string& token, const first_delivery* first = nullptr,
             const std::shared_ptr<reply>& resumed = nullptr, bool defer = false) noexcept;
  // A step's reply: its status (0 released, 1 a batch to run, 2 handed on; the script's
  // replies in scripts.hpp). Reports the dead letters it made. Throws error for an error
  // reply, a lost ownership (-1) or a reply of another shape.
  long long settle(const actor_names& n, const redisReply& r) const;
  // A step left by a post's owner (drain): the step script's call (the number of keys,
  // the keys, the arguments).
  struct deferred_step {
    actor_names n;
    std::string token;
    std::vector<std::string> call;
  };
  // Queues `s` for run_steps, which an executor job runs (one job at a time, queued by the
  // step that finds none queued). Keeps `s.token` registered with the renewer until its
  // reply is settled. If the executor refuses the job, reports it for every step waiting
  // and drops them (their leases run out; a sweeper takes the actors over).
  void defer_step(deferred_step s);
  // One executor job: rounds of sending every deferred step in one write and settling
  // the replies. An actor whose step peeked more messages (status 1) runs them here and
  // defers its next step to the next round, which runs as a job of its own; one handed on
  // (2) continues on the executor (queue_drain).
  void run_steps() noexcept;
  // The one place that decides where an owner continues its actor: on the executor (if
  // any) when `prefer_executor` (the sweeper) or when this thread runs work of the library
  // now (a handler, a callback, a resumed coroutine); otherwise drain_on_this_thread().
  // `first`: the post's own message, delivered by its reply (top level only).
  void continue_owned(const actor_names& n, const std::string& token, bool prefer_executor,
                      const first_delivery* first = nullptr);
  // At top level: drain() now. Inside work of the library: a task on this thread's run
  // queue that drains after that work returns (never nested in it). Reports failures.
  void drain_on_this_thread(const actor_names& n, const std::string& token,
                            const first_delivery* first = nullptr) noexcept;
  void queue_drain(const actor_names& n, const std::string& token);
  [[nodiscard]] std::shared_ptr<const actor_system::handler> find(std::string_view key) const;
  void report(std::string_view key, const std::exception_ptr& e) const noexcept;
  [[nodiscard]] std::string next_id() {
    return id_ + "-" + std::to_string(seq_.fetch_add(1, std::memory_order_relaxed));
  }

  const options o;
  const actor_options a;
  // The options as the scripts take them, written once: the ownership lease in whole
  // milliseconds (common/lease_ms.hpp), and the mailbox bound ('': unbounded).
  const std::int64_t lease_ms = lease_to_ms(a.lease.duration.count());
  const std::string lease_px = std::to_string(lease_ms);
  const std::string bound = a.capacity == 0 ? "" : std::to_string(a.capacity);
  const std::string attempts = std::to_string(a.max_attempts);
  router servers;  // after o, which it refers to
  // Loaded once by the constructor, then only read.
  script post_script, step_script, renew_script, claim_script, due_script;
  // Every pending set a sweep reads: the one of one server, or a cluster's per group.
  const std::vector<std::string> pending_sets;
  [[nodiscard]] actor_names names(std::string_view key) const { return {o.prefix, key, servers.clustered()}; }

  mutable std::mutex handlers_mu;
  // By family; guarded by handlers_mu. A handler is copied out (shared) before it runs.
  std::map<std::string, std::shared_ptr<const actor_system::handler>, std::less<>> handlers;

  std::mutex mu;
  std::condition_variable cv;  // `stopping` was set
  bool stopping = false;       // guarded by mu
  // The actors this process drains now or has queued on its executor, token -> key: the
  // renewer's work. Guarded by mu. A drain inserts an entry first and erases it last; a
  // continuation queued on the executor holds one of its own until it runs (so a token
  // may appear twice for a moment: erase one entry, never all).
  std::multimap<std::string, std::string, std::less<>> draining;
  // The deferred steps (defer_step, run_steps); every field guarded by `mu`.
  struct {
    std::mutex mu;
    std::vector<deferred_step> waiting;  // not sent yet
    bool queued = false;                 // a run_steps job is queued or running
    std::thread::id runner;              // the thread in run_steps now
    bool nested = false;                 // a run_steps job ran inline inside execute()
  } steps;
  void register_drain(const std::string& token, const std::string& key);
  void unregister_drain(const std::string& token) noexcept;

 private:
  void renew_loop() noexcept;
  void sweep_loop() noexcept;

  const std::string id_;
  // Message and token sequence; relaxed: only uniqueness matters (fetch_add never repeats).
  std::atomic<std::uint64_t> seq_{0};
  std::thread renewer_;
  std::thread sweeper_;
};

}  // namespace handoff::redis::detail
