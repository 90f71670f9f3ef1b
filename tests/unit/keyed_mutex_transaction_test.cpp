// handoff::keyed_mutex<Key>, several keys with a deadline or a lease: try_lock_all_for,
// try_lock_all_until and lock_all with a lease, one test per point of their contract in
// keyed_mutex.hpp.
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "../support/keyed_mutex_support.hpp"

namespace {

using namespace handoff::test;  // keyed_mutex_support.hpp: helpers, chrono literals, the names used

// --- try_lock_all_for / try_lock_all_until ------------------------------------------------

TEST_F(KeyedMutex, TryLockAllForTakesEveryFreeKeyInSortedOrder) {
  keyed_mutex<> m;
  handoff::multi_guard all = m.try_lock_all_for({"c", "a", "b", "a"}, 1s);
  ASSERT_TRUE(all.owns_lock());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_FALSE(free_elsewhere(m, std::string("a")));
  EXPECT_FALSE(free_elsewhere(m, std::string("c")));
  all.unlock();
  EXPECT_TRUE(free_elsewhere(m, std::string("b")));
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, TryLockAllForReturnsEmptyAndReleasesWhatItTookWhenAKeyStaysHeld) {
  keyed_mutex<> m;
  key_guard held = m.lock("c");  // the last key in sorted order: a and b are taken first
  std::thread other([&] {
    const auto start = steady::now();
    handoff::multi_guard all = m.try_lock_all_for({"a", "b", "c"}, 30ms);
    EXPECT_GE(steady::now() - start, 30ms);
    EXPECT_FALSE(all.owns_lock());
    EXPECT_EQ(all.size(), 0u);
  });
  other.join();
  // Nothing is left held: this thread takes a and b at once.
  EXPECT_TRUE(m.try_lock("a").owns_lock());
  EXPECT_TRUE(m.try_lock("b").owns_lock());
  held.unlock();  // skips the timed-out request (counted by waiting() until then)
  EXPECT_EQ(m.waiting(), 0u);
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, TryLockAllForSucceedsWhenTheKeysAreFreedBeforeTheDeadline) {
  keyed_mutex<> m;
  key_guard held = m.lock("b");
  handoff::multi_guard all;
  blocking_call waiter([&] { all = m.try_lock_all_for({"a", "b"}, 10s); });
  ASSERT_TRUE(eventually([&] { return m.waiting() == 1; }));
  held.unlock();
  waiter.join();
  EXPECT_TRUE(all.owns_lock());
  EXPECT_EQ(all.size(), 2u);
}

TEST_F(KeyedMutex, TryLockAllForWithAPassedDeadlineTriesEachKeyWithoutWaiting) {
  keyed_mutex<> m;
  EXPECT_TRUE(m.try_lock_all_for({"a", "b"}, 0s).owns_lock());
  key_guard held = m.lock("b");
  std::thread other([&] {
    const auto start = steady::now();
    EXPECT_FALSE(m.try_lock_all_for({"a", "b"}, -1s).owns_lock());
    EXPECT_LT(steady::now() - start, 5s);  // no wait (generous for sanitizer builds)
  });
  other.join();
  EXPECT_TRUE(free_elsewhere(m, std::string("a")));
}

TEST_F(KeyedMutex, TryLockAllUntilTakesOneDeadlineForAllTheKeys) {
  keyed_mutex<> m;
  key_guard held_a = m.lock("a");
  key_guard held_b = m.lock("b");
  std::thread other([&] {
    const auto start = steady::now();
    handoff::multi_guard all = m.try_lock_all_until(std::vector<std::string>{"a", "b"}, start + 40ms);
    const auto waited = steady::now() - start;
    EXPECT_FALSE(all.owns_lock());
    EXPECT_GE(waited, 40ms);
    EXPECT_LT(waited, 5s);  // a waited until the deadline; b was not tried after it
  });
  other.join();
  held_a.unlock();
  held_b.unlock();
  EXPECT_TRUE(m.try_lock_all_until({"a", "b"}, std::chrono::system_clock::now() + 1s).owns_lock());
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, TryLockAllForOnOverlappingKeysInOppositeOrdersNeverDeadlocks) {
  keyed_mutex<> m;
  constexpr int rounds = 2000;
  std::atomic<int> got{0};
  std::atomic<int> gave_up{0};
  std::int64_t counter = 0;  // guarded by holding both "x" and "y"
  auto run = [&](std::vector<std::string> keys) {
    for (int i = 0; i < rounds; ++i) {
      handoff::multi_guard g = m.try_lock_all_for(keys, 5s);
      if (!g.owns_lock()) {
        gave_up.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      ++counter;
      got.fetch_add(1, std::memory_order_relaxed);
    }
  };
  std::thread t1(run, std::vector<std::string>{"x", "y", "z"});
  std::thread t2(run, std::vector<std::string>{"z", "y", "x", "w"});
  t1.join();
  t2.join();
  // The sorted order makes every wait finite: no request ever reached its 5 s deadline.
  EXPECT_EQ(gave_up.load(), 0);
  EXPECT_EQ(got.load(), 2 * rounds);
  EXPECT_EQ(counter, 2 * rounds);
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, TryLockAllForOfAKeyThisThreadHoldsThrowsWithNothingHeld) {
  keyed_mutex<> m;
  key_guard held = m.lock("b");
  EXPECT_EQ(error_of([&] { (void)m.try_lock_all_for({"a", "b"}, 1s); }), would_deadlock);
  EXPECT_TRUE(free_elsewhere(m, std::string("a")));
}

// --- leases -------------------------------------------------------------------------------

TEST_F(KeyedMutex, LockAllWithALeaseReleasesEachKeyWhenItsLeaseRunsOut) {
  keyed_mutex<> m;
  handoff::multi_guard all = m.lock_all({"a", "b"}, lease{30ms});
  ASSERT_TRUE(all.owns_lock());
  EXPECT_EQ(all[0].lease_duration(), 30ms);
  EXPECT_EQ(all[1].lease_duration(), 30ms);
  // Another thread waits for the keys: the leases hand them over.
  std::thread other([&] { EXPECT_TRUE(m.try_lock_all_for({"b", "a"}, 10s).owns_lock()); });
  other.join();
  EXPECT_FALSE(all.owns_lock());
  EXPECT_TRUE(all[0].expired());
  EXPECT_TRUE(all[1].expired());
  all.unlock();  // a no-op for expired guards
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LockAllWithALeaseKeepsTheOtherKeysWhenOneIsExtended) {
  keyed_mutex<> m;
  handoff::multi_guard all = m.lock_all({"a", "b"}, lease{50ms});
  ASSERT_TRUE(all[1].extend(10s));  // b keeps its key; a's lease runs out alone
  ASSERT_TRUE(eventually([&] { return all[0].expired(); }));
  EXPECT_FALSE(all.owns_lock());
  EXPECT_TRUE(all[1].owns_lock());
  EXPECT_TRUE(free_elsewhere(m, std::string("a")));
  EXPECT_FALSE(free_elsewhere(m, std::string("b")));
  all.unlock();
  EXPECT_TRUE(free_elsewhere(m, std::string("b")));
}

TEST_F(KeyedMutex, TryLockAllForWithALeaseGrantsEachKeyWithIt) {
  keyed_mutex<> m;
  handoff::multi_guard all = m.try_lock_all_for(std::vector<std::string>{"a", "b"}, 1s, lease{10s});
  ASSERT_TRUE(all.owns_lock());
  EXPECT_EQ(all[0].lease_duration(), 10s);
  EXPECT_EQ(all[1].lease_duration(), 10s);
  all.unlock();
  handoff::multi_guard short_lease = m.try_lock_all_for({"b", "c"}, 1s, lease{20ms});
  ASSERT_TRUE(short_lease.owns_lock());
  EXPECT_TRUE(eventually([&] { return short_lease[0].expired() && short_lease[1].expired(); }));
  EXPECT_TRUE(free_elsewhere(m, std::string("c")));
  short_lease.unlock();
  EXPECT_EQ(m.size(), 0u);
}

}  // namespace
