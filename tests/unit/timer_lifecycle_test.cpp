// Starting, stopping and destroying a timer service, also from a handler the service is
// running: on its own thread, in a run_due() call and in a batch on an executor.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/thread_pool.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;

// Whether a one-shot 1 ms away runs within `limit` on a started service.
bool fires_within(handoff::timer_service& timers, handoff::actor<int>& a, std::chrono::milliseconds limit) {
  auto ran = std::make_shared<std::promise<void>>();
  auto t = timers.after(1ms, a, [ran](int&) { ran->set_value(); });
  return ran->get_future().wait_for(limit) == std::future_status::ready;
}

TEST(TimerLifecycle, StartAfterStopRunsTimersAgain) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  timers.start();
  EXPECT_TRUE(fires_within(timers, a, 2s));
  timers.stop();
  timers.start();
  EXPECT_TRUE(fires_within(timers, a, 2s));
  EXPECT_THROW(timers.start(), std::logic_error);  // running already
  timers.stop();
  handoff::thread_pool pool{1};
  timers.start(pool);
  EXPECT_TRUE(fires_within(timers, a, 2s));
  timers.stop();
}

#if defined(__linux__)
// The kernel's default timer slack would make every batch that much later.
TEST(TimerLifecycle, TheServicesThreadAsksTheKernelToWakeItWithoutTimerSlack) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  timers.start();  // an actor without an executor: its handler runs on the service's thread
  std::promise<long> slack;
  auto t = timers.after(1ms, a, [&slack](int&) { slack.set_value(prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0)); });
  EXPECT_EQ(slack.get_future().get(), 1);
  timers.stop();
}
#endif

// With start(executor) the service's thread sends each batch itself and only the actors it
// won wait for a worker: a worker that is busy elsewhere holds up no later batch.
TEST(TimerLifecycle, StartOnAnExecutorSendsLaterBatchesWhileEveryWorkerIsBusy) {
  test_timeout timeout{10s};
  handoff::thread_pool pool{1};
  std::promise<void> go;
  pool.execute([f = go.get_future().share()] { f.wait(); });  // the one worker, held
  handoff::timer_service timers;
  timers.start(pool);
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  auto t1 = timers.after(1ms, a, [](int& x) { ++x; });
  auto t2 = timers.after(20ms, b, [](int& x) { ++x; });
  (void)handoff::test::eventually([&timers] { return timers.stats().sent >= 2; }, 5s);
  EXPECT_EQ(timers.stats().sent, 2U);  // the second batch went out behind the held worker
  go.set_value();
  EXPECT_EQ(a.ask([](int& x) { return x; }).get(), 1);
  EXPECT_EQ(b.ask([](int& x) { return x; }).get(), 1);
  timers.stop();
}

TEST(TimerLifecycle, RunDueFromAHandlerThatRunDueRunsSendsWhatIsDue) {
  test_timeout timeout{5s};  // before: the nested call deadlocked on the driving mutex
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  const auto at = timers.now() + 1s;
  std::size_t nested = 99;
  auto later = timers.at(at + 1s, b, [](int& n) { ++n; });
  auto t = timers.at(at, a, [&](int&) { nested = timers.run_due(at + 2s); });
  // The handler runs after the batch (the drive is over): its run_due drives on.
  EXPECT_EQ(timers.run_due(at + 10ms), 1U);
  EXPECT_EQ(nested, 1U);
  EXPECT_EQ(b.ask([](int& n) { return n; }).get(), 1);
  EXPECT_EQ(timers.run_due(at + 3s), 0U);
}

TEST(TimerLifecycle, StopFromAHandlerOnTheServicesThreadStopsItAndItStartsAgain) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  timers.start();
  std::promise<void> stopped;
  auto t = timers.after(1ms, a, [&](int&) {
    timers.stop();  // the thread cannot join itself: it ends after this batch
    stopped.set_value();
  });
  ASSERT_EQ(stopped.get_future().wait_for(2s), std::future_status::ready);
  timers.start();
  EXPECT_TRUE(fires_within(timers, a, 2s));
  timers.stop();
}

// The service is destroyed by a handler it runs; a second timer is pending then: dropped,
// its callable destroyed, never run.
void destroy_from_a_handler(const std::function<void(handoff::timer_service&)>& drive) {
  auto timers = std::make_unique<handoff::timer_service>();
  handoff::actor<int> a{0};
  auto token = std::make_shared<int>(0);
  std::promise<void> destroyed;
  auto later = timers->after(1h, a, [token](int& n) { ++n; });
  auto t = timers->after(1ms, a, [&](int&) {
    timers.reset();
    destroyed.set_value();
  });
  drive(*timers);
  ASSERT_EQ(destroyed.get_future().wait_for(2s), std::future_status::ready);
  EXPECT_EQ(token.use_count(), 1);  // dropped with the service
  EXPECT_FALSE(later.active());
  EXPECT_FALSE(t.cancel());
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
}

TEST(TimerLifecycle, DestroyingTheServiceFromAHandlerOnItsOwnThreadDropsItsTimers) {
  test_timeout timeout{10s};
  destroy_from_a_handler([](handoff::timer_service& s) { s.start(); });
}

TEST(TimerLifecycle, DestroyingTheServiceFromAHandlerThatRunDueRunsDropsItsTimers) {
  test_timeout timeout{10s};
  destroy_from_a_handler([](handoff::timer_service& s) { (void)s.run_due(s.now() + 1s); });
}

TEST(TimerLifecycle, DestroyingTheServiceFromAHandlerInAnExecutorBatchDropsItsTimers) {
  test_timeout timeout{10s};
  handoff::thread_pool pool{1};
  destroy_from_a_handler([&](handoff::timer_service& s) { s.start(pool); });
}

}  // namespace
