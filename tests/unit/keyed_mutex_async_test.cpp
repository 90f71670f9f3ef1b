// handoff::keyed_mutex<Key>, coroutine (async_lock) and callback (lock_async) waiting: one test per point of the
// contract in keyed_mutex.hpp.
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <ctime>
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

// --- coroutines and callbacks -----------------------------------------------------------

TEST_F(KeyedMutex, AsyncLockOnAFreeKeyCompletesWithoutSuspending) {
  keyed_mutex<> m;
  async_outcome out;
  await_lock([&m] { return m.async_lock("k"); }, &out, true);
  ASSERT_TRUE(out.done());  // nobody else could have resumed it
  EXPECT_EQ(out.thread, std::this_thread::get_id());
  EXPECT_TRUE(out.owned);
  EXPECT_GT(out.token, 0u);
  EXPECT_FALSE(free_elsewhere(m, std::string("k")));
  out.kept.unlock();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, AsyncLockOnAHeldKeySuspendsAndIsResumedByTheUnlockingThread) {
  keyed_mutex<> m;
  async_outcome out;
  std::atomic<bool> held{false};
  std::latch go(1);
  bool done_when_unlock_returned = false;
  std::thread holder([&] {
    key_guard g = m.lock("k");
    held.store(true);
    go.wait();
    g.unlock();
    done_when_unlock_returned = out.done();
  });
  const std::thread::id holder_id = holder.get_id();
  ASSERT_TRUE(eventually([&] { return held.load(); }));
  await_lock([&m] { return m.async_lock("k"); }, &out, true);
  EXPECT_FALSE(out.done());  // suspended
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(out.done());  // and not resumed while the key is held
  go.count_down();
  holder.join();
  EXPECT_TRUE(done_when_unlock_returned);  // resumed inside the holder's unlock()
  ASSERT_TRUE(out.done());
  EXPECT_EQ(out.thread, holder_id);
  EXPECT_TRUE(out.owned);
  EXPECT_EQ(out.resumptions.load(), 1);
  out.kept.unlock();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, AsyncLockWithAWaitTimeGivesANonOwningGuardOnTimeoutAndIsNeverGrantedAfterwards) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  async_outcome out;
  const auto start = steady::now();
  await_lock([&m] { return m.async_lock("k", 50ms); }, &out, true);
  EXPECT_FALSE(out.done());
  ASSERT_TRUE(eventually([&] { return out.done(); }));
  EXPECT_GE(steady::now() - start, 50ms);
  EXPECT_FALSE(out.owned);
  EXPECT_FALSE(out.kept.owns_lock());
  EXPECT_NE(out.thread, std::this_thread::get_id());  // the mutex's completion thread resumed it
  EXPECT_EQ(m.size(), 1u);
  g.unlock();  // skips the timed-out request: the key is free
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.try_lock("k").owns_lock());
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(out.resumptions.load(), 1);
}

TEST_F(KeyedMutex, AsyncLockWithAWaitTimeIsGrantedWhenTheKeyIsReleasedInTime) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  async_outcome out;
  await_lock([&m] { return m.async_lock("k", 10s); }, &out, true);
  EXPECT_FALSE(out.done());
  g.unlock();
  ASSERT_TRUE(out.done());
  EXPECT_TRUE(out.owned);
  EXPECT_EQ(out.thread, std::this_thread::get_id());
  EXPECT_GT(out.token, g.token());
  out.kept.unlock();
  EXPECT_EQ(m.size(), 0u);
}

// A timed async waiter is queued, the shard unlocked, and only then its timeout scheduled.
// A holder that grants the waiter in between must leave nothing to the timer: otherwise the
// node stays in the timer's heap until its deadline (an hour here) and leaks when the mutex
// is destroyed, which LeakSanitizer (asan preset) reports.
TEST_F(KeyedMutex, AnAsyncWaitGrantedWhileItsTimeoutIsBeingScheduledLeavesNothingBehind) {
  for (int round = 0; round < 20; ++round) {
    keyed_mutex<> m;  // a fresh mutex: its timer thread starts inside the race window
    std::atomic<bool> stop{false};
    std::atomic<long> done{0};
    long started = 0;
    std::thread holder([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        key_guard g = m.lock("k");
        handoff::test::burn(static_cast<int>(done.load(std::memory_order_relaxed) % 64));
      }
    });
    const auto end = steady::now() + 25ms;
    std::vector<std::unique_ptr<async_outcome>> outcomes;
    while (steady::now() < end) {
      outcomes.push_back(std::make_unique<async_outcome>());
      await_lock([&m] { return m.async_lock("k", 1h); }, outcomes.back().get(), false);
      ++started;
      // The coroutine unlocks when it is resumed: wait for it so that the holder runs.
      while (!outcomes.back()->done()) std::this_thread::yield();  // a spin: the race needs many rounds
      done.fetch_add(1, std::memory_order_relaxed);
    }
    stop.store(true);
    holder.join();
    for (auto& o : outcomes) ASSERT_TRUE(o->owned);
    EXPECT_EQ(m.size(), 0u);
  }
}

