// handoff::redis::actor_system's threads (upkeep.hpp): the renewer keeps the leases of the
// actors this process drains; the sweeper takes over actors whose owner is gone.
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../common/renewal.hpp"
#include "actor_core.hpp"
#include "handoff/detail/report.hpp"

namespace handoff::redis::detail {

namespace {

// The due script's calls of a sweep, one per pending set (layout.hpp, scripts.hpp).
std::vector<std::vector<std::string>> due_calls_of(const actor_core& core) {
  std::vector<std::string> sets;
  if (!core.servers.clustered()) {
    sets.push_back(core.o.prefix + std::string(actor_pending_set));
  } else {
    sets.reserve(actor_groups);
    for (std::size_t g = 0; g < actor_groups; ++g) {
      sets.push_back(group_prefix(core.o.prefix, group_slot(g)) + std::string(actor_pending_set));
    }
  }
  std::vector<std::vector<std::string>> calls;
  calls.reserve(sets.size());
  for (std::string& set : sets) {
    delayed_names d(set);
    calls.push_back({"3", std::move(set), std::move(d.set), std::move(d.bodies), std::to_string(sweep_batch),
                     std::to_string(delayed_batch), core.settings.bound, core.settings.delayed_retry_ms});
  }
  return calls;
}

}  // namespace

upkeep::upkeep(actor_core& core) : core_(core), due_calls_(due_calls_of(core)) {}

void upkeep::start() {
  renewer_ = std::thread([this] { renew_loop(); });
  if (core_.a.sweep_interval.count() > 0) sweeper_ = std::thread([this] { sweep_loop(); });
}

void upkeep::stop() noexcept {
  {
    const std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (renewer_.joinable()) renewer_.join();
  if (sweeper_.joinable()) sweeper_.join();
}

void upkeep::register_drain(const std::string& token, const std::string& key) {
  const std::lock_guard<std::mutex> lock(mu_);
  draining_.emplace(token, key);
}

void upkeep::unregister_drain(const std::string& token) noexcept {
  const std::lock_guard<std::mutex> lock(mu_);
  const auto it = draining_.find(token);
  if (it != draining_.end()) draining_.erase(it);
}

void upkeep::renew_loop() noexcept {
  const auto period = std::max<std::chrono::milliseconds>(
      std::chrono::milliseconds(renewal_interval(core_.settings.lease_ms)), std::chrono::milliseconds(1));
  // Every renewal in one write per node: an owner's steps do not renew, so a process that
  // drains many actors renews them all here. Reply 0, lost: the actor is not ours any more;
  // its drain finds out at its next step. A failure is retried a period later, while the
  // lease lasts.
  const auto renew = [&](const std::vector<std::pair<std::string, std::string>>& owned) {
    std::vector<std::vector<std::string>> calls;
    calls.reserve(owned.size());
    for (const auto& [token, key] : owned) {
      const actor_names n = core_.names(key);
      calls.push_back({"2", n.owner, n.pending, token, core_.settings.lease_px, key});
    }
    const std::vector<router::outcome> replies =
        core_.servers.eval_each(core_.renew_script, calls, "lease renewal of an actor", router::lane::background);
    for (std::size_t i = 0; i < replies.size(); ++i) {
      if (replies[i].failed != nullptr) {
        core_.report(owned[i].second, replies[i].failed);
      } else if (replies[i].r->type == REDIS_REPLY_ERROR) {
        core_.report(owned[i].second, std::make_exception_ptr(error("handoff::redis: lease renewal of an actor: " +
                                                                    std::string(text(*replies[i].r)))));
      }
    }
  };
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    // Every drain is renewed at least once per period: the first renewal of a drain that
    // registered just now comes within one period, a third of the lease it was given.
    cv_.wait_for(lock, period, [&] { return stopping_; });
    if (stopping_) return;
    const std::vector<std::pair<std::string, std::string>> owned(draining_.begin(), draining_.end());
    lock.unlock();
    if (!owned.empty()) {
      try {
        renew(owned);
      } catch (...) {
        core_.report("", std::current_exception());  // out of memory: retried a period later
      }
    }
    lock.lock();
  }
}

void upkeep::sweep_loop() noexcept {
  bool failing = false;  // report a failing server once, not every interval
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, core_.a.sweep_interval, [&] { return stopping_; });
    if (stopping_) return;
    lock.unlock();
    try {
      // Again at once while a set had more due than one sweep takes.
      const auto stopping = [this] {
        const std::lock_guard<std::mutex> hold(mu_);
        return stopping_;
      };
      for (bool more = true; more && !stopping();) sweep(&more);
      failing = false;
    } catch (...) {
      if (!failing) core_.report("", std::current_exception());
      failing = true;
    }
    lock.lock();
  }
}

