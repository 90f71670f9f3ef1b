// handoff::keyed_mutex<Key>, acquiring (lock, try_lock, try_lock_for/until), the guard, mutual exclusion and
// visibility, fencing tokens: one test per point of the contract in keyed_mutex.hpp.
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../support/keyed_mutex_support.hpp"

namespace {

using namespace handoff::test;  // keyed_mutex_support.hpp: helpers, chrono literals, the names used

// --- acquiring --------------------------------------------------------------------------

TEST_F(KeyedMutex, LockOnAFreeKeyReturnsAnOwningGuardWithAToken) {
  keyed_mutex<> m;
  key_guard g = m.lock("player:42");
  EXPECT_TRUE(g.owns_lock());
  EXPECT_TRUE(static_cast<bool>(g));
  EXPECT_GT(g.token(), 0u);
  EXPECT_FALSE(g.expired());
  EXPECT_NO_THROW(g.check());
  EXPECT_EQ(g.lease_duration(), 0ns);
  EXPECT_FALSE(free_elsewhere(m, std::string("player:42")));
  EXPECT_TRUE(free_elsewhere(m, std::string("player:43")));  // other keys are independent
}

TEST_F(KeyedMutex, TryLockAcquiresAFreeKeyAndFailsAtOnceOnAHeldOne) {
  keyed_mutex<> m;
  key_guard g = m.try_lock("k");
  ASSERT_TRUE(g.owns_lock());
  std::thread([&] {
    const auto start = steady::now();
    key_guard g2 = m.try_lock("k");
    EXPECT_FALSE(g2.owns_lock());
    EXPECT_FALSE(static_cast<bool>(g2));
    EXPECT_EQ(g2.token(), 0u);
    EXPECT_LT(steady::now() - start, 1s);
  }).join();
  g.unlock();
  EXPECT_TRUE(m.try_lock("k").owns_lock());
}

TEST_F(KeyedMutex, TryLockForWaitsForTheHolderToUnlock) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  blocking_call waiter([&] {
    key_guard w = m.try_lock_for("k", 10s);
    EXPECT_TRUE(w.owns_lock());
  });
  ASSERT_TRUE(waiter.wait_until_blocked());
  g.unlock();
  waiter.join();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, TryLockForGivesUpAfterItsWaitTimeWithoutOwning) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  std::thread([&] {
    const auto start = steady::now();
    key_guard w = m.try_lock_for("k", 100ms);
    EXPECT_FALSE(w.owns_lock());
    EXPECT_GE(steady::now() - start, 100ms);
  }).join();
  EXPECT_TRUE(g.owns_lock());
}

TEST_F(KeyedMutex, TryLockForWithAZeroOrNegativeWaitBehavesLikeTryLock) {
  keyed_mutex<> m;
  {
    key_guard g = m.try_lock_for("free", 0ms);
    EXPECT_TRUE(g.owns_lock());
  }
  {
    key_guard g = m.try_lock_for("free", -5s);
    EXPECT_TRUE(g.owns_lock());
  }
  key_guard held = m.lock("k");
  // On a key this thread holds: fails like try_lock, no deadlock error.
  EXPECT_FALSE(m.try_lock_for("k", 0s).owns_lock());
  EXPECT_FALSE(m.try_lock_for("k", -1h).owns_lock());
  EXPECT_FALSE(m.try_lock_until("k", steady::now() - 1s).owns_lock());
  std::thread([&] {
    const auto start = steady::now();
    EXPECT_FALSE(m.try_lock_for("k", 0ms).owns_lock());
    EXPECT_FALSE(m.try_lock_for("k", -3s).owns_lock());
    EXPECT_FALSE(m.try_lock_until("k", std::chrono::system_clock::now() - 1s).owns_lock());
    EXPECT_LT(steady::now() - start, 1s);
  }).join();
  EXPECT_EQ(m.size(), 1u);  // nothing was left queued
}

