// handoff::timer_service on the real clock: ticked by the test (run_due at chosen
// instants), on its own thread, on a thread_pool, and on an Asio io_context.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/thread_pool.hpp>
#include <handoff/timer_service.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>
#include <utility>  // before Asio: GCC 12 in C++20 mode needs std::exchange declared first
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;
using clock_type = std::chrono::steady_clock;

TEST(TimerService, AOneShotIsNotSentBeforeItsDeadlineAndIsSentOnceAfterIt) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  const auto base = timers.now();
  auto t = timers.after(10s, a, [](int& n) { ++n; });
  EXPECT_EQ(timers.run_due(base + 9999ms), 0U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
  EXPECT_EQ(timers.run_due(base + 10s + 50ms), 1U);  // the handler ran inline, on this thread
  EXPECT_EQ(timers.run_due(base + 60s), 0U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 1);
  EXPECT_FALSE(t.active());
  EXPECT_FALSE(t.cancel());  // after it ran: harmless
  EXPECT_FALSE(t.cancel());  // twice, on an empty handle
}

TEST(TimerService, AtATimePointAndFromAHandlerToItsOwnActor) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<std::vector<int>> a;
  handoff::timer self_timer;
  const auto base = timers.now();
  auto t = timers.at(base + 2s, a, [&](std::vector<int>& v, handoff::actor<std::vector<int>>& self) {
    v.push_back(1);
    self_timer = timers.after(1s, self, [](std::vector<int>& w) { w.push_back(2); });
  });
  EXPECT_EQ(timers.run_due(base + 1s), 0U);
  EXPECT_EQ(timers.run_due(base + 2s + 10ms), 1U);
  EXPECT_TRUE(self_timer.active());
  EXPECT_EQ(timers.run_due(base + 4s), 1U);
  EXPECT_EQ(a.ask([](std::vector<int>& v) { return v; }).get(), (std::vector<int>{1, 2}));
}

TEST(TimerService, CancelBeforeItFiresStopsItAndIsCounted) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  const auto base = timers.now();
  auto t = timers.after(1s, a, [](int& n) { ++n; });
  EXPECT_TRUE(t.active());
  EXPECT_TRUE(t.cancel());
  EXPECT_FALSE(t.cancel());
  EXPECT_EQ(timers.run_due(base + 5s), 0U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
  EXPECT_EQ(timers.stats().cancelled, 1U);
  EXPECT_EQ(timers.stats().pending, 0U);
  {
    auto dropped = timers.after(1s, a, [](int& n) { ++n; });  // a handle let go cancels
  }
  EXPECT_EQ(timers.run_due(base + 10s), 0U);
  EXPECT_EQ(timers.stats().cancelled, 2U);
}

TEST(TimerService, RearmPushesTheDeadlineOut) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  const auto base = timers.now();
  auto idle = timers.after(10s, a, [](int& n) { ++n; });
  EXPECT_TRUE(idle.rearm(20s));  // a message from the player: 20 s from now
  EXPECT_EQ(timers.run_due(base + 15s), 0U);
  EXPECT_TRUE(idle.rearm_at(base + 30s));
  EXPECT_EQ(timers.run_due(base + 29s), 0U);
  EXPECT_EQ(timers.run_due(base + 30s + 10ms), 1U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 1);
  EXPECT_FALSE(idle.rearm(1s));  // over: a new timer is needed
}

TEST(TimerService, ABasicActorGetsItsMessage) {
  test_timeout timeout{10s};
  struct sum {
    long total = 0;
    void operator()(long v) { total += v; }
  };
  handoff::timer_service timers;
  handoff::basic_actor<long, sum> a;
  std::atomic<long> seen{0};
  const auto base = timers.now();
  auto t = timers.after(1s, a, 5L);
  auto u = timers.after(2s, a, 7L);
  EXPECT_TRUE(u.cancel());
  EXPECT_EQ(timers.run_due(base + 3s), 1U);
  EXPECT_FALSE(t.cancel());  // sent: over
  EXPECT_EQ(timers.stats().sent, 1U);
  (void)seen;
}

