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
  // Every renewal in one write per node: an owner's steps do not renew, so a process that
  // drains many actors renews them all here. Reply 0, lost: the actor is not ours any more;
  // its drain finds out at its next step. A failure is retried a period later, while the
  // lease lasts.
  const auto renew = [&](const std::vector<std::pair<std::string, std::string>>& owned) {
    std::vector<std::vector<std::string>> calls;
    calls.reserve(owned.size());
    for (const auto& [token, key] : owned) {
      const actor_names n = names(key);
      calls.push_back({"2", n.owner, n.pending, token, lease_px, key});
    }
    const std::vector<router::outcome> replies =
        servers.eval_each(renew_script, calls, "lease renewal of an actor", router::lane::background);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (replies[i].failed != nullptr) {
        report(owned[i].second, replies[i].failed);
      } else if (replies[i].r->type == REDIS_REPLY_ERROR) {
        report(owned[i].second, std::make_exception_ptr(error("handoff::redis: lease renewal of an actor: " +
                                                              std::string(text(*replies[i].r)))));
      }
    }
  };
  std::unique_lock<std::mutex> lock(mu);
  while (!stopping) {
    // Every drain is renewed at least once per period: the first renewal of a drain that
    // registered just now comes within one period, a third of the lease it was given.
    cv.wait_for(lock, period, [&] { return stopping; });
    if (stopping) return;
    const std::vector<std::pair<std::string, std::string>> owned(draining.begin(), draining.end());
    lock.unlock();
    if (!owned.empty()) {
      try {
        renew(owned);
      } catch (...) {
        report("", std::current_exception());  // out of memory: retried a period later
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
  // One due script per pending set, in one write per node.
  const std::string batch = std::to_string(sweep_batch);
  std::vector<std::vector<std::string>> calls;
  calls.reserve(pending_sets.size());
  for (const std::string& set : pending_sets) calls.push_back({"1", set, batch});
  std::vector<std::string> keys;
  std::exception_ptr failed;  // the first failure, thrown once every set that answered is swept
  for (const router::outcome& due : servers.eval_each(due_script, calls, "sweep of the actors' pending sets")) {
    if (due.failed == nullptr && due.r->type == REDIS_REPLY_ARRAY) {
      for (std::size_t i = 0; i < due.r->elements; ++i) {
        keys.emplace_back(due.r->element[i]->str, due.r->element[i]->len);
      }
    } else if (failed == nullptr && due.failed != nullptr) {
      failed = due.failed;
    } else if (failed == nullptr) {
      const std::string why =
          due.r->type == REDIS_REPLY_ERROR ? std::string(due.r->str, due.r->len) : "unexpected reply from the server";
      failed = std::make_exception_ptr(error("handoff::redis: sweep: " + why));
    }
  }
  std::size_t claimed = 0;
  for (const std::string& key : keys) {
    if (find(key) == nullptr) continue;  // another process's family
    const actor_names n = names(key);
    const std::string token = next_id();
    const reply r = servers.eval(claim_script, {n.mailbox, n.owner, n.pending}, {token, lease_px, key},
                                 "takeover of actor " + handoff::detail::key_excerpt(key));
    if (r->type != REDIS_REPLY_INTEGER || r->integer != 1) continue;
    ++claimed;
    continue_owned(n, token, static_cast<bool>(a.executor));
  }
  if (failed != nullptr) std::rethrow_exception(failed);
  return claimed;
}

}  // namespace handoff::redis::detail
