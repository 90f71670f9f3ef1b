// The client's caller side: construction, blocking acquire, release, extend (see client.hpp).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <system_error>
#include <tuple>

#include "client.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::redis::detail {

std::string_view hold::owner_client_prefix() const noexcept { return owner_client->o.prefix; }

client::client(options opts) : o(std::move(opts)), pool_(o, o.pool_size, &counters) {
  validate(o);
  bg_conn_ = std::make_unique<connection>(o, &counters);  // fails fast on a wrong address or password
  check_eviction(*bg_conn_, o, "a held lock could be evicted and granted twice");
  for (script* s : {&acquire_script_, &release_script_, &extend_script_, &cancel_script_}) bg_conn_->load(*s);
  skip_replies_ = bg_conn_->supports_reply_skip();
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
  auto s = std::make_unique<connection>(o, &counters);
  const std::string channel = channel_prefix_ + id_;
  s->command({"SUBSCRIBE", channel}, "SUBSCRIBE");  // replies once subscribed
  sub_ = std::move(s);
}

attempt_result client::parse_attempt(const redisReply& r, std::string_view key) {
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 3 || r.element[0]->type != REDIS_REPLY_INTEGER ||
      r.element[1]->type != REDIS_REPLY_INTEGER || r.element[2]->type != REDIS_REPLY_INTEGER) {
    throw error("handoff::redis: lock " + handoff::detail::key_excerpt(key) +
                ": unexpected reply from the acquire script");
  }
  return {r.element[0]->integer == 1, r.element[1]->integer, r.element[2]->integer};
}

attempt_result client::attempt(connection& c, const key_names& n, std::string_view id, std::int64_t lease_ms,
                               bool queue, std::string_view key) {
  const std::string ms = std::to_string(lease_ms);
  reply r = c.eval(acquire_script_, {n.lock, n.queue, n.waiters, n.fence},
                   {id, ms, queue ? "1" : "0", heartbeat_ttl_ms_, channel_prefix_, "0"},
                   "lock " + handoff::detail::key_excerpt(key));
  return parse_attempt(*r, key);
}

client::pushed_grant client::parse_grant(const redisReply& r, std::string_view what) {
  if (r.type == REDIS_REPLY_NIL) return {};
  // [list, "-"] or [list, "<fence> <heartbeat> <ms waited>"]
  if (r.type == REDIS_REPLY_ARRAY && r.elements == 2 && r.element[1]->type == REDIS_REPLY_STRING) {
    const std::string grant(r.element[1]->str, r.element[1]->len);
    if (grant == "-") return {0, 0, 0, true};
    std::uint64_t fence = 0;
    long long beat = 0;
    long long waited = 0;
    if (std::sscanf(grant.c_str(), "%" SCNu64 " %lld %lld", &fence, &beat, &waited) == 3 && fence != 0) {
      return {fence, beat, waited, false};
    }
  }
  throw error("handoff::redis: " + std::string(what) + ": unexpected reply to BLPOP");
}

namespace {
// BLPOP's timeout: seconds with decimals (0 would mean for ever).
std::string blpop_timeout(std::int64_t ms) {
  char s[32];
  std::snprintf(s, sizeof s, "%lld.%03lld", static_cast<long long>(ms / 1000), static_cast<long long>(ms % 1000));
  return s;
}
}  // namespace

std::pair<attempt_result, client::pushed_grant> client::attempt_and_wait(connection& c, const key_names& n,
                                                                         std::string_view id, std::int64_t lease_ms,
                                                                         const std::string& list, std::int64_t ms,
                                                                         std::string_view key, bool skip_reply) {
  const std::string lease = std::to_string(lease_ms);
  const std::string wait_ms = std::to_string(ms);
  const std::string what = "lock " + handoff::detail::key_excerpt(key);
  // The replies may take the whole wait: the socket waits that long plus one command_timeout.
  const auto timeout = std::chrono::milliseconds(ms) + o.command_timeout;
  if (skip_reply) {
    const reply r = c.eval_skipped_then(acquire_script_, {n.lock, n.queue, n.waiters, n.fence},
                                        {id, lease, "1", heartbeat_ttl_ms_, channel_prefix_, wait_ms, "1"},
                                        {"BLPOP", list, blpop_timeout(ms)}, what, timeout);
    return parse_listed(*r, what);
  }
  auto [a, g] = c.eval_then(acquire_script_, {n.lock, n.queue, n.waiters, n.fence},
                            {id, lease, "1", heartbeat_ttl_ms_, channel_prefix_, wait_ms},
                            {"BLPOP", list, blpop_timeout(ms)}, what, timeout);
  return {parse_attempt(*a, key), parse_grant(*g, what)};
}

