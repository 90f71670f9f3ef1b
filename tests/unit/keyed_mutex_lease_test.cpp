// handoff::keyed_mutex<Key>, leases: expiry, hand-over to the next waiter, extend, never-expiring leases, and leases
// that keep firing while completions block: one test per point of the contract in keyed_mutex.hpp.
#include <handoff/keyed_mutex.hpp>
#include <handoff/timer_service.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
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

// --- leases -----------------------------------------------------------------------------

TEST_F(KeyedMutex, LeaseOfZeroOrNegativeDurationIsRejected) {
  EXPECT_THROW((void)lease{0s}, std::invalid_argument);
  EXPECT_THROW((void)lease{-1ms}, std::invalid_argument);
  EXPECT_NO_THROW((void)lease{1ns});
}

TEST_F(KeyedMutex, EveryLeaseOverloadGrantsAGuardThatExpiresAndFreesTheKey) {
  keyed_mutex<> m;
  const lease l{50ms};
  std::vector<std::pair<const char*, std::function<key_guard()>>> overloads = {
      {"lock", [&] { return m.lock("k", l); }},
      {"try_lock", [&] { return m.try_lock("k", l); }},
      {"try_lock_for", [&] { return m.try_lock_for("k", 1s, l); }},
      {"try_lock_until steady", [&] { return m.try_lock_until("k", steady::now() + 1s, l); }},
      {"try_lock_until system", [&] { return m.try_lock_until("k", std::chrono::system_clock::now() + 1s, l); }},
  };
  for (auto& [name, acquire] : overloads) {
    SCOPED_TRACE(name);
    const auto start = steady::now();
    key_guard g = acquire();
    ASSERT_TRUE(g.owns_lock());
    EXPECT_EQ(g.lease_duration(), 50ms);
    ASSERT_TRUE(eventually([&] { return g.expired(); }));
    EXPECT_GE(steady::now() - start, 50ms);  // never early
    EXPECT_FALSE(g.owns_lock());
    // expired() turns true when the timer takes the lease, a moment before it releases
    // the key: wait for the release.
    EXPECT_TRUE(eventually([&] { return free_elsewhere(m, std::string("k")); }));  // the lease released it
  }
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, ALeaseThatRunsOutPassesTheKeyToTheNextWaiterAndTheOldGuardReportsIt) {
  keyed_mutex<> m;
  const auto start = steady::now();
  key_guard g = m.lock("k", lease{100ms});
  ASSERT_TRUE(g.owns_lock());
  EXPECT_FALSE(g.expired());
  std::atomic<bool> granted{false};
  std::atomic<std::uint64_t> next_token{0};
  std::latch done(1);
  blocking_call waiter([&] {
    key_guard w = m.try_lock_for("k", 20s);
    EXPECT_TRUE(w.owns_lock());
    next_token.store(w.token());
    granted.store(true);
    done.wait();
  });
  ASSERT_TRUE(waiter.wait_until_blocked());
  ASSERT_TRUE(eventually([&] { return granted.load(); }));
  EXPECT_GE(steady::now() - start, 100ms);  // never early
  EXPECT_TRUE(g.expired());
  EXPECT_FALSE(g.owns_lock());
  EXPECT_FALSE(static_cast<bool>(g));
  EXPECT_THROW(g.check(), handoff::lock_expired);
  EXPECT_FALSE(g.extend(1s));
  EXPECT_GT(next_token.load(), g.token());
  g.unlock();  // harmless: the waiter keeps the key
  EXPECT_TRUE(g.expired());
  EXPECT_FALSE(m.try_lock("k").owns_lock());
  done.count_down();
  waiter.join();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, ALeaseThatRunsOutResumesAWaitingCoroutineOnTheMutexsCompletionThread) {
  keyed_mutex<> m;
  key_guard g = m.lock("k", lease{50ms});
  async_outcome out;
  await_lock([&m] { return m.async_lock("k"); }, &out, true);
  EXPECT_FALSE(out.done());
  ASSERT_TRUE(eventually([&] { return out.done(); }));
  EXPECT_TRUE(out.owned);
  EXPECT_NE(out.thread,
            std::this_thread::get_id());  // nobody unlocked: the timer handed it over, the completion thread resumed it
  EXPECT_GT(out.token, g.token());
  EXPECT_TRUE(g.expired());
  g.unlock();  // no-op: the coroutine's guard keeps the key
  EXPECT_FALSE(free_elsewhere(m, std::string("k")));
  out.kept.unlock();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LeaseExpiryWithNoWaiterFreesTheKeyAndItsStateOnceTheGuardIsGone) {
  keyed_mutex<> m;
  {
    key_guard g = m.lock("k", lease{30ms});
    ASSERT_TRUE(eventually([&] { return g.expired(); }));
    // free while the expired guard exists (the release follows expired() closely)
    EXPECT_TRUE(eventually([&] { return free_elsewhere(m, std::string("k")); }));
    {
      key_guard other = m.try_lock("k");
      ASSERT_TRUE(other.owns_lock());
      g.unlock();  // must not release `other`
      EXPECT_FALSE(free_elsewhere(m, std::string("k")));
    }
  }
  EXPECT_EQ(m.size(), 0u);
  {
    key_guard g = m.lock("k2", lease{30ms});
    ASSERT_TRUE(eventually([&] { return g.expired(); }));
  }  // dropped without unlock()
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, ExtendBeforeExpiryKeepsTheKeyPastTheOriginalDeadline) {
  keyed_mutex<> m;
  key_guard g = m.lock("k", lease{200ms});
  ASSERT_TRUE(g.extend(10s));
  EXPECT_EQ(g.lease_duration(), 10s);
  std::atomic<bool> granted{false};
  blocking_call waiter([&] {
    key_guard w = m.try_lock_for("k", 20s);
    EXPECT_TRUE(w.owns_lock());
    granted.store(true);
  });
  ASSERT_TRUE(waiter.wait_until_blocked());
  std::this_thread::sleep_for(500ms);  // well past the original lease
  EXPECT_FALSE(granted.load());
  EXPECT_FALSE(g.expired());
  EXPECT_TRUE(g.owns_lock());
  EXPECT_NO_THROW(g.check());
  g.unlock();
  waiter.join();
  EXPECT_TRUE(granted.load());
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, ExtendRejectsGuardsWithoutALeaseAndNonPositiveDurations) {
  keyed_mutex<> m;
  key_guard plain = m.lock("a");
  EXPECT_THROW((void)plain.extend(1s), std::logic_error);
  key_guard none;
  EXPECT_THROW((void)none.extend(1s), std::logic_error);
  key_guard leased = m.lock("b", lease{10s});
  EXPECT_THROW((void)leased.extend(0s), std::invalid_argument);
  EXPECT_THROW((void)leased.extend(-1s), std::invalid_argument);
  EXPECT_TRUE(leased.owns_lock());
  leased.unlock();
  EXPECT_FALSE(leased.extend(1s));  // unlocked: nothing to renew
}

