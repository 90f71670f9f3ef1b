// handoff::testing (testing.hpp): the deterministic scheduler's contract, one test per
// promise, and explore's seeds, replay and failure reports. The example programs with
// planted bugs are in testing_examples_test.cpp.
#include <gtest/gtest.h>

#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // designated actor_options

#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/testing.hpp>
#include <handoff/thread_pool.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::fire_and_forget;
using handoff::test::test_timeout;
using handoff::testing::event_kind;
using handoff::testing::scheduler;

std::vector<event_kind> kinds(const scheduler& s) {
  std::vector<event_kind> out;
  for (const auto& e : s.pending()) out.push_back(e.kind);
  return out;
}

TEST(TestingScheduler, QueuesASendAsAnEventInsteadOfRunningIt) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{0};
  a.post([](int& x) { x = 1; });
  ASSERT_EQ(s.pending().size(), 1U);
  EXPECT_EQ(s.pending()[0].kind, event_kind::actor);
  EXPECT_EQ(s.pending()[0].subject, "actor 1");
  EXPECT_TRUE(s.run_one());
  EXPECT_FALSE(s.run_one());
  EXPECT_EQ(a.ask([](int& x) { return x; }).get(), 1);
}

TEST(TestingScheduler, RunsOneMessagePerEventSoThatActorsInterleave) {
  test_timeout limit(60s);
  scheduler s;
  std::vector<int> log;
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  a.post([&](int&) { log.push_back(1); });
  a.post([&](int&) { log.push_back(2); });
  b.post([&](int&) { log.push_back(3); });
  EXPECT_EQ(s.run_all(), 3U);
  // FIFO by when each became runnable: a's first message, b, then a's second.
  EXPECT_EQ(log, (std::vector<int>{1, 3, 2}));
  EXPECT_EQ(s.trace(), "1. actor 1\n2. actor 2\n3. actor 1\n");
}

TEST(TestingScheduler, QueuesADeferredSendAsAnEvent) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{0};
  std::vector<int> log;
  a.post([&](int&, handoff::actor<int>& self) {
    log.push_back(1);
    self.defer([&](int&) { log.push_back(3); });  // after what is already queued
  });
  handoff::actor<int> b{0};
  b.post([&](int&) { log.push_back(2); });
  EXPECT_EQ(s.run_all(), 3U);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(s.trace(), "1. actor 1\n2. actor 2\n3. actor 1\n");
}

TEST(TestingScheduler, RunsEventsOnItsOwnThreadsOneAtATime) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{0};
  std::thread::id ran_on;
  a.post([&](int&) { ran_on = std::this_thread::get_id(); });
  s.run_all();
  EXPECT_NE(ran_on, std::thread::id{});
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(TestingScheduler, AnsweringAnAskFromTheTestRunsEventsUntilTheAnswerIsThere) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{41};
  handoff::actor<int> other{0};
  other.post([](int&) {});
  EXPECT_EQ(a.ask([](int& x) { return x + 1; }).get(), 42);
  EXPECT_EQ(s.trace(), "1. actor 2\n2. actor 1\n");  // the older event first
}

TEST(TestingScheduler, ParksAnAskInsideAHandlerWhileTheTargetRuns) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> target{5};
  handoff::actor<int> asker{0};
  asker.post([&](int& got) { got = target.ask([](int& x) { return x; }).get(); });
  s.run_all();
  EXPECT_EQ(asker.ask([](int& x) { return x; }).get(), 5);
  EXPECT_EQ(s.trace(), "1. actor 2\n2. actor 1\n3. resume actor 2: ask\n4. actor 2\n");
}

fire_and_forget read_into(handoff::actor<int>& a, int& got) {
  got = co_await a.async_ask([](int& x) { return x; });
}

TEST(TestingScheduler, ResumesAnAsyncAskAsACoroutineEvent) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{7};
  int got = 0;
  read_into(a, got);
  EXPECT_EQ(kinds(s), (std::vector<event_kind>{event_kind::actor}));
  EXPECT_TRUE(s.run_one());
  EXPECT_EQ(kinds(s), (std::vector<event_kind>{event_kind::coroutine}));
  EXPECT_EQ(got, 0);
  s.run_all();
  EXPECT_EQ(got, 7);
}