TEST(TimerService, ALargeCallableIsStoredOnTheHeapAndFreed) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  auto token = std::make_shared<int>(7);
  std::array<long, 8> big{};
  auto t = timers.after(1s, a, [token, big](int& n) { n += *token + static_cast<int>(big[0]); });
  EXPECT_EQ(token.use_count(), 2);
  EXPECT_TRUE(t.cancel());
  EXPECT_EQ(token.use_count(), 1);  // destroyed at cancel, not at the service's end
}

TEST(TimerService, CancelRacingTheDriverOnAnotherThreadSendsOrStopsEachTimerExactlyOnce) {
  test_timeout timeout{20s};
  constexpr int timers_count = 2000;
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  std::vector<handoff::timer> handles;
  handles.reserve(timers_count);
  for (int i = 0; i < timers_count; ++i) handles.push_back(timers.after(1ms * (i % 8), a, [](int& n) { ++n; }));
  std::atomic<bool> done{false};
  std::thread driver([&] {
    while (!done.load()) (void)timers.run_due(timers.now() + 10ms);
  });
  int stopped = 0;
  for (auto& h : handles) stopped += h.cancel() ? 1 : 0;
  done = true;
  driver.join();
  const int ran = a.ask([](int& n) { return n; }).get();
  EXPECT_EQ(ran + stopped, timers_count);
  EXPECT_EQ(timers.stats().pending, 0U);
}

TEST(TimerService, AFullBoundedMailboxIsRetriedOnTheNextRunAndCounted) {
  test_timeout timeout{10s};
  handoff::actor_options o;
  o.capacity = 1;
  o.on_full = handoff::full_policy::fail;
  handoff::actor<int> a{o, 0};
  handoff::timer_service timers;
  const auto base = timers.now();
  auto t = timers.after(1s, a, [](int& n) { n += 10; });
  std::promise<void> release;
  std::promise<void> busy;
  std::thread owner([&] {  // holds the actor in a handler: the next send finds it full
    a.post([&](int&) {
      busy.set_value();
      release.get_future().wait();
    });
  });
  busy.get_future().wait();  // the running message takes the one slot
  EXPECT_EQ(timers.run_due(base + 2s), 0U);
  EXPECT_EQ(timers.stats().retried, 1U);
  EXPECT_TRUE(t.active());
  release.set_value();
  owner.join();
  EXPECT_EQ(timers.run_due(base + 3s), 1U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 10);
}

TEST(TimerService, HandlesDestroyedBeforeTheirActorNeverLetTheServiceTouchIt) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  const auto base = timers.now();
  {
    struct player {
      handoff::actor<int> session{0};
      handoff::timer idle;  // declared after: destroyed first, which cancels
    };
    auto p = std::make_unique<player>();
    p->idle = timers.after(1s, p->session, [](int& n) { ++n; });
    p.reset();
  }
  EXPECT_EQ(timers.run_due(base + 5s), 0U);  // nothing left to touch the freed actor (ASan)
  EXPECT_EQ(timers.stats().pending, 0U);
}

TEST(TimerService, DestroyingTheServiceDropsPendingTimersAndTheirCallables) {
  test_timeout timeout{10s};
  handoff::actor<int> a{0};
  auto token = std::make_shared<int>(1);
  handoff::timer kept;
  {
    handoff::timer_service timers;
    kept = timers.after(1s, a, [token](int& n) { n += *token; });
    auto detached = timers.every(1s, a, [token](int& n) { n += *token; });
    detached.detach();
    EXPECT_EQ(token.use_count(), 3);
  }
  EXPECT_EQ(token.use_count(), 1);  // destroyed with the service, never sent
  EXPECT_FALSE(kept.active());      // the handle outlives the service safely
  EXPECT_FALSE(kept.cancel());
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
}

TEST(TimerService, ItsOwnThreadSendsAtTheDeadlineNeverBefore) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<int> a{0};
  std::promise<clock_type::time_point> fired;
  const auto scheduled = clock_type::now();
  auto t = timers.after(20ms, a, [&](int&) { fired.set_value(clock_type::now()); });
  const auto at = fired.get_future().get();
  EXPECT_GE(at - scheduled, 20ms);
  EXPECT_LT(at - scheduled, 2s);
  timers.stop();
}

