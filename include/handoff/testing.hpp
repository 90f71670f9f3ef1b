// handoff::testing: deterministic, explorable runs of a program built on handoff.
//
//   handoff::testing::scheduler s;           // on this thread, nothing runs by itself now
//   handoff::actor<Room> room;
//   room.post([](Room& r) { r.join(1); });   // queued as an event, not run
//   s.pending();                             // {{event_kind::actor, "actor 1"}}
//   s.run_all();                             // runs it (and what it makes runnable)
//
//   auto r = handoff::testing::explore([](handoff::testing::scheduler& s) {
//     ... set the program up, send ...
//     s.run_all();
//     handoff::testing::check(invariant_holds, "two buyers got the last item");
//   });
//   EXPECT_FALSE(r.failed) << r.trace;      // r.seed replays it: explore(body, {.replay = r.seed})
//
// The types:
//   scheduler    while one is in scope on a thread, what the library would run by itself
//                is queued as an event instead: each message of an actor's turn, a resumed
//                coroutine, a keyed mutex's grant to a coroutine or callback, an executor
//                or thread_pool job, a blocked call that may go on, and time passing to
//                the next lease or wait deadline (virtual time). The test runs them.
//   explore      runs a test body many times, each under another seeded order of events,
//                stops at the first failure and returns its seed and trace.
//   check        throws check_failed and fails the run, wherever it is called.
//
// What a scheduler changes, on the threads it runs (the test's, and the ones it runs
// events on; one event runs at a time, so the run is as deterministic as the test body):
//  - A send never runs the target: the actor becomes an event. An actor's event runs one
//    message, then the actor queues again if more wait (so messages of different actors
//    interleave message by message). ask() waits through the scheduler: from the test
//    body it runs events until the answer is there; from inside an event it parks that
//    event while others run. ~actor waits the same way.
//  - Executors and thread_pool::execute queue their work as events; actors go on after a
//    budget, a defer or a hand-off as events too, and are never spread to an executor's
//    idle workers. A pool's workers stay idle.
//  - A send inside an event that wins an idle actor puts its message in the actor's
//    mailbox (a pooled node), not in the thread's carry slot, so that the actor's event
//    may run on any of the scheduler's threads.
//  - A keyed_mutex made inside the scheduler's scope runs on its virtual clock: leases and
//    wait times fire only when time passes (advance(), or a time event). Every lock
//    request made inside an event is a scheduling point, after which it runs as without
//    a scheduler: a free key is granted at once (a lock_async callback runs inside the
//    call); a blocking request that must wait parks its event until the key is granted
//    or its virtual deadline passes; a queued async request is granted through an event.
//  - An exception that no hook takes (an actor handler's without on_error, a lock_async
//    callback's, a job's) fails the run instead of being printed to stderr.
// Outside a scheduler nothing changes: each hook is one test of a pointer that is null
// (the thread's, or a keyed mutex's, set when it was made under a scheduler).
//
// Threads the test starts itself (std::thread, std::jthread, a pool of its own) are not
// the scheduler's: it neither runs nor orders their calls, so none of them can park. The
// first call such a thread makes that would wait on an object made under the scheduler (a
// keyed_mutex lock or try_lock_for that finds the key held) waits for nothing: it throws
// std::logic_error naming that thread's id and the call ("thread <id> ... waits in lock
// "k""), and the run fails with the same reason at the scheduler's next step (explore: at
// the latest when the body returns). Its other calls run at once on that thread, at
// moments no seed orders. Give such work to actors or thread_pool jobs instead: those are
// events.
//
// Not covered: Redis calls; objects made before the scheduler (a keyed_mutex keeps its
// real clock; a thread_pool already running work); interleavings inside one event (two
// handlers never run at once, so a race between plain memory accesses with no handoff
// call in between is not explored); actor budgets (max_messages, max_time), since every
// event is one message.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace handoff::testing {

// A failed check(): thrown by check, and by run_all()/run_one() once the run has failed.
class check_failed : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// No event can run and a blocked call cannot return: thrown to the blocked calls (so
// that they give up) and by the scheduler's run calls.
class deadlock : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Thread-safe. Does nothing if `condition` holds. Else fails the run of the scheduler
// this thread runs under (if any), records `message` in its trace, and throws
// check_failed(message): from inside an actor's handler the actor's error hook takes the
// exception, but the run has failed all the same.
void check(bool condition, std::string_view message);

enum class event_kind : unsigned char {
  actor,      // one message of an actor's turn
  coroutine,  // a coroutine resumed: async_ask's answer
  grant,      // a keyed mutex's coroutine or callback waiter, granted or timed out
  job,        // work given to an executor or thread_pool
  resume,     // a call parked in an event (ask, a lock, ~actor, a lock request) goes on
  time,       // virtual time passes to the next deadline (a lease, a wait time)
};

// "actor", "coroutine", ...
[[nodiscard]] std::string_view to_string(event_kind k) noexcept;

struct event {
  event_kind kind;
  // What it runs, as the trace names it: "actor 2" (actors are numbered by creation
  // under the scheduler), "key \"player:42\"", "actor 1: lock \"a\"", "+500 ms".
  std::string subject;
};

