// lib/redis/actor/: handoff::redis::actor_system. Each file holds one job:
//   actor_system.cpp     the facade, and this core: post, and where an owner continues
//   settings.hpp         the options, checked, with the forms the scripts take them in
//   handlers.hpp         the handlers by key family
//   drain.hpp/.cpp       the owner's drain loop: batches peeked, run, dequeued
//   rounds.hpp/.cpp      the steps left to the executor, sent together in rounds
//   upkeep.hpp/.cpp      the renewer and the sweeper (the two threads)
//   layout.hpp           the names of an actor's keys, and the helpers the files share
//   scripts.hpp          the Lua, and the step script's arguments by name
// Built on common/ only, never on the lock client.
//
// The state behind handoff::redis::actor_system (private to lib/redis): the options, the
// servers (one, or a cluster's primaries: common/router.hpp), the scripts, and the parts
// above, which reach each other through the core.
//
// Ownership: actor_system holds the core; an executor job continuing a drain holds it too
// (shared_ptr), so a job may outlive the facade. The threads use the core through a
// reference and are joined by upkeep::stop(), which the facade's destructor calls.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "../common/connection.hpp"
#include "../common/router.hpp"
#include "drain.hpp"
#include "handlers.hpp"
#include "handoff/redis/actor_system.hpp"
#include "layout.hpp"
#include "rounds.hpp"
#include "settings.hpp"
#include "upkeep.hpp"

namespace handoff::redis::detail {

struct actor_core : std::enable_shared_from_this<actor_core> {
  actor_core(options opts, actor_options a);
  ~actor_core() { background.stop(); }
  actor_core(const actor_core&) = delete;
  actor_core& operator=(const actor_core&) = delete;

  // post's work: std::nullopt when the mailbox is full, else the message's id.
  std::optional<std::string> try_post(std::string_view key, std::string_view body);
  // std::invalid_argument for a body over max_message_bytes, naming `call`.
  void check_body_size(std::size_t bytes, const char* call) const;
  // post_after's and cancel_delayed's.
  std::string post_delayed(std::string_view key, std::string_view body, std::chrono::nanoseconds delay);
  bool cancel_delayed(std::string_view key, std::string_view id);
  // The one place that decides where a post's owner continues its actor: on the executor
  // (if any) when this thread runs work of the library now (a handler, a callback, a
  // resumed coroutine); otherwise drain_on_this_thread(). `first`: the post's own message,
  // delivered by its reply (top level only). (A sweep's takeovers go to step_rounds.)
  void continue_owned(const actor_names& n, const std::string& token, const first_delivery* first = nullptr);
  // At top level: drain now. Inside work of the library: a task on this thread's run
  // queue that drains after that work returns (never nested in it). Reports failures.
  void drain_on_this_thread(const actor_names& n, const std::string& token,
                            const first_delivery* first = nullptr) noexcept;
  // A drain as an executor job, registered for renewal while it waits.
  void queue_drain(const actor_names& n, const std::string& token);
  // To on_error, or to stderr without one.
  void report(std::string_view key, const std::exception_ptr& e) const noexcept;
  [[nodiscard]] std::string next_id() {
    return id_ + "-" + std::to_string(seq_.fetch_add(1, std::memory_order_relaxed));
  }
  // A delayed message's id: its sequence zero-padded, so that the delayed set, which
  // orders messages due in the same millisecond by id, keeps each process's posting order.
  // Unique like next_id's (the same sequence; a padded number is never written unpadded).
  [[nodiscard]] std::string next_delayed_id();
  [[nodiscard]] actor_names names(std::string_view key) const { return {o.prefix, key, servers.clustered()}; }

  const options o;
  const actor_settings settings;
  const actor_options& a = settings.a;
  router servers;  // after o, which it refers to
  // Loaded once by the constructor, then only read.
  script post_script, step_script, renew_script, claim_script, due_script, delay_script, cancel_script;
  handler_registry handlers;
  drainer drains{*this};
  step_rounds rounds{*this};
  upkeep background{*this};  // after servers

 private:
  const std::string id_;
  // Message and token sequence; relaxed: only uniqueness matters (fetch_add never repeats).
  std::atomic<std::uint64_t> seq_{0};
};

}  // namespace handoff::redis::detail
