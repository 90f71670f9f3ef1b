// handoff::redis::keyed_mutex: the client side. The protocol on the server is in
// scripts.hpp; this file waits for notifications, renews leases and drives async waiters.
//
// Threads: callers run their own acquire/release round trips on pooled connections and
// block on a condition variable between attempts. One background thread per client owns
// the subscriber connection (wakes waiters), the watchdog (renews lease-less holds) and
// the async waiters (their attempts run there, on its own connection).
#include "handoff/redis/keyed_mutex.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "connection.hpp"
#include "handoff/detail/report.hpp"
#include "scripts.hpp"

namespace handoff::redis {
namespace detail {
namespace {

using handoff::detail::now_ns;
constexpr std::int64_t ms_ns = 1'000'000;
constexpr std::int64_t max_sleep = 1000 * ms_ns;  // of the background thread

std::string random_hex128() {
  std::random_device rd;
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 4; ++i) {
    std::uint32_t v = rd();
    for (int j = 0; j < 8; ++j, v >>= 4U) s += digits[v & 0xFU];
  }
  return s;
}

}  // namespace

// The Redis keys of one lock name (see the header's overview); {key} is the hash tag, so
// that a cluster would keep them in one slot.
struct key_names {
  key_names(std::string_view prefix, std::string_view key) {
    std::string base(prefix);
    base += '{';
    base += key;
    base += "}:";
    lock = base + "lock";
    queue = base + "queue";
    waiters = base + "waiters";
    fence = base + "fence";
  }
  std::string lock, queue, waiters, fence;
};

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
    return std::max(retry_at, valid_until.load(std::memory_order_relaxed) - lease + lease / 3);
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
    return lease_ns == 0 ? o.watchdog_lease.count() : std::max<std::int64_t>(1, (lease_ns + ms_ns - 1) / ms_ns);
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
  const std::string heartbeat_ttl_ms_ = std::to_string(3 * o.recheck_interval.count());
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

std::string_view hold::owner_client_prefix() const noexcept { return owner_client->o.prefix; }

client::client(options opts) : o(std::move(opts)), pool_(o) {
  if (o.unix_socket.empty() && (o.port <= 0 || o.port > 65535)) {
    throw std::invalid_argument("handoff::redis::options: port out of range");
  }
  if (o.pool_size == 0) throw std::invalid_argument("handoff::redis::options: pool_size must be at least 1");
  if (o.connect_timeout.count() <= 0 || o.command_timeout.count() <= 0 || o.watchdog_lease.count() < 3 ||
      o.recheck_interval.count() <= 0) {
    throw std::invalid_argument(
        "handoff::redis::options: timeouts and recheck_interval must be positive, watchdog_lease at least 3 ms");
  }
  if (o.database < 0) throw std::invalid_argument("handoff::redis::options: database must be >= 0");
  bg_conn_ = std::make_unique<connection>(o);  // fails fast on a wrong address or password
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
  watched_.clear();  // the watchdog stops: those holds end with their lease
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
                   "lock " + std::string(key));
  if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || r->element[0]->type != REDIS_REPLY_INTEGER ||
      r->element[1]->type != REDIS_REPLY_INTEGER) {
    throw error("handoff::redis: lock " + std::string(key) + ": unexpected reply from the acquire script");
  }
  return {r->element[0]->integer == 1, r->element[1]->integer};
}

void client::cancel(connection& c, const key_names& n, std::string_view waiter_id, std::string_view key) {
  c.eval(cancel_script_, {n.lock, n.queue, n.waiters}, {waiter_id, channel_prefix_},
         "cancel wait for " + std::string(key));
}

std::shared_ptr<hold> client::make_hold(std::string_view key, std::string owner, std::uint64_t fence,
                                        std::int64_t lease_ns, std::int64_t sent_at) {
  const bool wd = lease_ns == 0;
  const std::int64_t lease = wd ? o.watchdog_lease.count() * ms_ns : lease_ns;
  auto h = std::make_shared<hold>(shared_from_this(), key, std::move(owner), fence, lease, wd, sent_at + lease);
  if (wd) {
    {
      const std::lock_guard lock(in_mu_);
      watch_incoming_.push_back(h);
    }
    // The background thread wakes at least every max_sleep and picks the hold up then;
    // only an earlier first renewal needs it now (not the common 30 s lease).
    if (h->renewal_due() - now_ns() < 2 * max_sleep) wake();
  }
  return h;
}

std::int64_t client::next_check(std::int64_t now, std::int64_t deadline, std::int64_t pttl_ms) const noexcept {
  std::int64_t t = std::min(deadline, now + o.recheck_interval.count() * ms_ns);
  // The holder's lease runs out without a release (so without a notification): look then.
  if (pttl_ms >= 0) t = std::min(t, now + (pttl_ms + 1) * ms_ns);
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
          "unlock " + h.key);
}

