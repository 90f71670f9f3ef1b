// The timer service's shards (lib/timer/timer_shard.hpp): threads schedule into shards of
// their own, and one driver, a cancel from any thread, an actor's destruction and the
// service's destruction each reach every shard.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "../../lib/timer/timer_core.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;

// A timer scheduled on a new thread: in that thread's shard.
handoff::timer after_on_new_thread(handoff::timer_service& s, std::chrono::nanoseconds d, handoff::actor<int>& a) {
  handoff::timer t;
  std::thread([&] { t = s.after(d, a, [](int& n) { ++n; }); }).join();
  return t;
}

int value_of(handoff::actor<int>& a) {
  return a.ask([](int& n) { return n; }).get();
}

TEST(TimerShards, ThreadsScheduleIntoShardsOfTheirOwn) {
  test_timeout timeout{10s};
  handoff::actor<int> a(0);
  const std::size_t before = handoff::detail::shards_of_every_core();
  handoff::timer_service s;
  auto t1 = after_on_new_thread(s, 1h, a);
  auto t2 = after_on_new_thread(s, 1h, a);
  EXPECT_EQ(handoff::detail::shards_of_every_core() - before, 2U);
  EXPECT_EQ(s.stats().pending, 2U);
  EXPECT_EQ(s.stats().scheduled, 2U);
}

TEST(TimerShards, OneDriverSendsWhatIsDueInEveryShard) {
  test_timeout timeout{10s};
  handoff::actor<int> a(0);
  handoff::timer_service s;
  std::vector<handoff::timer> timers;
  for (int i = 0; i < 4; ++i) timers.push_back(after_on_new_thread(s, 1ms * (i + 1), a));
  EXPECT_EQ(s.run_due(s.now() + 10ms), 4U);
  EXPECT_EQ(value_of(a), 4);
  EXPECT_EQ(s.stats().sent, 4U);
}

TEST(TimerShards, AShardMadeLaterFiresAtItsDeadlineNotBefore) {
  test_timeout timeout{10s};
  handoff::actor<int> a(0);
  handoff::timer_service s;
  const auto early = s.after(1h, a, [](int& n) { ++n; });  // this thread's shard, made now
  std::this_thread::sleep_for(5ms);                        // time moves on before the next shard
  auto later = after_on_new_thread(s, 50ms, a);
  EXPECT_EQ(s.next_deadline() > s.now() + 40ms, true);
  EXPECT_EQ(s.run_due(s.now() + 40ms), 0U);
  EXPECT_EQ(s.run_due(s.now() + 60ms), 1U);
  EXPECT_EQ(value_of(a), 1);
}

TEST(TimerShards, ACancelOnAnotherThreadStopsATimerOfAnyShard) {
  test_timeout timeout{10s};
  handoff::actor<int> a(0);
  handoff::timer_service s;
  auto t = after_on_new_thread(s, 1ms, a);
  EXPECT_TRUE(t.rearm(2ms));
  EXPECT_TRUE(t.cancel());
  EXPECT_EQ(s.run_due(s.now() + 10ms), 0U);
  EXPECT_EQ(s.stats().cancelled, 1U);
}

TEST(TimerShards, DestroyingAnActorCancelsItsTimersInEveryShard) {
  test_timeout timeout{10s};
  auto doomed = std::make_unique<handoff::actor<int>>(0);
  handoff::actor<int> other(0);
  handoff::timer_service s;
  auto mine1 = after_on_new_thread(s, 1ms, *doomed);
  auto mine2 = after_on_new_thread(s, 1ms, *doomed);
  auto mine3 = s.after(1ms, *doomed, [](int& n) { ++n; });
  auto theirs = after_on_new_thread(s, 1ms, other);
  doomed.reset();
  EXPECT_FALSE(mine1.active());
  EXPECT_FALSE(mine2.active());
  EXPECT_FALSE(mine3.active());
  EXPECT_TRUE(theirs.active());
  EXPECT_EQ(s.run_due(s.now() + 10ms), 1U);
  EXPECT_EQ(value_of(other), 1);
}

TEST(TimerShards, DestroyingTheServiceDropsTheTimersOfEveryShard) {
  test_timeout timeout{10s};
  handoff::actor<int> a(0);
  auto s = std::make_unique<handoff::timer_service>();
  auto t1 = after_on_new_thread(*s, 1h, a);
  auto t2 = after_on_new_thread(*s, 1h, a);
  auto t3 = s->after(1h, a, [](int& n) { ++n; });
  s.reset();
  EXPECT_FALSE(t1.active());
  EXPECT_FALSE(t2.active());
  EXPECT_FALSE(t3.cancel());
  EXPECT_FALSE(t1.rearm(1ms));
}

// A callable whose move constructor reads the service's counts, which takes every shard's
// lock: under the lock it would spin forever.
struct reads_stats_when_moved {
  handoff::timer_service* s;
  int* moves;
  reads_stats_when_moved(handoff::timer_service* svc, int* m) noexcept : s(svc), moves(m) {}
  reads_stats_when_moved(reads_stats_when_moved&& o) noexcept : s(o.s), moves(o.moves) {
    (void)s->stats();
    ++*moves;
  }
  reads_stats_when_moved(const reads_stats_when_moved&) = delete;
  reads_stats_when_moved& operator=(const reads_stats_when_moved&) = delete;
  reads_stats_when_moved& operator=(reads_stats_when_moved&&) = delete;
  ~reads_stats_when_moved() = default;
  void operator()(int& n) const { ++n; }
};

TEST(TimerShards, APayloadsMoveConstructorRunsWithNoLockHeld) {
  test_timeout timeout{10s};
  handoff::actor<int> a(0);
  handoff::timer_service s;
  int moves = 0;
  auto t = s.after(1ms, a, reads_stats_when_moved{&s, &moves});
  EXPECT_GE(moves, 1);
  EXPECT_EQ(s.run_due(s.now() + 10ms), 1U);
  EXPECT_EQ(value_of(a), 1);
}

}  // namespace