TEST(TestingScheduler, TurnsAThreadPoolJobIntoAnEvent) {
  test_timeout limit(60s);
  handoff::thread_pool pool(2);
  scheduler s;
  bool ran = false;
  pool.execute([&] { ran = true; });
  EXPECT_EQ(kinds(s), (std::vector<event_kind>{event_kind::job}));
  EXPECT_FALSE(ran);
  s.run_all();
  EXPECT_TRUE(ran);
}

TEST(TestingScheduler, ContinuesABudgetedActorThroughAnEventNotItsExecutor) {
  test_timeout limit(60s);
  handoff::thread_pool pool(1);
  scheduler s;
  handoff::actor<int> a(handoff::actor_options{.executor = pool, .max_messages = 1}, 0);
  std::vector<std::thread::id> on;
  for (int i = 0; i < 3; ++i) a.post([&](int&) { on.push_back(std::this_thread::get_id()); });
  EXPECT_EQ(s.run_all(), 3U);
  ASSERT_EQ(on.size(), 3U);
  EXPECT_EQ(s.trace(), "1. actor 1\n2. actor 1\n3. actor 1\n");
}

TEST(TestingScheduler, AdvanceFiresALeaseAtItsVirtualDeadlineAndNotBefore) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  auto g = m.lock("k", handoff::lease{1s});
  s.advance(999ms);
  EXPECT_FALSE(g.expired());
  s.advance(1ms);
  EXPECT_TRUE(g.expired());
  EXPECT_EQ(s.now(), 1s);
}

TEST(TestingScheduler, TimesOutAWaitOnlyWhenVirtualTimePasses) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  handoff::actor<int> a{0};
  auto held = m.lock("k");
  bool owned = true;
  a.post([&](int&) { owned = m.try_lock_for("k", 5s).owns_lock(); });
  s.run_until([&] { return s.blocked() == 1; });  // its request parked: the key is held
  auto p = s.pending();
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].kind, event_kind::time);
  EXPECT_EQ(p[0].subject, "+5000 ms (at 5000 ms)");
  s.run_all();
  EXPECT_FALSE(owned);
  EXPECT_EQ(s.now(), 5s);
}

TEST(TestingScheduler, GrantsAParkedBlockingLockWhenTheTestUnlocks) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  handoff::actor<int> a{0};
  auto held = m.lock("k");
  bool got = false;
  a.post([&](int&) { got = m.lock("k").owns_lock(); });
  s.run_all();
  EXPECT_EQ(s.blocked(), 1U);
  EXPECT_FALSE(got);
  held.unlock();
  auto p = s.pending();
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].kind, event_kind::resume);
  EXPECT_EQ(p[0].subject, "actor 1: lock \"k\"");
  s.run_all();
  EXPECT_TRUE(got);
  EXPECT_EQ(m.size(), 0U);
}

struct holder {
  handoff::key_guard g;
};

TEST(TestingScheduler, RunsEventsWhileTheTestItselfWaitsForAKey) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  handoff::actor<holder> a;
  bool held = false;
  bool unlocked = false;
  a.post([&](holder& h) {
    h.g = m.lock("k");
    held = true;
  });
  a.post([&](holder& h) {
    h.g.unlock();
    unlocked = true;
  });
  ASSERT_TRUE(s.run_until([&] { return held; }));
  EXPECT_FALSE(unlocked);
  EXPECT_TRUE(m.lock("k").owns_lock());  // held by a: runs a's next message, which unlocks
  EXPECT_TRUE(unlocked);
  EXPECT_EQ(s.now(), 0s);
}

TEST(TestingScheduler, EndsTheTestsOwnTimedWaitOnTheVirtualClock) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  handoff::actor<holder> a;
  a.post([&](holder& h) { h.g = m.lock("k"); });  // kept until a is destroyed
  s.run_all();
  EXPECT_FALSE(m.try_lock_for("k", 3s).owns_lock());
  EXPECT_EQ(s.now(), 3s);
  EXPECT_NE(s.trace().find("time +3000 ms (at 3000 ms)"), std::string::npos) << s.trace();
}

// A free key is granted inside the request, as without a scheduler: the callback has run
// when lock_async returns, and no grant event is queued. The request inside an event is a
// scheduling point first: the handler parks once, as "lock".
TEST(TestingScheduler, RunsALockAsyncCallbackInsideTheCallWhenTheKeyIsFree) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  bool got = false;
  m.lock_async("k", [&](handoff::key_guard g) { got = g.owns_lock(); });
  EXPECT_TRUE(got);
  EXPECT_TRUE(s.pending().empty());
  handoff::actor<int> a{0};
  bool ran_inside = false;
  a.post([&](int&) {
    bool in = false;
    m.lock_async("k", [&](handoff::key_guard g) { in = g.owns_lock(); });
    ran_inside = in;
  });
  s.run_all();
  EXPECT_TRUE(ran_inside);
  EXPECT_EQ(s.trace(), "1. actor 1\n2. resume actor 1: lock \"k\"\n");
  EXPECT_EQ(m.size(), 0U);
}