std::pair<attempt_result, client::pushed_grant> client::parse_listed(const redisReply& r, std::string_view what) {
  if (r.type == REDIS_REPLY_NIL) return {{false, -1, -1}, {}};  // nothing in time, or the script failed
  if (r.type == REDIS_REPLY_ARRAY && r.elements == 2 && r.element[1]->type == REDIS_REPLY_STRING) {
    const std::string got(r.element[1]->str, r.element[1]->len);
    long long a = 0;
    long long b = 0;
    // "g <fence> <lease ms left>": the attempt got the key, as {1, fence, left} would say.
    if (std::sscanf(got.c_str(), "g %lld %lld", &a, &b) == 2 && a > 0) return {{true, a, b}, {}};
    // "- <pttl>": look again when the holder's lease ends, as {0, pttl, ...} and '-' would say.
    if (std::sscanf(got.c_str(), "- %lld", &a) == 1) return {{false, a, -1}, {0, 0, 0, true}};
    // A release's grant. The attempt emptied the list before the BLPOP behind it ran, so
    // the grant answers this attempt: its heartbeat is the one the attempt recorded.
    const pushed_grant g = parse_grant(r, what);
    if (g.fence != 0) return {{false, -1, g.beat}, g};
  }
  throw error("handoff::redis: " + std::string(what) + ": unexpected reply to BLPOP");
}

void client::cancel(connection& c, const key_names& n, std::string_view id, std::string_view key) noexcept {
  try {
    c.eval(cancel_script_, {n.lock, n.queue, n.waiters, n.fence}, {id, channel_prefix_},
           "cancel wait for " + handoff::detail::key_excerpt(key));
  } catch (...) {  // NOLINT(bugprone-empty-catch): documented; the heartbeat or lease ends it
  }
}

guard client::granted(std::string_view key, std::string_view id, std::uint64_t fence, std::int64_t lease_ns,
                      grant_clock clock) {
  std::string value(id);
  value += ' ';
  value += std::to_string(fence);
  const bool wd = lease_ns == 0;
  const std::int64_t lease = wd ? o.watchdog_lease.count() * ms_ns : lease_ns;
  auto h = std::make_shared<hold>(shared_from_this(), key, std::move(value), fence, lease, wd, clock.valid_until,
                                  clock.px_ns);
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
  return guard(std::move(h));
}

std::int64_t client::next_check(std::int64_t now, std::int64_t deadline, std::int64_t pttl_ms) const noexcept {
  std::int64_t t = std::min(deadline, add_saturating(now, ms_to_ns(o.recheck_interval.count())));
  // The holder's lease runs out without a release (so without a notification): look then.
  if (pttl_ms >= 0) t = std::min(t, add_saturating(now, ms_to_ns(pttl_ms + 1)));
  return t;
}

client::pushed_grant client::await_grant(connection& c, const std::string& list, std::int64_t ms,
                                         std::string_view key) {
  const std::string what = "wait for " + handoff::detail::key_excerpt(key);
  reply r = c.command({"BLPOP", list, blpop_timeout(ms)}, what, std::chrono::milliseconds(ms) + o.command_timeout);
  return parse_grant(*r, what);
}

