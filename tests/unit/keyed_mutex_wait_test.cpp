// handoff::keyed_mutex<Key>, FIFO order among waiters of every kind, and waits that time out: one test per point of the
// contract in keyed_mutex.hpp.
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

// --- FIFO -------------------------------------------------------------------------------

TEST_F(KeyedMutex, GrantsBlockedThreadsInTheOrderTheyQueued) {
  keyed_mutex<> m;
  grant_log log;
  key_guard g = m.lock("k");
  constexpr int waiters = 8;
  std::vector<std::uint64_t> tokens(waiters);
  std::vector<std::unique_ptr<blocking_call>> calls;
  for (int i = 0; i < waiters; ++i) {
    calls.push_back(std::make_unique<blocking_call>([&, i] {
      key_guard w = m.lock("k");
      log.add(i);
      tokens[static_cast<std::size_t>(i)] = w.token();
    }));
    // Queued (the library's count), not only seen asleep: a sanitizer's allocator can put
    // a thread to sleep before it queues, and the next one would then queue first.
    ASSERT_TRUE(eventually([&] { return m.waiting() == static_cast<std::size_t>(i) + 1; })) << "waiter " << i;
    ASSERT_TRUE(calls.back()->wait_until_blocked()) << "waiter " << i;
  }
  EXPECT_EQ(log.size(), 0u);
  g.unlock();
  for (auto& c : calls) c->join();
  EXPECT_EQ(log.order(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Every grant here is a hand-off from the previous holder's unlock: tokens grow along it.
  EXPECT_GT(tokens[0], g.token());
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_LT(tokens[i - 1], tokens[i]) << "waiter " << i;
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, GrantsCoroutineWaitersInTheOrderTheyQueued) {
  keyed_mutex<> m;
  grant_log log;
  key_guard g = m.lock("k");
  constexpr int waiters = 8;
  std::vector<std::unique_ptr<async_outcome>> outcomes;
  for (int i = 0; i < waiters; ++i) {
    outcomes.push_back(std::make_unique<async_outcome>());
    await_lock([&m] { return m.async_lock("k"); }, outcomes.back().get(), false, &log, i);
  }
  EXPECT_EQ(log.size(), 0u);  // all suspended
  g.unlock();                 // resumes them all, one after the other, on this thread
  EXPECT_EQ(log.order(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  for (auto& o : outcomes) EXPECT_EQ(o->resumptions.load(), 1);
  EXPECT_GT(outcomes[0]->token, g.token());
  for (std::size_t i = 1; i < outcomes.size(); ++i) EXPECT_LT(outcomes[i - 1]->token, outcomes[i]->token) << i;
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, GrantsMixedThreadCoroutineAndCallbackWaitersInArrivalOrder) {
  keyed_mutex<> m;
  grant_log log;
  key_guard g = m.lock("k");
  std::vector<std::unique_ptr<blocking_call>> threads;
  std::vector<std::unique_ptr<async_outcome>> outcomes;
  std::atomic<int> callbacks{0};
  auto add_thread = [&](int who) {
    const std::size_t before = m.waiting();
    threads.push_back(std::make_unique<blocking_call>([&m, &log, who] {
      key_guard w = m.lock("k");
      log.add(who);
    }));
    ASSERT_TRUE(eventually([&] { return m.waiting() == before + 1; })) << "waiter " << who;  // queued
    ASSERT_TRUE(threads.back()->wait_until_blocked()) << "waiter " << who;
  };
  auto add_coroutine = [&](int who) {
    outcomes.push_back(std::make_unique<async_outcome>());
    await_lock([&m] { return m.async_lock("k"); }, outcomes.back().get(), false, &log, who);
  };
  auto add_callback = [&](int who) {
    m.lock_async("k", [&log, &callbacks, who](key_guard w) {
      if (w.owns_lock()) log.add(who);
      callbacks.fetch_add(1, std::memory_order_release);
    });
  };
  add_coroutine(0);
  add_thread(1);
  add_callback(2);
  add_coroutine(3);
  add_thread(4);
  add_thread(5);
  add_callback(6);
  add_coroutine(7);
  EXPECT_EQ(log.size(), 0u);
  g.unlock();
  for (auto& t : threads) t->join();
  ASSERT_TRUE(eventually([&] { return log.size() == 8; }));
  EXPECT_EQ(log.order(), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(callbacks.load(std::memory_order_acquire), 2);
  EXPECT_EQ(m.size(), 0u);
}

// --- timeouts ---------------------------------------------------------------------------

TEST_F(KeyedMutex, AWaiterThatTimedOutIsSkippedAndTheKeyGoesToTheNextLiveWaiter) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  const std::uint64_t holder_token = g.token();
  // The main thread learns that the first waiter gave up through relaxed atomics only, so
  // that the sole ordering between that waiter and the holder that later skips it is the
  // library's own (ThreadSanitizer then checks the skip path for races).
  std::atomic<bool> gave_up{false};
  std::atomic<bool> timed_out_owned{true};
  blocking_call quitter([&] {
    key_guard w = m.try_lock_for("k", 50ms);
    timed_out_owned.store(w.owns_lock(), std::memory_order_relaxed);
    gave_up.store(true, std::memory_order_relaxed);
  });
  ASSERT_TRUE(quitter.wait_until_blocked());
  std::uint64_t next_token = 0;
  blocking_call next([&] {
    // Bounded, so that a key granted to the waiter that gave up fails here, not by hanging.
    key_guard w = m.try_lock_for("k", 20s);
    EXPECT_TRUE(w.owns_lock());
    next_token = w.token();
  });
  ASSERT_TRUE(next.wait_until_blocked());
  ASSERT_TRUE(eventually([&] { return gave_up.load(std::memory_order_relaxed); }));
  EXPECT_FALSE(timed_out_owned.load(std::memory_order_relaxed));
  EXPECT_EQ(m.size(), 1u);
  g.unlock();  // pops the timed-out request, skips it, grants `next`
  next.join();
  quitter.join();
  EXPECT_GT(next_token, holder_token);
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, AWaiterThatTimedOutIsNeverGrantedTheKeyLater) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  std::atomic<bool> gave_up{false};
  blocking_call quitter([&] {
    key_guard w = m.try_lock_for("k", 30ms);
    EXPECT_FALSE(w.owns_lock());
    gave_up.store(true, std::memory_order_relaxed);
    // Keeps running (and would be "holding" the key if it had been granted).
    std::this_thread::sleep_for(200ms);
  });
  ASSERT_TRUE(eventually([&] { return gave_up.load(std::memory_order_relaxed); }));
  g.unlock();  // the only queued request gave up: the key must become free
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.try_lock("k").owns_lock());
  quitter.join();
  EXPECT_EQ(m.size(), 0u);
}

// The largest time point of a steady clock with a coarse duration is beyond the range of
// nanoseconds: it must mean "no deadline", not overflow into the past and give up at once.
TEST_F(KeyedMutex, TryLockUntilTheMaxTimePointOfACoarseClockWaitsForTheGrant) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  using steady_seconds = std::chrono::time_point<steady, std::chrono::seconds>;
  using system_seconds = std::chrono::time_point<std::chrono::system_clock, std::chrono::seconds>;
  for (int round = 0; round < 2; ++round) {
    blocking_call waiter([&] {
      key_guard w =
          round == 0 ? m.try_lock_until("k", steady_seconds::max()) : m.try_lock_until("k", system_seconds::max());
      EXPECT_TRUE(w.owns_lock()) << "round " << round;
    });
    ASSERT_TRUE(waiter.wait_until_blocked()) << "round " << round;
    g.unlock();
    waiter.join();
    g = m.lock("k");
  }
}

}  // namespace