fire_and_forget lock_then_note(handoff::keyed_mutex<>& m, bool& owned) {
  auto g = co_await m.async_lock("k");
  owned = g.owns_lock();
}

TEST(TestingScheduler, GoesOnWithoutSuspendingWhenAnAsyncLockFindsTheKeyFree) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  handoff::actor<int> a{0};
  bool went_on = false;
  a.post([&](int&) {
    bool owned = false;
    lock_then_note(m, owned);
    went_on = owned;  // the coroutine ran to its end inside the call
  });
  s.run_all();
  EXPECT_TRUE(went_on);
  EXPECT_EQ(s.trace(), "1. actor 1\n2. resume actor 1: lock \"k\"\n");
}

TEST(TestingScheduler, GrantsAQueuedAsyncRequestThroughAGrantEvent) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  auto held = m.lock("k");
  bool got = false;
  m.lock_async("k", [&](handoff::key_guard g) { got = g.owns_lock(); });
  EXPECT_TRUE(s.pending().empty());
  EXPECT_EQ(m.waiting(), 1U);
  held.unlock();
  auto p = s.pending();
  ASSERT_EQ(p.size(), 1U);
  EXPECT_EQ(p[0].kind, event_kind::grant);
  EXPECT_EQ(p[0].subject, "key \"k\": granted");
  EXPECT_FALSE(got);
  s.run_all();
  EXPECT_TRUE(got);
}

// A won message is not carried in the thread's carry slot under a scheduler (the scheduler
// keeps the slot marked taken): it goes into the actor's mailbox and the actor becomes an
// event of its own, which may run on any of the scheduler's threads. Without a scheduler
// the slot would hold it (nested_hop_test.cpp).
TEST(TestingScheduler, PutsAMessageWonInsideAnEventInTheMailboxNotTheCarrySlot) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  const void* before = nullptr;
  const void* after = nullptr;
  std::uint64_t queued = 0;
  a.post([&](int&) {
    before = handoff::detail::carried.actor;
    b.post([](int& x) { x = 1; });
    after = handoff::detail::carried.actor;
    queued = b.pending();
  });
  s.run_all();
  EXPECT_NE(before, nullptr);
  EXPECT_EQ(after, before);
  EXPECT_EQ(queued, 1U);
  EXPECT_EQ(s.trace(), "1. actor 1\n2. actor 2\n");
  EXPECT_EQ(b.ask([](int& x) { return x; }).get(), 1);
}

// An executor that reports idle workers and keeps what it is given.
struct recording_executor {
  std::vector<handoff::work> jobs;
  void execute(handoff::work w) { jobs.push_back(w); }
  [[nodiscard]] static bool has_idle_workers() noexcept { return true; }
  void run_jobs() {
    for (std::size_t i = 0; i < jobs.size(); ++i) jobs[i]();
  }
};

// a's handler wins b, c and d (b carried, c and d behind it), and b defers to itself.
// Without a scheduler the run queue spreads c to the idle executor and b's defer hands b
// to it. Under `s` (nullptr: none), s runs the events. Returns the messages that ran
// before the executor ran anything, and in all.
std::pair<int, int> spread_and_defer(recording_executor& pool, scheduler* s) {
  handoff::actor_options with_pool;
  with_pool.executor = pool;
  handoff::actor<int> a{0};
  handoff::actor<int> b{with_pool, 0};
  handoff::actor<int> c{with_pool, 0};
  handoff::actor<int> d{with_pool, 0};
  int ran = 0;
  a.post([&](int&) {
    b.post([&](int&, handoff::actor<int>& self) {
      ++ran;
      self.defer([&](int&) { ++ran; });
    });
    c.post([&](int&) { ++ran; });
    d.post([&](int&) { ++ran; });
  });
  if (s != nullptr) s->run_all();
  const int before_jobs = ran;
  pool.run_jobs();
  return {before_jobs, ran};
}

