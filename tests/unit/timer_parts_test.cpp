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

// One schedule's steps on the table: reserve (the pool's entry, the target's slot), then add.
timer_entry* add_entry(entry_pool& pool, target_table& t, void* target) {
  pool.reserve_one();
  t.reserve_one(target);
  timer_entry* e = pool.take();
  e->target = target;
  t.add(pool, e);
  return e;
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
      timer_entry* e = add_entry(pool, table, &actors[rng() % (step < 20'000 ? actors.size() : 64)]);
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

TEST(TimerTargetTable, AResizeMovesAFewSlotsPerCallNotTheWholeTable) {
  test_timeout timeout{10s};
  int owner = 0;
  entry_pool pool(&owner);
  target_table table;
  std::vector<int> actors(4096);
  std::vector<timer_entry*> live;
  auto add = [&](void* target) { live.push_back(add_entry(pool, table, target)); };
  bool saw_growth = false;
  for (int& a : actors) {
    const std::size_t before = table.bytes();
    add(&a);
    if (table.bytes() > before) {
      saw_growth = true;
      // The add that starts a doubling leaves most of the old slots to later calls.
      EXPECT_TRUE(table.resizing()) << "a doubling moved every slot in one call";
    }
    ASSERT_NE(table.find(&actors[0]), nullptr);  // found in whichever array holds it
  }
  EXPECT_TRUE(saw_growth);
  for (int& a : actors) ASSERT_EQ(entries_of(pool, table, &a).size(), 1U);
  for (timer_entry* e : live) {
    table.remove(pool, e);
    pool.give(e);
  }
  EXPECT_EQ(table.size(), 0U);
  EXPECT_FALSE(table.resizing());
}

// A schedule whose payload's move runs with the lock let go: other schedules meanwhile
// may start a resize, which leaves the target's slot in the old array; settle() brings it
// over, so that add() finds it instead of making a second slot for the same actor.
TEST(TimerTargetTable, SettleKeepsOneSlotPerTargetAcrossAResizeStartedMeanwhile) {
  test_timeout timeout{10s};
  int owner = 0;
  entry_pool pool(&owner);
  target_table table;
  std::vector<int> actors(64);
  auto add = [&](void* target) { return add_entry(pool, table, target); };
  timer_entry* first = add(&actors[0]);
  pool.reserve_one();
  table.reserve_one(&actors[0]);  // the second schedule for actors[0] reserves, then lets go
  timer_entry* second = pool.take();
  std::size_t others = 1;
  while (!table.resizing()) (void)add(&actors[others++]);  // meanwhile: a doubling starts
  table.settle(&actors[0]);
  second->target = &actors[0];
  table.add(pool, second);
  EXPECT_EQ(table.size(), others);
  const auto listed = entries_of(pool, table, &actors[0]);
  EXPECT_EQ(std::set<timer_entry*>(listed.begin(), listed.end()), (std::set<timer_entry*>{first, second}));
}

TEST(TimerTargetTable, AScheduleAfterForgettingClearsTheMark) {
  test_timeout timeout{10s};
  int owner = 0;
  entry_pool pool(&owner);
  target_table table;
  int actor = 0;
  pool.reserve_one();
  table.reserve_one(&actor);
  timer_entry* e = pool.take();
  e->target = &actor;
  table.add(pool, e);
  table.find(&actor)->forgotten = 1;
  pool.reserve_one();
  table.reserve_one(&actor);
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
