// The lock client: its parts put together, and what runs on the caller's thread: the
// blocking lock (an acquire_step driven with BLPOP), unlock, extend, and the guard of a
// grant (see client.hpp).
#include "client.hpp"

#include <algorithm>
#include <chrono>
#include <utility>

#include "handoff/detail/report.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::redis::detail {

using handoff::detail::now_ns;

client::client(options opts) : o(validated(std::move(opts))) {
  check_server(commands.servers(), o, "a held lock could be evicted and granted twice");
  commands.load();
  async_.connect_subscriber();
}

void client::start() { background_.start(async_, watchdog_); }

void client::stop() noexcept {
  background_.stop();
  watchdog_.clear();  // those holds end with their lease
  async_.stop();
}

guard client::granted(std::string_view key, const acquire_step& step, const grant& g, lock_commands::lane l) {
  std::string value(step.id());
  value += ' ';
  value += std::to_string(g.fence);
  const bool wd = step.lease_ns() == 0;
  auto h = std::make_shared<hold>(shared_from_this(), step.names(), key, std::move(value), g.fence,
                                  clock.hold_ns(step.lease_ns()), wd, g.clock.valid_until, g.clock.px_ns);
  if (o.min_replicas > 0) confirm(*h, l);
  if (wd) watchdog_.add(h);
  return guard(std::move(h));
}

void client::confirm(hold& h, lock_commands::lane l) {
  // A renewal is a write of this grant's own, after it in the replication stream: replicas
  // that acknowledge it hold the grant and its token too.
  bool held = false;
  try {
    held = commands.renew(l, h, h.lease_ns.load(std::memory_order_relaxed), "lock");
  } catch (const error& e) {
    give_up(h);
    throw error(std::string(e.what()) + "; the key was given up");
  }
  if (!held) {
    throw error("handoff::redis: lock " + handoff::detail::key_excerpt(h.key) +
                ": the grant was lost before its replicas held it");
  }
}

void client::give_up(const hold& h) noexcept {
  try {
    commands.release(h);
  } catch (const error&) {  // NOLINT(bugprone-empty-catch): the lease ends it
  }
}

guard client::acquire(std::string_view key, handoff::detail::wait_mode mode, std::int64_t deadline,
                      std::int64_t lease_ns) {
  using handoff::detail::wait_mode;
  const std::int64_t start = now_ns();
  if (mode == wait_mode::forever) deadline = handoff::detail::no_deadline;
  if (mode == wait_mode::none) deadline = start;  // one try
  const bool wait = acquire_step::waits(deadline, start);
  acquire_step step(clock, commands.names(key), commands.request_id(lease_ns, wait), lease_ns, deadline);
  step.start(start);
  // One attempt on a pooled connection. Its send time is taken before: before the server
  // sees the attempt, so before any grant after it.
  const auto attempt = [&] {
    step.begin_attempt(now_ns());
    return step.on_attempt(
        commands.attempt(lock_commands::lane::commands, step.names(), step.id(), step.lease_ms(), step.waiting(), key));
  };
  if (!step.waiting()) {  // try_lock: one round trip, never queued
    const auto g = attempt();
    return g ? granted(key, step, *g) : guard();
  }

  // A grant after the first attempt waited (handoff/metrics.hpp: redis_lock).
  const auto waited = [&](guard g) {
    if (metrics_sink* s = handoff::detail::sink_or_global(counters.sink)) {
      s->observe_wait(metric_wait::redis_lock, std::chrono::nanoseconds(now_ns() - start));
    }
    return g;
  };
  // A caller inside an actor's handler may block below: first run what this thread owns
  // only through its run queue, which nobody else can run.
  handoff::detail::run_before_blocking();
  bool need_attempt = contention_.high();
  if (!need_attempt) {  // the first attempt alone, on a pooled connection: most locks end here
    if (const auto g = attempt()) return granted(key, step, *g);
    contention_.queued();
  }

  // Wait on a connection of the waits lane, in BLPOP on the request's grant list: a release
  // that grants the key pushes the grant there, and the reply wakes this thread (scripts.hpp).
  // An attempt goes with the BLPOP that follows it, in one round trip; the BLPOP's timeout
  // is the step's next check (the heartbeat, or the holder's lease if that ends sooner).
  const std::string list = lock_commands::grant_list(step.names(), step.id());
  const auto wait_ms = [&](std::int64_t now) {
    return std::max<std::int64_t>(1, (step.next_check(now) - now) / ms_ns);
  };
  // A step that fails ends the call with its error and no cancel: a second step would
  // double the time a stalled server costs the caller. The server drops the request when
  // its heartbeat runs out; a release that grants it first leaves the key with it for that
  // grant's lease (for a lease-less request, a heartbeat: scripts.hpp).
  for (bool first = need_attempt;; first = false) {
    if (need_attempt) {
      const std::int64_t sent = now_ns();
      if (!first && step.expired(sent)) break;
      if (!first) counters.recheck();  // no notification answered this wait in time
      step.begin_attempt(sent);
      // The first attempt skips the script's reply (one wake-up instead of two); a
      // re-check takes it, so that a script that failed (NOSCRIPT after a server
      // restart) is seen and loaded again.
      const auto [r, pushed] = commands.attempt_and_wait(step.names(), step.id(), step.lease_ms(), list, wait_ms(sent),
                                                         key, first && commands.skip_replies());
      if (const auto g = step.on_attempt(r)) {
        if (!first) return waited(granted(key, step, *g));
        contention_.found_free();
        return granted(key, step, *g);
      }
      if (first) contention_.queued();
      if (const auto g = step.on_grant(pushed.grant)) return waited(granted(key, step, *g));
      if (!pushed.poked) continue;  // nothing came in time: re-check
      // Poked: the holder's lease ends before the BLPOP would have timed out; wait until then.
    }
    need_attempt = true;
    const std::int64_t now = now_ns();
    if (step.expired(now)) break;
    const pushed_grant pushed = commands.await_grant(list, wait_ms(now), key);
    if (const auto g = step.on_grant(pushed.grant)) return waited(granted(key, step, *g));
  }
  // The wait ran out: leave the queue, passing on a grant that came meanwhile.
  if (step.queued()) commands.cancel(lock_commands::lane::commands, step.names(), step.id(), key);
  return guard();
}

void client::lock_async(std::string key, keyed_mutex::callback f, std::int64_t deadline, std::int64_t lease_ns) {
  std::string id = commands.request_id(lease_ns, false);
  key_names names = commands.names(key);
  async_.submit(std::make_unique<async_request>(clock, std::move(names), std::move(key), std::move(id), lease_ns,
                                                deadline, std::move(f)));
}

bool client::extend(hold& h, std::int64_t lease_ns) {
  const bool renewed = commands.renew(lock_commands::lane::commands, h, lease_ns);
  if (renewed && h.watchdog) background_.wake();  // the next renewal moved
  return renewed;
}

}  // namespace handoff::redis::detail
