// The lock client's async requests (private to lib/redis): the requests lock_async hands
// in, their registry by request id, the subscriber connection on which releases announce
// grants to them, the attempts the background thread runs for them (each an acquire_step,
// acquire_step.hpp), and the callback thread that completes them, so that a slow callback
// never holds up this client's heartbeats, renewals or notifications.
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
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

struct async_request {
  async_request(const lease_clock& clock, std::string_view prefix, std::string k, std::string id, std::int64_t lease_ns,
                std::int64_t deadline, keyed_mutex::callback f)
      : key(std::move(k)), cb(std::move(f)), step(clock, prefix, key, std::move(id), lease_ns, deadline) {}

  std::string key;
  keyed_mutex::callback cb;
  acquire_step step;            // background thread only
  grant_notice notice;          // background thread only: the last grant announced to it
  std::int64_t next_check = 0;  // background thread only: its next attempt (0: now)
};

class async_waiters {
 public:
  async_waiters(client& c, background& bg) noexcept : client_(c), bg_(bg) {}

  // Subscribes to the client's channel; throws error. Once, before the background thread
  // starts (which reconnects it when it fails).
  void connect_subscriber();
  // Thread-safe, never blocks: the background thread takes r in and runs its attempts.
  void submit(std::unique_ptr<async_request> r);

  // Background thread only. Reconnects a failed subscriber when its retry is due.
  void reconnect_subscriber(std::int64_t now);
  // Background thread only. Takes in what submit() gave, then drives every request:
  // completes those granted (by an announcement or an attempt), timed out or failed, and
  // sends the due attempts.
  void run(std::int64_t now);
  // Background thread only: the earlier of `next` and the next attempt or subscriber retry.
  [[nodiscard]] std::int64_t next_due(std::int64_t next) const noexcept;
  // Background thread only: the subscriber's socket, or -1 while it is down.
  [[nodiscard]] int subscriber_fd() const noexcept { return sub_ != nullptr ? sub_->fd() : -1; }
  // Background thread only: reads the grants announced on the subscriber.
  void read_subscriber();

  // After the background thread ended: ends the requests still waiting (a precondition
  // violation: the mutex is destroyed) with an error rather than leak them, then runs the
  // callbacks still queued and joins the callback thread.
  void stop() noexcept;

 private:
  void on_message(const redisReply& r);
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
  std::unique_ptr<connection> sub_;
  std::int64_t sub_retry_at_ = 0;
};

}  // namespace handoff::redis::detail
