// The timer service's parts driven directly: the entry pool (lib/timer/entry_pool.hpp)
// and the table of targets (lib/timer/target_table.hpp). The wheel has its own file
// (timer_wheel_test.cpp), the shards theirs (timer_shards_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <set>
#include <unordered_map>
#include <vector>

#include "../../lib/timer/entry_pool.hpp"
#include "../../lib/timer/target_table.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::detail::entry_pool;
using handoff::detail::target_table;
using handoff::detail::timer_entry;
using handoff::test::test_timeout;

TEST(TimerEntryPool, EveryEntryFindsItsOwnerAndItsIndexAcrossChunks) {
  test_timeout timeout{10s};
  int owner = 0;
  entry_pool pool(&owner);
  std::vector<timer_entry*> out;
  std::set<std::uint32_t> indices;
  for (std::uint32_t i = 0; i < 3 * entry_pool::chunk_entries + 1; ++i) {
    pool.reserve_one();
    timer_entry* e = pool.take();
    EXPECT_EQ(entry_pool::owner_of(e), &owner);
    EXPECT_EQ(pool.at(entry_pool::index_of(e)), e);
    EXPECT_TRUE(indices.insert(entry_pool::index_of(e)).second) << "an index given twice";
    out.push_back(e);
  }
  EXPECT_EQ(pool.chunks(), 4U);
  EXPECT_EQ(pool.allocated(), out.size());
  for (timer_entry* e : out) pool.give(e);
}

TEST(TimerEntryPool, AnEmptiedPoolKeepsOneSpareChunkAndReturnsTheRest) {
  test_timeout timeout{10s};
  int owner = 0;
  entry_pool pool(&owner);
  std::vector<timer_entry*> out;
  for (std::uint32_t i = 0; i < 5 * entry_pool::chunk_entries; ++i) {
    pool.reserve_one();
    out.push_back(pool.take());
  }
  EXPECT_EQ(pool.chunks(), 5U);
  std::mt19937 rng(3);
  std::shuffle(out.begin(), out.end(), rng);  // chunks empty in no order
  for (timer_entry* e : out) pool.give(e);
  EXPECT_EQ(pool.allocated(), 0U);
  EXPECT_EQ(pool.chunks(), 1U);
  // A pool swinging around a chunk's edge allocates no chunk: the spare serves it.
  for (int round = 0; round < 3; ++round) {
    std::vector<timer_entry*> again;
    for (std::uint32_t i = 0; i < entry_pool::chunk_entries + 1; ++i) {
      pool.reserve_one();
      again.push_back(pool.take());
    }
    EXPECT_EQ(pool.chunks(), 2U);
    for (timer_entry* e : again) pool.give(e);
    EXPECT_EQ(pool.chunks(), 1U);
  }
}

std::vector<timer_entry*> entries_of(entry_pool& pool, target_table& t, const void* target) {
  std::vector<timer_entry*> v;
  const target_table::slot* s = t.find(target);
  if (s == nullptr) return v;
  for (std::uint32_t i = s->head; i != target_table::none; i = pool.at(i)->target_next) v.push_back(pool.at(i));
  return v;
}

TEST(TimerTargetTable, ListsEachTargetsEntriesThroughGrowthShrinkageAndBackwardShifts) {
  test_timeout timeout{30s};
  int owner = 0;
  entry_pool pool(&owner);
  target_table table;
  std::vector<int> actors(5000);
  std::unordered_map<const void*, std::set<timer_entry*>> truth;
  std::vector<timer_entry*> live;
  std::mt19937_64 rng(11);
  auto check = [&] {
    ASSERT_EQ(table.size(), truth.size());
    for (auto& [target, want] : truth) {
      const auto got = entries_of(pool, table, target);
      ASSERT_EQ(std::set<timer_entry*>(got.begin(), got.end()), want);
    }
  };
  for (int step = 0; step < 40'000; ++step) {
    // Grow to about 3000 targets, then shrink to none: the table doubles and halves.
    const bool add = step < 20'000 ? rng() % 4 != 0 : rng() % 4 == 0;
    if (add || live.empty()) {
      pool.reserve_one();
      table.reserve_one();
      timer_entry* e = pool.take();
      e->target = &actors[rng() % (step < 20'000 ? actors.size() : 64)];
      table.add(pool, e);
      truth[e->target].insert(e);
      live.push_back(e);
    } else {
      const std::size_t i = rng() % live.size();
      timer_entry* e = live[i];
      live[i] = live.back();
      live.pop_back();
      table.remove(pool, e);
      truth[e->target].erase(e);
      if (truth[e->target].empty()) truth.erase(e->target);
      pool.give(e);
    }
    if (step % 4000 == 0) check();
  }
  check();
  while (!live.empty()) {
    table.remove(pool, live.back());
    pool.give(live.back());
    live.pop_back();
  }
  EXPECT_EQ(table.size(), 0U);
  EXPECT_LE(table.bytes(), 64 * sizeof(target_table::slot)) << "the table did not shrink back";
}

TEST(TimerTargetTable, AScheduleAfterForgettingClearsTheMark) {
  test_timeout timeout{10s};
  int owner = 0;
  entry_pool pool(&owner);
  target_table table;
  int actor = 0;
  pool.reserve_one();
  table.reserve_one();
  timer_entry* e = pool.take();
  e->target = &actor;
  table.add(pool, e);
  table.find(&actor)->forgotten = 1;
  pool.reserve_one();
  table.reserve_one();
  timer_entry* f = pool.take();
  f->target = &actor;
  table.add(pool, f);  // a new timer for an address reused by a new actor
  EXPECT_EQ(table.find(&actor)->forgotten, 0U);
  table.remove(pool, e);
  table.remove(pool, f);
  EXPECT_EQ(table.find(&actor), nullptr);
  pool.give(e);
  pool.give(f);
}

}  // namespace
