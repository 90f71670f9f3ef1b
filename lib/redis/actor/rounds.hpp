// The steps that a post's owner leaves to a handoff::redis::actor_system's executor, sent
// together in rounds (rounds.cpp; private to lib/redis).
#pragma once

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "layout.hpp"

namespace handoff::redis::detail {

struct actor_core;

class step_rounds {
 public:
  explicit step_rounds(actor_core& core) noexcept : core_(core) {}

  // A step left by a post's owner: the step script's call (the number of keys, the keys,
  // the arguments).
  struct deferred_step {
    actor_names n;
    std::string token;
    std::vector<std::string> call;
  };
  // Queues `s` for run(), which an executor job runs (one job at a time, queued by the
  // step that finds none queued). Keeps `s.token` registered with the renewer until its
  // reply is settled. If the executor refuses the job, reports it for every step waiting
  // and drops them (their leases run out; a sweeper takes the actors over).
  void defer(deferred_step s);
  // One executor job: rounds of sending every deferred step in one write and settling
  // the replies. An actor whose step peeked more messages (status 1) runs them here and
  // defers its next step to the next round, which runs as a job of its own; one handed on
  // (2) continues on the executor (actor_core::queue_drain).
  void run() noexcept;

 private:
  actor_core& core_;
  std::mutex mu_;
  std::vector<deferred_step> waiting_;  // not sent yet; guarded by mu_, as the three below
  bool queued_ = false;                 // a run() job is queued or running
  std::thread::id runner_;              // the thread in run() now
  bool nested_ = false;                 // a run() job ran inline inside execute()
};

}  // namespace handoff::redis::detail
