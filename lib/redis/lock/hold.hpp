// One grant of the Redis lock (private to lib/redis): the state its guard and, for a
// lease-less hold, the watchdog share, and how a renewal of its lease (common/renewal.hpp)
// updates it: the one place extend() and the watchdog write a hold's lease clock.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "../common/names.hpp"
#include "../common/renewal.hpp"
#include "handoff/detail/clock.hpp"

namespace handoff::redis::detail {

struct client;

struct hold {
  hold(std::shared_ptr<client> c, key_names n, std::string_view k, std::string v, std::uint64_t f, std::int64_t lease,
       bool wd, std::int64_t valid, std::int64_t px)
      : owner_client(std::move(c)), key(k), names(std::move(n)), value(std::move(v)), fence(f), watchdog(wd),
        lease_ns(lease), valid_until(valid), px_ns(px) {}

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

  // Under mu: a renewal of the lease to `lease` came back (renewed, or the key is lost).
  void renewed(const renewal& r, std::int64_t lease) noexcept {
    if (!r.renewed) {
      lost.store(true, std::memory_order_relaxed);
      return;
    }
    lease_ns.store(lease, std::memory_order_relaxed);
    px_ns.store(lease, std::memory_order_relaxed);
    valid_until.store(r.valid_until(lease), std::memory_order_relaxed);
  }

  // When the watchdog renews: a third into the lease on the server (also after extend()),
  // or when a failed renewal is tried again.
  [[nodiscard]] std::int64_t renewal_due() const noexcept {
    const std::int64_t px = px_ns.load(std::memory_order_relaxed);
    return std::max(retry_at, valid_until.load(std::memory_order_relaxed) - px + renewal_interval(px));
  }

  [[nodiscard]] bool expired() const noexcept {
    return lost.load(std::memory_order_relaxed) ||
           handoff::detail::now_ns() >= valid_until.load(std::memory_order_relaxed);
  }
};

}  // namespace handoff::redis::detail
