// The owner's drain loop of a handoff::redis::actor_system (drain.cpp; private to
// lib/redis): batches peeked, run in order, and dequeued by the step script (scripts.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "../common/connection.hpp"
#include "layout.hpp"

namespace handoff::redis::detail {

struct actor_core;

// A message its post delivered to the post's caller (the post script's reply 2).
struct first_delivery {
  std::string_view id, body, last_id, state;
};

// Where a drain's budget (actor_options::max_messages, max_time) stands: the messages run
// and the time's end (0: not started; the drain starts it, max_time from now).
struct drain_budget {
  std::uint32_t ran = 0;
  std::int64_t end = 0;
};

class drainer {
 public:
  explicit drainer(actor_core& core) noexcept : core_(core) {}

  // Owner only: drains `n`'s actor under `token` (actor_system.hpp's protocol), starting
  // with `first` if given, or with the batch of `resumed`, a step's reply of status 1,
  // else with a peek; reports every failure to on_error. `defer`: the first step after the
  // batch (or the peek) goes to the rounds (step_rounds::defer) instead of being sent
  // here. `budget`: where the budget of a drain continued across rounds stands.
  void drain(const actor_names& n, const std::string& token, const first_delivery* first = nullptr,
             const std::shared_ptr<reply>& resumed = nullptr, bool defer = false, drain_budget budget = {}) noexcept;
  // A step's reply: its status (0 released, 1 a batch to run, 2 handed on; the script's
  // replies in scripts.hpp). Reports the dead letters it made. Throws error for an error
  // reply, a lost ownership (-1) or a reply of another shape.
  [[nodiscard]] long long settle(const actor_names& n, const redisReply& r) const;

 private:
  actor_core& core_;
};

}  // namespace handoff::redis::detail
