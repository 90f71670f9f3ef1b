// The steps of many actors' drains sent together in rounds (rounds.cpp; private to
// lib/redis): on the executor, the steps that posts' owners leave to it; on a sweeping
// thread without an executor, the drains of the actors one sweep took over.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "drain.hpp"
#include "layout.hpp"

namespace handoff::redis::detail {

struct actor_core;

class step_rounds {
 public:
  explicit step_rounds(actor_core& core) noexcept : core_(core) {}

  // A step a drain left to the rounds: the step script's call (the number of keys, the
  // keys, the arguments), and where the drain's budget stood.
  struct deferred_step {
    actor_names n;
    std::string token;
    std::vector<std::string> call;
    drain_budget budget;
  };
  // Queues `s` for the next round: run_here's, if this thread is in run_here now, else
  // run()'s, which an executor job runs (one job at a time, queued by the step that finds
  // none queued). Keeps `s.token` registered with the renewer until its reply is settled.
  // If the executor refuses the job, reports it for every step waiting and drops them
  // (their leases run out; a sweeper takes the actors over).
  void defer(deferred_step s);
  // One executor job: rounds of sending every deferred step in one write and settling
  // the replies. An actor whose step peeked more messages (status 1) runs them here and
  // defers its next step to the next round, which runs as a job of its own; one handed on
  // (2) continues on the executor (actor_core::queue_drain).
  void run() noexcept;
  // An actor a sweep made this process own: its names, the owner's token, and the
  // message the sweep delivered (its views into the sweep's reply), if it did.
  struct taken_actor {
    actor_names n;
    std::string token;
    std::optional<first_delivery> first;
  };
  // Without an executor: drains the actors a sweep made this thread own here, in rounds:
  // the delivered messages run, then the steps of all (or their peeks) in one write, then
  // each round's batches run and their steps in the next write, until every actor is
  // released or, its budget spent (counted across the rounds), announced. Every token is
  // registered for renewal from the start.
  void run_here(const std::vector<taken_actor>& taken) noexcept;

 private:
  // Sends `sent` in one write and settles the replies; the steps of actors with more
  // messages are deferred to the next round. `carry`: their drains go on with the budget
  // where it stood (run_here's), not a new one (an executor job's).
  void round(std::vector<deferred_step>& sent, bool carry) noexcept;

  actor_core& core_;
  std::mutex mu_;
  std::vector<deferred_step> waiting_;  // not sent yet; guarded by mu_, as the three below
  bool queued_ = false;                 // a run() job is queued or running
  std::thread::id runner_;              // the thread in run() now
  bool nested_ = false;                 // a run() job ran inline inside execute()
};

}  // namespace handoff::redis::detail