TEST_F(KeyedMutex, AWaitersLeaseCountsFromItsGrantNotFromItsRequest) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  std::atomic<bool> expired_at_grant{true};
  std::atomic<bool> expired_later{false};
  blocking_call waiter([&] {
    key_guard w = m.try_lock_for("k", 20s, lease{200ms});
    EXPECT_TRUE(w.owns_lock());
    expired_at_grant.store(w.expired());
    expired_later.store(eventually([&] { return w.expired(); }));
  });
  ASSERT_TRUE(waiter.wait_until_blocked());
  std::this_thread::sleep_for(400ms);  // longer than the lease: a lease counted from the request would be over
  g.unlock();
  waiter.join();
  EXPECT_FALSE(expired_at_grant.load());
  EXPECT_TRUE(expired_later.load());
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LockingAgainAfterTheLeaseExpiredIsNotADeadlock) {
  keyed_mutex<> m;
  key_guard g = m.lock("k", lease{20ms});
  ASSERT_TRUE(eventually([&] { return g.expired(); }));
  key_guard again;
  EXPECT_NO_THROW(again = m.try_lock_for("k", 5s));
  EXPECT_TRUE(again.owns_lock());
}

// --- leases that never run out ----------------------------------------------------------

// A lease too long to add to the clock saturates to "never": it must not wrap around into
// the past and expire at once.
TEST_F(KeyedMutex, ALeaseOfNanosecondsOrHoursMaxNeverExpires) {
  keyed_mutex<> m;
  for (const lease l : {lease{std::chrono::nanoseconds::max()}, lease{std::chrono::hours::max()}}) {
    key_guard g = m.lock("k", l);
    ASSERT_TRUE(g.owns_lock());
    std::thread([&] {
      const auto start = steady::now();
      EXPECT_FALSE(m.try_lock_for("k", 100ms).owns_lock());  // still held after a wait
      EXPECT_GE(steady::now() - start, 100ms);
    }).join();
    EXPECT_FALSE(g.expired());
    EXPECT_TRUE(g.owns_lock());
    EXPECT_NO_THROW(g.check());
    g.unlock();
    EXPECT_TRUE(free_elsewhere(m, std::string("k")));  // the unlock released it
    EXPECT_EQ(m.size(), 0u);
  }
}

