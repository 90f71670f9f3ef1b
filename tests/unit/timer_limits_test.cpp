// The timer service at the limits of its numbers: deadlines at the end of time, and
// counters driven past the width they once had.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <future>
#include <thread>

#include "../../lib/timer/timer_core.hpp"
#include "../support/test_timeout.hpp"

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

namespace {

// An actor held busy by a handler on another thread until release(): what is sent to it
// meanwhile waits in its mailbox.
struct busy_owner {
  explicit busy_owner(handoff::actor<int>& a) {
    std::promise<void> busy;
    owner = std::thread([&a, &busy, this] {
      a.post([&busy, this](int&) {
        busy.set_value();
        released.get_future().wait();
      });
    });
    busy.get_future().wait();
  }
  busy_owner(const busy_owner&) = delete;
  busy_owner& operator=(const busy_owner&) = delete;
  ~busy_owner() { release(); }
  void release() {
    if (owner.joinable()) {
      released.set_value();
      owner.join();
    }
  }
  std::promise<void> released;
  std::thread owner;
};

TEST(TimerLimits, SixtyFiveThousandDeliveriesOfOneTimerWaitingAtOnceAreAllCounted) {
  test_timeout timeout{20s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  {
    busy_owner owner{a};
    auto t = timers.after(1h, a, [](int& n) { ++n; });
    const auto past = timers.now() - 1s;
    // Each re-arm into the past fires again at once; every delivery waits behind the owner.
    // A 16-bit count of them wraps here.
    for (int i = 0; i < 65'536; ++i) {
      ASSERT_TRUE(t.rearm_at(past));
      ASSERT_EQ(timers.run_due(), 1U);
    }
    EXPECT_TRUE(t.cancel());  // the deliveries are still queued: the entry must stay theirs
    owner.release();
  }
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);  // cancelled: none ran
  // Two new timers get entries of their own and each fires once.
  const auto base = timers.now();
  auto x = timers.after(1s, a, [](int& n) { n += 1; });
  auto y = timers.after(2s, a, [](int& n) { n += 10; });
  EXPECT_EQ(timers.run_due(base + 1500ms), 1U);
  EXPECT_TRUE(y.active());
  EXPECT_EQ(timers.run_due(base + 3s), 1U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 11);
  EXPECT_EQ(timers.stats().pending, 0U);
}

}  // namespace

namespace {

TEST(TimerLimits, AQueuedDeliveryDoesNothingAfterTwoToTheThirtyTwoRearms) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  auto t = timers.after(1h, a, [](int& n) { ++n; });
  {
    busy_owner owner{a};
    ASSERT_TRUE(t.rearm_at(timers.now() - 1s));
    ASSERT_EQ(timers.run_due(), 1U);  // its delivery waits behind the owner
    // 2^32 re-arms: all but the last skipped in one step (a minute of real re-arms).
    handoff::detail::skip_generations_of_every_core((std::uint64_t{1} << 32) - 1);
    ASSERT_TRUE(t.rearm(1h));
    owner.release();
  }
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0) << "the stale delivery ran the callable an hour early";
  EXPECT_TRUE(t.active());
  EXPECT_EQ(timers.run_due(timers.now() + 2h), 1U);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 1);
}

}  // namespace