TEST_F(KeyedMutex, TryLockUntilAcceptsSteadyAndSystemClockDeadlines) {
  keyed_mutex<> m;
  EXPECT_TRUE(m.try_lock_until("a", steady::now() + 1s).owns_lock());
  EXPECT_TRUE(m.try_lock_until("a", std::chrono::system_clock::now() + 1s).owns_lock());
  key_guard g = m.lock("k");
  std::thread([&] {
    auto start = steady::now();
    EXPECT_FALSE(m.try_lock_until("k", steady::now() + 100ms).owns_lock());
    EXPECT_GE(steady::now() - start, 100ms);
    start = steady::now();
    // The system_clock deadline is converted to a wait from now: allow the conversion's
    // few microseconds.
    EXPECT_FALSE(m.try_lock_until("k", std::chrono::system_clock::now() + 100ms).owns_lock());
    EXPECT_GE(steady::now() - start, 90ms);
  }).join();
  blocking_call waiter([&] { EXPECT_TRUE(m.try_lock_until("k", std::chrono::system_clock::now() + 10s).owns_lock()); });
  ASSERT_TRUE(waiter.wait_until_blocked());
  g.unlock();
  waiter.join();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, TryLockForWithAnUnboundedOrFractionalWaitTimeWaitsForTheGrant) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  std::thread([&] {
    const auto start = steady::now();
    EXPECT_FALSE(m.try_lock_for("k", std::chrono::duration<double, std::milli>(50.5)).owns_lock());
    EXPECT_GE(steady::now() - start, 50ms);
  }).join();
  // Waits so long that "now + wait" overflows must wait, not fail at once.
  for (int round = 0; round < 3; ++round) {
    blocking_call waiter([&] {
      key_guard w = round == 0   ? m.try_lock_for("k", std::chrono::hours::max())
                    : round == 1 ? m.try_lock_for("k", std::chrono::nanoseconds::max())
                                 : m.try_lock_until("k", steady::time_point::max());
      EXPECT_TRUE(w.owns_lock()) << "round " << round;
    });
    ASSERT_TRUE(waiter.wait_until_blocked()) << "round " << round;
    g.unlock();
    waiter.join();
    g = m.lock("k");
  }
}

// --- the guard --------------------------------------------------------------------------

TEST_F(KeyedMutex, DefaultConstructedGuardOwnsNothing) {
  key_guard g;
  EXPECT_FALSE(g.owns_lock());
  EXPECT_FALSE(static_cast<bool>(g));
  EXPECT_EQ(g.token(), 0u);
  EXPECT_FALSE(g.expired());
  EXPECT_THROW(g.check(), handoff::lock_expired);
  g.unlock();  // no-op
  EXPECT_FALSE(g.owns_lock());
}

TEST_F(KeyedMutex, MoveConstructionTransfersTheHoldAndTheMovedFromGuardsUnlockDoesNothing) {
  keyed_mutex<> m;
  key_guard a = m.lock("k");
  const std::uint64_t token = a.token();
  key_guard b(std::move(a));
  EXPECT_FALSE(a.owns_lock());  // NOLINT(bugprone-use-after-move): the moved-from state is specified
  EXPECT_TRUE(b.owns_lock());
  EXPECT_EQ(b.token(), token);
  a.unlock();                                         // NOLINT(bugprone-use-after-move)
  EXPECT_FALSE(free_elsewhere(m, std::string("k")));  // still held, by b
  b.unlock();
  EXPECT_TRUE(free_elsewhere(m, std::string("k")));
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, MoveAssignmentOverAHeldGuardReleasesItsKeyAndTakesTheOther) {
  keyed_mutex<> m;
  key_guard a = m.lock("a");
  key_guard b = m.lock("b");
  const std::uint64_t b_token = b.token();
  a = std::move(b);
  EXPECT_TRUE(free_elsewhere(m, std::string("a")));   // a's old key was released
  EXPECT_FALSE(free_elsewhere(m, std::string("b")));  // now held through a
  EXPECT_TRUE(a.owns_lock());
  EXPECT_EQ(a.token(), b_token);
  EXPECT_FALSE(b.owns_lock());  // NOLINT(bugprone-use-after-move)
  b.unlock();                   // NOLINT(bugprone-use-after-move): no-op
  EXPECT_FALSE(free_elsewhere(m, std::string("b")));
  key_guard empty;
  a = std::move(empty);  // assigning an empty guard releases too
  EXPECT_TRUE(free_elsewhere(m, std::string("b")));
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, UnlockingTwiceDoesNotReleaseTheNextHoldersKey) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  g.unlock();
  EXPECT_FALSE(g.owns_lock());
  key_guard next = m.try_lock("k");
  ASSERT_TRUE(next.owns_lock());
  g.unlock();  // must be a no-op
  EXPECT_FALSE(free_elsewhere(m, std::string("k")));
  EXPECT_TRUE(next.owns_lock());
}

TEST_F(KeyedMutex, TokenIsKeptAfterUnlock) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  const std::uint64_t token = g.token();
  ASSERT_NE(token, 0u);
  g.unlock();
  EXPECT_EQ(g.token(), token);
  EXPECT_THROW(g.check(), handoff::lock_expired);  // check() after unlock: not held
}

// --- exclusion and visibility -----------------------------------------------------------

