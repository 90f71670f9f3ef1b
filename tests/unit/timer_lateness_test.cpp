// timer_stats::lateness and metric_wait::timer_lateness: how late a timer service sent its
// due messages, as its stats and a metrics sink see it.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/metrics.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <future>
#include <thread>
#include <vector>

#include "../support/counting_sink.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::counting_sink;
using handoff::test::test_timeout;

// 1 ns resolution: a timer is due at its deadline exactly, so a batch run `late` after it
// sends it whatever `late` (with the default 1.05 ms, one under a step may not be due yet).
constexpr handoff::timer_options exact{.resolution = std::chrono::nanoseconds(1)};

// Sends one timer `late` after its deadline: the batch runs at deadline + late.
void send_late(handoff::timer_service& timers, handoff::actor<int>& a, std::chrono::nanoseconds late) {
  const auto due = timers.now() + 1s;
  timers.at(due, a, [](int& n) { ++n; }).detach();
  ASSERT_EQ(timers.run_due(due + late), 1U);
}

TEST(TimerLateness, StatsReportTheSendTimeMinusTheDeadline) {
  test_timeout timeout{10s};
  handoff::timer_service timers(exact);
  handoff::actor<int> a{0};
  send_late(timers, a, 5ms);
  send_late(timers, a, 1ms);
  send_late(timers, a, 100ms);
  const handoff::timer_lateness l = timers.stats().lateness;
  EXPECT_EQ(l.count, 3U);
  EXPECT_EQ(l.max, 100ms);  // exact
  EXPECT_GE(l.p50, 5ms);    // the second of three, within its bucket
  EXPECT_LE(l.p50, 5ms * 5 / 4);
  EXPECT_EQ(l.p99, 100ms);  // the largest: its bucket's bound, clamped to the maximum
}

TEST(TimerLateness, QuantilesStayWithinAQuarterOfTheTrueValue) {
  test_timeout timeout{10s};
  handoff::timer_service timers(exact);
  handoff::actor<int> a{0};
  for (int i = 1; i <= 100; ++i) send_late(timers, a, i * 1ms);
  const handoff::timer_lateness l = timers.stats().lateness;
  EXPECT_EQ(l.count, 100U);
  EXPECT_GE(l.p50, 50ms);
  EXPECT_LE(l.p50, 50ms * 5 / 4);
  EXPECT_GE(l.p99, 99ms);
  EXPECT_LE(l.p99, 100ms);
  EXPECT_EQ(l.max, 100ms);
}

TEST(TimerLateness, TwoCenturiesLateIsMeasuredExactlyWithoutOverflow) {
  test_timeout timeout{10s};
  handoff::timer_service timers(exact);
  handoff::actor<int> a{0};
  const auto due = std::chrono::steady_clock::time_point(1ns);  // long past: due at once
  const auto run_at = timers.now() + std::chrono::years(200);   // near the top of int64 ns
  timers.at(due, a, [](int& n) { ++n; }).detach();
  ASSERT_EQ(timers.run_due(run_at), 1U);
  const handoff::timer_lateness l = timers.stats().lateness;
  EXPECT_EQ(l.count, 1U);
  EXPECT_EQ(l.max, run_at - due);
  EXPECT_EQ(l.p50, l.max);  // one value: its bucket's bound clamps to it
  EXPECT_EQ(l.p99, l.max);
}

TEST(TimerLateness, EachStatsCallStartsANewWindow) {
  test_timeout timeout{10s};
  handoff::timer_service timers(exact);
  handoff::actor<int> a{0};
  send_late(timers, a, 40ms);
  EXPECT_EQ(timers.stats().lateness.max, 40ms);
  const handoff::timer_lateness empty = timers.stats().lateness;
  EXPECT_EQ(empty.count, 0U);
  EXPECT_EQ(empty.max, 0ns);
  EXPECT_EQ(empty.p99, 0ns);
  send_late(timers, a, 2ms);
  EXPECT_EQ(timers.stats().lateness.max, 2ms);  // the 40 ms are in the earlier window only
}

TEST(TimerLateness, ARefusedSendIsMeasuredOnceWhenItIsAcceptedWithItsWholeDelay) {
  test_timeout timeout{10s};
  handoff::actor_options o;
  o.capacity = 1;
  o.on_full = handoff::full_policy::fail;
  handoff::actor<int> a{o, 0};
  handoff::timer_service timers(exact);
  const auto due = timers.now() + 1s;
  auto t = timers.at(due, a, [](int& n) { ++n; });
  std::promise<void> release;
  std::promise<void> busy;
  std::thread owner([&] {  // holds the actor in a handler: the first send finds it full
    a.post([&](int&) {
      busy.set_value();
      release.get_future().wait();
    });
  });
  busy.get_future().wait();
  EXPECT_EQ(timers.run_due(due + 2ms), 0U);
  release.set_value();
  owner.join();
  EXPECT_EQ(timers.run_due(due + 30ms), 1U);
  const handoff::timer_lateness l = timers.stats().lateness;
  EXPECT_EQ(l.count, 1U);
  EXPECT_EQ(l.max, 30ms);
}

TEST(TimerLateness, TheServicesOwnSinkHearsEachSend) {
  test_timeout timeout{10s};
  counting_sink sink;
  handoff::timer_service timers({.resolution = std::chrono::nanoseconds(1), .metrics = &sink});
  handoff::actor<int> a{0};
  send_late(timers, a, 7ms);
  send_late(timers, a, 3ms);
  EXPECT_EQ(sink.waits(handoff::metric_wait::timer_lateness), (std::vector<std::chrono::nanoseconds>{7ms, 3ms}));
}

TEST(TimerLateness, TheProcessWideSinkHearsAServiceWithoutItsOwn) {
  test_timeout timeout{10s};
  counting_sink sink;
  handoff::set_metrics_sink(&sink);
  {
    handoff::timer_service timers(exact);
    handoff::actor<int> a{0};
    send_late(timers, a, 9ms);
  }
  handoff::set_metrics_sink(nullptr);
  EXPECT_EQ(sink.waits(handoff::metric_wait::timer_lateness), (std::vector<std::chrono::nanoseconds>{9ms}));
}

}  // namespace
