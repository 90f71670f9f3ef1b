// handoff::redis::guard and handoff::redis::keyed_mutex: the public facade over the
// client (client.hpp).
#include "handoff/redis/keyed_mutex.hpp"

#include <stdexcept>
#include <utility>

#include "client.hpp"

namespace handoff::redis {

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
    h.valid_until.store(handoff::detail::no_deadline,
                        std::memory_order_relaxed);  // ended by unlock: expired() stays false
  }
  h.owner_client->commands.release(h);
}

std::uint64_t guard::token() const noexcept { return hold_ != nullptr ? hold_->fence : 0; }

bool guard::expired() const noexcept { return hold_ != nullptr && hold_->expired(); }

void guard::check() const {
  if (!owns_lock()) throw lock_expired();
}

bool guard::extend(lease l) {
  if (hold_ == nullptr) return false;
  const std::lock_guard lock(hold_->mu);
  if (hold_->released.load(std::memory_order_relaxed) || hold_->expired()) return false;
  return hold_->owner_client->extend(*hold_, l.duration.count());
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

guard keyed_mutex::acquire(std::string_view key, wait_mode mode, std::int64_t deadline, std::int64_t lease_ns) {
  return client_->acquire(key, mode, deadline, lease_ns);
}

void keyed_mutex::lock_async_until(std::string key, callback f, std::int64_t deadline, std::int64_t lease_ns) {
  client_->lock_async(std::move(key), std::move(f), deadline, lease_ns);
}

const options& keyed_mutex::config() const noexcept { return client_->o; }

client_stats keyed_mutex::stats() const noexcept { return client_->counters.snapshot(); }

}  // namespace handoff::redis
