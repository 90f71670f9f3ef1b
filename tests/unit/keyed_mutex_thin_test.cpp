// handoff::keyed_mutex's thin keys: an uncontended key has no entry; a key inflates into
// one when contended and its stripe deflates once calm, keeping exact keys, rising tokens,
// deadlock detection and its holders' records valid across threads.
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../support/core_access.hpp"
#include "../support/keyed_mutex_support.hpp"

namespace {

using namespace handoff::test;  // keyed_mutex_support.hpp: helpers, chrono literals, the names used
using handoff::detail::lock_shard;
using handoff::detail::lock_table;
using handoff::detail::lock_table_access;

template <class Key>
std::size_t stripe_of(const Key& k) {
  return handoff::detail::mix_hash(std::hash<Key>{}(k)) >> (64 - lock_table::shard_bits);
}
// An integer key other than k on k's stripe.
std::uint64_t same_stripe_as(std::uint64_t k) {
  std::uint64_t other = k + 1;
  while (stripe_of(other) != stripe_of(k)) ++other;
  return other;
}

TEST_F(KeyedMutex, AnUncontendedKeyLeavesNoEntryInTheTableAndItsHolderCountsInSize) {
  keyed_mutex<> m;
  const lock_table& table = lock_table_access::table(m);
  for (int i = 0; i < 1000; ++i) {
    key_guard g = m.lock("player:" + std::to_string(i));
    ASSERT_EQ(m.size(), 1u);
  }
  EXPECT_EQ(table.entries(), 0u);
  key_guard g = m.lock("player:7");
  EXPECT_EQ(table.entries(), 0u);  // thin: no entry while held either
  EXPECT_EQ(m.size(), 1u);
  EXPECT_EQ(m.stats().keys, 1u);
}

// A key's entry outlives its hand-offs (no entry made and freed per hand-off); its stripe
// deflates at the deflate_after-th lock that finds it inflated with every entry idle.
TEST_F(KeyedMutex, AContendedKeyInflatesAndDeflatesOnceCalm) {
  keyed_mutex<std::uint64_t> m;
  const lock_table& table = lock_table_access::table(m);
  key_guard g = m.lock(5);
  blocking_call waiter([&] { key_guard w = m.lock(5); });
  ASSERT_TRUE(waiter.wait_until_blocked());
  EXPECT_EQ(table.entries(), 1u);  // the holder's key, with the waiter queued on it
  EXPECT_EQ(m.waiting(), 1u);
  g.unlock();
  waiter.join();
  EXPECT_EQ(table.entries(), 1u);  // idle, kept
  EXPECT_EQ(m.size(), 0u);
  for (int i = 1; i < lock_shard::deflate_after; ++i) (void)m.lock(5);
  EXPECT_EQ(table.entries(), 1u);
  key_guard again = m.lock(5);  // the deflate_after-th: deflates, then takes the word
  EXPECT_EQ(table.entries(), 0u);
  EXPECT_EQ(m.size(), 1u);
}

// A wait on a key of the stripe starts the count again: a stripe that stays contended
// keeps its entries.
TEST_F(KeyedMutex, AWaitKeepsAStripeInflated) {
  keyed_mutex<std::uint64_t> m;
  const lock_table& table = lock_table_access::table(m);
  const std::uint64_t other = same_stripe_as(5);
  const auto contend = [&] {  // two locks that find the stripe inflated (or inflate it), one waits
    key_guard g = m.lock(5);
    blocking_call waiter([&] { key_guard w = m.lock(5); });
    ASSERT_TRUE(waiter.wait_until_blocked());
    g.unlock();
    waiter.join();
  };
  contend();  // inflates
  for (int i = 0; i < lock_shard::deflate_after - 3; ++i) (void)m.lock(other);
  contend();  // the count is one short when the waiter waits
  for (int i = 0; i < lock_shard::deflate_after - 1; ++i) (void)m.lock(other);
  EXPECT_EQ(table.entries(), 2u);  // not calm yet: the wait started the count again
  (void)m.lock(other);
  EXPECT_EQ(table.entries(), 0u);
}

// Each step's token must exceed every earlier one of the key, with no other key locked
// in between (another key's churn would raise the stripe's counter by itself).
TEST_F(KeyedMutex, TokensRiseStrictlyAcrossInflationAndDeflationOfOneKey) {
  keyed_mutex<std::uint64_t> m;
  std::vector<std::uint64_t> tokens;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < lock_shard::deflate_after; ++i) tokens.push_back(m.lock(9).token());  // the entry's, then thin
    EXPECT_EQ(lock_table_access::table(m).entries(), 0u);
    key_guard g = m.lock(9);  // thin
    tokens.push_back(g.token());
    std::uint64_t waited = 0;
    blocking_call waiter([&] {
      key_guard w = m.lock(9);  // inflates, queues, is handed the key: an entry's token
      waited = w.token();
    });
    ASSERT_TRUE(waiter.wait_until_blocked());
    g.unlock();
    waiter.join();  // the stripe stays inflated, the entry idle
    tokens.push_back(waited);
  }
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]) << "step " << i;
}

