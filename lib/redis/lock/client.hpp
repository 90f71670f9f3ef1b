// lib/redis/lock/: handoff::redis::keyed_mutex: this client, its facade and guard
// (keyed_mutex.cpp), the background thread (background.cpp: loop and subscriber; watchdog.cpp;
// async_runner.cpp) and the lock's Lua (scripts.hpp). The stores and the actors never use it.
//
// The client behind handoff::redis::keyed_mutex (private to lib/redis). The protocol on
// the server is in scripts.hpp; the client waits for grants, renews leases and drives
// async waiters.
//
// Threads: callers run their own acquire/release round trips on pooled connections; a
// blocking waiter waits for its grant in BLPOP on a connection of its own (client.cpp).
// One background thread per client owns the subscriber connection on which async
// waiters' grants are announced (background.cpp), the watchdog that renews lease-less
// holds (watchdog.cpp) and the async waiters' attempts (async_runner.cpp), on its own
// connection. User callbacks never run on it: they go to
// the client's callback thread, so a slow callback cannot stop heartbeats or renewals.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../../runtime/task_thread.hpp"
#include "../common/connection.hpp"
#include "../common/counters.hpp"
#include "../common/ids.hpp"
#include "../common/lease_ms.hpp"
#include "../common/names.hpp"
#include "../common/renewal.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/redis/keyed_mutex.hpp"
#include "scripts.hpp"

namespace handoff::redis::detail {

using handoff::detail::add_saturating;
using handoff::detail::now_ns;
// The background thread's longest sleep: it picks up new watchdog holds at least this
// often (a hold whose first renewal is due within twice this wakes it, see granted()), so
// no renewal is sent more than this late. A quarter second: a lease-less hold granted by a
// release renews a third into a heartbeat-long lease (1 s in, by default), and must be
// picked up in time without a wake-up of this thread on every hand-off; 4 wake-ups a
// second of an idle client cost nothing measurable.
constexpr std::int64_t max_sleep = 250 * ms_ns;
// After a failed subscriber connect, the next try comes after recheck_interval, at most
// this: notifications are lost while it is down, so retry quickly (waiters re-check anyway).
constexpr std::int64_t subscriber_retry_max = 100 * ms_ns;
// A waiter's heartbeat deadline on the server is this many recheck_intervals: a waiter
// whose process died is dropped after missing that many re-checks, while one late
// re-check (a busy machine) never costs a live waiter its place.
constexpr std::int64_t missed_heartbeats = 3;
// client::contention_: a lock that had to queue counts as four free ones, and eight queued
// locks in a row are remembered: a hot key keeps the single round trip to queue and wait
// while a free grant now and then (a hand-off to a thread that was not queued yet) does not
// turn it off.
constexpr int contention_step = 4;
constexpr int contention_max = 32;

// Milliseconds to nanoseconds, saturating at no_deadline.
constexpr std::int64_t ms_to_ns(std::int64_t ms) noexcept {
  return ms >= handoff::detail::no_deadline / ms_ns ? handoff::detail::no_deadline : ms * ms_ns;
}

// One grant, shared by its guard and, for lease-less holds, the watchdog.
struct hold {
  hold(std::shared_ptr<client> c, std::string_view k, std::string v, std::uint64_t f, std::int64_t lease, bool wd,
       std::int64_t valid, std::int64_t px)
      : owner_client(std::move(c)), key(k), names(owner_client_prefix(), k), value(std::move(v)), fence(f),
        watchdog(wd), lease_ns(lease), valid_until(valid), px_ns(px) {}
  [[nodiscard]] std::string_view owner_client_prefix() const noexcept;

  std::shared_ptr<client> owner_client;
  std::string key;
  key_names names;
  std::string value;  // what {key}:lock holds while this grant lasts: "<request id> <fence>"
  std::uint64_t fence;
  bool watchdog;  // renewed by the background thread until released

  // Written by the owner (extend) and the watchdog, read by both; relaxed: each is a
  // value on its own, and mu orders the writers.
  std::atomic<std::int64_t> lease_ns;
  // Steady ns: a local time before the server granted or renewed it last, plus the lease.
  std::atomic<std::int64_t> valid_until;
  // The lease the last grant or renewal set on the server (shorter than lease_ns for a
  // lease-less hold granted by a release, until its first renewal).
  std::atomic<std::int64_t> px_ns;
  std::atomic<bool> lost{false};  // a renewal found the key not ours, or came too late

  // Held by the watchdog across a renewal and by unlock/extend: once unlock has set
  // `released`, no renewal is in flight and none will be sent.
  std::mutex mu;
  std::atomic<bool> released{false};  // written under mu by the owner; read by the owner freely
  std::int64_t retry_at = 0;          // background thread only: after a failed renewal

  // When the watchdog renews: a third into the lease on the server (also after extend()).
  [[nodiscard]] std::int64_t renewal_due() const noexcept {
    const std::int64_t px = px_ns.load(std::memory_order_relaxed);
    return std::max(retry_at, valid_until.load(std::memory_order_relaxed) - px + renewal_interval(px));
  }

