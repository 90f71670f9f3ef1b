// The client's caller side: construction, blocking acquire, release, extend (see client.hpp).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <system_error>

#include "client.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::redis::detail {

std::string_view hold::owner_client_prefix() const noexcept { return owner_client->o.prefix; }

client::client(options opts) : o(std::move(opts)), pool_(o) {
  validate(o);
  bg_conn_ = std::make_unique<connection>(o);  // fails fast on a wrong address or password
  check_eviction(*bg_conn_, o, "a held lock could be evicted and granted twice");
  for (script* s : {&acquire_script_, &release_script_, &extend_script_, &cancel_script_}) bg_conn_->load(*s);
  connect_subscriber();
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "handoff::redis: eventfd");
}

client::~client() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void client::start() {
  thread_ = std::thread([this] { run(); });
}

void client::stop() noexcept {
  stop_.store(true);
  wake();
  if (thread_.joinable()) thread_.join();
  // Requests still waiting (a precondition violation): end them rather than leak them.
  std::vector<std::unique_ptr<async_request>> left = std::move(async_);
  {
    const std::lock_guard lock(in_mu_);
    for (auto& r : incoming_) left.push_back(std::move(r));
    incoming_.clear();
    watch_incoming_.clear();
  }
  for (auto& r : left) {
    complete(std::move(r), guard(),
             std::make_exception_ptr(error("handoff::redis: keyed_mutex destroyed while waiting")));
  }
  watched_.clear();   // the watchdog stops: those holds end with their lease
  callbacks_.stop();  // runs the callbacks still queued, those just completed included
}

void client::connect_subscriber() {
  auto s = std::make_unique<connection>(o);
  const std::string channel = channel_prefix_ + id_;
  s->command({"SUBSCRIBE", channel}, "SUBSCRIBE");  // replies once subscribed
  sub_ = std::move(s);
}

attempt_result client::attempt(connection& c, const key_names& n, std::string_view owner, std::int64_t lease_ms,
                               std::string_view waiter_id, std::string_view key) {
  const std::string ms = std::to_string(lease_ms);
  reply r = c.eval(acquire_script_, {n.lock, n.queue, n.waiters, n.fence}, {owner, ms, waiter_id, heartbeat_ttl_ms_},
                   "lock " + handoff::detail::key_excerpt(key));
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    throw error("handoff::redis: lock " + handoff::detail::key_excerpt(key) +
                ": unexpected reply from the acquire script");
  }
  return {r->element[0]->integer == 1, r->element[1]->integer};
}

void client::cancel(connection& c, const key_names& n, std::string_view waiter_id, std::string_view key) {
  c.eval(cancel_script_, {n.lock, n.queue, n.waiters}, {waiter_id, channel_prefix_},
         "cancel wait for " + handoff::detail::key_excerpt(key));
}

std::shared_ptr<hold> client::make_hold(std::string_view key, std::string owner, std::uint64_t fence,
                                        std::int64_t lease_ns, std::int64_t sent_at) {
  const bool wd = lease_ns == 0;
  const std::int64_t lease = wd ? o.watchdog_lease.count() * ms_ns : lease_ns;
  auto h = std::make_shared<hold>(shared_from_this(), key, std::move(owner), fence, lease, wd,
                                  add_saturating(sent_at, lease));
  if (wd) {
    {
      const std::lock_guard lock(in_mu_);
      watch_incoming_.push_back(h);
    }
    // The background thread wakes at least every max_sleep and picks the hold up then,
    // up to max_sleep late; a renewal due within twice that (a short watchdog_lease, not
    // the common 30 s) could be missed that way: wake it now.
    if (h->renewal_due() - now_ns() < 2 * max_sleep) wake();
  }
  return h;
}

std::int64_t client::next_check(std::int64_t now, std::int64_t deadline, std::int64_t pttl_ms) const noexcept {
  std::int64_t t = std::min(deadline, add_saturating(now, ms_to_ns(o.recheck_interval.count())));
  // The holder's lease runs out without a release (so without a notification): look then.
  if (pttl_ms >= 0) t = std::min(t, add_saturating(now, ms_to_ns(pttl_ms + 1)));
  return t;
}

guard client::acquire(std::string_view key, std::int64_t deadline, std::int64_t lease_ns) {
  const key_names n(o.prefix, key);
  std::string owner = next_id();
  const std::int64_t ms = lease_ms(lease_ns);
  if (deadline <= now_ns()) {  // try_lock: one round trip, never queued
    const std::int64_t sent = now_ns();
    attempt_result r{};
    {
      auto c = pool_.take();
      r = attempt(*c, n, owner, ms, "", key);
    }
    if (!r.granted) return guard();
    return guard(make_hold(key, std::move(owner), static_cast<std::uint64_t>(r.value), lease_ns, sent));
  }

  // A caller inside an actor's handler may block below: first run what this thread owns
  // only through its run queue, which nobody else can run.
  handoff::detail::run_before_blocking();
  waiter w;
  const std::string id = next_id();
  {
    const std::lock_guard lock(reg_mu_);
    waiters_.emplace(id, &w);
  }
  struct unregister {
    unregister(client& cl, const std::string& i) : c(cl), id(i) {}
    unregister(const unregister&) = delete;
    unregister& operator=(const unregister&) = delete;
    client& c;
    const std::string& id;
    ~unregister() {
      const std::lock_guard lock(c.reg_mu_);
      c.waiters_.erase(id);
    }
  } unregister_at_exit{*this, id};

  for (;;) {
    const std::int64_t sent = now_ns();
    attempt_result r{};
    {
      auto c = pool_.take();
      r = attempt(*c, n, owner, ms, id, key);
    }
    if (r.granted) return guard(make_hold(key, std::move(owner), static_cast<std::uint64_t>(r.value), lease_ns, sent));
    const std::int64_t now = now_ns();
    if (now >= deadline) {
      try {
        auto c = pool_.take();
        cancel(*c, n, id, key);
      } catch (const error&) {
        // Not granted all the same (only our own attempt could grant us); the server drops
        // the queue entry when its heartbeat runs out.
      }
      return guard();
    }
    std::unique_lock lock(reg_mu_);
    const std::chrono::steady_clock::time_point wake{std::chrono::nanoseconds(next_check(now, deadline, r.value))};
    w.cv.wait_until(lock, wake, [&] { return w.notified; });
    w.notified = false;
  }
}

void client::submit(std::unique_ptr<async_request> r) {
  {
    const std::lock_guard lock(in_mu_);
    incoming_.push_back(std::move(r));
  }
  wake();
}

void client::wake() const noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = write(wake_fd_, &one, sizeof one);
}

void client::release(hold& h) {
  auto c = pool_.take();
  c->eval(release_script_, {h.names.lock, h.names.queue, h.names.waiters}, {h.owner, channel_prefix_},
          "unlock " + handoff::detail::key_excerpt(h.key));
}

bool client::extend(hold& h, std::int64_t lease_ns) {
  const std::int64_t sent = now_ns();
  const std::string ms = std::to_string(lease_ms(lease_ns));
  reply r = [&] {
    auto c = pool_.take();
    return c->eval(extend_script_, {h.names.lock}, {h.owner, ms}, "extend " + handoff::detail::key_excerpt(h.key));
  }();
  const bool ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  if (ok) {
    h.lease_ns.store(lease_ns, std::memory_order_relaxed);
    h.valid_until.store(add_saturating(sent, lease_ns), std::memory_order_relaxed);
    if (h.watchdog) wake();  // the next renewal moved
  } else {
    h.lost.store(true, std::memory_order_relaxed);
  }
  return ok;
}

}  // namespace handoff::redis::detail