TEST(TimerService, OnAThreadPoolTheBatchIsSentByAPoolWorker) {
  test_timeout timeout{10s};
  handoff::thread_pool pool{1};
  handoff::timer_service timers;
  timers.start(pool);
  handoff::actor<int> a{0};
  std::promise<std::thread::id> ran_on;
  auto t = timers.after(5ms, a, [&](int&) { ran_on.set_value(std::this_thread::get_id()); });
  const auto id = ran_on.get_future().get();
  EXPECT_NE(id, std::this_thread::get_id());
  timers.stop();
}

TEST(TimerService, AnAsioIoContextDrivesItThroughNextDeadlineAndTheWakeup) {
  test_timeout timeout{10s};
  boost::asio::io_context io;
  handoff::timer_service timers;
  boost::asio::steady_timer wait{io};
  std::function<void()> arm = [&] {
    wait.expires_at(timers.next_deadline());
    wait.async_wait([&](boost::system::error_code ec) {
      if (ec) return;  // re-armed earlier: the new wait takes over
      (void)timers.run_due();
      arm();
    });
  };
  struct wake {
    boost::asio::io_context* io;
    std::function<void()>* arm;
  } w{&io, &arm};
  timers.set_wakeup({[](void* p) noexcept {
                       auto* x = static_cast<wake*>(p);
                       boost::asio::post(*x->io, [arm = x->arm] { (*arm)(); });
                     },
                     &w});
  handoff::actor<int> a{0};
  int fired = 0;
  const auto start = clock_type::now();
  auto late = timers.after(1h, a, [&](int&) { fired += 100; });
  boost::asio::post(io, arm);
  auto soon = timers.after(10ms, a, [&](int&) {
    ++fired;
    io.stop();
  });
  io.run_for(5s);
  EXPECT_EQ(fired, 1);
  EXPECT_GE(clock_type::now() - start, 10ms);
}

}  // namespace

namespace {

TEST(TimerService, ATimerCancelledByAHandlerOfTheSameBatchDoesNotRun) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  const auto at = timers.now() + 1s;
  handoff::timer x;
  handoff::timer y;
  // Both due in one run, both sent before either runs (after the batch, on this thread);
  // whichever runs first cancels the other, whose delivery then does nothing.
  x = timers.at(at, a, [&](int& n) {
    ++n;
    y.cancel();
  });
  y = timers.at(at, a, [&](int& n) {
    ++n;
    x.cancel();
  });
  EXPECT_EQ(timers.run_due(at + 1s), 2U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 1);
  EXPECT_EQ(timers.stats().pending, 0U);
}

}  // namespace

namespace {

TEST(TimerService, AFixedRateTimerStaysOnItsScheduleGridWhenItFiresLate) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  const auto lo = timers.now();
  auto t = timers.every(1s, a, [](int& n) { ++n; });
  const auto hi = timers.now() + 1ms;  // the first tick lies in [lo + 1s, hi + 1s + a step]
  const auto slack = 20ms;             // a resolution step (1.05 ms) and the clock's margin, well inside
  EXPECT_EQ(timers.run_due(lo + 1s - 1ms), 0U);
  EXPECT_EQ(timers.run_due(lo + 1s + 300ms), 1U);  // late by 300 ms
  // The next tick is a period after the first one's deadline, not after it fired.
  EXPECT_EQ(timers.run_due(lo + 2s - 1ms), 0U);
  EXPECT_EQ(timers.run_due(hi + 2s + slack), 1U);
  // Late by 2.5 periods: one tick now, the missed ones skipped, the grid kept.
  EXPECT_EQ(timers.run_due(lo + 5s + 500ms), 1U);
  EXPECT_EQ(timers.stats().skipped, 2U);
  EXPECT_EQ(timers.run_due(lo + 6s - 1ms), 0U);
  EXPECT_EQ(timers.run_due(hi + 6s + slack), 1U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 4);
}

}  // namespace
