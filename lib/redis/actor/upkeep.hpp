// A handoff::redis::actor_system's two threads (upkeep.cpp; private to lib/redis): the
// renewer, which renews the lease of every actor this process drains (its steps do not),
// and the sweeper, which takes over actors whose owner is gone or that were announced.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace handoff::redis::detail {

struct actor_core;

class upkeep {
 public:
  // After core.servers: it reads which pending sets there are.
  explicit upkeep(actor_core& core);

  void start();          // the threads
  void stop() noexcept;  // joins them; idempotent

  // The actors this process drains now or has queued, renewed until unregistered. A drain
  // registers first and unregisters last; a continuation queued on the executor holds a
  // registration of its own until it runs (so a token may be registered twice for a
  // moment: unregister removes one).
  void register_drain(const std::string& token, const std::string& key);
  void unregister_drain(const std::string& token) noexcept;

  // actor_system::sweep(): moves the due delayed messages to their mailboxes, then takes
  // over and drains the due actors this process has handlers for; how many. Throws error
  // (having swept the pending sets that answered). `more`, if given: set when a set had
  // more due than one sweep takes (sweep_batch, delayed_batch).
  std::size_t sweep(bool* more = nullptr);

 private:
  void renew_loop() noexcept;
  void sweep_loop() noexcept;

  actor_core& core_;
  // What a sweep reads per pending set: a call of the due script but for its batch
  // sizes, for the one set of one server, or a cluster's per group.
  const std::vector<std::vector<std::string>> due_calls_;
  std::mutex mu_;
  std::condition_variable cv_;                                     // stopping_ was set
  bool stopping_ = false;                                          // guarded by mu_
  std::multimap<std::string, std::string, std::less<>> draining_;  // token -> key; guarded by mu_
  std::thread renewer_;
  std::thread sweeper_;
};

}  // namespace handoff::redis::detail