TEST_F(KeyedMutex, TwoKeysOnOneStripeDoNotExcludeEachOther) {
  keyed_mutex<std::uint64_t> m;
  const std::uint64_t a = 1, b = same_stripe_as(1);
  key_guard ga = m.lock(a);
  std::thread([&] {
    key_guard gb = m.try_lock(b);  // the stripe is thin-held by a: the table tells the keys apart
    EXPECT_TRUE(gb.owns_lock());
    EXPECT_FALSE(m.try_lock(a).owns_lock());
  }).join();
  EXPECT_EQ(m.size(), 1u);
  ga.unlock();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(lock_table_access::table(m).entries(), 2u);  // idle until the stripe is calm
}

TEST_F(KeyedMutex, LockAllOfTwoKeysOnOneStripeFromTwoThreadsInOppositeOrdersNeverDeadlocks) {
  keyed_mutex<std::uint64_t> m;
  const std::uint64_t a = 3, b = same_stripe_as(3);
  long inside = 0;
  run_threads(2, [&](int t) {
    for (int i = 0; i < 2000; ++i) {
      auto all = t == 0 ? m.lock_all({a, b}) : m.lock_all({b, a});
      ++inside;  // both keys held: exclusive
    }
  });
  EXPECT_EQ(inside, 4000);
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, ABlockingRelockOfAThinHeldKeyThrowsAndLeavesItHeld) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  try {
    key_guard again = m.lock("k");
    FAIL() << "relocked";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), would_deadlock);
  }
  EXPECT_FALSE(m.try_lock("k").owns_lock());
  EXPECT_FALSE(free_elsewhere(m, std::string("k")));
  g.unlock();
  EXPECT_TRUE(free_elsewhere(m, std::string("k")));
  EXPECT_EQ(m.size(), 0u);
}

// A guard moved after its stripe inflated: the thread that handed it on waits normally.
TEST_F(KeyedMutex, MovingAnInflatedThinGuardTurnsDeadlockDetectionOff) {
  keyed_mutex<std::uint64_t> m;
  key_guard moved;
  std::atomic<bool> handed_on{false};
  bool got = false;
  bool threw = false;
  blocking_call locker([&] {
    key_guard g = m.lock(11);
    EXPECT_FALSE(free_elsewhere(m, std::uint64_t{11}));  // a try_lock elsewhere inflated it
    moved = std::move(g);
    handed_on.store(true, std::memory_order_release);
    try {
      got = m.lock(11).owns_lock();  // waits for the new owner's unlock instead of throwing
    } catch (const std::system_error&) {
      threw = true;
    }
  });
  ASSERT_TRUE(eventually([&] { return handed_on.load(std::memory_order_acquire); }));
  ASSERT_TRUE(locker.wait_until_blocked());
  moved.unlock();
  locker.join();
  EXPECT_FALSE(threw);
  EXPECT_TRUE(got);
}

TEST_F(KeyedMutex, AThinGuardOutlivesTheThreadThatLockedIt) {
  keyed_mutex<> m;
  key_guard g;
  std::thread([&] { g = m.lock("room:1"); }).join();
  for (int i = 0; i < 100; ++i) std::thread([&] { key_guard x = m.lock("room:" + std::to_string(i + 2)); }).join();
  EXPECT_TRUE(g.owns_lock());
  EXPECT_FALSE(free_elsewhere(m, std::string("room:1")));
  g.unlock();
  EXPECT_TRUE(free_elsewhere(m, std::string("room:1")));
}

