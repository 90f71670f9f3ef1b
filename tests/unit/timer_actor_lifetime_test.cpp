// An actor destroyed with timers pending: the service cancels them at the start of the
// actor's destructor and never touches the actor again, with handles anywhere (outside,
// or inside the actor's own State), with one service or several.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/detail/actor_destroy_hook.hpp>
#include <handoff/timer_service.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;

TEST(TimerActorLifetime, ATimerPendingForADestroyedActorIsCancelledItsCallableDestroyedAndNothingSent) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  auto token = std::make_shared<int>(0);
  auto a = std::make_unique<handoff::actor<int>>(0);
  const auto base = timers.now();
  handoff::timer t = timers.after(1s, *a, [token](int& n) { ++n; });
  auto tick = timers.every(1s, *a, [token](int& n) { ++n; });
  a.reset();
  EXPECT_EQ(token.use_count(), 1);  // both callables destroyed by the actor's destructor
  EXPECT_FALSE(t.active());
  EXPECT_FALSE(tick.active());
  EXPECT_EQ(timers.run_due(base + 10s), 0U);
  EXPECT_EQ(timers.stats().cancelled, 2U);
  EXPECT_EQ(timers.stats().pending, 0U);
  EXPECT_FALSE(t.cancel());  // the handle outlived the actor: harmless
}

struct holder {
  int ran = 0;
  handoff::timer t;  // destroyed after the actor shut down
};

TEST(TimerActorLifetime, AHandleKeptInTheActorsOwnStateIsSafeWhenTheActorGoes) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  const auto base = timers.now();
  auto a = std::make_unique<handoff::actor<holder>>();
  a->post([&](holder& s, handoff::actor<holder>& self) { s.t = timers.after(1s, self, [](holder& h) { ++h.ran; }); });
  EXPECT_EQ(timers.stats().pending, 1U);
  a.reset();
  EXPECT_EQ(timers.stats().pending, 0U);
  EXPECT_EQ(timers.run_due(base + 10s), 0U);
}

TEST(TimerActorLifetime, ATimerOfABasicActorIsNotSentAfterTheActorWasDestroyed) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  const auto base = timers.now();
  std::atomic<int> got{0};
  auto a = std::make_unique<handoff::basic_actor<int, std::function<void(int)>>>([&](int v) { got += v; });
  handoff::timer t = timers.after(1s, *a, 5);
  a.reset();
  EXPECT_EQ(timers.run_due(base + 10s), 0U);
  EXPECT_EQ(got.load(), 0);
  EXPECT_FALSE(t.active());
}

TEST(TimerActorLifetime, EveryServiceCancelsItsTimersAndAnotherActorsTimersGoOn) {
  test_timeout timeout{10s};
  handoff::timer_service one;
  handoff::timer_service two;
  handoff::actor<int> other{0};
  auto a = std::make_unique<handoff::actor<int>>(0);
  const auto base = one.now();
  auto t1 = one.after(1s, *a, [](int& n) { ++n; });
  auto t2 = two.after(1s, *a, [](int& n) { ++n; });
  auto kept = two.after(1s, other, [](int& n) { ++n; });
  a.reset();
  EXPECT_FALSE(t1.active());
  EXPECT_FALSE(t2.active());
  EXPECT_TRUE(kept.active());
  EXPECT_EQ(one.run_due(base + 10s), 0U);
  EXPECT_EQ(two.run_due(base + 10s), 1U);
  EXPECT_EQ(other.ask([](int& n) { return n; }).get(), 1);
}

// A message whose move blocks while `hold` is set: a send of it in progress on the
// service's thread stays in progress until the test lets it go.
std::atomic<bool> hold{false};
std::atomic<bool> in_send{false};
struct slow_message {
  int v = 0;
  explicit slow_message(int x) noexcept : v(x) {}
  slow_message(slow_message&& o) noexcept : v(o.v) {
    if (!hold.load()) return;
    in_send.store(true);
    while (hold.load()) std::this_thread::yield();
  }
  slow_message& operator=(slow_message&&) noexcept = default;
};

TEST(TimerActorLifetime, TheDestructorWaitsForASendOfItsTimerInProgressOnAnotherThread) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  auto a = std::make_unique<handoff::basic_actor<slow_message, std::function<void(slow_message)>>>([](slow_message) {});
  handoff::timer t = timers.after(1ms, *a, slow_message{1});
  hold = true;
  std::thread driver([&] { (void)timers.run_due(timers.now() + 1s); });
  while (!in_send.load()) std::this_thread::yield();
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    a.reset();
    destroyed = true;
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(destroyed.load());  // the send is still touching the actor
  hold = false;
  destroyer.join();
  driver.join();
  EXPECT_TRUE(destroyed.load());
}

TEST(TimerActorLifetime, AnActorWithItsHandleInItsStateGoesWhileItsTimerFiresOnTheServicesThread) {
  test_timeout timeout{20s};
  handoff::timer_service timers;
  timers.start();
  auto token = std::make_shared<int>(0);
  for (int i = 0; i < 200; ++i) {
    auto a = std::make_unique<handoff::actor<holder>>();
    a->post([&](holder& s, handoff::actor<holder>& self) {
      s.t = timers.after(std::chrono::microseconds(i % 7 * 50), self, [token](holder& h) { ++h.ran; });
    });
    if (i % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(i % 11 * 40));
    a.reset();  // before, during or after the send on the service's thread
  }
  timers.stop();
  EXPECT_EQ(token.use_count(), 1);
  EXPECT_EQ(timers.stats().pending, 0U);
}

TEST(TimerActorLifetime, NoHookIsInstalledWhileNoServiceExists) {
  test_timeout timeout{10s};
  {
    handoff::timer_service timers;
    EXPECT_NE(handoff::detail::actor_destroy_hook_fn.load(), nullptr);
  }
  EXPECT_EQ(handoff::detail::actor_destroy_hook_fn.load(), nullptr);
  EXPECT_LE(sizeof(handoff::actor<char>), 64U);
}

}  // namespace
