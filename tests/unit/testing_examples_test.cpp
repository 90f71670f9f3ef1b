// handoff::testing on small game-server programs, each written twice: once with a real
// bug, which explore() must find within its default run count, and once fixed, which
// must pass every run. docs/testing.md walks through them.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/testing.hpp>

#include <chrono>
#include <string>
#include <utility>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;
using handoff::testing::check;
using handoff::testing::explore;
using handoff::testing::scheduler;

// --- check-then-act between actors: two buyers race for the last item in a shop ---

struct shop {
  int stock = 1;
};

void buyers(scheduler& s, bool fixed) {
  handoff::actor<shop> store;
  handoff::actor<int> alice{0};
  handoff::actor<int> bob{0};
  for (auto* buyer : {&alice, &bob}) {
    buyer->post([&store, fixed](int& bought) {
      if (fixed) {  // check and take in one message: nothing runs in between
        bought += store.ask([](shop& s) { return s.stock > 0 ? (--s.stock, 1) : 0; }).get();
        return;
      }
      if (store.ask([](shop& s) { return s.stock; }).get() > 0) {  // bug: another buyer may take it now
        store.post([](shop& s) { --s.stock; });
        ++bought;
      }
    });
  }
  s.run_all();
  check(store.ask([](shop& s) { return s.stock; }).get() >= 0, "sold more items than the shop had");
}

TEST(TestingExamples, FindsACheckThenActRaceBetweenTwoActors) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { buyers(s, false); });
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("sold more items than the shop had"), std::string::npos) << r.trace;
}

TEST(TestingExamples, PassesEveryRunOnceTheCheckAndTheActAreOneMessage) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { buyers(s, true); });
  EXPECT_FALSE(r.failed) << r.trace;
  EXPECT_EQ(r.runs, handoff::testing::explore_options{}.runs);
}

// --- a lease that runs out during a handler: a player's gold is saved under a lease ---

struct bank {
  int gold = 100;
  int writes = 0;
};

void lease_expiry(scheduler& s, bool fixed) {
  handoff::keyed_mutex<> locks;
  bank record;
  handoff::actor<int> prices{10};
  handoff::actor<int> shop{0};
  handoff::actor<int> quest{0};
  shop.post([&, fixed](int&) {  // buys an item: gold -= price
    for (;;) {
      auto g = locks.lock("player:1", handoff::lease{2s});
      const int gold = record.gold;
      const int price = prices.ask([](int& p) { return p; }).get();  // time passes here
      if (fixed && g.expired()) continue;  // the lease ran out: somebody else may have written
      record.gold = gold - price;
      ++record.writes;
      return;
    }
  });
  quest.post([&](int&) {  // a reward: gold += 50
    auto g = locks.lock("player:1");
    record.gold += 50;
    ++record.writes;
  });
  s.run_all();
  check(record.gold == 140, "gold is " + std::to_string(record.gold) + ", not 100 - 10 + 50");
}

TEST(TestingExamples, FindsALeaseThatRunsOutDuringAHandlerThatForgotToCheckIt) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { lease_expiry(s, false); });
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("time +2000 ms"), std::string::npos) << r.trace;
  EXPECT_NE(r.trace.find("gold is 90"), std::string::npos) << r.trace;
}

TEST(TestingExamples, PassesEveryRunOnceTheHandlerChecksItsLease) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { lease_expiry(s, true); });
  EXPECT_FALSE(r.failed) << r.trace;
}

// --- lock order: a trade locks both players' keys, two trades in opposite directions ---

void trades_blocking(scheduler& s, bool fixed) {
  handoff::keyed_mutex<> locks;
  handoff::actor<int> trade1{0};
  handoff::actor<int> trade2{0};
  trade1.post([&, fixed](int&) {
    if (fixed) {
      auto both = locks.lock_all({"player:1", "player:2"});
      return;
    }
    auto a = locks.lock("player:1");
    auto b = locks.lock("player:2");
  });
  trade2.post([&, fixed](int&) {
    if (fixed) {
      auto both = locks.lock_all({"player:2", "player:1"});
      return;
    }
    auto a = locks.lock("player:2");
    auto b = locks.lock("player:1");
  });
  s.run_all();
}

TEST(TestingExamples, FindsALockOrderDeadlockBetweenBlockingLocks) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { trades_blocking(s, false); });
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("failed: deadlock"), std::string::npos) << r.trace;
}

TEST(TestingExamples, PassesEveryRunWhenBlockingTradesLockBothKeysWithLockAll) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { trades_blocking(s, true); });
  EXPECT_FALSE(r.failed) << r.trace;
}

// The async form: each trade takes its first key with lock_async, then the second from the
// first one's callback.
void trade_async(handoff::keyed_mutex<>& locks, const std::string& first, const std::string& second) {
  locks.lock_async(first, [&locks, second](handoff::key_guard g1) {
    locks.lock_async(second, [g1 = std::move(g1)](handoff::key_guard g2) { check(g2.owns_lock(), "second key"); });
  });
}

void trades_async(scheduler& s, bool fixed) {
  handoff::keyed_mutex<> locks;
  handoff::actor<int> trade1{0};
  handoff::actor<int> trade2{0};
  trade1.post([&](int&) { trade_async(locks, "player:1", "player:2"); });
  trade2.post([&, fixed](int&) {
    if (fixed) {
      trade_async(locks, "player:1", "player:2");  // one order for every trade
    } else {
      trade_async(locks, "player:2", "player:1");
    }
  });
  s.run_all();
}

TEST(TestingExamples, FindsALockOrderDeadlockBetweenAsyncLocks) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { trades_async(s, false); });
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("failed: deadlock"), std::string::npos) << r.trace;
}

TEST(TestingExamples, PassesEveryRunWhenAsyncTradesTakeTheirKeysInOneOrder) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { trades_async(s, true); });
  EXPECT_FALSE(r.failed) << r.trace;
}

// --- a lost update: two actors save one player record, reading it before an ask ---

struct player_record {
  int xp = 0;
};

void lost_update(scheduler& s, bool fixed) {
  handoff::keyed_mutex<> locks;
  player_record record;
  handoff::actor<int> rules{25};
  handoff::actor<int> combat{0};
  handoff::actor<int> crafting{0};
  for (auto* system : {&combat, &crafting}) {
    system->post([&, fixed](int&) {
      handoff::key_guard g;
      if (fixed) g = locks.lock("player:1");  // the key guards the whole read-modify-write
      const int xp = record.xp;
      const int award = rules.ask([](int& r) { return r; }).get();
      record.xp = xp + award;
    });
  }
  s.run_all();
  check(record.xp == 50, "xp is " + std::to_string(record.xp) + ", not 25 + 25");
}

TEST(TestingExamples, FindsALostUpdateToARecordWrittenWithoutItsKey) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { lost_update(s, false); });
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("xp is 25"), std::string::npos) << r.trace;
}

TEST(TestingExamples, PassesEveryRunOnceTheRecordIsWrittenUnderItsKey) {
  test_timeout limit(120s);
  const auto r = explore([](scheduler& s) { lost_update(s, true); });
  EXPECT_FALSE(r.failed) << r.trace;
}

}  // namespace
