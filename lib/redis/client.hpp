// The client behind handoff::redis::keyed_mutex (private to lib/redis). The protocol on
// the server is in scripts.hpp; the client waits for notifications, renews leases and
// drives async waiters.
//
// Threads: callers run their own acquire/release round trips on pooled connections and
// block on a condition variable between attempts (client.cpp). One background thread per
// client owns the subscriber connection that wakes waiters (background.cpp), the watchdog
// that renews lease-less holds (watchdog.cpp) and the async waiters' attempts
// (async_runner.cpp), on its own connection. User callbacks never run on it: they go to
// the client's callback thread, so a slow callback cannot stop heartbeats or renewals.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "../task_thread.hpp"
#include "connection.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/redis/keyed_mutex.hpp"
#include "names.hpp"
#include "scripts.hpp"

namespace handoff::redis::detail {

using handoff::detail::add_saturating;
using handoff::detail::now_ns;
constexpr std::int64_t ms_ns = 1'000'000;
// The background thread's longest sleep: it picks up new watchdog holds at least this
// often (a hold whose first renewal is due sooner wakes it, see make_hold), so no renewal
// is sent more than this late: one second, short against the 30 s default lease.
constexpr std::int64_t max_sleep = 1000 * ms_ns;
// After a failed subscriber connect, the next try comes after recheck_interval, at most
// this: notifications are lost while it is down, so retry quickly (waiters re-check anyway).
constexpr std::int64_t subscriber_retry_max = 100 * ms_ns;
// The watchdog renews a lease-less hold when a third of its lease has passed (and retries
// a failed renewal a third later): two more tries fit before the lease would run out, so
// one lost round trip or a short server stall never loses a hold.
constexpr std::int64_t renew_fraction = 3;
// A waiter's heartbeat deadline on the server is this many recheck_intervals: a waiter
// whose process died is dropped after missing that many re-checks, while one late
// re-check (a busy machine) never costs a live waiter its place.
constexpr std::int64_t missed_heartbeats = 3;
// The longest lease sent to the server: 2^42 ms, about 139 years. Redis rejects a PX past
// its clock's range; this is far inside it and far beyond any real lease ("never").
constexpr std::int64_t max_lease_ms = std::int64_t{1} << 42;

// Milliseconds to nanoseconds, saturating at no_deadline.
constexpr std::int64_t ms_to_ns(std::int64_t ms) noexcept {
  return ms >= handoff::detail::no_deadline / ms_ns ? handoff::detail::no_deadline : ms * ms_ns;
}
// A lease in nanoseconds to whole milliseconds for PX: rounded up, at least 1, at most
// max_lease_ms.
constexpr std::int64_t lease_to_ms(std::int64_t lease_ns) noexcept {
  const std::int64_t ms = lease_ns / ms_ns + (lease_ns % ms_ns != 0 ? 1 : 0);
  return std::clamp<std::int64_t>(ms, 1, max_lease_ms);
}

inline std::string random_hex128() {
  std::random_device rd;
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 4; ++i) {
    std::uint32_t v = rd();
    for (int j = 0; j < 8; ++j, v >>= 4U) s += digits[v & 0xFU];
  }
  return s;
}

// One grant, shared by its guard and, for lease-less holds, the watchdog.
struct hold {
  hold(std::shared_ptr<client> c, std::string_view k, std::string o, std::uint64_t f, std::int64_t lease, bool wd,
       std::int64_t valid)
      : owner_client(std::move(c)), key(k), names(owner_client_prefix(), k), owner(std::move(o)), fence(f),
        watchdog(wd), lease_ns(lease), valid_until(valid) {}
  [[nodiscard]] std::string_view owner_client_prefix() const noexcept;

  std::shared_ptr<client> owner_client;
  std::string key;
  key_names names;
  std::string owner;  // the random owner token stored in {key}:lock
  std::uint64_t fence;
  bool watchdog;  // renewed by the background thread until released