  [[nodiscard]] bool expired() const noexcept {
    return lost.load(std::memory_order_relaxed) || now_ns() >= valid_until.load(std::memory_order_relaxed);
  }
};

struct async_request;

// An async request's registration, found by its id when a grant is announced on the
// client's channel (blocking waiters take their grants from a list instead: client.cpp).
// Written and read by the background thread only.
struct waiter {
  // Set when a release announced a grant of the key to this request: the fencing token,
  // the server time of the heartbeat before the grant, and the ms from that heartbeat to
  // the grant (scripts.hpp).
  std::uint64_t granted_fence = 0;
  std::int64_t granted_after_beat = -1;
  std::int64_t waited_ms = 0;
  // The announced grant, if it answers the attempt whose heartbeat is `beat` (the last one
  // the request made): an older one has ended since, or that attempt would have found it.
  [[nodiscard]] bool granted(std::int64_t beat) const noexcept {
    return granted_fence != 0 && granted_after_beat == beat;
  }
  async_request* async = nullptr;  // the request, which the background thread re-checks
};

struct async_request {
  std::string key;
  std::string id;  // the request id (scripts.hpp)
  std::int64_t deadline = 0;
  std::int64_t lease_ns = 0;
  keyed_mutex::callback cb;
  std::int64_t next_check = 0;  // background thread only
  std::int64_t sent = 0;        // background thread only: when its last attempt was sent
  std::int64_t beat = -1;       // background thread only: that attempt's heartbeat time on the server
  bool queued = false;          // background thread only: `id` is in the key's queue
  waiter w;
};

struct attempt_result {
  bool granted;
  std::int64_t value;  // the fencing token if granted, else the lock's PTTL in ms (< 0: none)
  // If granted: the lease left in ms, or -1 for the whole lease from now. If queued: the
  // server time (ms) of the heartbeat it recorded.
  std::int64_t extra;
};

struct client : std::enable_shared_from_this<client> {
  explicit client(options opts);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  void start();
  void stop() noexcept;

  // keyed_mutex's blocking requests: `deadline` is read under wait_mode::until only.
  guard acquire(std::string_view key, handoff::detail::wait_mode mode, std::int64_t deadline, std::int64_t lease_ns);
  void submit(std::unique_ptr<async_request> r);
  void wake() const noexcept;  // the background thread re-reads its inputs and schedule
  void release(hold& h);
  bool extend(hold& h, std::int64_t lease_ns);

  // A new request id (scripts.hpp): unique, with the lease and heartbeat a release sets
  // and reads when it grants the request, and whether it is told on the client's channel
  // (async) or through a list (blocking).
  std::string request_id(std::int64_t lease_ns, bool blocking) {
    return id_ + ":" + std::to_string(seq_.fetch_add(1, std::memory_order_relaxed)) + (lease_ns == 0 ? ":w" : ":") +
           std::to_string(lease_ms(lease_ns)) + ":" + heartbeat_ttl_ms_ + (blocking ? ":l" : "");
  }
  [[nodiscard]] std::int64_t lease_ms(std::int64_t lease_ns) const noexcept {
    return lease_ns == 0 ? o.watchdog_lease.count() : lease_to_ms(lease_ns);
  }
  const options o;
  client_counters counters{o.metrics};  // before the pools and connections that count into it