TEST_F(KeyedMutex, ShortLivedThreadsLockingKeysLeaveNoRecordsBehind) {
  keyed_mutex<std::uint64_t> m;
  auto burst = [&](int threads) {
    for (int i = 0; i < threads; ++i) {
      std::thread([&m, i] {
        std::vector<key_guard> held;
        for (std::uint64_t k = 0; k < 40; ++k) held.push_back(m.lock(static_cast<std::uint64_t>(i) * 100 + k));
      }).join();
    }
  };
  burst(50);
  const std::size_t before = handoff::detail::thin_records_allocated();
  burst(1000);
  EXPECT_LE(handoff::detail::thin_records_allocated(), before + 128);  // the exiting threads gave theirs back
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, AThreadMayHoldAHundredThousandThinKeysAtOnce) {
  keyed_mutex<std::uint64_t> m;
  std::vector<key_guard> held;
  held.reserve(100000);
  for (std::uint64_t k = 0; k < 100000; ++k) held.push_back(m.lock(k));
  EXPECT_EQ(m.size(), 100000u);
  auto all = m.lock_all(std::vector<std::uint64_t>{200001, 200002, 200003});  // stripes all taken
  EXPECT_TRUE(all.owns_lock());
  EXPECT_EQ(m.size(), 100003u);
  all.unlock();
  held.clear();
  EXPECT_EQ(m.size(), 0u);
  // Idle until their stripes are calm: at most kept_idle_thin a stripe.
  EXPECT_LE(lock_table_access::table(m).entries(), lock_shard::kept_idle_thin * lock_table::shard_count());
  std::vector<std::uint64_t> keys(64);
  for (std::uint64_t k = 0; k < 64; ++k) keys[k] = k * 7;
  auto many = m.lock_all(keys);
  EXPECT_EQ(many.size(), 64u);
  EXPECT_EQ(m.size(), 64u);
}

// A trivially copyable key (thin) whose every hash collides and whose Eq throws once asked.
struct coin {
  int v;
};
struct coin_hash {
  std::size_t operator()(const coin&) const noexcept { return 42; }
};
struct coin_eq {
  bool operator()(const coin& a, const coin& b) const {
    if (a.v != b.v) throw std::runtime_error("eq");
    return true;
  }
};

TEST_F(KeyedMutex, AnEqThatThrowsWhileItsStripeInflatesLeavesTheHolderHoldingAndTheStripeUsable) {
  handoff::keyed_mutex<coin, coin_hash, coin_eq> m;
  key_guard a = m.lock(coin{1});
  std::thread([&] { EXPECT_THROW((void)m.try_lock(coin{2}), std::runtime_error); }).join();
  EXPECT_EQ(m.size(), 1u);
  EXPECT_FALSE(free_elsewhere(m, coin{1}));
  a.unlock();
  EXPECT_EQ(m.size(), 0u);
  // coin{1}'s entry stays idle (any other key's lookup would meet this Eq) until calm.
  for (int i = 0; i < lock_shard::deflate_after; ++i) (void)m.lock(coin{1});
  EXPECT_EQ(lock_table_access::table(m).entries(), 0u);
  key_guard b = m.lock(coin{2});
  EXPECT_TRUE(b.owns_lock());
}

TEST_F(KeyedMutex, KeysTooLongForARecordTakeTheTableAndStillReleaseTheirMemory) {
  keyed_mutex<> m;
  const std::string long_key(100, 'x');
  {
    key_guard g = m.lock(long_key);
    EXPECT_EQ(lock_table_access::table(m).entries(), 1u);
    EXPECT_EQ(m.size(), 1u);
  }
  EXPECT_EQ(m.size(), 0u);
  key_guard t = m.lock(std::string(23, 'y'));  // the longest thin string
  EXPECT_EQ(m.size(), 1u);
}

TEST_F(KeyedMutex, AnEmptyMutexStaysWithin32Kilobytes) {
  EXPECT_LE(sizeof(handoff::detail::lock_shard) * lock_table::shard_count(), 32u * 1024);
  EXPECT_EQ(sizeof(handoff::detail::lock_shard), 64u);
}

// --- eventual fairness: parking on a hot key's word ---------------------------------------

handoff::keyed_mutex_options eventual(std::chrono::nanoseconds fair_after) {
  handoff::keyed_mutex_options o;
  o.fairness = handoff::fairness::eventual;
  o.fair_after = fair_after;
  return o;
}
constexpr auto never_due = 60s;  // longer than any test here runs

std::uint64_t parked(keyed_mutex<std::uint64_t>& m) {
  return lock_table_access::table(m).counters().parked.load(std::memory_order_relaxed);
}