TEST_F(KeyedMutex, ExtendingALeaseByNanosecondsMaxMakesItNeverExpire) {
  keyed_mutex<> m;
  key_guard g = m.lock("k", lease{50ms});
  ASSERT_TRUE(g.extend(std::chrono::nanoseconds::max()));
  EXPECT_EQ(g.lease_duration(), std::chrono::nanoseconds::max());
  std::thread([&] {
    const auto start = steady::now();
    EXPECT_FALSE(m.try_lock_for("k", 200ms).owns_lock());  // well past the original 50 ms
    EXPECT_GE(steady::now() - start, 200ms);
  }).join();
  EXPECT_FALSE(g.expired());
  EXPECT_TRUE(g.owns_lock());
  ASSERT_TRUE(g.extend(100ms));  // and a finite lease can follow: it runs out again
  ASSERT_TRUE(eventually([&] { return g.expired(); }));
  // The timer releases the key a moment after expired() turns true (key_guard.hpp).
  EXPECT_TRUE(eventually([&] { return free_elsewhere(m, std::string("k")); }));
  g.unlock();
  EXPECT_EQ(m.size(), 0u);
}

// --- the timer never runs user code -----------------------------------------------------

// Regression: the timer thread used to run the callbacks and coroutines it granted (after
// a lease expiry) itself, so one that blocked stopped every lease of the mutex; one that
// waited for another leased key waited for ever, since only the timer could free it.
TEST_F(KeyedMutex, LeasesKeepExpiringWhileACallbackGrantedByALeaseExpiryBlocks) {
  keyed_mutex<> m;
  key_guard a = m.lock("a", lease{30ms});
  key_guard c = m.lock("c", lease{300ms});
  std::atomic<bool> in_callback{false};
  std::atomic<bool> got_c{false};
  std::latch leave(1);
  std::atomic<bool> left{false};
  m.lock_async("a", [&](key_guard g) {
    EXPECT_TRUE(g.owns_lock());
    in_callback.store(true);
    key_guard gc = m.lock("c");  // blocks until c's lease runs out: the timer must fire it
    got_c.store(gc.owns_lock());
    leave.wait();  // then blocks for as long as the test wants
    gc.unlock();
    g.unlock();
    left.store(true);
  });
  ASSERT_TRUE(eventually([&] { return in_callback.load(); }));  // granted by a's expiry
  EXPECT_TRUE(a.expired());
  ASSERT_TRUE(eventually([&] { return got_c.load(); }, 10s)) << "c's lease never fired";
  EXPECT_TRUE(c.expired());
  // The callback is still blocked; another key's lease expires on time all the same.
  const auto start = steady::now();
  key_guard b = m.lock("b", lease{50ms});
  ASSERT_TRUE(eventually([&] { return b.expired(); }, 10s));
  EXPECT_LT(steady::now() - start, 5s);
  // The timer releases the key a moment after expired() turns true (key_guard.hpp).
  EXPECT_TRUE(eventually([&] { return free_elsewhere(m, std::string("b")); }));
  b.unlock();
  leave.count_down();
  ASSERT_TRUE(eventually([&] { return left.load(); }));
  EXPECT_EQ(m.size(), 2u);  // a and c: still referred to by their expired guards
  a.unlock();
  c.unlock();
  EXPECT_EQ(m.size(), 0u);
}