TEST(TestingScheduler, NeverHandsAnActorToItsExecutorWhereWithoutOneItWould) {
  test_timeout limit(60s);
  recording_executor unscheduled;
  EXPECT_EQ(spread_and_defer(unscheduled, nullptr), std::make_pair(2, 4));  // b's first message and d's
  EXPECT_EQ(unscheduled.jobs.size(), 2U) << "c spread to the idle executor, b's defer handed to it";
  recording_executor scheduled;
  scheduler s;
  EXPECT_EQ(spread_and_defer(scheduled, &s), std::make_pair(4, 4));
  EXPECT_TRUE(scheduled.jobs.empty());
  EXPECT_EQ(s.trace(), "1. actor 1\n2. actor 2\n3. actor 3\n4. actor 4\n5. actor 2\n");
}

TEST(TestingScheduler, WaitsForRoomInAFullMailboxThroughTheScheduler) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a(handoff::actor_options{.capacity = 1}, 0);
  a.post([](int& x) { ++x; });
  a.post([](int& x) { ++x; });  // full: runs the first message to make room
  EXPECT_EQ(a.ask([](int& x) { return x; }).get(), 2);
}

TEST(TestingScheduler, FailsTheRunOnAHandlerExceptionThatNoHookTakes) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{0};
  a.post([](int&) { throw std::runtime_error("boom"); });
  EXPECT_THROW(s.run_all(), std::runtime_error);
  EXPECT_TRUE(s.failed());
  EXPECT_EQ(s.trace(), "1. actor 1\nfailed: exception thrown by an actor handler: boom\n");
}

TEST(TestingScheduler, FailsTheRunOnACheckInsideAHandler) {
  test_timeout limit(60s);
  scheduler s;
  handoff::actor<int> a{0};
  a.post([](int& x) { handoff::testing::check(x == 1, "x is 1"); });
  EXPECT_THROW(s.run_all(), handoff::testing::check_failed);
  EXPECT_EQ(s.trace(), "1. actor 1\nfailed: check failed: x is 1\n");
}

TEST(TestingScheduler, ReportsADeadlockWhenTheTestWaitsForWhatNoEventCanDo) {
  test_timeout limit(60s);
  scheduler s;
  handoff::keyed_mutex<> m;
  handoff::actor<int> a{0};
  auto held = m.lock("k");
  a.post([&](int&) { auto g = m.lock("k"); });
  EXPECT_THROW((void)a.ask([](int& x) { return x; }).get(), handoff::testing::deadlock);
  EXPECT_NE(s.trace().find("failed: deadlock: the test waits in ask"), std::string::npos) << s.trace();
  EXPECT_NE(s.trace().find("actor 1: lock \"k\""), std::string::npos) << s.trace();
}

TEST(TestingScheduler, RunsPendingMessagesWhenAnActorIsDestroyed) {
  test_timeout limit(60s);
  scheduler s;
  int ran = 0;
  {
    handoff::actor<int> a{0};
    a.post([&](int&) { ++ran; });
    a.post([&](int&) { ++ran; });
  }
  EXPECT_EQ(ran, 2);
}