 private:
  // One acquire script: `queue` false for a try_lock, which never queues.
  attempt_result attempt(connection& c, const key_names& n, std::string_view id, std::int64_t lease_ms, bool queue,
                         std::string_view key);
  // The cancel script; a failure is ignored (the server drops the entry when its heartbeat
  // runs out). Best effort: a grant it cannot pass on ends with its lease.
  void cancel(connection& c, const key_names& n, std::string_view id, std::string_view key) noexcept;
  // When a grant's lease ends on this process's clock (no later than on the server's: it
  // starts from a local time no later than the server's grant) and the lease it set there.
  struct grant_clock {
    std::int64_t valid_until;
    std::int64_t px_ns;
  };
  // The lease a release sets when it grants a queued request: the request's lease, or for
  // a lease-less one the shorter of the watchdog lease and the heartbeat (a waiter that
  // died just before it was granted holds the key no longer than a dead waiter blocks the
  // queue); the watchdog renews it to the full watchdog lease a third into it.
  [[nodiscard]] std::int64_t released_px(std::int64_t lease_ns) const noexcept {
    return lease_ns != 0 ? lease_ns : std::min(o.watchdog_lease.count(), heartbeat_ms_) * ms_ns;
  }
  // For an attempt sent at `sent` that found the key granted to it: by itself (the whole
  // lease from then), or earlier by a release (what PTTL said was left).
  [[nodiscard]] grant_clock found(std::int64_t sent, std::int64_t lease_ns, const attempt_result& r) const noexcept {
    if (r.extra >= 0) return {add_saturating(sent, ms_to_ns(r.extra)), released_px(lease_ns)};
    const std::int64_t lease = lease_ns == 0 ? o.watchdog_lease.count() * ms_ns : lease_ns;
    return {add_saturating(sent, lease), lease};
  }
  // For a grant announced to a request whose last attempt was sent at `sent`: the lease
  // from `sent` plus the time the server says passed from that attempt to the grant.
  [[nodiscard]] grant_clock announced(std::int64_t sent, std::int64_t lease_ns, std::int64_t waited_ms) const noexcept {
    const std::int64_t px = released_px(lease_ns);
    return {add_saturating(add_saturating(sent, ms_to_ns(waited_ms)), px), px};
  }
  // The guard of a grant to request `id`.
  guard granted(std::string_view key, std::string_view id, std::uint64_t fence, std::int64_t lease_ns,
                grant_clock clock);
  // What a blocking waiter's BLPOP on its grant list (scripts.hpp) returned: a grant
  // {fence, heartbeat, ms waited}, a poke (fence 0, poked), or nothing in time.
  struct pushed_grant {
    std::uint64_t fence = 0;
    std::int64_t beat = 0;
    std::int64_t waited_ms = 0;
    bool poked = false;
  };
  // A blocking waiter's wait, on its own connection: BLPOP `list` for at most `ms`.
  pushed_grant await_grant(connection& c, const std::string& list, std::int64_t ms, std::string_view key);
  // An attempt (queueing) with the BLPOP of `list` for at most `ms` behind it: one round trip.
  // With skip_reply, the script's reply is skipped (connection::eval_skipped_then) and the
  // BLPOP's reply says what it would have (scripts.hpp, ARGV[7]): the thread wakes once,
  // and a failing script shows only as the BLPOP timing out.
  std::pair<attempt_result, pushed_grant> attempt_and_wait(connection& c, const key_names& n, std::string_view id,
                                                           std::int64_t lease_ms, const std::string& list,
                                                           std::int64_t ms, std::string_view key, bool skip_reply);
  static attempt_result parse_attempt(const redisReply& r, std::string_view key);
  // The BLPOP's reply of a skip_reply attempt, as the attempt's result and the pushed grant.
  static std::pair<attempt_result, pushed_grant> parse_listed(const redisReply& r, std::string_view what);
  static pushed_grant parse_grant(const redisReply& r, std::string_view what);
  // When a waiter that was not granted re-checks next: a notification wakes it earlier.
  [[nodiscard]] std::int64_t next_check(std::int64_t now, std::int64_t deadline, std::int64_t pttl_ms) const noexcept;

  pool pool_;
  // Blocking waiters' own connections, one per waiter while it waits (BLPOP), kept for
  // reuse: not limited by pool_size, so that no waiter keeps a command connection.
  pool waits_{o, std::numeric_limits<std::size_t>::max(), &counters};
  script acquire_script_{scripts::acquire_source(), {}};
  script release_script_{scripts::release_source(), {}};
  script extend_script_{scripts::extend, {}};
  script cancel_script_{scripts::cancel_source(), {}};
  // Whether the server honours CLIENT REPLY SKIP: set by the constructor, read-only after.
  bool skip_replies_ = false;
  const std::string id_ = random_hex128();
  const std::string channel_prefix_ = o.prefix + "notify:";
  const std::int64_t heartbeat_ms_ = missed_heartbeats * o.recheck_interval.count();
  const std::string heartbeat_ttl_ms_ = std::to_string(heartbeat_ms_);
  std::atomic<std::uint64_t> seq_{0};
  // Whether blocking locks of this client have been waiting lately: then a lock sends its
  // first attempt and the BLPOP of its wait together (one round trip to queue and wait,
  // instead of two), at the price of a '-' pushed and popped when the key was free. Up by
  // contention_step each time a lock had to queue (at most contention_max), down by one
  // each time one found the key free: a few free keys in a row turn it off. Relaxed: a
  // hint, read and written on its own.
  std::atomic<int> contention_{0};

  std::mutex reg_mu_;
  // Async requests by id (the background thread registers them; complete() also runs in
  // stop(), after that thread ended).
  std::unordered_map<std::string, waiter*> waiters_;  // guarded by reg_mu_

  void run() noexcept;
  void connect_subscriber();
  void on_message(const redisReply& r);
  void wake_all();
  connection& bg_connection();
  void run_async(std::int64_t now);
  void run_watchdog(std::int64_t now);
  void complete(std::unique_ptr<async_request> r, guard g, std::exception_ptr e) noexcept;

  // Runs the callbacks of async requests (complete()), so that a slow one never holds up
  // this client's heartbeats, renewals or notifications.
  handoff::detail::task_thread callbacks_;
  std::thread thread_;
  int wake_fd_ = -1;  // eventfd: submit() and stop() wake the background thread
  std::atomic<bool> stop_{false};

  std::mutex in_mu_;
  std::vector<std::unique_ptr<async_request>> incoming_;  // guarded by in_mu_
  std::vector<std::shared_ptr<hold>> watch_incoming_;     // guarded by in_mu_

  // Background thread only (and the constructor/stop, when it is not running):
  std::unique_ptr<connection> sub_;
  std::unique_ptr<connection> bg_conn_;
  std::vector<std::unique_ptr<async_request>> async_;
  std::vector<std::shared_ptr<hold>> watched_;
  std::int64_t sub_retry_at_ = 0;
};

}  // namespace handoff::redis::detail
