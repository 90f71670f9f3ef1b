// The async requests: their registry, the subscriber, their attempts on the background
// thread, and their completion on the callback thread (see async_waiters.hpp).
#include "async_waiters.hpp"

#include <algorithm>
#include <charconv>
#include <new>
#include <string_view>
#include <system_error>
#include <utility>

#include "background.hpp"
#include "client.hpp"
#include "handoff/detail/report.hpp"

namespace handoff::redis::detail {

namespace {
using lane = router::lane;

// One finished async request on its way to the callback thread.
struct callback_task final : handoff::detail::task {
  callback_task(std::unique_ptr<async_request> req, guard g, std::exception_ptr e) noexcept
      // NOLINTNEXTLINE(bugprone-throw-keyword-missing): an exception_ptr is stored, not thrown
      : r(std::move(req)), result(std::move(g)), failure(std::move(e)) {
    run = &call;
  }
  std::unique_ptr<async_request> r;
  guard result;
  std::exception_ptr failure;

  static void call(handoff::detail::task* t) noexcept {
    std::unique_ptr<callback_task> self(static_cast<callback_task*>(t));
    try {
      self->r->cb(std::move(self->result), std::move(self->failure));
    } catch (...) {
      handoff::detail::report_to_stderr(std::current_exception(), "a redis::keyed_mutex::lock_async callback");
    }
  }
};

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

void async_waiters::connect(subscriber& s, const options& o) {
  auto c = std::make_unique<connection>(o, &client_.counters);
  if (!client_.commands.servers().clustered()) {
    c->command({"SUBSCRIBE", client_.commands.channel(0)}, "SUBSCRIBE");  // replies once subscribed
  }
  s.conn = std::move(c);
  s.slots.clear();
}

void async_waiters::connect_subscriber() {
  if (!client_.commands.servers().clustered()) connect(subs_[std::string()], client_.o);
}

void async_waiters::drop(subscriber& s, std::int64_t retry_at) {
  if (s.conn != nullptr) client_.counters.notifications_lost();
  s.conn.reset();
  s.slots.clear();
  s.retry_at = retry_at;
  for (auto& r : requests_) r->next_check = 0;
}

bool async_waiters::subscribe_for(const async_request& r, std::int64_t now) {
  router& servers = client_.commands.servers();
  if (!servers.clustered()) return true;
  const std::uint16_t slot = hash_slot(r.step.names().lock);
  subscriber* sp = nullptr;
  try {
    // A second pass after a MOVED: the slot left the node the map named (a resharding
    // ended, which is also what ended the old subscription), so subscribe on its new one.
    for (int pass = 0; pass < 2; ++pass) {
      const auto [address, o] = servers.primary_of(slot);
      subscriber& s = subs_[address];
      sp = &s;
      if (s.conn == nullptr) {
        if (now < s.retry_at) return false;
        connect(s, *o);
      }
      if (s.slots.contains(slot)) return true;
      // The confirmation comes after any announcement already on its way: those are handled.
      constexpr std::string_view what = "SSUBSCRIBE";
      const std::string channel = client_.commands.channel(slot);
      s.conn->write({"SSUBSCRIBE", channel}, what);
      for (;;) {
        const reply got = s.conn->read_reply(what);
        if (got->type == REDIS_REPLY_ERROR) {  // MOVED: the map is read again
          servers.refresh(what);
          break;
        }
        if (got->type == REDIS_REPLY_ARRAY && got->elements == 3 && got->element[0]->type == REDIS_REPLY_STRING &&
            std::string_view(got->element[0]->str, got->element[0]->len) == "ssubscribe") {
          s.slots.insert(slot);
          return true;
        }
        on_message(s, *got);
      }
    }
  } catch (const error&) {
    // No subscriber there for now: r's attempt goes on, and its re-checks find its grant.
    if (sp != nullptr && (sp->conn == nullptr || sp->conn->broken())) drop(*sp, now + subscriber_retry_max);
  }
  // Both passes met MOVED (the map read again still lags the slot's move), or the node failed.
  return false;
}

void async_waiters::submit(std::unique_ptr<async_request> r) {
  {
    const std::lock_guard lock(in_mu_);
    incoming_.push_back(std::move(r));
  }
  bg_.wake();
}

void async_waiters::reconnect_subscriber(std::int64_t now) {
  if (client_.commands.servers().clustered()) return;  // subscribe_for reconnects
  subscriber& s = subs_[std::string()];
  if (s.conn != nullptr || now < s.retry_at) return;
  try {
    connect(s, client_.o);
    client_.counters.reconnect();  // the constructor's first subscription is not in this loop
    // Notifications sent while we were not listening are lost: re-check every request.
    for (auto& r : requests_) r->next_check = 0;
  } catch (const error&) {
    s.retry_at = now + std::min<std::int64_t>(ms_to_ns(client_.clock.recheck_ms), subscriber_retry_max);
  }
}

void async_waiters::on_message(subscriber& s, const redisReply& r) {
  // ["message" or "smessage", channel, "<request id> <fence> <heartbeat> <ms waited>"]
  // (scripts.hpp); ["sunsubscribe", channel, n] when a cluster moved the channel's slot
  // away: its requests re-check, which subscribes on the slot's new node. Subscription
  // confirmations are ignored.
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 3 || r.element[0]->type != REDIS_REPLY_STRING ||
      r.element[1]->type != REDIS_REPLY_STRING) {
    return;
  }
  const std::string_view kind(r.element[0]->str, r.element[0]->len);
  if (kind == "sunsubscribe") {
    s.slots.erase(hash_slot(std::string_view(r.element[1]->str, r.element[1]->len)));
    for (auto& req : requests_) req->next_check = 0;
    return;
  }
  if (r.element[2]->type != REDIS_REPLY_STRING) return;
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
  auto it = by_id_.find(std::string(msg.substr(0, id_end)));
  if (it == by_id_.end()) return;  // gave up meanwhile: its cancel passed the key on
  async_request& req = *it->second;
  req.notice = {static_cast<std::uint64_t>(fence), beat, waited};
  req.next_check = 0;
}

void async_waiters::subscriber_fds(std::vector<int>& fds) const {
  for (const auto& [address, s] : subs_) {
    if (s.conn != nullptr) fds.push_back(s.conn->fd());
  }
}

void async_waiters::read_subscribers() {
  for (auto& [address, s] : subs_) {
    if (s.conn == nullptr) continue;
    try {
      for (const reply& r : s.conn->read_available()) on_message(s, *r);
    } catch (const error&) {
      drop(s, 0);  // connected again at once: by reconnect_subscriber, or subscribe_for
    }
  }
}

void async_waiters::complete(std::unique_ptr<async_request> r, guard g, std::exception_ptr e) noexcept {
  by_id_.erase(r->step.id());
  void* memory = ::operator new(sizeof(callback_task), std::nothrow);
  if (memory != nullptr) return callbacks_.post(::new (memory) callback_task(std::move(r), std::move(g), std::move(e)));
  try {  // no memory for the task: run the callback here rather than lose it
    r->cb(std::move(g), std::move(e));
  } catch (...) {
    handoff::detail::report_to_stderr(std::current_exception(), "a redis::keyed_mutex::lock_async callback");
  }
}

void async_waiters::run(std::int64_t now) {
  {
    const std::lock_guard lock(in_mu_);
    for (auto& r : incoming_) {
      r->step.start(now);
      by_id_.emplace(r->step.id(), r.get());
      requests_.push_back(std::move(r));
    }
    incoming_.clear();
  }
  std::vector<std::pair<std::unique_ptr<async_request>, std::pair<guard, std::exception_ptr>>> done;
  const auto finish = [&](std::unique_ptr<async_request>& r, guard g, std::exception_ptr e) {
    done.emplace_back(std::move(r), std::pair{std::move(g), std::move(e)});
  };
  for (auto& r : requests_) {
    acquire_step& step = r->step;
    if (const auto g = step.on_grant(r->notice)) {  // granted by a release (on_message): no round trip
      try {
        finish(r, client_.granted(r->key, step, *g, lane::background), nullptr);
      } catch (...) {  // not confirmed by options::min_replicas replicas
        finish(r, guard(), std::current_exception());
      }
      continue;
    }
    if (r->next_check > now) continue;
    try {
      const bool subscribed = subscribe_for(*r, now);
      if (step.queued()) client_.counters.recheck();  // queued before, and no notification granted it
      step.begin_attempt(handoff::detail::now_ns());
      // A waiting request's attempts queue it (or refresh its heartbeat) up to the last one,
      // which may still be granted; a try never queues.
      const attempt_result a =
          client_.commands.attempt(lane::background, step.names(), step.id(), step.lease_ms(), step.waiting(), r->key);
      if (const auto g = step.on_attempt(a)) {
        finish(r, client_.granted(r->key, step, *g, lane::background), nullptr);
      } else if (step.expired(handoff::detail::now_ns())) {
        // Leaves the queue, passing on a grant that came meanwhile.
        if (step.queued()) client_.commands.cancel(lane::background, step.names(), step.id(), r->key);
        finish(r, guard(), nullptr);
      } else {
        const std::int64_t t = handoff::detail::now_ns();
        r->next_check = step.next_check(t);
        // Not listening for its grant: try again soon rather than after the whole re-check
        // interval (a notice sent meanwhile would be missed until then).
        if (!subscribed) r->next_check = std::min(r->next_check, t + unsubscribed_retry(client_.clock.recheck_ms));
      }
    } catch (...) {
      finish(r, guard(), std::current_exception());
    }
  }
  std::erase(requests_, nullptr);
  for (auto& [r, result] : done) complete(std::move(r), std::move(result.first), std::move(result.second));
}

std::int64_t async_waiters::next_due(std::int64_t next) const noexcept {
  for (const auto& r : requests_) next = std::min(next, r->next_check);
  for (const auto& [address, s] : subs_) {
    if (s.conn == nullptr && address.empty()) next = std::min(next, s.retry_at);  // reconnect_subscriber's
  }
  return next;
}

void async_waiters::stop() noexcept {
  std::vector<std::unique_ptr<async_request>> left = std::move(requests_);
  {
    const std::lock_guard lock(in_mu_);
    for (auto& r : incoming_) left.push_back(std::move(r));
    incoming_.clear();
  }
  for (auto& r : left) {
    complete(std::move(r), guard(),
             std::make_exception_ptr(error("handoff::redis: keyed_mutex destroyed while waiting")));
  }
  callbacks_.stop();  // runs the callbacks still queued, those just completed included
}

}  // namespace handoff::redis::detail
