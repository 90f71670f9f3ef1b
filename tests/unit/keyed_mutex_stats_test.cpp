// keyed_mutex introspection and metrics: stats() (keys, waiters, waits, timeouts, lease
// expiries, longest waits per window), waiting(), and the events a metrics_sink receives,
// per mutex or process-wide.
#include <handoff/keyed_mutex.hpp>
#include <handoff/metrics.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "../support/counting_sink.hpp"
#include "../support/keyed_mutex_support.hpp"

namespace {

using namespace handoff::test;

// Holds `key` on a thread of its own for `hold`, while a blocking lock() of it on another
// thread waits: that wait lasts about `hold`.
void wait_behind_a_holder(keyed_mutex<>& m, const std::string& key, std::chrono::milliseconds hold) {
  key_guard held = m.lock(key);
  blocking_call waiter([&] { key_guard g = m.lock(key); });
  ASSERT_TRUE(waiter.wait_until_blocked());
  std::this_thread::sleep_for(hold);
  held.unlock();
  waiter.join();
}

TEST_F(KeyedMutex, StatsOfAnIdleMutexAreAllZero) {
  keyed_mutex<> m;
  { key_guard g = m.lock("a"); }
  const auto s = m.stats();
  EXPECT_EQ(s.keys, 0u);
  EXPECT_EQ(s.waiters, 0u);
  EXPECT_EQ(s.waits, 0u);
  EXPECT_EQ(s.timeouts, 0u);
  EXPECT_EQ(s.lease_expiries, 0u);
  EXPECT_TRUE(s.longest_waits.empty());
}

TEST_F(KeyedMutex, StatsCountTheKeysWithStateAndTheRequestsQueuedBehindTheirHolders) {
  keyed_mutex<> m;
  key_guard a = m.lock("a");
  key_guard b = m.lock("b");
  blocking_call w1([&] { key_guard g = m.lock("a"); });
  ASSERT_TRUE(w1.wait_until_blocked());
  blocking_call w2([&] { key_guard g = m.lock("a"); });
  ASSERT_TRUE(w2.wait_until_blocked());
  const auto s = m.stats();
  EXPECT_EQ(s.keys, 2u);
  EXPECT_EQ(s.waiters, 2u);
  EXPECT_EQ(m.waiting(), 2u);
  a.unlock();
  w1.join();
  w2.join();
  EXPECT_EQ(m.waiting(), 0u);
  EXPECT_EQ(m.stats().waits, 2u);
}

TEST_F(KeyedMutex, ATimedLockThatGivesUpIsCountedAsATimeoutAndReportedToTheSink) {
  counting_sink sink;
  keyed_mutex<> m({.metrics = &sink});
  key_guard held = m.lock("k");
  std::thread([&] { EXPECT_FALSE(m.try_lock_for("k", 20ms).owns_lock()); }).join();  // waited, gave up
  std::thread([&] { EXPECT_FALSE(m.try_lock_for("k", 0ms).owns_lock()); }).join();   // gave up at once
  EXPECT_FALSE(m.try_lock("k").owns_lock());                                         // no wait time: not a timeout
  const auto s = m.stats();
  EXPECT_EQ(s.timeouts, 2u);
  EXPECT_EQ(s.waits, 0u);
  EXPECT_EQ(sink.count(handoff::metric_counter::keyed_lock_timeouts), 2u);
  EXPECT_TRUE(sink.waits(handoff::metric_wait::keyed_lock).empty());  // only granted waits are observed
}

TEST_F(KeyedMutex, AnAsyncWaitThatTimesOutIsCountedAsATimeout) {
  counting_sink sink;
  keyed_mutex<> m({.metrics = &sink});
  key_guard held = m.lock("k");
  async_outcome out;
  await_lock([&] { return m.async_lock("k", 10ms); }, &out, false);
  ASSERT_TRUE(eventually([&] { return out.done(); }, 10s));
  EXPECT_FALSE(out.owned);
  EXPECT_EQ(m.stats().timeouts, 1u);
  EXPECT_EQ(sink.count(handoff::metric_counter::keyed_lock_timeouts), 1u);
}

TEST_F(KeyedMutex, ALeaseThatRunsOutIsCountedAsALeaseExpiry) {
  counting_sink sink;
  keyed_mutex<> m({.metrics = &sink});
  key_guard g = m.lock("k", lease{10ms});
  ASSERT_TRUE(eventually([&] { return g.expired(); }, 10s));
  ASSERT_TRUE(eventually([&] { return m.stats().lease_expiries == 1; }, 10s));
  EXPECT_EQ(sink.count(handoff::metric_counter::keyed_lease_expiries), 1u);
  key_guard unlocked_in_time = m.lock("j", lease{1h});
  unlocked_in_time.unlock();
  EXPECT_EQ(m.stats().lease_expiries, 1u);
}

TEST_F(KeyedMutex, LongestWaitsListTheKeyThatWaitedLongestFirstAndStartANewWindowAtEachCall) {
  counting_sink sink;
  keyed_mutex<> m({.metrics = &sink, .longest_waits = 2});
  wait_behind_a_holder(m, "slow", 60ms);
  wait_behind_a_holder(m, "slow", 1ms);  // the same key again: listed once, with its longest wait
  wait_behind_a_holder(m, "quick", 1ms);
  wait_behind_a_holder(m, "quicker", 0ms);
  const auto s = m.stats();
  EXPECT_EQ(s.waits, 4u);
  ASSERT_EQ(s.longest_waits.size(), 2u);  // the limit
  EXPECT_EQ(s.longest_waits[0].key, "slow");
  EXPECT_GE(s.longest_waits[0].waited, 50ms);
  EXPECT_GE(s.longest_waits[0].waited, s.longest_waits[1].waited);
  EXPECT_NE(s.longest_waits[1].key, "slow");
  EXPECT_TRUE(m.stats().longest_waits.empty());  // a new window

  const auto waits = sink.waits(handoff::metric_wait::keyed_lock);
  ASSERT_EQ(waits.size(), 4u);
  EXPECT_GE(waits[0], 50ms);
}

TEST_F(KeyedMutex, NoLongestWaitsAreKeptWhenTheOptionsAskForNone) {
  keyed_mutex<> m({.longest_waits = 0});
  wait_behind_a_holder(m, "k", 5ms);
  const auto s = m.stats();
  EXPECT_EQ(s.waits, 1u);
  EXPECT_TRUE(s.longest_waits.empty());
}

TEST_F(KeyedMutex, CoroutineAndCallbackWaitsAreRecordedWhenTheyAreGranted) {
  counting_sink sink;
  keyed_mutex<> m({.metrics = &sink});
  key_guard held = m.lock("co");
  key_guard held2 = m.lock("cb");
  async_outcome out;
  await_lock([&] { return m.async_lock("co"); }, &out, false);
  std::atomic<bool> called{false};
  m.lock_async("cb", [&](key_guard g) { called.store(g.owns_lock()); });
  m.lock_async("free", [](key_guard) {});  // granted at once: no wait to record
  std::this_thread::sleep_for(20ms);
  held.unlock();
  held2.unlock();
  ASSERT_TRUE(out.done() && out.owned);
  ASSERT_TRUE(called.load());
  const auto s = m.stats();
  EXPECT_EQ(s.waits, 2u);
  ASSERT_EQ(s.longest_waits.size(), 2u);
  EXPECT_GE(s.longest_waits[1].waited, 15ms);
  EXPECT_EQ(sink.waits(handoff::metric_wait::keyed_lock).size(), 2u);
}

TEST_F(KeyedMutex, UncontendedLocksReportNothingToTheSink) {
  counting_sink sink;
  keyed_mutex<> m({.metrics = &sink});
  for (int i = 0; i < 1000; ++i) {
    key_guard g = m.lock(std::to_string(i % 7));
    key_guard t = m.try_lock("other");
  }
  EXPECT_EQ(sink.events(), 0u);
  EXPECT_EQ(m.stats().waits, 0u);
}

TEST_F(KeyedMutex, AMutexWithoutASinkOfItsOwnReportsToTheProcessWideSink) {
  counting_sink global;
  counting_sink own;
  handoff::set_metrics_sink(&global);
  {
    keyed_mutex<> plain;
    keyed_mutex<> with_own({.metrics = &own});
    key_guard a = plain.lock("k");
    key_guard b = with_own.lock("k");
    std::thread([&] {
      (void)plain.try_lock_for("k", 1ms);
      (void)with_own.try_lock_for("k", 1ms);
    }).join();
  }
  handoff::set_metrics_sink(nullptr);
  EXPECT_EQ(handoff::global_metrics_sink(), nullptr);
  EXPECT_EQ(global.count(handoff::metric_counter::keyed_lock_timeouts), 1u);
  EXPECT_EQ(own.count(handoff::metric_counter::keyed_lock_timeouts), 1u);
}

}  // namespace