// --- the timer service ------------------------------------------------------------------

std::size_t threads_of_this_process() {
  const auto it = std::filesystem::directory_iterator("/proc/self/task");
  return static_cast<std::size_t>(std::distance(std::filesystem::begin(it), std::filesystem::end(it)));
}

TEST_F(KeyedMutex, LeasesAndWaitTimesFireOnTheServiceTheOptionsName) {
  handoff::timer_service timers;  // not started: only run_due() below fires anything
  keyed_mutex<> m({.timers = &timers});
  key_guard g = m.lock("k", lease{1ms});
  key_guard w = m.lock("w");
  async_outcome out;
  await_lock([&m] { return m.async_lock("w", 1ms); }, &out, false);  // behind w
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(g.expired());  // nothing drives the service
  EXPECT_FALSE(out.done());
  timers.run_due();
  EXPECT_TRUE(g.expired());
  // The timed-out coroutine never resumes on the service's driver (this thread, here).
  ASSERT_TRUE(eventually([&] { return out.done(); }));
  EXPECT_NE(out.thread, std::this_thread::get_id());
  EXPECT_TRUE(eventually([&] { return free_elsewhere(m, std::string("k")); }));
}

TEST_F(KeyedMutex, TenMutexesWithLeasesAndWaitTimesAddAtMostOneThreadBesideTheService) {
  handoff::timer_service timers;
  timers.start();
  const std::size_t before = threads_of_this_process();
  std::vector<std::unique_ptr<keyed_mutex<>>> mutexes;
  std::vector<key_guard> guards;
  std::vector<std::unique_ptr<async_outcome>> outs;
  for (int i = 0; i < 10; ++i) {
    auto& m = *mutexes.emplace_back(std::make_unique<keyed_mutex<>>(handoff::keyed_mutex_options{.timers = &timers}));
    guards.push_back(m.lock("held", lease{5ms}));
    auto& out = *outs.emplace_back(std::make_unique<async_outcome>());
    await_lock([&m] { return m.async_lock("held", 1ms); }, &out, false);  // times out first
  }
  for (auto& out : outs) ASSERT_TRUE(eventually([&] { return out->done(); }));
  for (auto& g : guards) ASSERT_TRUE(eventually([&] { return g.expired(); }));
  EXPECT_LE(threads_of_this_process(), before + 1);  // the completion thread, if not yet started
  guards.clear();
  mutexes.clear();
}

TEST_F(KeyedMutex, TenMutexesGivenNoServiceShareTheLibrarysServiceAndCompletionThread) {
  const std::size_t before = threads_of_this_process();
  std::vector<std::unique_ptr<keyed_mutex<>>> mutexes;
  std::vector<key_guard> guards;
  for (int i = 0; i < 10; ++i) {
    guards.push_back(mutexes.emplace_back(std::make_unique<keyed_mutex<>>())->lock("held", lease{1ms}));
  }
  for (auto& g : guards) ASSERT_TRUE(eventually([&] { return g.expired(); }));
  EXPECT_LE(threads_of_this_process(), before + 2);  // the service's and the completion thread, if new
  guards.clear();
  mutexes.clear();
}

TEST_F(KeyedMutex, DestroyingTheTimerServiceOfALiveMutexTerminatesNamingTheProblem) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the process has threads: re-execute, not fork
  EXPECT_DEATH(
      {
        auto* timers = new handoff::timer_service;
        keyed_mutex<> m({.timers = timers});
        key_guard g = m.lock("k", lease{1h});
        delete timers;
      },
      "timer_service was destroyed while a keyed_mutex");
}

}  // namespace
