// The timer service at the limits of its numbers: deadlines at the end of time, and
// counters driven past the width they once had.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <ctime>
#include <thread>

#include "test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;
using clock_type = std::chrono::steady_clock;

std::chrono::nanoseconds process_cpu_time() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec);
}

TEST(TimerLimits, ANeverTimerHasNoDeadlineAndNeverFires) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  auto after_max = timers.after(std::chrono::hours::max(), a, [](int& n) { ++n; });
  auto at_max = timers.at(clock_type::time_point::max(), a, [](int& n) { ++n; });
  auto every_max = timers.every(std::chrono::nanoseconds::max(), a, [](int& n) { ++n; });
  EXPECT_EQ(timers.next_deadline(), clock_type::time_point::max());
  const auto now = timers.now();
  {
    // Beside a real deadline, that one is the earliest.
    auto soon = timers.after(1s, a, [](int& n) { ++n; });
    EXPECT_GE(timers.next_deadline(), now + 1s);
    EXPECT_LT(timers.next_deadline(), now + 1h);
  }
  EXPECT_EQ(timers.run_due(now + std::chrono::years(200)), 0U);
  EXPECT_EQ(timers.next_deadline(), clock_type::time_point::max());
  EXPECT_TRUE(after_max.active());
  EXPECT_TRUE(at_max.active());
  EXPECT_TRUE(every_max.active());
  EXPECT_TRUE(after_max.rearm(std::chrono::hours::max()));
  EXPECT_EQ(timers.next_deadline(), clock_type::time_point::max());
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
}

TEST(TimerLimits, TheServiceThreadSleepsWhileOnlyANeverTimerIsPending) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  timers.start();
  auto never = timers.after(std::chrono::hours::max(), a, [](int& n) { ++n; });
  auto never_at = timers.at(clock_type::time_point::max(), a, [](int& n) { ++n; });
  // The window the thread is watched over; a thread that spins burns most of it.
  const auto cpu_before = process_cpu_time();
  std::this_thread::sleep_for(200ms);
  const auto cpu = process_cpu_time() - cpu_before;
  EXPECT_LT(cpu, 50ms) << "the service's thread spins";
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
  timers.stop();
}

}  // namespace
