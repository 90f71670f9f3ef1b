// The watchdog's renewals, run by the background thread (see watchdog.hpp).
#include "watchdog.hpp"

#include <algorithm>

#include "background.hpp"

namespace handoff::redis::detail {

void watchdog::add(std::shared_ptr<hold> h) {
  // The background thread wakes at least every max_sleep and picks the hold up then, up
  // to max_sleep late; a renewal due within twice that (a short watchdog_lease, not the
  // common 30 s) could be missed that way: wake it now.
  const bool soon = h->renewal_due() - handoff::detail::now_ns() < 2 * max_sleep;
  {
    const std::lock_guard lock(mu_);
    incoming_.push_back(std::move(h));
  }
  if (soon) bg_.wake();
}

void watchdog::run(std::int64_t now) {
  {
    const std::lock_guard lock(mu_);
    for (auto& h : incoming_) watched_.push_back(std::move(h));
    incoming_.clear();
  }
  for (auto& h : watched_) {
    if (h->released.load(std::memory_order_relaxed)) {  // unlocked: forget it (owner-written, any order)
      h.reset();
      continue;
    }
    if (h->renewal_due() > now) continue;
    bool keep = true;
    {
      const std::lock_guard lock(h->mu);
      if (h->released.load(std::memory_order_relaxed) || h->expired()) {  // unlocked, or renewals came too late
        keep = false;
      } else {
        const std::int64_t lease = h->lease_ns.load(std::memory_order_relaxed);
        try {
          keep = commands_.renew(lock_commands::lane::background, *h, lease);  // false: taken over, lost
          if (keep) h->retry_at = 0;
        } catch (const error&) {
          // Unreachable: try again a third of a lease later; expired() turns true if it stays so.
          h->retry_at = handoff::detail::now_ns() + renewal_interval(lease);
        }
      }
    }
    // Only once h->mu is unlocked: the guard may hold the last other reference, and the
    // hold (its mutex with it) goes with the last one.
    if (!keep) h.reset();
  }
  std::erase(watched_, nullptr);
}

std::int64_t watchdog::next_due(std::int64_t next) const noexcept {
  for (const auto& h : watched_) next = std::min(next, h->renewal_due());
  return next;
}

void watchdog::clear() noexcept {
  const std::lock_guard lock(mu_);
  incoming_.clear();
  watched_.clear();
}

}  // namespace handoff::redis::detail
