// The client's background thread: its loop, the subscriber that wakes waiters, and its
// own command connection (see client.hpp).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <string_view>
#include <system_error>

#include "client.hpp"
#include "handoff/detail/report.hpp"

namespace handoff::redis::detail {

connection& client::bg_connection() {
  if (bg_conn_ == nullptr || bg_conn_->stale()) {
    const bool replaces = bg_conn_ != nullptr;  // a reconnect, for the statistics
    bg_conn_.reset();
    bg_conn_ = std::make_unique<connection>(o, &counters);
    if (replaces) counters.reconnect();
  }
  return *bg_conn_;
}

namespace {
// Parses the decimal number that ends at the first ' ' from `at` (or at the end); moves `at`
// past it. False if there is none.
bool next_number(std::string_view s, std::size_t& at, std::int64_t& out) {
  const std::size_t end = std::min(s.find(' ', at), s.size());
  const auto [p, ec] = std::from_chars(s.data() + at, s.data() + end, out);
  if (ec != std::errc() || p != s.data() + end) return false;
  at = end + 1;
  return true;
}
}  // namespace

void client::on_message(const redisReply& r) {
  // ["message", channel, "<request id> <fence> <heartbeat> <ms waited>"] (scripts.hpp); the
  // subscribe confirmations are ignored.
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 3 || r.element[2]->type != REDIS_REPLY_STRING) return;
  const std::string_view msg(r.element[2]->str, r.element[2]->len);
  const std::size_t id_end = msg.find(' ');
  if (id_end == std::string_view::npos) return;
  std::size_t at = id_end + 1;
  std::int64_t fence = 0;
  std::int64_t beat = 0;
  std::int64_t waited = 0;
  if (!next_number(msg, at, fence) || !next_number(msg, at, beat) || !next_number(msg, at, waited) || fence <= 0) {
    return;
  }
  const std::string id(msg.substr(0, id_end));
  const std::lock_guard lock(reg_mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;  // gave up meanwhile: its cancel passed the key on
  waiter& w = *it->second;
  w.granted_fence = static_cast<std::uint64_t>(fence);
  w.granted_after_beat = beat;
  w.waited_ms = waited;
  w.async->next_check = 0;  // this thread owns async requests
}

void client::wake_all() {
  const std::lock_guard lock(reg_mu_);
  for (auto& [id, w] : waiters_) w->async->next_check = 0;
}

void client::run() noexcept {
  for (;;) {
    if (stop_.load()) return;
    std::int64_t now = now_ns();
    if (sub_ == nullptr && now >= sub_retry_at_) {
      try {
        connect_subscriber();
        counters.reconnect();  // the constructor's first subscription is not in this loop
        wake_all();            // notifications sent while we were not listening are lost: re-check
      } catch (const error&) {
        sub_retry_at_ = now + std::min<std::int64_t>(o.recheck_interval.count() * ms_ns, subscriber_retry_max);
      }
    }
    {
      const std::lock_guard lock(in_mu_);
      for (auto& r : incoming_) {
        r->w.async = r.get();
        {
          const std::lock_guard reg(reg_mu_);
          waiters_.emplace(r->id, &r->w);
        }
        async_.push_back(std::move(r));
      }
      incoming_.clear();
      for (auto& h : watch_incoming_) watched_.push_back(std::move(h));
      watch_incoming_.clear();
    }
    try {
      run_async(now);
      run_watchdog(now);
    } catch (const std::exception& e) {  // bad_alloc: keep the thread alive, retry later
      std::fprintf(stderr, "handoff::redis: background thread: %s\n", e.what());
    }

    now = now_ns();
    std::int64_t next = now + max_sleep;
    for (const auto& r : async_) next = std::min(next, r->next_check);
    for (const auto& h : watched_) next = std::min(next, h->renewal_due());
    if (sub_ == nullptr) next = std::min(next, sub_retry_at_);
    pollfd fds[2] = {{.fd = wake_fd_, .events = POLLIN, .revents = 0},
                     {.fd = sub_ != nullptr ? sub_->fd() : -1, .events = POLLIN, .revents = 0}};
    const int timeout_ms = static_cast<int>(std::max<std::int64_t>(0, (next - now + ms_ns - 1) / ms_ns));
    if (poll(fds, 2, timeout_ms) < 0) continue;  // EINTR
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t v = 0;
      [[maybe_unused]] const auto n = read(wake_fd_, &v, sizeof v);
    }
    if (sub_ != nullptr && fds[1].revents != 0) {
      try {
        for (const reply& r : sub_->read_available()) on_message(*r);
      } catch (const error&) {
        sub_.reset();  // reconnect at the top of the loop
        sub_retry_at_ = 0;
        counters.notifications_lost();
      }
    }
  }
}

}  // namespace handoff::redis::detail