class scheduler {
 public:
  // Takes over this thread: precondition, no other scheduler is in scope on it and it is
  // not inside a handler. Runs events in the order they became runnable (time last).
  scheduler();
  // Runs what is still runnable (as run_all(), failures ignored), then gives the thread
  // back. Calls still parked (a deadlock the test did not run into) are made to give up.
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  // Runs one event: true, or false when none can run. Throws what failed the run
  // (check_failed, deadlock, the exception no hook took, or the std::logic_error of a
  // thread of the test's own that tried to wait; see the overview), once.
  bool run_one();
  // Runs events until none can run (time events included: virtual time passes to each
  // deadline in turn); returns how many ran. Calls parked waiting for something only the
  // test can do (a key the test holds) stay parked. Throws as run_one does.
  std::size_t run_all();
  // Runs events until pred() holds (true) or none can run (false). Throws as run_one does.
  template <class Pred>
  bool run_until(Pred pred) {
    while (!pred()) {
      if (!run_one()) return pred();
    }
    return true;
  }
  // The events that can run now, in the order run_one() would pick without exploration.
  [[nodiscard]] std::vector<event> pending() const;
  // Moves virtual time forward by d, firing the deadlines it passes (in deadline order);
  // what they complete becomes events. Runs nothing else.
  void advance(std::chrono::nanoseconds d);
  // Virtual time since the scheduler started.
  [[nodiscard]] std::chrono::nanoseconds now() const noexcept;
  // Calls parked in events (blocked in ask, a lock, ~actor) that cannot go on yet.
  [[nodiscard]] std::size_t blocked() const noexcept;
  // Whether the run failed, and the events run so far, one line each, then the failure.
  [[nodiscard]] bool failed() const noexcept;
  [[nodiscard]] const std::string& trace() const noexcept;

  class impl;

 private:
  friend struct explorer;
  scheduler(std::uint64_t seed, unsigned preemptions);  // explore's runs
  std::unique_ptr<impl> impl_;
};

struct explore_options {
  // Runs to try; each run orders events differently (when the program gives it a choice).
  // At least 1 (unless replay is set).
  std::size_t runs = 200;
  // The seed of the first run's order (the seed of run i is derived from it). Overridden
  // by the environment variable HANDOFF_TEST_SEED, when set and not empty: a decimal
  // number, or 0x and a hex number, below 2^64.
  std::uint64_t seed = 1;
  // At most this many times per run, the explorer runs another event than the oldest
  // runnable one (at random steps, as PCT places its priority changes).
  unsigned preemptions = 3;
  // Runs only the run with this seed (an exploration's `seed`): the same order, the same
  // trace, byte for byte, given a deterministic body.
  std::optional<std::uint64_t> replay{};
};

struct exploration {
  bool failed = false;
  std::uint64_t seed = 0;  // the failing run's seed: replay it with {.replay = seed}
  std::size_t runs = 0;    // runs executed, the failing one included
  std::string trace;       // the failing run's events, one per line, then its failure
};

// Runs body(scheduler&) under `o.runs` orders of events (or one, to replay). The body sets
// the program up, sends, runs the events (run_all) and checks, throwing on a failure. A
// run fails on an exception out of the body (check_failed included), a check failed
// anywhere, an exception no hook took, a wait refused on a thread of the test's own (see
// the overview), a deadlock, or events or blocked calls left when the body returns (a
// keyed waiter never granted counts). Stops at the first failure and prints its seed and
// replay line to stderr. A GoogleTest failure recorded inside the
// body also fails the run, when <gtest/gtest.h> is included before this header. Throws
// std::invalid_argument, before any run, when o.runs is 0 without o.replay (nothing would
// run) or HANDOFF_TEST_SEED is set to anything but a seed.
exploration explore(const std::function<void(scheduler&)>& body, const explore_options& o = {});

}  // namespace handoff::testing

#if defined(GOOGLETEST_INCLUDE_GTEST_GTEST_H_) || defined(GTEST_INCLUDE_GTEST_GTEST_H_)
namespace handoff::testing::detail {
// Fails the run when the body recorded a new GoogleTest failure.
struct gtest_failures {
  static int count() {
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    if (t == nullptr) return 0;
    const ::testing::TestResult* r = t->result();
    int n = 0;
    for (int i = 0; i < r->total_part_count(); ++i) n += r->GetTestPartResult(i).failed() ? 1 : 0;
    return n;
  }
};
}  // namespace handoff::testing::detail
namespace handoff::testing {
template <class Body>
  requires(!std::is_same_v<std::decay_t<Body>, std::function<void(scheduler&)>>)
exploration explore(Body&& body, const explore_options& o = {}) {
  return explore(std::function<void(scheduler&)>([&body](scheduler& s) {
                   const int before = detail::gtest_failures::count();
                   body(s);
                   check(detail::gtest_failures::count() == before, "a GoogleTest assertion failed in the body");
                 }),
                 o);
}
}  // namespace handoff::testing
#endif