TEST(TestingScheduler, GivesTheThreadBackWhenItEnds) {
  test_timeout limit(60s);
  {
    scheduler s;
    handoff::actor<int> a{0};
    a.post([](int&) {});
  }
  handoff::actor<int> a{0};
  std::thread::id ran_on;
  a.post([&](int&) { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // runs inline again, as without a scheduler
}

TEST(TestingScheduler, RefusesASecondSchedulerOnTheSameThread) {
  scheduler s;
  EXPECT_THROW(scheduler{}, std::logic_error);
}

// --- explore ---

// Two actors add to a shared counter through a read, an ask (where another event may run)
// and a write: an order exists that loses an update.
void racy_counter(scheduler& s) {
  int shared = 0;
  handoff::actor<int> pricing{1};
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  for (auto* w : {&a, &b}) {
    w->post([&](int&) {
      const int seen = shared;
      const int step = pricing.ask([](int& p) { return p; }).get();
      shared = seen + step;
    });
  }
  s.run_all();
  handoff::testing::check(shared == 2, "an update was lost");
}

TEST(TestingExplore, StopsAtTheFirstFailingRunAndReplaysItsTraceByteForByte) {
  test_timeout limit(120s);
  const auto found = handoff::testing::explore(racy_counter);
  ASSERT_TRUE(found.failed);
  EXPECT_GE(found.runs, 1U);
  EXPECT_NE(found.trace.find("failed: check failed: an update was lost"), std::string::npos) << found.trace;
  const auto again = handoff::testing::explore(racy_counter, {.replay = found.seed});
  EXPECT_TRUE(again.failed);
  EXPECT_EQ(again.runs, 1U);
  EXPECT_EQ(again.seed, found.seed);
  EXPECT_EQ(again.trace, found.trace);
}

TEST(TestingExplore, RunsEveryRunOfACorrectProgram) {
  test_timeout limit(120s);
  const auto r = handoff::testing::explore(
      [](scheduler& s) {
        handoff::actor<int> counter{0};
        handoff::actor<int> a{0};
        handoff::actor<int> b{0};
        for (auto* w : {&a, &b}) w->post([&](int&) { counter.post([](int& c) { ++c; }); });
        s.run_all();
        handoff::testing::check(counter.ask([](int& c) { return c; }).get() == 2, "both counted");
      },
      {.runs = 50});
  EXPECT_FALSE(r.failed) << r.trace;
  EXPECT_EQ(r.runs, 50U);
}

TEST(TestingExplore, ExploresOrdersAPlainSchedulerNeverTries) {
  test_timeout limit(120s);
  // FIFO runs b's message before the time event: only a preemption lets the lease run out.
  auto body = [](scheduler& s) {
    handoff::keyed_mutex<> m;
    auto g = m.lock("k", handoff::lease{1s});
    handoff::actor<int> a{0};
    a.post([&](int&) { handoff::testing::check(!g.expired(), "the lease ran out first"); });
    s.run_all();
  };
  {
    scheduler s;
    body(s);
    EXPECT_FALSE(s.failed());
  }
  EXPECT_TRUE(handoff::testing::explore(body).failed);
}

// Two sales of one item. The careless one reads the stock before it asks for the item's
// key and writes what it read less one in the callback; the careful one reads and writes
// in its callback. The key is free whenever it is asked for, so each callback runs inside
// its lock_async: only the scheduling point before a request can let the careful sale in
// between the careless one's read and its write.
void sales_reading_before_lock_async(scheduler& s) {
  handoff::keyed_mutex<> locks;
  int stock = 10;
  handoff::actor<int> careless{0};
  handoff::actor<int> careful{0};
  careless.post([&](int&) {
    const int seen = stock;
    locks.lock_async("item", [&stock, seen](handoff::key_guard) { stock = seen - 1; });
  });
  careful.post([&](int&) { locks.lock_async("item", [&stock](handoff::key_guard) { --stock; }); });
  s.run_all();
  handoff::testing::check(stock == 8, "stock is " + std::to_string(stock) + ", not 8");
}

TEST(TestingExplore, FindsARaceBeforeALockAsyncThatTakesAFreeKey) {
  test_timeout limit(120s);
  {
    scheduler s;
    sales_reading_before_lock_async(s);  // oldest first: the careless callback runs first
    EXPECT_FALSE(s.failed());
  }
  const auto r = handoff::testing::explore(sales_reading_before_lock_async);
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("resume actor 1: lock \"item\""), std::string::npos) << r.trace;
  EXPECT_NE(r.trace.find("failed: check failed: stock is 9, not 8"), std::string::npos) << r.trace;
  EXPECT_EQ(r.trace.find("granted"), std::string::npos) << r.trace;  // no grant events: each ran inside its call
}

TEST(TestingExplore, TakesItsSeedFromTheEnvironmentWhenSet) {
  test_timeout limit(120s);
  auto body = [](scheduler& s) { racy_counter(s); };
  const auto from_options = handoff::testing::explore(body, {.seed = 99});
  ::setenv("HANDOFF_TEST_SEED", "99", 1);
  const auto from_env = handoff::testing::explore(body, {.seed = 1234});
  ::unsetenv("HANDOFF_TEST_SEED");
  EXPECT_EQ(from_env.seed, from_options.seed);
  EXPECT_EQ(from_env.trace, from_options.trace);
}

// Sets HANDOFF_TEST_SEED for its scope.
class seed_in_environment {
 public:
  explicit seed_in_environment(const char* value) { ::setenv("HANDOFF_TEST_SEED", value, 1); }
  ~seed_in_environment() { ::unsetenv("HANDOFF_TEST_SEED"); }
  seed_in_environment(const seed_in_environment&) = delete;
  seed_in_environment& operator=(const seed_in_environment&) = delete;
};

TEST(TestingExplore, ReadsAnEnvironmentSeedInHexAsInDecimal) {
  test_timeout limit(120s);
  auto body = [](scheduler& s) { racy_counter(s); };
  const auto decimal = [&] {
    seed_in_environment env("99");
    return handoff::testing::explore(body);
  }();
  seed_in_environment env("0x63");
  const auto hex = handoff::testing::explore(body);
  EXPECT_EQ(hex.seed, decimal.seed);
  EXPECT_EQ(hex.trace, decimal.trace);
}

TEST(TestingExplore, RefusesAnEnvironmentSeedThatIsNotANumberBeforeAnyRun) {
  test_timeout limit(60s);
  for (const char* bad : {"banana", "12abc", "-1", "+1", " 7", "0x", "0xg", "18446744073709551616"}) {
    seed_in_environment env(bad);
    int ran = 0;
    try {
      (void)handoff::testing::explore([&](scheduler&) { ++ran; });
      ADD_FAILURE() << "HANDOFF_TEST_SEED=" << bad << " was taken as a seed";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("HANDOFF_TEST_SEED=\"" + std::string(bad) + "\""), std::string::npos) << what;
    }
    EXPECT_EQ(ran, 0) << bad;
  }
}