guard client::acquire(std::string_view key, handoff::detail::wait_mode mode, std::int64_t deadline,
                      std::int64_t lease_ns) {
  using handoff::detail::wait_mode;
  const key_names n(o.prefix, key);
  if (mode == wait_mode::forever) deadline = handoff::detail::no_deadline;
  // A deadline already past is one try, as wait_mode::none (detail/clock.hpp).
  const bool wait = mode == wait_mode::forever || (mode == wait_mode::until && deadline > now_ns());
  const std::string id = request_id(lease_ns, wait);
  const std::int64_t ms = lease_ms(lease_ns);
  // `sent` is before the server saw the attempt, so before any grant after it.
  std::int64_t sent = now_ns();
  attempt_result r{};
  if (!wait) {  // try_lock: one round trip, never queued
    {
      auto c = pool_.take();
      r = attempt(*c, n, id, ms, false, key);
    }
    if (!r.granted) return guard();
    return granted(key, id, static_cast<std::uint64_t>(r.value), lease_ns, found(sent, lease_ns, r));
  }

  // Leaves the queue, passing on a grant that came meanwhile: the request gave up.
  const auto give_up = [&] {
    try {
      auto c = pool_.take();
      cancel(*c, n, id, key);
    } catch (const error&) {  // NOLINT(bugprone-empty-catch): as cancel()
    }
  };
  // contention_: a lock that queued counts up, one that found the key free counts down.
  const auto queued = [this] {
    const int v = contention_.load(std::memory_order_relaxed);
    contention_.store(std::min(contention_max, v + contention_step), std::memory_order_relaxed);
  };
  const auto found_free = [this] {
    const int v = contention_.load(std::memory_order_relaxed);
    if (v > 0) contention_.store(v - 1, std::memory_order_relaxed);
  };
  // A grant after the first attempt waited (handoff/metrics.hpp: redis_lock).
  const std::int64_t started = sent;
  const auto waited = [&](guard g) {
    if (metrics_sink* s = handoff::detail::sink_or_global(counters.sink)) {
      s->observe_wait(metric_wait::redis_lock, std::chrono::nanoseconds(now_ns() - started));
    }
    return g;
  };
  // A caller inside an actor's handler may block below: first run what this thread owns
  // only through its run queue, which nobody else can run.
  handoff::detail::run_before_blocking();
  bool need_attempt = contention_.load(std::memory_order_relaxed) > 0;
  if (!need_attempt) {  // the first attempt alone, on a pooled connection: most locks end here
    auto c = pool_.take();
    r = attempt(*c, n, id, ms, true, key);
    if (r.granted) return granted(key, id, static_cast<std::uint64_t>(r.value), lease_ns, found(sent, lease_ns, r));
    queued();
  }

  // Wait on a connection of its own, in BLPOP on the request's grant list: a release that
  // grants the key pushes the grant there, and the reply wakes this thread (scripts.hpp).
  // An attempt goes with the BLPOP that follows it, in one round trip; the BLPOP's timeout
  // is the re-check (the heartbeat), or the holder's lease if that ends sooner.
  const std::string list = n.prefix_and_key + "grant:" + id;
  const auto wait_ms = [&](std::int64_t now, std::int64_t pttl_ms) {
    return std::max<std::int64_t>(1, (next_check(now, deadline, pttl_ms) - now) / ms_ns);
  };
  // A step that fails ends the call with its error and no cancel: a second step would
  // double the time a stalled server costs the caller. The server drops the request when
  // its heartbeat runs out; a release that grants it first leaves the key with it for that
  // grant's lease (for a lease-less request, a heartbeat: scripts.hpp).
  {
    const auto own = waits_.take();
    connection& c = *own;
    for (bool first = need_attempt;; first = false) {
      if (need_attempt) {
        sent = now_ns();
        if (sent >= deadline && !first) break;
        if (!first) counters.recheck();  // no notification answered this wait in time
        pushed_grant g;
        // The first attempt skips the script's reply (one wake-up instead of two); a
        // re-check takes it, so that a script that failed (NOSCRIPT after a server
        // restart) is seen and loaded again.
        std::tie(r, g) = attempt_and_wait(c, n, id, ms, list, wait_ms(sent, -1), key, first && skip_replies_);
        if (r.granted) {
          if (first) found_free();
          guard got = granted(key, id, static_cast<std::uint64_t>(r.value), lease_ns, found(sent, lease_ns, r));
          if (first) return got;
          return waited(std::move(got));
        }
        if (first) queued();
        // A grant answering an older attempt has ended since: that attempt would have found it.
        if (g.fence != 0 && g.beat == r.extra) {
          return waited(granted(key, id, g.fence, lease_ns, announced(sent, lease_ns, g.waited_ms)));
        }
        if (!g.poked) continue;  // nothing came in time: re-check
        // Poked: the holder's lease ends before the BLPOP would have timed out; wait until then.
      }
      need_attempt = true;
      const std::int64_t now = now_ns();
      if (now >= deadline) break;
      const pushed_grant g = await_grant(c, list, wait_ms(now, r.value), key);
      if (g.fence != 0 && g.beat == r.extra) {
        return waited(granted(key, id, g.fence, lease_ns, announced(sent, lease_ns, g.waited_ms)));
      }
    }
  }
  give_up();  // the wait ran out: leave the queue, passing on a grant that came meanwhile
  return guard();
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
  c->eval(release_script_, {h.names.lock, h.names.queue, h.names.waiters, h.names.fence}, {h.value, channel_prefix_},
          "unlock " + handoff::detail::key_excerpt(h.key));
}

bool client::extend(hold& h, std::int64_t lease_ns) {
  const std::string ms = std::to_string(lease_ms(lease_ns));
  const renewal r = [&] {
    auto c = pool_.take();
    return renew(*c, extend_script_, {h.names.lock}, {h.value, ms}, "extend " + handoff::detail::key_excerpt(h.key));
  }();
  const bool ok = r.renewed;
  if (ok) {
    h.lease_ns.store(lease_ns, std::memory_order_relaxed);
    h.px_ns.store(lease_ns, std::memory_order_relaxed);
    h.valid_until.store(r.valid_until(lease_ns), std::memory_order_relaxed);
    if (h.watchdog) wake();  // the next renewal moved
  } else {
    h.lost.store(true, std::memory_order_relaxed);
  }
  return ok;
}

}  // namespace handoff::redis::detail
