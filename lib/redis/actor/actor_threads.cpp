// handoff::redis::actor_system's threads (actor_core.hpp): the renewer keeps the leases of
// the actors this process drains; the sweeper takes over actors whose owner is gone.
#include <algorithm>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "../common/renewal.hpp"
#include "actor_core.hpp"
#include "handoff/detail/report.hpp"

namespace handoff::redis::detail {

void actor_core::start() {
  renewer_ = std::thread([this] { renew_loop(); });
  if (a.sweep_interval.count() > 0) sweeper_ = std::thread([this] { sweep_loop(); });
}

void actor_core::stop() noexcept {
  {
    const std::lock_guard<std::mutex> lock(mu);
    stopping = true;
  }
  cv.notify_all();
  if (renewer_.joinable()) renewer_.join();
  if (sweeper_.joinable()) sweeper_.join();
}

void actor_core::renew_loop() noexcept {
  const auto period = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(renewal_interval(lease_ms)),
                                                          std::chrono::milliseconds(1));
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    // Every drain is renewed at least once per period: the first renewal of a drain that
    // registered just now comes within one period, and its steps renew it meanwhile.
    cv.wait_for(lock, period, [&] { return stopping; });
    if (stopping) return;
    std::vector<std::pair<std::string, std::string>> owned(draining.begin(), draining.end());
    lock.unlock();
    for (const auto& [token, key] : owned) {
      const actor_names n(o.prefix, key);
      try {
        auto c = connections.take();
        // Lost: the actor is not ours any more; its drain finds out at its next step.
        (void)renew(*c, renew_script, {n.owner, pending_key}, {token, lease_px, key}, "lease renewal of an actor");
      } catch (...) {
        report(key, std::current_exception());  // retried a period later, while the lease lasts
      }
    }
    lock.lock();
  }
}

void actor_core::sweep_loop() noexcept {
  bool failing = false;  // report a failing server once, not every interval
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    cv.wait_for(lock, a.sweep_interval, [&] { return stopping; });
    if (stopping) return;
    lock.unlock();
    try {
      sweep();
      failing = false;
    } catch (...) {
      if (!failing) report("", std::current_exception());
      failing = true;
    }
    lock.lock();
  }
}

std::size_t actor_core::sweep() {
  {
    const std::lock_guard<std::mutex> lock(handlers_mu);
    if (handlers.empty()) return 0;
  }
  const std::string batch = std::to_string(sweep_batch);
  const reply due = [&] {
    auto c = connections.take();
    return c->eval(due_script, {pending_key}, {batch}, "sweep of the actors' pending set");
  }();
  if (due->type != REDIS_REPLY_ARRAY) throw error("handoff::redis: sweep: unexpected reply from the server");
  std::vector<std::string> keys;
  keys.reserve(due->elements);
  for (std::size_t i = 0; i < due->elements; ++i) keys.emplace_back(due->element[i]->str, due->element[i]->len);
  std::size_t claimed = 0;
  for (const std::string& key : keys) {
    if (find(key) == nullptr) continue;  // another process's family
    const actor_names n(o.prefix, key);
    const std::string token = next_id();
    const reply r = [&] {
      auto c = connections.take();
      return c->eval(claim_script, {n.count, n.mailbox, n.owner, pending_key}, {token, lease_px, key},
                     "takeover of actor " + handoff::detail::key_excerpt(key));
    }();
    if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) continue;
    ++claimed;
    continue_owned(n, token, static_cast<bool>(a.executor));
  }
  return claimed;
}

}  // namespace handoff::redis::detail