bool client::extend(hold& h, std::int64_t lease_ns) {
  const std::int64_t sent = now_ns();
  const std::string ms = std::to_string(lease_ms(lease_ns));
  reply r = [&] {
    auto c = pool_.take();
    return c->eval(extend_script_, {h.names.lock}, {h.owner, ms}, "extend " + h.key);
  }();
  const bool ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  if (ok) {
    h.lease_ns.store(lease_ns, std::memory_order_relaxed);
    h.valid_until.store(sent + lease_ns, std::memory_order_relaxed);
    if (h.watchdog) wake();  // the next renewal moved
  } else {
    h.lost.store(true, std::memory_order_relaxed);
  }
  return ok;
}

connection& client::bg_connection() {
  if (bg_conn_ == nullptr || bg_conn_->stale()) {
    bg_conn_.reset();
    bg_conn_ = std::make_unique<connection>(o);
  }
  return *bg_conn_;
}

void client::on_message(const redisReply& r) {
  // ["message", channel, waiter id]; the subscribe confirmations are ignored.
  if (r.type != REDIS_REPLY_ARRAY || r.elements != 3 || r.element[2]->type != REDIS_REPLY_STRING) return;
  const std::string id(r.element[2]->str, r.element[2]->len);
  const std::lock_guard lock(reg_mu_);
  auto it = waiters_.find(id);
  if (it == waiters_.end()) return;  // gave up meanwhile
  if (it->second->async != nullptr) {
    it->second->async->next_check = 0;  // this thread owns async requests
  } else {
    it->second->notified = true;
    it->second->cv.notify_one();
  }
}

void client::wake_all() {
  const std::lock_guard lock(reg_mu_);
  for (auto& [id, w] : waiters_) {
    if (w->async != nullptr) {
      w->async->next_check = 0;
    } else {
      w->notified = true;
      w->cv.notify_one();
    }
  }
}

void client::complete(std::unique_ptr<async_request> r, guard g, std::exception_ptr e) noexcept {
  {
    const std::lock_guard lock(reg_mu_);
    waiters_.erase(r->id);
  }
  try {
    r->cb(std::move(g), std::move(e));
  } catch (...) {
    handoff::detail::report_to_stderr(std::current_exception(), "a redis::keyed_mutex::lock_async callback");
  }
}

void client::run_async(std::int64_t now) {
  std::vector<std::pair<std::unique_ptr<async_request>, std::pair<guard, std::exception_ptr>>> done;
  for (auto& r : async_) {
    if (r->next_check > now) continue;
    const key_names n(o.prefix, r->key);
    try {
      connection& c = bg_connection();
      // Once queued, attempts carry the id up to the last one (which may still be granted),
      // and a request that then gives up leaves the queue. wait 0: one try, never queued.
      const bool queue = r->queued || r->deadline > now;
      const std::int64_t sent = now_ns();
      const attempt_result a = attempt(c, n, r->owner, lease_ms(r->lease_ns), queue ? r->id : "", r->key);
      r->queued = queue && !a.granted;
      if (a.granted) {
        guard g(make_hold(r->key, r->owner, static_cast<std::uint64_t>(a.value), r->lease_ns, sent));
        done.emplace_back(std::move(r), std::pair{std::move(g), nullptr});
      } else if (now_ns() >= r->deadline) {
        if (r->queued) {
          try {
            cancel(c, n, r->id, r->key);
          } catch (const error&) {  // as in acquire(): not granted, dropped by its heartbeat
          }
        }
        done.emplace_back(std::move(r), std::pair{guard(), nullptr});
      } else {
        r->next_check = next_check(now_ns(), r->deadline, a.value);
      }
    } catch (...) {
      done.emplace_back(std::move(r), std::pair{guard(), std::current_exception()});
    }
  }
  std::erase(async_, nullptr);
  for (auto& [r, result] : done) complete(std::move(r), std::move(result.first), std::move(result.second));
}

void client::run_watchdog(std::int64_t now) {
  for (auto& h : watched_) {
    if (h->released.load(std::memory_order_relaxed)) {  // unlocked: forget it (owner-written, any order)
      h.reset();
      continue;
    }
    if (h->renewal_due() > now) continue;
    const std::lock_guard lock(h->mu);
    if (h->released.load(std::memory_order_relaxed) || h->expired()) {  // unlocked, or renewals came too late
      h.reset();
      continue;
    }
    const std::int64_t lease = h->lease_ns.load(std::memory_order_relaxed);
    const std::int64_t sent = now_ns();
    try {
      reply r = bg_connection().eval(extend_script_, {h->names.lock}, {h->owner, std::to_string(lease_ms(lease))},
                                     "watchdog renewal of " + h->key);
      if (r->type == REDIS_REPLY_INTEGER && r->integer == 1) {
        h->valid_until.store(sent + lease, std::memory_order_relaxed);
        h->retry_at = 0;
      } else {
        h->lost.store(true, std::memory_order_relaxed);  // taken over: stop renewing
        h.reset();
        continue;
      }
    } catch (const error&) {
      // Unreachable: try again a third of a lease later; expired() turns true if it stays so.
      h->retry_at = now_ns() + lease / 3;
    }
  }
  std::erase(watched_, nullptr);
}

