// The clock timers add their durations to (lib/timer/deadline_clock.hpp): never below
// steady_clock, however it reads it, and only microseconds above it.
#include <gtest/gtest.h>

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

}  // namespace
