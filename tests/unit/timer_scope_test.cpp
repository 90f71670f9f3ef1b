// handoff/timer_scope.hpp: a handler schedules on the program's timer service through its
// own actor, without carrying the service: the process default, a thread's scope, the
// error when there is none, and virtual time under the test scheduler.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/testing.hpp>
#include <handoff/timer_scope.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;

struct session {
  int idle_closes = 0;
  handoff::timer idle;
};

// Clears the process default at the end of a test, also when it fails.
struct default_service {
  explicit default_service(handoff::timer_service& s) { handoff::set_default_timer_service(&s); }
  ~default_service() { handoff::set_default_timer_service(nullptr); }
  default_service(const default_service&) = delete;
  default_service& operator=(const default_service&) = delete;
};

TEST(TimerScope, AHandlerSchedulesOnTheDefaultServiceThroughSelf) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  default_service d(timers);
  handoff::actor<session> a;
  const auto base = timers.now();
  a.post([](session& s, handoff::actor<session>& self) {
    s.idle = handoff::after(30s, self, [](session& x) { ++x.idle_closes; });
  });
  EXPECT_EQ(timers.stats().pending, 1U);
  EXPECT_EQ(timers.run_due(base + 29s), 0U);
  EXPECT_EQ(timers.run_due(base + 31s), 1U);
  EXPECT_EQ(a.ask([](session& s) { return s.idle_closes; }).get(), 1);
}

TEST(TimerScope, AHandlerOnAnotherThreadReachesTheDefaultServiceRunningOnItsThread) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  timers.start();
  default_service d(timers);
  handoff::actor<int> a{0};
  std::promise<std::thread::id> fired;
  std::thread sender([&] {
    a.post([&fired](int&, handoff::actor<int>& self) {
      handoff::after(1ms, self, [&fired](int&) { fired.set_value(std::this_thread::get_id()); }).detach();
    });
  });
  sender.join();
  auto f = fired.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_NE(f.get(), std::this_thread::get_id());  // sent by the service's thread
}

TEST(TimerScope, AThreadsScopeWinsOverTheDefaultAndScopesNest) {
  handoff::timer_service process_wide;
  handoff::timer_service mine;
  handoff::timer_service inner;
  default_service d(process_wide);
  EXPECT_EQ(&handoff::current_timer_service(), &process_wide);
  {
    handoff::timer_scope scope(mine);
    EXPECT_EQ(&handoff::current_timer_service(), &mine);
    {
      handoff::timer_scope nested(inner);
      EXPECT_EQ(&handoff::current_timer_service(), &inner);
    }
    EXPECT_EQ(&handoff::current_timer_service(), &mine);
    std::thread other([&] { EXPECT_EQ(&handoff::current_timer_service(), &process_wide); });  // per thread
    other.join();
  }
  EXPECT_EQ(&handoff::current_timer_service(), &process_wide);
}

TEST(TimerScope, WithoutAServiceTheCallThrowsAndSchedulesNothing) {
  handoff::actor<int> a{0};
  EXPECT_THROW((void)handoff::current_timer_service(), std::logic_error);
  EXPECT_THROW((void)handoff::after(1ms, a, [](int& n) { ++n; }), std::logic_error);
  handoff::timer_service timers;
  {
    default_service d(timers);
    auto t = handoff::every(1ms, a, [](int& n) { ++n; });
    EXPECT_EQ(timers.stats().pending, 1U);
  }
  EXPECT_THROW((void)handoff::current_timer_service(), std::logic_error);  // cleared again
  EXPECT_EQ(timers.stats().scheduled, 1U);
}

struct ping {
  int n = 0;
};
struct pinger {
  std::vector<int>* got;
  void operator()(ping p, handoff::basic_actor<ping, pinger>& self) {
    got->push_back(p.n);
    if (p.n < 3) handoff::after(10ms, self, ping{p.n + 1}).detach();
  }
};

TEST(TimerScope, ABasicActorSendsItselfAMessageLaterThroughSelf) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::timer_scope scope(timers);
  std::vector<int> got;
  handoff::basic_actor<ping, pinger> p(pinger{&got});
  const auto base = timers.now();
  p.send(ping{1});  // runs here: the handler schedules ping 2 for 10 ms from now
  EXPECT_EQ(timers.run_due(base + 5ms), 0U);
  EXPECT_EQ(timers.run_due(base + 50ms), 1U);  // ping 2 runs and schedules ping 3
  EXPECT_EQ(timers.run_due(base + 100ms), 1U);
  EXPECT_EQ(got, (std::vector<int>{1, 2, 3}));
  EXPECT_EQ(timers.stats().pending, 0U);
}

TEST(TimerScope, UnderTheTestSchedulerSelfTimersFireOnVirtualTime) {
  test_timeout timeout{10s};
  const auto wall = std::chrono::steady_clock::now();
  handoff::testing::scheduler s;
  {
    handoff::timer_service timers({.resolution = std::chrono::nanoseconds(1)});
    handoff::timer_scope scope(timers);
    std::vector<long> at;
    handoff::actor<handoff::timer> room;
    room.post([&](handoff::timer& tick, handoff::actor<handoff::timer>& self) {
      tick = handoff::every(
          50ms, self, [&](handoff::timer&) { at.push_back(static_cast<long>(s.now() / 1ms)); },
          handoff::repeat::fixed_delay);
    });
    ASSERT_TRUE(s.run_until([&] { return at.size() == 200; }));  // ten virtual seconds
    room.post([](handoff::timer& tick) { tick.cancel(); });
    s.run_all();
    ASSERT_EQ(at.size(), 200U);
    EXPECT_EQ(at.front(), 50);
    EXPECT_EQ(at.back(), 10000);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - wall, 5s);  // no real waiting
}

}  // namespace
