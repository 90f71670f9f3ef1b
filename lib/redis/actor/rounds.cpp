// handoff::redis::actor_system: the steps a post's owner leaves to the executor, sent
// together in rounds (rounds.hpp).
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "actor_core.hpp"

namespace handoff::redis::detail {

namespace {

// The round that a run_here on this thread collects its drains' steps into, and whose
// rounds (one actor_system's) they are: per thread, since a sweeper thread and a caller of
// sweep() may run run_here at once.
struct collecting {
  const step_rounds* rounds = nullptr;
  std::vector<step_rounds::deferred_step>* into = nullptr;
};
thread_local collecting here;

}  // namespace

void step_rounds::defer(deferred_step s) {
  // Registered until its reply is settled, so that the renewer keeps the lease meanwhile.
  core_.background.register_drain(s.token, s.n.key);
  if (here.rounds == this) {
    here.into->push_back(std::move(s));  // run_here's next round
    return;
  }
  bool start = false;
  {
    const std::lock_guard<std::mutex> lock(mu_);
    waiting_.push_back(std::move(s));
    start = !queued_;
    queued_ = true;
  }
  if (!start) return;  // the queued run() job takes it
  try {
    handoff::execute(core_.a.executor, [core = core_.shared_from_this()] { core->rounds.run(); });
  } catch (...) {
    // The executor refused the job (out of memory, say). Nobody will send the steps
    // waiting: their actors stay owned until their leases run out, as after any failure
    // of a drain; then a sweeper takes them over and runs their messages again.
    std::vector<deferred_step> dropped;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      dropped.swap(waiting_);
      queued_ = false;
    }
    for (const deferred_step& d : dropped) {
      core_.report(d.n.key, std::current_exception());
      core_.background.unregister_drain(d.token);
    }
  }
}

void step_rounds::run() noexcept {
  // An executor may run a job inline, inside execute(): the next round's job would then
  // nest a frame per round. The nested call only tells this one to go on instead.
  const std::thread::id self = std::this_thread::get_id();
  {
    const std::lock_guard<std::mutex> lock(mu_);
    if (runner_ == self) {
      nested_ = true;
      return;
    }
    runner_ = self;
  }
  struct done {
    step_rounds& rounds;
    explicit done(step_rounds& r) : rounds(r) {}
    done(const done&) = delete;
    done& operator=(const done&) = delete;
    ~done() {
      const std::lock_guard<std::mutex> lock(rounds.mu_);
      // A pool may have started the next round's job on another thread already.
      if (rounds.runner_ == std::this_thread::get_id()) rounds.runner_ = std::thread::id();
    }
  } const end(*this);
  for (;;) {
    std::vector<deferred_step> sent;
    {
      const std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty()) {
        queued_ = false;
        return;
      }
      sent.swap(waiting_);
    }
    round(sent, false);
    {
      // Another round as a job of its own, so that the executor's other jobs run between.
      const std::lock_guard<std::mutex> lock(mu_);
      if (waiting_.empty()) {
        queued_ = false;
        return;
      }
    }
    try {
      handoff::execute(core_.a.executor, [core = core_.shared_from_this()] { core->rounds.run(); });
      const std::lock_guard<std::mutex> lock(mu_);
      if (!std::exchange(nested_, false)) return;  // queued: it runs after this job
    } catch (...) {                                // NOLINT(bugprone-empty-catch): refused: the next round runs here
    }
  }
}

void step_rounds::run_here(const std::vector<taken_actor>& taken) noexcept {
  std::vector<deferred_step> next;
  // Renewed while the delivered messages before theirs run.
  for (const taken_actor& t : taken) core_.background.register_drain(t.token, t.n.key);
  const collecting outer = here;  // a handler's sweep() may nest a run_here
  here = {this, &next};
  // Each drain runs its delivered message, or peeks, and defers its step: the first round
  // sends them all.
  for (const taken_actor& t : taken) {
    core_.drains.drain(t.n, t.token, t.first ? &*t.first : nullptr, nullptr, true);
    core_.background.unregister_drain(t.token);  // its step holds a registration of its own
  }
  while (!next.empty()) {
    std::vector<deferred_step> sent;
    sent.swap(next);
    round(sent, true);  // the drains it resumes defer their steps into `next`
  }
  here = outer;
}

void step_rounds::round(std::vector<deferred_step>& sent, bool carry) noexcept {
  // One round: every step in one write; then every actor with more messages runs its next
  // batch here and defers its next step to the next round.
  std::vector<router::outcome> replies;
  try {
    std::vector<std::vector<std::string>> calls;
    calls.reserve(sent.size());
    for (deferred_step& s : sent) calls.push_back(std::move(s.call));
    replies = core_.servers.eval_each(core_.step_script, calls, "steps of the actors' drains");
  } catch (...) {
    // Out of memory. Each actor stays owned until its lease runs out; then a sweeper
    // takes over.
    for (const deferred_step& s : sent) core_.report(s.n.key, std::current_exception());
  }
  for (std::size_t i = 0; i < replies.size(); ++i) {
    const deferred_step& s = sent[i];
    try {
      // A failed round trip: as for a throwing eval, the lease runs out, then a takeover.
      if (replies[i].failed != nullptr) std::rethrow_exception(replies[i].failed);
      const long long status = core_.drains.settle(s.n, *replies[i].r);
      if (status == 2 && core_.a.executor) core_.queue_drain(s.n, s.token);  // kept: go on there
      if (status == 1) {
        core_.drains.drain(s.n, s.token, nullptr, std::make_shared<reply>(std::move(replies[i].r)), true,
                           carry ? s.budget : drain_budget{});
      }
    } catch (...) {
      core_.report(s.n.key, std::current_exception());
    }
  }
  for (const deferred_step& s : sent) core_.background.unregister_drain(s.token);
}

}  // namespace handoff::redis::detail