TEST_F(KeyedMutex, NeverLetsTwoThreadsHoldTheSameKeyAtOnce) {
  keyed_mutex<> m;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  long plain = 0;  // deliberately not atomic: TSan checks the lock's happens-before edges
  std::atomic<long> busy{0};
  constexpr int threads = 4, per_thread = 20000;
  std::latch start(threads);  // all contend from the first iteration
  run_threads(threads, [&](int t) {
    start.arrive_and_wait();
    for (int i = 0; i < per_thread; ++i) {
      // A mix of the acquiring calls, all of which must exclude each other.
      key_guard g = (i % 3 == 0) ? m.lock("hot") : (i % 3 == 1) ? m.try_lock_for("hot", 10s) : m.try_lock("hot");
      if (!g) {
        ASSERT_EQ(i % 3, 2) << "thread " << t << ": only try_lock may fail here";
        busy.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      if (inside.fetch_add(1, std::memory_order_relaxed) != 0) overlaps.fetch_add(1, std::memory_order_relaxed);
      ++plain;
      if (i % 64 == 0) std::this_thread::yield();  // sometimes give the core away while holding
      inside.fetch_sub(1, std::memory_order_relaxed);
    }
  });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(busy.load(), 0);  // the threads did contend
  EXPECT_EQ(plain, long{threads} * per_thread - busy.load());
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, MakesAHoldersWritesVisibleToTheNextHolderOnAnotherThread) {
  keyed_mutex<> m;
  struct record {
    long sequence = 0;
    long last_writer = -1;
    std::vector<long> history;
  } data;  // plain data, protected only by the key
  std::atomic<int> mismatches{0};
  constexpr int threads = 3, per_thread = 5000;
  std::latch start(threads);
  run_threads(threads, [&](int t) {
    start.arrive_and_wait();
    for (int i = 0; i < per_thread; ++i) {
      key_guard g = m.lock("shared");
      // What the previous holder wrote must all be here, consistently.
      if (static_cast<long>(data.history.size()) != data.sequence) mismatches.fetch_add(1);
      if (!data.history.empty() && data.history.back() != data.last_writer) mismatches.fetch_add(1);
      ++data.sequence;
      data.last_writer = t;
      data.history.push_back(t);
      if (i % 64 == 0) std::this_thread::yield();
    }
  });
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(data.sequence, long{threads} * per_thread);
}

// --- fencing tokens ---------------------------------------------------------------------

TEST_F(KeyedMutex, TokensStrictlyIncreaseAcrossGrantsOfAKey) {
  keyed_mutex<> m;
  std::vector<std::uint64_t> tokens;  // appended while holding the key: in grant order
  std::atomic<long> found_held{0};
  std::latch start(4);
  run_threads(4, [&](int) {
    start.arrive_and_wait();
    for (int i = 0; i < 2000; ++i) {
      key_guard g = m.try_lock("k");
      if (!g) {  // held: most likely granted by the holder's unlock (a hand-off)
        found_held.fetch_add(1, std::memory_order_relaxed);
        g = m.lock("k");
      }
      tokens.push_back(g.token());
      // Hold a while, now and then giving the core away, so that others find the key held
      // and queue (on a busy two-core machine the threads may otherwise never overlap).
      handoff::test::burn(200);
      if (i % 8 == 0) std::this_thread::yield();
    }
  });
  ASSERT_EQ(tokens.size(), 8000u);
  EXPECT_GT(found_held.load(), 0);  // the hand-off path was exercised (FIFO tests check it exactly)
  for (std::size_t i = 1; i < tokens.size(); ++i) ASSERT_LT(tokens[i - 1], tokens[i]) << "grant " << i;
}

TEST_F(KeyedMutex, TokensKeepIncreasingAfterTheKeysStateWasFreedAndRecreated) {
  keyed_mutex<> m;
  std::uint64_t last = 0;
  for (int i = 0; i < 100; ++i) {
    std::uint64_t t;
    {
      key_guard g = m.lock("k");
      t = g.token();
    }
    ASSERT_EQ(m.size(), 0u);  // the key's state is gone between the rounds
    ASSERT_GT(t, last) << "round " << i;
    last = t;
    // Other keys come and go in between (they may share the key's shard).
    for (int j = 0; j < 50; ++j) (void)m.lock("other:" + std::to_string(i * 50 + j));
  }
}

TEST_F(KeyedMutex, TheHolderAfterALeaseExpiryGetsALargerToken) {
  keyed_mutex<> m;
  key_guard g = m.lock("k", lease{20ms});
  ASSERT_TRUE(eventually([&] { return g.expired(); }));
  // The timer reports the expiry (under its mutex) before it releases the key (after it):
  // the key becomes free shortly after expired() turns true, not necessarily at once.
  key_guard next;
  ASSERT_TRUE(eventually([&] { return (next = m.try_lock("k")).owns_lock(); }));
  EXPECT_GT(next.token(), g.token());
}

}  // namespace