  // Written by the owner (extend) and the watchdog, read by both; relaxed: each is a
  // value on its own, and mu orders the writers.
  std::atomic<std::int64_t> lease_ns;
  std::atomic<std::int64_t> valid_until;  // steady ns: sent-time of the last grant/renewal + lease
  std::atomic<bool> lost{false};          // a renewal found the key not ours, or came too late

  // Held by the watchdog across a renewal and by unlock/extend: once unlock has set
  // `released`, no renewal is in flight and none will be sent.
  std::mutex mu;
  std::atomic<bool> released{false};  // written under mu by the owner; read by the owner freely
  std::int64_t retry_at = 0;          // background thread only: after a failed renewal

  // When the watchdog renews: a third into the current lease (also after extend()).
  [[nodiscard]] std::int64_t renewal_due() const noexcept {
    const std::int64_t lease = lease_ns.load(std::memory_order_relaxed);
    return std::max(retry_at, valid_until.load(std::memory_order_relaxed) - lease + lease / renew_fraction);
  }

  [[nodiscard]] bool expired() const noexcept {
    return lost.load(std::memory_order_relaxed) || now_ns() >= valid_until.load(std::memory_order_relaxed);
  }
};

struct async_request;

// A waiting request, found by its id when its notification arrives.
struct waiter {
  bool notified = false;           // guarded by client::reg_mu_
  std::condition_variable cv;      // blocking waiters wait on it with reg_mu_
  async_request* async = nullptr;  // set for async requests: the background thread re-checks them
};

struct async_request {
  std::string key;
  std::string owner;
  std::string id;
  std::int64_t deadline = 0;
  std::int64_t lease_ns = 0;
  keyed_mutex::callback cb;
  std::int64_t next_check = 0;  // background thread only
  bool queued = false;          // background thread only: `id` is in the key's queue
  waiter w;
};

struct attempt_result {
  bool granted;
  std::int64_t value;  // the fencing token if granted, else the lock's PTTL in ms (< 0: none)
};

struct client : std::enable_shared_from_this<client> {
  explicit client(options opts);
  ~client();
  client(const client&) = delete;
  client& operator=(const client&) = delete;

  void start();
  void stop() noexcept;

  guard acquire(std::string_view key, std::int64_t deadline, std::int64_t lease_ns);
  void submit(std::unique_ptr<async_request> r);
  void wake() const noexcept;  // the background thread re-reads its inputs and schedule
  void release(hold& h);
  bool extend(hold& h, std::int64_t lease_ns);

  std::string next_id() { return id_ + ":" + std::to_string(seq_.fetch_add(1, std::memory_order_relaxed)); }
  [[nodiscard]] std::int64_t lease_ms(std::int64_t lease_ns) const noexcept {
    return lease_ns == 0 ? o.watchdog_lease.count() : lease_to_ms(lease_ns);
  }
  const options o;

 private:
  attempt_result attempt(connection& c, const key_names& n, std::string_view owner, std::int64_t lease_ms,
                         std::string_view waiter_id, std::string_view key);
  void cancel(connection& c, const key_names& n, std::string_view waiter_id, std::string_view key);
  std::shared_ptr<hold> make_hold(std::string_view key, std::string owner, std::uint64_t fence, std::int64_t lease_ns,
                                  std::int64_t sent_at);
  // When a waiter that was not granted re-checks next: a notification wakes it earlier.
  [[nodiscard]] std::int64_t next_check(std::int64_t now, std::int64_t deadline, std::int64_t pttl_ms) const noexcept;

  pool pool_;
  script acquire_script_{scripts::prelude + std::string(scripts::acquire), {}};
  script release_script_{scripts::prelude + std::string(scripts::release), {}};
  script extend_script_{scripts::extend, {}};
  script cancel_script_{scripts::prelude + std::string(scripts::cancel), {}};
  const std::string id_ = random_hex128();
  const std::string channel_prefix_ = o.prefix + "notify:";
  const std::string heartbeat_ttl_ms_ = std::to_string(missed_heartbeats * o.recheck_interval.count());
  std::atomic<std::uint64_t> seq_{0};

  std::mutex reg_mu_;
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
