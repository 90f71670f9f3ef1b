// The watchdog: renews lease-less holds from the background thread (see client.hpp).
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <system_error>

#include "client.hpp"
#include "handoff/detail/report.hpp"

namespace handoff::redis::detail {

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
    try {
      const renewal r =
          renew(bg_connection(), extend_script_, {h->names.lock}, {h->value, std::to_string(lease_ms(lease))},
                "watchdog renewal of " + handoff::detail::key_excerpt(h->key));
      if (r.renewed) {
        h->valid_until.store(r.valid_until(lease), std::memory_order_relaxed);
        h->px_ns.store(lease, std::memory_order_relaxed);
        h->retry_at = 0;
      } else {
        h->lost.store(true, std::memory_order_relaxed);  // taken over: stop renewing
        h.reset();
        continue;
      }
    } catch (const error&) {
      // Unreachable: try again a third of a lease later; expired() turns true if it stays so.
      h->retry_at = now_ns() + renewal_interval(lease);
    }
  }
  std::erase(watched_, nullptr);
}

}  // namespace handoff::redis::detail