std::size_t upkeep::sweep(bool* more) {
  if (more != nullptr) *more = false;
  if (core_.handlers.empty()) return 0;
  // One due script per pending set, in one write per node. An actor that a moved delayed
  // message takes from empty becomes this process's at once if it has its handler: its
  // message delivered by the reply, or (with an executor, where the drain runs) owned only.
  const char* on_take = core_.a.executor ? "o" : core_.a.remember_handled ? "s" : "d";
  const std::vector<std::string> families = core_.handlers.families();
  std::vector<std::vector<std::string>> calls = due_calls_;
  for (std::vector<std::string>& c : calls) {
    c.insert(c.end(), {on_take, core_.settings.lease_px});
    c.insert(c.end(), families.begin(), families.end());
  }
  const std::string what = "sweep of the actors' pending sets";
  const std::vector<router::outcome> dues = core_.servers.eval_each(core_.due_script, calls, what);
  std::vector<step_rounds::taken_actor> taken;  // the firsts' views point into `dues`
  std::vector<std::string> keys;
  bool full_delayed = false;  // a set had more delayed messages due than one sweep moves
  bool full_keys = false;     // or more actors due than one sweep reads
  std::exception_ptr failed;  // the first failure, thrown once every set that answered is swept
  for (const router::outcome& due : dues) {
    if (due.failed == nullptr && due.r->type == REDIS_REPLY_ARRAY && due.r->elements >= 2 &&
        due.r->element[0]->type == REDIS_REPLY_INTEGER && due.r->element[1]->type == REDIS_REPLY_INTEGER) {
      // {delayed messages read, m actors owned, m x (key, element, state id, state value), due keys...}
      const redisReply& r = *due.r;
      const auto owned = static_cast<std::size_t>(r.element[1]->integer);
      const std::size_t keys_from = 2 + 4 * owned;
      if (keys_from > r.elements) unexpected(what);
      for (std::size_t i = 2; i < keys_from; i += 4) {
        const auto [id, body] = split(text(*r.element[i + 1]), what);
        step_rounds::taken_actor& t = taken.emplace_back(
            step_rounds::taken_actor{core_.names(text(*r.element[i])), std::string(id), std::nullopt});
        if (*on_take != 'o') t.first = first_delivery{id, body, text(*r.element[i + 2]), text(*r.element[i + 3])};
      }
      full_delayed = full_delayed || r.element[0]->integer >= delayed_batch;
      full_keys = full_keys || r.elements - keys_from >= static_cast<std::size_t>(sweep_batch);
      for (std::size_t i = keys_from; i < r.elements; ++i) keys.emplace_back(text(*r.element[i]));
    } else if (failed == nullptr && due.failed != nullptr) {
      failed = due.failed;
    } else if (failed == nullptr) {
      const std::string why =
          due.r->type == REDIS_REPLY_ERROR ? std::string(text(*due.r)) : "unexpected reply from the server";
      failed = std::make_exception_ptr(error("handoff::redis: sweep: " + why));
    }
  }
  // The takeovers of the due actors in one write per node.
  std::vector<std::vector<std::string>> claims;
  std::vector<step_rounds::taken_actor> claimed;
  for (const std::string& key : keys) {
    if (core_.handlers.find(key) == nullptr) continue;  // another process's family
    actor_names n = core_.names(key);
    std::string token = core_.next_id();
    claims.push_back({"3", n.mailbox, n.owner, n.pending, token, core_.settings.lease_px, key});
    claimed.push_back({std::move(n), std::move(token), std::nullopt});
  }
  std::size_t took_due = 0;  // due actors taken over
  if (!claims.empty()) {
    const std::vector<router::outcome> replies =
        core_.servers.eval_each(core_.claim_script, claims, "takeover of the actors due");
    for (std::size_t i = 0; i < replies.size(); ++i) {
      const router::outcome& r = replies[i];
      if (r.failed == nullptr && r.r->type == REDIS_REPLY_INTEGER && r.r->integer == 1) {
        taken.push_back(std::move(claimed[i]));
        ++took_due;
      } else if (failed == nullptr && r.failed != nullptr) {
        failed = r.failed;
      }
    }
  }
  // Their drains in rounds: every actor's step of a round in one write (step_rounds), on
  // the executor if there is one, else here.
  if (core_.a.executor) {
    for (const step_rounds::taken_actor& t : taken) core_.drains.drain(t.n, t.token, nullptr, nullptr, true);
  } else if (!taken.empty()) {
    core_.rounds.run_here(taken);
  }
  // Only actors taken over leave the due ones a sweep reads (those of other families stay).
  if (more != nullptr) *more = full_delayed || (full_keys && took_due > 0);
  if (failed != nullptr) std::rethrow_exception(failed);
  return taken.size();
}

}  // namespace handoff::redis::detail