void client::run() noexcept {
  for (;;) {
    if (stop_.load()) return;
    std::int64_t now = now_ns();
    if (sub_ == nullptr && now >= sub_retry_at_) {
      try {
        connect_subscriber();
        wake_all();  // notifications sent while we were not listening are lost: re-check
      } catch (const error&) {
        sub_retry_at_ = now + std::min<std::int64_t>(o.recheck_interval.count() * ms_ns, 100 * ms_ns);
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
      }
    }
  }
}

}  // namespace detail

// ---- guard ----

guard::guard() noexcept = default;
guard::guard(std::shared_ptr<detail::hold> h) noexcept : hold_(std::move(h)) {}
guard::guard(guard&&) noexcept = default;

guard& guard::operator=(guard&& o) noexcept {
  if (this != &o) {
    const guard old(std::exchange(hold_, std::move(o.hold_)));  // ~guard unlocks
  }
  return *this;
}

guard::~guard() {
  try {
    unlock();
  } catch (...) {  // NOLINT(bugprone-empty-catch): documented; the lease frees the key
  }
}

bool guard::owns_lock() const noexcept {
  return hold_ != nullptr && !hold_->released.load(std::memory_order_relaxed) && !hold_->expired();
}

void guard::unlock() {
  if (hold_ == nullptr) return;
  detail::hold& h = *hold_;
  {
    const std::lock_guard lock(h.mu);  // waits out a renewal in flight
    if (h.released.load(std::memory_order_relaxed)) return;
    h.released.store(true, std::memory_order_relaxed);
    // The lease is over: the server frees (or freed) the key; expired() stays true.
    if (h.expired()) return;
    h.valid_until.store(INT64_MAX, std::memory_order_relaxed);  // ended by unlock: expired() stays false
  }
  h.owner_client->release(h);
}

std::uint64_t guard::token() const noexcept { return hold_ != nullptr ? hold_->fence : 0; }

bool guard::expired() const noexcept { return hold_ != nullptr && hold_->expired(); }

void guard::check() const {
  if (!owns_lock()) throw lock_expired();
}

bool guard::extend(std::chrono::nanoseconds d) {
  if (d <= std::chrono::nanoseconds::zero())
    throw std::invalid_argument("handoff::redis::guard::extend: d must be positive");
  if (hold_ == nullptr) return false;
  const std::lock_guard lock(hold_->mu);
  if (hold_->released.load(std::memory_order_relaxed) || hold_->expired()) return false;
  return hold_->owner_client->extend(*hold_, d.count());
}

std::chrono::nanoseconds guard::lease_duration() const noexcept {
  return std::chrono::nanoseconds(hold_ != nullptr ? hold_->lease_ns.load(std::memory_order_relaxed) : 0);
}

const std::string& guard::key() const noexcept {
  static const std::string none;
  if (hold_ == nullptr) return none;
  return hold_->key;
}

// ---- keyed_mutex ----

keyed_mutex::keyed_mutex(options o) : client_(std::make_shared<detail::client>(std::move(o))) { client_->start(); }

keyed_mutex::~keyed_mutex() { client_->stop(); }

guard keyed_mutex::lock(std::string_view key) { return acquire(key, no_deadline, 0); }
guard keyed_mutex::lock(std::string_view key, lease l) { return acquire(key, no_deadline, l.duration.count()); }
guard keyed_mutex::try_lock(std::string_view key) { return acquire(key, 0, 0); }
guard keyed_mutex::try_lock(std::string_view key, lease l) { return acquire(key, 0, l.duration.count()); }

guard keyed_mutex::acquire(std::string_view key, std::int64_t deadline, std::int64_t lease_ns) {
  return client_->acquire(key, deadline, lease_ns);
}

void keyed_mutex::lock_async(std::string key, callback f, std::chrono::nanoseconds wait,
                             std::chrono::nanoseconds lease) {
  if (lease < std::chrono::nanoseconds::zero())
    throw std::invalid_argument("handoff::redis::lock_async: negative lease");
  auto r = std::make_unique<detail::async_request>();
  r->key = std::move(key);
  r->owner = client_->next_id();
  r->id = client_->next_id();
  r->deadline = wait == std::chrono::nanoseconds::max() ? no_deadline : deadline_in(wait);
  r->lease_ns = lease.count();
  r->cb = std::move(f);
  client_->submit(std::move(r));
}

const options& keyed_mutex::config() const noexcept { return client_->o; }

}  // namespace handoff::redis
