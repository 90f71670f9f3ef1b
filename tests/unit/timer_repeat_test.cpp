// Periodic timers outside the test scheduler: on the service's own thread and in a loop
// that calls run_due(), where an idle actor runs each tick inline, inside the driver's send.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;
using clock_type = std::chrono::steady_clock;

// Ticks counted by the handler, awaited by the test with a limit: a timer that stopped
// ticking fails the expectation instead of hanging.
class tick_counter {
 public:
  void tick() {
    {
      std::lock_guard g(m_);
      ++ticks_;
    }
    cv_.notify_all();
  }
  int wait_for(int n, std::chrono::milliseconds limit) {
    std::unique_lock g(m_);
    cv_.wait_for(g, limit, [&] { return ticks_ >= n; });
    return ticks_;
  }
  int count() {
    std::lock_guard g(m_);
    return ticks_;
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int ticks_ = 0;
};

TEST(TimerRepeat, AFixedDelayTimerOnAnIdleActorKeepsTickingOnTheServiceThread) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<int> a{0};
  tick_counter ticks;
  auto t = timers.every(
      1ms, a, [&](int&) { ticks.tick(); }, handoff::repeat::fixed_delay);
  EXPECT_GE(ticks.wait_for(5, 2s), 5);
  EXPECT_TRUE(t.active());
  EXPECT_TRUE(t.cancel());
  timers.stop();
}

TEST(TimerRepeat, AFixedDelayTimerOnAnIdleActorKeepsTickingInARunDueLoop) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  tick_counter ticks;
  auto t = timers.every(
      1ms, a, [&](int&) { ticks.tick(); }, handoff::repeat::fixed_delay);
  const auto limit = clock_type::now() + 2s;
  while (ticks.count() < 5 && clock_type::now() < limit) {
    (void)timers.run_due();  // the idle actor runs the tick here, inside the send
    std::this_thread::sleep_until(std::min(timers.next_deadline(), clock_type::now() + 5ms));  // the loop's wait
  }
  EXPECT_GE(ticks.count(), 5);
  EXPECT_TRUE(t.active());
}

}  // namespace