TEST_F(KeyedMutex, AsyncLockWithALeaseExpiresFromItsGrant) {
  keyed_mutex<> m;
  {
    async_outcome out;
    await_lock([&m] { return m.async_lock("free", lease{50ms}); }, &out, true);
    ASSERT_TRUE(out.done());
    EXPECT_TRUE(out.owned);
    EXPECT_EQ(out.kept.lease_duration(), 50ms);
    ASSERT_TRUE(eventually([&] { return out.kept.expired(); }));
    // expired() turns true when the timer takes the lease, a moment before it releases the
    // key (key_guard.hpp): the key is free soon after, not necessarily at once.
    EXPECT_TRUE(eventually([&] { return free_elsewhere(m, std::string("free")); }));
  }
  key_guard g = m.lock("k");
  async_outcome out;
  await_lock([&m] { return m.async_lock("k", lease{100ms}); }, &out, true);
  std::this_thread::sleep_for(200ms);  // longer than the lease: it must not count from the request
  g.unlock();
  ASSERT_TRUE(out.done());
  EXPECT_TRUE(out.owned);
  EXPECT_FALSE(out.expired_at_grant);
  ASSERT_TRUE(eventually([&] { return out.kept.expired(); }));
  EXPECT_THROW(out.kept.check(), handoff::lock_expired);
  EXPECT_TRUE(eventually([&] { return free_elsewhere(m, std::string("k")); }));  // as above
  out.kept.unlock();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LockAsyncCallsTheCallbackAtOnceWhenTheKeyIsFree) {
  keyed_mutex<> m;
  std::thread::id ran_on;
  bool owned = false;
  m.lock_async("k", [&](key_guard g) {
    ran_on = std::this_thread::get_id();
    owned = g.owns_lock();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_TRUE(owned);
  EXPECT_EQ(m.size(), 0u);  // the callback's guard unlocked when it returned
}

TEST_F(KeyedMutex, LockAsyncCallsTheCallbackOnTheUnlockingThreadWhenTheKeyWasHeld) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  key_guard kept;
  m.lock_async("k", [&](key_guard w) {
    ran_on = std::this_thread::get_id();
    kept = std::move(w);  // a callback may keep the guard beyond its return
    ran.store(true);
  });
  EXPECT_FALSE(ran.load());
  std::thread::id unlocker;
  std::thread([&, g = std::move(g)]() mutable {
    unlocker = std::this_thread::get_id();
    g.unlock();
    EXPECT_TRUE(ran.load());  // inside unlock()
  }).join();
  EXPECT_EQ(ran_on, unlocker);
  EXPECT_TRUE(kept.owns_lock());
  EXPECT_FALSE(free_elsewhere(m, std::string("k")));
  kept.unlock();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LockAsyncReportsAnExceptionFromTheCallbackAndReleasesTheKey) {
  keyed_mutex<> m;
  testing::internal::CaptureStderr();
  m.lock_async("free", [](key_guard) { throw std::runtime_error("callback boom 1"); });
  key_guard g = m.lock("held");
  m.lock_async("held", [](key_guard) { throw std::runtime_error("callback boom 2"); });
  g.unlock();  // runs the callback here; its exception must not escape unlock()
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("callback boom 1"), std::string::npos) << err;
  EXPECT_NE(err.find("callback boom 2"), std::string::npos) << err;
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.try_lock("free").owns_lock());
  EXPECT_TRUE(m.try_lock("held").owns_lock());
}

// A wait time too long to add to the clock means "no deadline"; a finite one of hours must
// not make the timer spin or time out early. Both wait, and are granted at the unlock.
TEST_F(KeyedMutex, AsyncLockWithAnUnboundedOrHoursLongWaitTimeWaitsAndIsGrantedAtUnlock) {
  for (const std::chrono::nanoseconds wait : {std::chrono::nanoseconds::max(), std::chrono::nanoseconds(10000h)}) {
    keyed_mutex<> m;
    key_guard g = m.lock("k");
    async_outcome out;
    const std::clock_t cpu_before = std::clock();
    await_lock([&m, wait] { return m.async_lock("k", wait); }, &out, true);
    std::this_thread::sleep_for(100ms);  // a negative check: the waiter must still be waiting
    const double cpu_ms = 1000.0 * static_cast<double>(std::clock() - cpu_before) / CLOCKS_PER_SEC;
    EXPECT_FALSE(out.done()) << "timed out at once";
    EXPECT_LT(cpu_ms, 60.0) << "the timer thread spins";
    g.unlock();
    ASSERT_TRUE(out.done());  // granted inside the unlock
    EXPECT_TRUE(out.owned);
    out.kept.unlock();
    EXPECT_EQ(m.size(), 0u);
  }
}

}  // namespace
