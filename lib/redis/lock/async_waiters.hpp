// The lock client's async requests (private to lib/redis): the requests lock_async hands
// in, their registry by request id, the subscriber connections on which releases announce
// grants to them (one to the one server; on a cluster, one per primary that serves a slot
// a request waits in, subscribed to the sharded channel of each such slot), the attempts the background thread runs for
// them (each an acquire_step, acquire_step.hpp), and the callback thread that completes them, so that a slow callback
// never holds up this client's heartbeats, renewals or notifications.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "../../runtime/task_thread.hpp"
#include "../common/connection.hpp"
#include "acquire_step.hpp"
#include "handoff/redis/keyed_mutex.hpp"

namespace handoff::redis::detail {

struct client;
class background;

// After a failed subscriber connect, the next try comes after recheck_interval, at most
// this: notifications are lost while it is down, so retry quickly (waiters re-check anyway).
constexpr std::int64_t subscriber_retry_max = 100 * ms_ns;
// A request whose slot's channel could not be subscribed to (its node down, or a slot map
// that still lags a move after a refresh) re-checks after this, not the whole re-check
// interval: at most every 100 ms, never later than its normal re-check.
[[nodiscard]] constexpr std::int64_t unsubscribed_retry(std::int64_t recheck_ms) noexcept {
  return std::min<std::int64_t>(ms_to_ns(recheck_ms), subscriber_retry_max);
}

struct async_request {
  async_request(const lease_clock& clock, key_names names, std::string k, std::string id, std::int64_t lease_ns,
                std::int64_t deadline, keyed_mutex::callback f)
      : key(std::move(k)), cb(std::move(f)), step(clock, std::move(names), std::move(id), lease_ns, deadline) {}

  std::string key;
  keyed_mutex::callback cb;
  acquire_step step;            // background thread only
  grant_notice notice;          // background thread only: the last grant announced to it
  std::int64_t next_check = 0;  // background thread only: its next attempt (0: now)
};

class async_waiters {
 public:
  async_waiters(client& c, background& bg) noexcept : client_(c), bg_(bg) {}

  // On one server, subscribes to the client's channel; throws error. Once, before the
  // background thread starts (which reconnects it when it fails). On a cluster, nothing:
  // each slot's channel is subscribed before the first attempt of a request in that slot.
  void connect_subscriber();
  // Thread-safe, never blocks: the background thread takes r in and runs its attempts.
  void submit(std::unique_ptr<async_request> r);

  // Background thread only. Reconnects the one server's failed subscriber when its retry
  // is due.
  void reconnect_subscriber(std::int64_t now);
  // Background thread only. Takes in what submit() gave, then drives every request:
  // completes those granted (by an announcement or an attempt), timed out or failed, and
  // sends the due attempts.
  void run(std::int64_t now);
  // Background thread only: the earlier of `next` and the next attempt or subscriber retry.
  [[nodiscard]] std::int64_t next_due(std::int64_t next) const noexcept;
  // Background thread only: the subscribers' sockets, appended to `fds`.
  void subscriber_fds(std::vector<int>& fds) const;
  // Background thread only: reads the grants announced on the subscribers.
  void read_subscribers();

  // After the background thread ended: ends the requests still waiting (a precondition
  // violation: the mutex is destroyed) with an error rather than leak them, then runs the
  // callbacks still queued and joins the callback thread.
  void stop() noexcept;

 private:
  // One subscriber connection: to the one server (address ""), or to a cluster's primary.
  struct subscriber {
    std::unique_ptr<connection> conn;  // nullptr: down
    std::set<std::uint16_t> slots;     // on a cluster: the slots whose channel it subscribed to
    std::int64_t retry_at = 0;         // when down: when to connect again
  };

  // Opens s to the server of `o`; on one server, subscribes to the client's channel.
  // Throws error.
  void connect(subscriber& s, const options& o);
  // On a cluster: subscribes to the channel of r's slot, on the node serving it, before r's
  // attempt, unless done. True when subscribed (or on one server); false leaves r to a prompt
  // re-check (unsubscribed_retry).
  bool subscribe_for(const async_request& r, std::int64_t now);
  // s failed: closed; every request re-checks (the announcements sent meanwhile are lost).
  void drop(subscriber& s, std::int64_t retry_at);
  void on_message(subscriber& s, const redisReply& r);
  // Hands r's callback its result, on the callback thread.
  void complete(std::unique_ptr<async_request> r, guard g, std::exception_ptr e) noexcept;

  client& client_;
  background& bg_;
  handoff::detail::task_thread callbacks_;

  std::mutex in_mu_;
  std::vector<std::unique_ptr<async_request>> incoming_;  // guarded by in_mu_

  // Background thread only (and stop(), after that thread ended):
  std::vector<std::unique_ptr<async_request>> requests_;
  std::unordered_map<std::string, async_request*> by_id_;  // the requests, by request id
  std::map<std::string, subscriber, std::less<>> subs_;    // by node address
};

}  // namespace handoff::redis::detail