// A blocking lock of a key held thin sleeps on the stripe's word: the key makes no entry,
// the sleeper counts in waiting(), and the unlock wakes it to take the key thin.
TEST_F(KeyedMutex, UnderEventualABlockedLockParksOnTheHotKeysWordWithoutInflatingIt) {
  keyed_mutex<std::uint64_t> m(eventual(never_due));
  const lock_table& table = lock_table_access::table(m);
  key_guard g = m.lock(5);
  std::uint64_t token = 0;
  blocking_call waiter([&] { token = m.lock(5).token(); });
  ASSERT_TRUE(waiter.wait_until_blocked());
  EXPECT_EQ(table.entries(), 0u);
  EXPECT_EQ(m.waiting(), 1u);
  EXPECT_EQ(m.size(), 1u);
  g.unlock();
  waiter.join();
  EXPECT_GT(token, g.token());
  EXPECT_EQ(table.entries(), 0u);
  EXPECT_EQ(m.waiting(), 0u);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.stats().waits, 1u);
  key_guard a = m.lock(5);
  EXPECT_EQ(error_of([&] { (void)m.lock(5); }), would_deadlock);  // a relock by the holder
}

// Mutual exclusion and no lost wake-up: threads relock one key, holding it now and then
// long enough that the others park. A parker is never due (fair_after far away), so only
// unlocks wake it: a lost wake-up hangs the test (the watchdog fails it).
TEST_F(KeyedMutex, UnderEventualThreadsParkedOnAHotKeyAreAlwaysWokenAndExclusionHolds) {
  for (const int threads : {2, 3, 4}) {
    keyed_mutex<std::uint64_t> m(eventual(never_due));
    std::uint64_t count = 0;       // under the key
    std::uint64_t last_token = 0;  // under the key
    std::atomic<int> inside{0};
    std::atomic<bool> broken{false};
    constexpr int rounds = 3000;
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        for (int i = 0; i < rounds; ++i) {
          key_guard g = m.lock(7);
          if (inside.fetch_add(1, std::memory_order_relaxed) != 0 || g.token() <= last_token) broken = true;
          last_token = g.token();
          ++count;
          if ((i + t) % 64 == 0) std::this_thread::sleep_for(20us);  // the others park
          inside.fetch_sub(1, std::memory_order_relaxed);
        }
      });
    }
    for (auto& th : ts) th.join();
    EXPECT_FALSE(broken.load()) << threads << " threads";
    EXPECT_EQ(count, static_cast<std::uint64_t>(threads) * rounds);
    EXPECT_EQ(m.size(), 0u);
    EXPECT_EQ(m.waiting(), 0u);
    EXPECT_EQ(parked(m), 0u);
  }
}

// A request that cannot park (a timed one) inflates the stripe: the thread parked on the
// word is woken by it and queues in the table too, from where the unlocks reach both.
TEST_F(KeyedMutex, UnderEventualAnInflationWakesTheThreadsParkedOnTheWordIntoTheTable) {
  keyed_mutex<std::uint64_t> m(eventual(never_due));
  const lock_table& table = lock_table_access::table(m);
  key_guard g = m.lock(5);
  blocking_call parker([&] { key_guard w = m.lock(5); });
  ASSERT_TRUE(parker.wait_until_blocked());
  ASSERT_EQ(parked(m), 1u);
  blocking_call timed([&] { EXPECT_TRUE(m.try_lock_for(5, 30s).owns_lock()); });
  ASSERT_TRUE(timed.wait_until_blocked());
  EXPECT_EQ(table.entries(), 1u);
  ASSERT_TRUE(eventually([&] { return parked(m) == 0 && m.waiting() == 2; }));  // both queued
  g.unlock();
  parker.join();
  timed.join();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.waiting(), 0u);
}

// fair_after bounds a parked waiter's whole wait: once it has slept fair_after on the word
// it inflates the stripe and queues in the table, its wait counted from its first park,
// so the next unlock hands it the key (a try_lock right after finds it taken) rather
// than freeing it for whoever comes first.
TEST_F(KeyedMutex, UnderEventualAWaiterDueAfterParkingQueuesInTheTableAndTheNextUnlockHandsItTheKey) {
  keyed_mutex<std::uint64_t> m(eventual(20ms));
  const lock_table& table = lock_table_access::table(m);
  key_guard g = m.lock(9);
  std::uint64_t token = 0;
  std::atomic<bool> looked{false};
  blocking_call waiter([&] {
    const key_guard w = m.lock(9);
    token = w.token();
    EXPECT_TRUE(eventually([&] { return looked.load(); }));  // holds it until the try_lock below
  });
  ASSERT_TRUE(eventually([&] { return table.entries() == 1; }));  // due: inflated, queued
  EXPECT_EQ(parked(m), 0u);
  EXPECT_EQ(m.waiting(), 1u);
  g.unlock();
  EXPECT_FALSE(m.try_lock(9).owns_lock());
  looked = true;
  waiter.join();
  EXPECT_GT(token, g.token());
  EXPECT_EQ(m.size(), 0u);
}

}  // namespace
