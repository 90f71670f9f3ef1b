// The timer service's hierarchical timing wheel (lib/timer/wheel.hpp), driven directly:
// every entry comes out once, never before its tick, and at the first advance past it,
// across all four levels and the cascades between them.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "../../lib/timer/wheel.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::detail::timer_entry;
using handoff::detail::timer_wheel;
using handoff::test::test_timeout;

std::vector<timer_entry*> advance(timer_wheel& w, std::uint64_t to) {
  w.advance(to);
  std::vector<timer_entry*> v;
  while (timer_entry* e = w.pop_batch()) v.push_back(e);
  return v;
}

TEST(TimerWheel, EveryEntryComesOutOnceNeverEarlyAndAtTheFirstAdvancePastItsTick) {
  test_timeout timeout{10s};
  constexpr unsigned shift = 0;  // 1 ns ticks: deadlines are ticks
  timer_wheel w(0, shift);
  std::mt19937_64 rng(7);
  std::vector<timer_entry> entries(2000);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto& e = entries[i];
    e.where = timer_wheel::nowhere;
    const unsigned level = static_cast<unsigned>(i % 4);  // spread over the levels
    e.deadline = 1 + static_cast<std::int64_t>(rng() % (std::uint64_t{1} << (8 * (level + 1) - (level == 3 ? 4 : 0))));
    w.insert(&e);
  }
  std::vector<int> seen(entries.size(), 0);
  std::uint64_t now = 0;
  while (w.size() != 0) {
    const std::uint64_t next = w.next_tick();
    ASSERT_GT(next, now);
    const std::uint64_t to = now + 1 + rng() % (std::uint64_t{1} << (rng() % 20));
    for (timer_entry* e : advance(w, to)) {
      const auto t = static_cast<std::uint64_t>(e->deadline);
      EXPECT_LE(t, to) << "early";
      EXPECT_GT(t, now) << "late: due at an earlier advance";
      ++seen[static_cast<std::size_t>(e - entries.data())];
    }
    EXPECT_LE(next, to < next ? next : to);
    now = to;
  }
  for (int n : seen) EXPECT_EQ(n, 1);
}

TEST(TimerWheel, AnEntryAtEachLevelsEdgeGoesToThatLevelAndComesOutAtItsTick) {
  test_timeout timeout{10s};
  struct edge {
    std::uint64_t delta;
    std::uint8_t level;
  };
  constexpr std::uint64_t one = 1;
  for (const edge x : {edge{1, 0}, edge{255, 0}, edge{256, 1}, edge{65'535, 1}, edge{65'536, 2},
                       edge{(one << 24) - 1, 2}, edge{one << 24, 3}, edge{(one << 32) - 1, 3}, edge{one << 40, 3}}) {
    timer_wheel w(0, 0);  // 1 ns ticks: deadlines are ticks
    timer_entry e;
    e.where = timer_wheel::nowhere;
    e.deadline = static_cast<std::int64_t>(x.delta);
    w.insert(&e);
    EXPECT_EQ(e.where, x.level) << x.delta;
    EXPECT_TRUE(advance(w, x.delta - 1).empty()) << x.delta;
    EXPECT_EQ(advance(w, x.delta), std::vector<timer_entry*>{&e}) << x.delta;
  }
}

TEST(TimerWheel, NextTickIsTheEarliestDeadlineAndUnlinkRemovesAnEntry) {
  test_timeout timeout{10s};
  timer_wheel w(0, 0);
  timer_entry a, b;
  a.where = b.where = timer_wheel::nowhere;
  a.deadline = 70000;  // level 2
  b.deadline = 300;    // level 1
  w.insert(&a);
  w.insert(&b);
  EXPECT_EQ(w.next_tick(), 300U);
  w.unlink(&b);
  EXPECT_EQ(w.next_tick(), 70000U);
  EXPECT_TRUE(advance(w, 69999).empty());
  EXPECT_EQ(advance(w, 70000).size(), 1U);
  EXPECT_EQ(w.size(), 0U);
}

TEST(TimerWheel, AnEntryMovedWithinItsSlotOrToAnotherLevelComesOutAtItsNewTickOnly) {
  test_timeout timeout{10s};
  timer_wheel w(0, 0);
  std::mt19937_64 rng(11);
  std::vector<timer_entry> entries(500);
  for (auto& e : entries) {
    e.where = timer_wheel::nowhere;
    e.deadline = 1 + static_cast<std::int64_t>(rng() % 100000);
    w.insert(&e);
  }
  // Moves of every kind, between advances: by a few ticks (mostly the same slot), and
  // anywhere (another slot or level).
  std::uint64_t now = 0;
  for (int round = 0; round < 20; ++round) {
    for (auto& e : entries) {
      if (e.where == timer_wheel::nowhere) continue;
      const std::int64_t d = rng() % 2 == 0 ? e.deadline + static_cast<std::int64_t>(rng() % 8)
                                            : static_cast<std::int64_t>(now + 1 + rng() % 100000);
      w.move(&e, d);
    }
    const std::uint64_t to = now + 1 + rng() % 3000;
    for (timer_entry* e : advance(w, to)) {
      EXPECT_LE(static_cast<std::uint64_t>(e->deadline), to) << "early";
      EXPECT_GT(static_cast<std::uint64_t>(e->deadline), now) << "late: due at an earlier advance";
    }
    now = to;
  }
  for (timer_entry* e : advance(w, now + 200000)) EXPECT_GT(static_cast<std::uint64_t>(e->deadline), now);
  EXPECT_EQ(w.size(), 0U);
}

}  // namespace