TEST(TestingExplore, RefusesZeroRunsUnlessItReplays) {
  test_timeout limit(60s);
  int ran = 0;
  auto body = [&](scheduler&) { ++ran; };
  try {
    (void)handoff::testing::explore(body, {.runs = 0});
    ADD_FAILURE() << "explore with runs = 0 returned";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("runs is 0"), std::string::npos) << e.what();
  }
  EXPECT_EQ(ran, 0);
  const auto replayed = handoff::testing::explore(body, {.runs = 0, .replay = 7});
  EXPECT_EQ(replayed.runs, 1U);
  EXPECT_EQ(ran, 1);
}

// The test holds "k" while a thread it started itself locks "k". That thread is not the
// scheduler's, so its wait cannot be an event: the lock throws at once, naming that thread
// and the key, and the run fails with the same reason. Never a deadlock blamed on the test,
// which is not waiting.
TEST(TestingExplore, RefusesAWaitOnAThreadTheTestStartedItselfNamingThatThread) {
  test_timeout limit(120s);
  std::string thread_id;
  std::string thrown;  // what the thread's lock threw
  bool logic_error = false;
  const auto r = handoff::testing::explore(
      [&](scheduler&) {
        handoff::keyed_mutex<> m;
        auto g = m.lock("k");
        std::atomic<bool> done{false};
        std::thread t([&] {
          std::ostringstream id;
          id << std::this_thread::get_id();
          thread_id = id.str();
          try {
            auto mine = m.lock("k");
          } catch (const std::exception& e) {
            thrown = e.what();
            logic_error = dynamic_cast<const std::logic_error*>(&e) != nullptr;
          }
          done = true;
        });
        // Unlock only once the thread's lock has returned or thrown (it found the key held),
        // or after 10 s (a wait that blocks for real: the checks below then fail).
        for (int i = 0; i < 10'000 && !done; ++i) std::this_thread::sleep_for(1ms);
        g.unlock();
        t.join();
      },
      {.runs = 5});
  ASSERT_FALSE(thread_id.empty());
  EXPECT_TRUE(logic_error) << thrown;
  EXPECT_NE(thrown.find("thread " + thread_id + " "), std::string::npos) << thrown;
  EXPECT_NE(thrown.find("waits in lock \"k\""), std::string::npos) << thrown;
  EXPECT_EQ(thrown.find("the test waits"), std::string::npos) << thrown;
  ASSERT_TRUE(r.failed);
  EXPECT_EQ(r.runs, 1U);
  EXPECT_NE(r.trace.find("failed: thread " + thread_id + " "), std::string::npos) << r.trace;
  EXPECT_NE(r.trace.find("waits in lock \"k\""), std::string::npos) << r.trace;
  EXPECT_EQ(r.trace.find("the test waits"), std::string::npos) << r.trace;
}

TEST(TestingExplore, FailsARunThatLeavesACallWaiting) {
  test_timeout limit(120s);
  const auto r = handoff::testing::explore(
      [](scheduler& s) {
        handoff::keyed_mutex<> m;
        handoff::actor<int> a{0};
        handoff::actor<int> b{0};
        a.post([&](int&) {
          auto g = m.lock("k");
          b.ask([](int&) { return 0; }).get();
        });
        b.post([&](int&) { auto g = m.lock("k"); });
        s.run_all();
      },
      {.runs = 20});
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("failed: deadlock"), std::string::npos) << r.trace;
}

}  // namespace
