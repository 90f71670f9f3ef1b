// The timer service with a timer per session: many distinct target actors, in the steady
// state and after a burst. What it allocates, what forgetting a destroyed actor visits,
// and what memory it keeps.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "../../lib/timer/timer_core.hpp"
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;

std::vector<std::unique_ptr<handoff::actor<int>>> make_actors(std::size_t n) {
  std::vector<std::unique_ptr<handoff::actor<int>>> v;
  v.reserve(n);
  for (std::size_t i = 0; i < n; ++i) v.push_back(std::make_unique<handoff::actor<int>>(0));
  return v;
}

TEST(TimerTargets, ScheduleCancelAndRearmOverAHundredThousandTargetsAllocateNothingInTheSteadyState) {
  test_timeout timeout{60s};
  constexpr std::size_t targets = 100'000;
  constexpr std::size_t pending = 10'000;
  const auto actors = make_actors(targets);
  handoff::timer_service timers;
  std::vector<handoff::timer> handles(pending);
  std::vector<long> allocations_per_round;
  std::size_t next = 0;
  for (int round = 0; round < 3; ++round) {
    const long before = handoff::test::allocations_so_far();
    for (std::size_t i = 0; i < targets; ++i) {
      handoff::timer& h = handles[i % pending];
      h.cancel();  // the timer of a target 10,000 schedules ago
      h = timers.after(1s + 1ms * static_cast<int>(i % 1000), *actors[next], [](int& n) { ++n; });
      next = (next + 7919) % targets;  // a prime stride: every target in turn, in no order
      (void)handles[(i * 31) % pending].rearm(2s);
    }
    allocations_per_round.push_back(handoff::test::allocations_so_far() - before);
  }
  EXPECT_EQ(timers.stats().pending, pending);
  EXPECT_EQ(allocations_per_round[1], 0) << "round 0: " << allocations_per_round[0];
  EXPECT_EQ(allocations_per_round[2], 0);
}

TEST(TimerTargets, ForgettingADestroyedActorVisitsOnlyItsOwnTimers) {
  test_timeout timeout{30s};
  const auto others = make_actors(1000);
  handoff::timer_service timers;
  std::vector<handoff::timer> handles;
  for (int i = 0; i < 20'000; ++i) {
    handles.push_back(
        timers.after(1s + 1ms * (i % 500), *others[static_cast<std::size_t>(i) % others.size()], [](int& n) { ++n; }));
  }
  auto doomed = std::make_unique<handoff::actor<int>>(0);
  auto own = timers.after(1s, *doomed, [](int& n) { ++n; });
  const std::uint64_t before = handoff::detail::entries_visited_by_forget();
  doomed.reset();
  const std::uint64_t visited = handoff::detail::entries_visited_by_forget() - before;
  EXPECT_GE(visited, 1U);  // its timer, looked at to cancel it and to finish it
  EXPECT_LE(visited, 2U) << "forgetting one actor looked at other actors' timers";
  EXPECT_FALSE(own.active());
  EXPECT_EQ(timers.stats().pending, 20'000U);
  EXPECT_EQ(timers.stats().cancelled, 1U);
}

TEST(TimerTargets, ForgettingADestroyedActorFinishesEachOfItsTimersAndNoOther) {
  test_timeout timeout{10s};
  const auto others = make_actors(3);
  handoff::timer_service timers;
  auto doomed = std::make_unique<handoff::actor<int>>(0);
  std::vector<handoff::timer> mine;
  std::vector<handoff::timer> theirs;
  for (int i = 0; i < 300; ++i) {  // interleaved, so that their entries share chunks
    mine.push_back(timers.after(1s + 1ms * i, *doomed, [](int& n) { ++n; }));
    theirs.push_back(timers.every(1s + 1ms * i, *others[static_cast<std::size_t>(i) % 3], [](int& n) { ++n; }));
  }
  for (int i = 0; i < 300; i += 3) (void)mine[static_cast<std::size_t>(i)].cancel();
  doomed.reset();
  for (auto& t : mine) EXPECT_FALSE(t.active());
  for (auto& t : theirs) EXPECT_TRUE(t.active());
  EXPECT_EQ(timers.stats().pending, 300U);
  EXPECT_EQ(timers.stats().cancelled, 300U);
  EXPECT_EQ(timers.run_due(timers.now() + 2s), 300U);  // theirs only
}

TEST(TimerTargets, MemoryReturnsAfterABurstWhileAPeriodicTimerLives) {
  test_timeout timeout{60s};
  const auto actors = make_actors(1000);
  handoff::timer_service timers;
  auto tick = timers.every(1h, *actors[0], [](int& n) { ++n; });
  const std::size_t idle = timers.stats().bytes;
  std::vector<handoff::timer> burst;
  burst.reserve(300'000);
  for (std::size_t i = 0; i < 300'000; ++i) {
    burst.push_back(
        timers.after(1s + 1ms * static_cast<int>(i % 5000), *actors[i % actors.size()], [](int& n) { ++n; }));
  }
  EXPECT_GT(timers.stats().bytes, idle + 20'000'000);                   // the burst's entries
  for (std::size_t i = 0; i < burst.size(); i += 2) burst[i].cancel();  // in two sweeps
  for (std::size_t i = 1; i < burst.size(); i += 2) burst[i].cancel();
  EXPECT_TRUE(tick.active());
  const std::size_t after = timers.stats().bytes;
  EXPECT_LE(after, sizeof(handoff::detail::timer_wheel) + 64 * 1024) << "idle: " << idle;
  // And the pool grows again from there.
  auto again = timers.after(1s, *actors[1], [](int& n) { ++n; });
  EXPECT_EQ(timers.stats().pending, 2U);
}

}  // namespace
