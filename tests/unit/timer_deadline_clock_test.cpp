// The clock timers add their durations to (lib/timer/deadline_clock.hpp): never below
// steady_clock, however it reads it, and only microseconds above it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../../lib/timer/deadline_clock.hpp"
#include "../support/test_timeout.hpp"
#include "handoff/detail/clock.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::detail::deadline_now;
using handoff::detail::now_ns;

struct bounds {
  std::int64_t below = 0;  // reads under steady_clock just before the call: must stay 0
  std::int64_t most_above = 0;
  std::int64_t reads = 0;
};

// Reads for `span`: deadline_now() against steady_clock read around it.
bounds read_for(std::chrono::milliseconds span) {
  bounds b;
  const std::int64_t end = now_ns() + std::chrono::nanoseconds(span).count();
  for (std::int64_t before = now_ns(); before < end; before = now_ns()) {
    const std::int64_t d = deadline_now();
    const std::int64_t after = now_ns();
    if (d < before) ++b.below;
    b.most_above = std::max(b.most_above, d - after);
    ++b.reads;
  }
  return b;
}

TEST(DeadlineClock, IsNeverBelowSteadyClockAndOnlyMicrosecondsAboveItOnEveryThread) {
  handoff::test::test_timeout timeout{20s};
  // Past the calibration and through dozens of rebases per thread, two threads at once.
  const auto span = std::chrono::milliseconds(handoff::detail::calibrate_ns / 1'000'000 * 6);
  std::vector<bounds> seen(2);
  {
    std::vector<std::jthread> threads;
    for (auto& s : seen) threads.emplace_back([&s, span] { s = read_for(span); });
  }
  for (const bounds& s : seen) {
    EXPECT_GT(s.reads, 1000);
    EXPECT_EQ(s.below, 0) << "a deadline computed from it would be early";
    // margin_ns, the rate's error over a rebase, and a thread descheduled between the
    // counter and steady_clock at a rebase: far below a timer's resolution either way.
    EXPECT_LT(s.most_above, handoff::detail::margin_ns + 200'000);
  }
  // Where the kernel's clock is the time-stamp counter, the counter is what it reads by now.
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  f >> source;
#if defined(__x86_64__)
  if (source == "tsc") {
    EXPECT_TRUE(handoff::detail::deadline_clock_fast());
  }
#endif
  RecordProperty("clock_source", source);
  RecordProperty("fast", handoff::detail::deadline_clock_fast() ? "yes" : "no");
}

// The tests below restart the process's calibration, or bend its rate, through the clock's
// test seam; they read from fresh threads (a thread keeps its base until it rebases) and
// leave a fresh calibration behind.
bool counter_is_the_clock() {
#if defined(__x86_64__)
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string source;
  f >> source;
  return source == "tsc";
#else
  return false;
#endif
}

// Reads on a fresh thread until the rate is measured (or `limit` passes).
bool calibrated_within(std::chrono::milliseconds limit) {
  bool fast = false;
  std::thread([&] {
    const std::int64_t end = now_ns() + std::chrono::nanoseconds(limit).count();
    while (!handoff::detail::deadline_clock_fast() && now_ns() < end) (void)deadline_now();
    fast = handoff::detail::deadline_clock_fast();
  }).join();
  return fast;
}

bounds read_on_a_fresh_thread(std::chrono::milliseconds span) {
  bounds b;
  std::thread([&] { b = read_for(span); }).join();
  return b;
}

struct fresh_calibration_after {
  fresh_calibration_after() = default;
  fresh_calibration_after(const fresh_calibration_after&) = delete;
  fresh_calibration_after& operator=(const fresh_calibration_after&) = delete;
  ~fresh_calibration_after() { handoff::detail::deadline_clock_reset_for_test(); }
};

TEST(DeadlineClock, APreemptionInTheFirstCalibrationSampleMakesNoDeadlineEarly) {
  handoff::test::test_timeout timeout{20s};
  if (!counter_is_the_clock()) GTEST_SKIP() << "the clock is steady_clock itself here";
  fresh_calibration_after restore;
  static std::atomic<bool> paused{false};
  paused = false;
  // The thread loses the CPU for 3 ms between the counter and steady_clock, once.
  handoff::detail::deadline_clock_reset_for_test([] {
    if (!paused.exchange(true)) std::this_thread::sleep_for(3ms);
  });
  handoff::detail::deadline_clock_start();
  EXPECT_TRUE(paused.load());
  const bounds b = read_on_a_fresh_thread(std::chrono::milliseconds(handoff::detail::calibrate_ns / 1'000'000 * 4));
  EXPECT_GT(b.reads, 1000);
  EXPECT_EQ(b.below, 0) << "a deadline computed from it would be early";
  EXPECT_TRUE(handoff::detail::deadline_clock_fast());  // measured well, not fallen back
}

TEST(DeadlineClock, ARateSlowByLessThanTheMarginCoversStaysAnUpperBound) {
  handoff::test::test_timeout timeout{20s};
  if (!counter_is_the_clock()) GTEST_SKIP() << "the clock is steady_clock itself here";
  fresh_calibration_after restore;
  ASSERT_TRUE(calibrated_within(1s));
  // Low by a quarter of what the margin covers over a rebase: the margin keeps it above.
  handoff::detail::deadline_clock_reset_for_test(
      nullptr, 1.0 - 0.25 * static_cast<double>(handoff::detail::margin_ns) / handoff::detail::rebase_ns);
  const bounds b = read_on_a_fresh_thread(20ms);
  EXPECT_GT(b.reads, 1000);
  EXPECT_EQ(b.below, 0) << "a deadline computed from it would be early";
  EXPECT_TRUE(handoff::detail::deadline_clock_fast());  // within the margin: kept
}

// A rate that is low (a calibration gone wrong) is found at the thread's next rebase,
// whether it comes a rebase period later or long after: the process falls back to
// steady_clock, and from then on no reading is early.
void a_low_rate_is_dropped(std::chrono::milliseconds between_rebases) {
  if (!counter_is_the_clock()) GTEST_SKIP() << "the clock is steady_clock itself here";
  fresh_calibration_after restore;
  ASSERT_TRUE(calibrated_within(1s));
  handoff::detail::deadline_clock_reset_for_test(nullptr, 0.9);
  ASSERT_TRUE(handoff::detail::deadline_clock_fast());
  bounds after_check;
  std::thread([&] {
    (void)deadline_now();  // the base, on the low rate
    const std::int64_t next = now_ns() + std::chrono::nanoseconds(between_rebases).count();
    while (now_ns() < next) {
    }
    (void)deadline_now();  // the rebase: its check
    after_check = read_for(5ms);
  }).join();
  EXPECT_FALSE(handoff::detail::deadline_clock_fast()) << "the low rate was kept";
  EXPECT_EQ(after_check.below, 0);
}

TEST(DeadlineClock, ALowRateIsDroppedAtTheNextRebase) {
  handoff::test::test_timeout timeout{20s};
  a_low_rate_is_dropped(std::chrono::milliseconds(handoff::detail::rebase_ns / 1'000'000 + 1));
}

TEST(DeadlineClock, ALowRateIsDroppedByAThreadWhoseRebasesAreFarApart) {
  handoff::test::test_timeout timeout{20s};
  a_low_rate_is_dropped(std::chrono::milliseconds(handoff::detail::rebase_ns / 1'000'000 * 10));
}

}  // namespace
