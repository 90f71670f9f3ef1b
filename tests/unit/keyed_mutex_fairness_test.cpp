// handoff::keyed_mutex<Key> under keyed_mutex_options::fairness: `eventual` lets a request
// that has not queued take a freed key ahead of the waiters until the oldest has waited
// fair_after, then hands the key over; `fifo`, and `eventual` with fair_after 0, always hand
// it over. One test per point of the contract in keyed_mutex_options.hpp and keyed_mutex.hpp.
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/core_access.hpp"
#include "../support/keyed_mutex_support.hpp"

namespace {

using handoff::detail::lock_table_access;
using namespace handoff::test;  // keyed_mutex_support.hpp: helpers, chrono literals, the names used

class KeyedMutexFairness : public KeyedMutex {};

handoff::keyed_mutex_options eventual(std::chrono::nanoseconds fair_after) {
  handoff::keyed_mutex_options o;
  o.fairness = handoff::fairness::eventual;
  o.fair_after = fair_after;
  return o;
}

// Longer than any test here runs: the waiters of a test using it are never due.
constexpr auto never_due = 60s;

// Busy for `d` (holding a key): longer than a waiter spins, so that it falls asleep and
// needs a futex wake-up to compete, which the holder's relock then beats.
void busy_for(std::chrono::nanoseconds d) {
  const auto until = steady::now() + d;
  while (steady::now() < until) {
  }
}
constexpr auto barger_hold = 20us;  // a waiter spins about 6 us before it sleeps

// --- barging ------------------------------------------------------------------------------

// Two threads that take key "k" with try_lock whenever it is free and hold it for
// barger_hold, until stop() or for 2 s at most (a waiter starved for ever then fails its
// test instead of hanging it). `locks` counts their holds.
class bargers {
 public:
  explicit bargers(keyed_mutex<>& m) : m_(m), b1_([this] { run(); }), b2_([this] { run(); }) {}
  bargers(const bargers&) = delete;
  bargers& operator=(const bargers&) = delete;
  ~bargers() { stop(); }
  void stop() {
    stop_.store(true, std::memory_order_relaxed);
    if (b1_.joinable()) b1_.join();
    if (b2_.joinable()) b2_.join();
  }
  std::atomic<std::uint64_t> locks{0};

 private:
  void run() {
    const auto give_up = steady::now() + 2s;
    while (!stop_.load(std::memory_order_relaxed) && steady::now() < give_up) {
      key_guard g = m_.try_lock("k");
      if (!g.owns_lock()) continue;
      locks.fetch_add(1, std::memory_order_relaxed);
      busy_for(barger_hold);
    }
  }
  keyed_mutex<>& m_;
  std::atomic<bool> stop_{false};
  std::thread b1_;
  std::thread b2_;
};

TEST_F(KeyedMutexFairness, UnderEventualATryLockTakesAKeyFreedByUnlockWhileAThreadWaits) {
  keyed_mutex<> m(eventual(never_due));
  // The unlock frees the key and wakes the waiter, which takes microseconds to run: a
  // try_lock right after it finds the key free. Tried a few times, should the waiter win.
  int barged = 0;
  for (int attempt = 0; attempt < 20 && barged == 0; ++attempt) {
    key_guard g = m.lock("k");
    std::uint64_t waiter_token = 0;
    std::atomic<bool> waiter_held{false};  // set under the key
    blocking_call waiter([&] {
      key_guard w = m.lock("k");
      waiter_token = w.token();
      waiter_held.store(true, std::memory_order_relaxed);
    });
    ASSERT_TRUE(waiter.wait_until_blocked());
    g.unlock();
    key_guard t = m.try_lock("k");
    // Not a barge if the waiter took the key and let it go again first.
    const bool ahead_of_waiter = t.owns_lock() && !waiter_held.load(std::memory_order_relaxed);
    if (ahead_of_waiter) {
      ++barged;
      EXPECT_GT(t.token(), g.token());
      EXPECT_EQ(m.waiting(), 1u);  // the waiter is still queued behind the barger
    }
    const std::uint64_t before_waiter = ahead_of_waiter ? t.token() : g.token();
    t.unlock();  // the waiter, woken again, takes the key
    waiter.join();
    EXPECT_GT(waiter_token, before_waiter);
  }
  EXPECT_EQ(barged, 1);
  EXPECT_EQ(m.size(), 0u);
}

// fifo, and eventual with fair_after 0 (which behaves as fifo): the unlock hands the key to
// the waiter, so a try_lock after it fails and the unlocking thread's relock queues last.
TEST_F(KeyedMutexFairness, UnderFifoAndFairAfterZeroUnlockHandsTheKeyToTheOldestWaiter) {
  for (const handoff::keyed_mutex_options& o : {handoff::keyed_mutex_options{}, eventual(0ns)}) {
    keyed_mutex<> m(o);
    grant_log log;
    key_guard g = m.lock("k");
    std::vector<std::unique_ptr<blocking_call>> calls;
    for (int i = 0; i < 3; ++i) {
      calls.push_back(std::make_unique<blocking_call>([&, i] {
        key_guard w = m.lock("k");
        log.add(i);
        // Waiter 0 holds on until this thread's relock has queued behind waiters 1 and 2.
        if (i == 0) {
          EXPECT_TRUE(eventually([&] { return m.waiting() == 3; }));
        }
      }));
      ASSERT_TRUE(eventually([&] { return m.waiting() == static_cast<std::size_t>(i) + 1; })) << "waiter " << i;
      ASSERT_TRUE(calls.back()->wait_until_blocked()) << "waiter " << i;
    }
    g.unlock();  // waiter 0 holds the key as this returns
    EXPECT_FALSE(m.try_lock("k").owns_lock());
    {
      key_guard again = m.lock("k");  // queued behind waiters 1 and 2
      log.add(3);
    }
    for (auto& c : calls) c->join();
    EXPECT_EQ(log.order(), (std::vector<int>{0, 1, 2, 3})) << "fair_after " << o.fair_after.count();
    EXPECT_EQ(m.size(), 0u);
  }
}

// --- the bound ----------------------------------------------------------------------------

// Two threads keep the key busy: each try_locks in a loop and holds the key a while, so
// that when one unlocks, the other takes the freed key within nanoseconds, ahead of the
// waiter (asleep, it needs a futex wake-up first). Each wait still ends at the first
// unlock after fair_after, give or take the time the waiter needs to be scheduled.
TEST_F(KeyedMutexFairness, AWaiterPassedOverByBargingThreadsGetsTheKeyOnceItHasWaitedFairAfter) {
  constexpr auto fair_after = 20ms;
  constexpr auto slack = 200ms;  // scheduling the waiter on a loaded machine, sanitizer builds
  keyed_mutex<> m(eventual(fair_after));
  bargers b(m);
  std::atomic<std::uint64_t>& barger_locks = b.locks;
  ASSERT_TRUE(eventually([&] { return barger_locks.load(std::memory_order_relaxed) > 10; }));
  std::vector<std::chrono::nanoseconds> waits;
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(1ms);  // let the bargers run: our unlock frees the key to them
    const auto start = steady::now();
    key_guard w = m.lock("k");
    waits.push_back(steady::now() - start);
  }
  b.stop();
  for (const auto w : waits) EXPECT_LT(w, fair_after + slack);
  EXPECT_EQ(m.size(), 0u);
}

// The bound, exactly, on the table's manual clock: frozen, the waiter is never due and the
// bargers pass it over and over; advanced past fair_after, the next unlock hands it the key
// (the barger holding the key then, or one that took it just before, is the last to pass it).
TEST_F(KeyedMutexFairness, OnceTheOldestWaiterHasWaitedFairAfterTheNextUnlockHandsItTheKey) {
  keyed_mutex<> m(eventual(1ms));
  handoff::detail::lock_table& table = lock_table_access::table(m);
  std::int64_t clock = 1;
  table.use_manual_clock(clock);      // before first use; untimed requests only from here on
  table.advance_manual_clock(clock);  // builds the (threadless) timer now, not when the waiter is due
  bargers b(m);
  std::atomic<std::uint64_t>& barger_locks = b.locks;
  int checked = 0;
  for (int attempt = 0; attempt < 30 && checked == 0; ++attempt) {
    std::atomic<bool> granted{false};
    std::atomic<std::uint64_t> at_grant{0};
    std::thread waiter([&] {
      key_guard g = m.lock("k");
      at_grant.store(barger_locks.load(std::memory_order_relaxed), std::memory_order_relaxed);
      granted.store(true, std::memory_order_release);
    });
    // Queued (on the frozen clock: it is due only once the clock moves on)...
    ASSERT_TRUE(eventually([&] { return granted.load(std::memory_order_acquire) || m.waiting() == 1; }, 2s));
    const std::uint64_t at_start = barger_locks.load(std::memory_order_relaxed);
    // ...and passed over: the bargers take the freed key again and again while it waits.
    ASSERT_TRUE(eventually(
        [&] {
          return granted.load(std::memory_order_acquire) ||
                 barger_locks.load(std::memory_order_relaxed) - at_start >= 10;
        },
        2s));
    if (granted.load(std::memory_order_acquire)) {  // it won a race for the freed key: try again
      waiter.join();
      continue;
    }
    clock += 2'000'000;  // 2 ms: past fair_after
    table.advance_manual_clock(clock);
    // Counted from now: a barger that took the key just before may count itself after.
    const std::uint64_t at_due = barger_locks.load(std::memory_order_relaxed);
    waiter.join();
    EXPECT_LE(at_grant.load(std::memory_order_relaxed) - at_due, 1u);
    ++checked;
  }
  b.stop();
  EXPECT_EQ(checked, 1) << "the waiter was never passed over 10 times: not eventual";
  EXPECT_EQ(m.size(), 0u);
}

// --- tokens, timeouts, leases -------------------------------------------------------------

TEST_F(KeyedMutexFairness, UnderEventualEveryGrantsTokenIsGreaterThanEveryEarlierOne) {
  keyed_mutex<> m(eventual(200us));
  std::vector<std::uint64_t> tokens;  // appended under the key itself
  tokens.reserve(8000);
  const auto record = [&](const key_guard& g) {
    if (g.owns_lock()) tokens.push_back(g.token());
  };
  std::thread blocking([&] {
    for (int i = 0; i < 2000; ++i) record(m.lock("k"));
  });
  std::thread mixed([&] {
    for (int i = 0; i < 2000; ++i) {
      if (i % 3 == 0) record(m.try_lock("k"));
      if (i % 3 == 1) record(m.try_lock_for("k", 1ms));
      if (i % 3 == 2) record(m.lock("k"));
    }
  });
  blocking.join();
  mixed.join();
  ASSERT_GE(tokens.size(), 2000u + 667u);
  for (std::size_t i = 1; i < tokens.size(); ++i) ASSERT_LT(tokens[i - 1], tokens[i]) << "grant " << i;
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.waiting(), 0u);
}

TEST_F(KeyedMutexFairness, UnderEventualTimedWaitsThatLoseToABargerTimeOutAndLeaveNothingBehind) {
  keyed_mutex<> m(eventual(never_due));
  {
    key_guard g = m.lock("k");
    bool owned = true;
    std::thread([&] { owned = m.try_lock_for("k", 20ms).owns_lock(); }).join();
    EXPECT_FALSE(owned);
  }
  EXPECT_EQ(m.size(), 0u);
  // Against a thread that relocks in a loop, a waiter that is never due mostly loses
  // (woken, it finds the key taken again) until its deadline: each wait ends, either way.
  std::atomic<bool> stop{false};
  std::thread barger([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      key_guard g = m.lock("k");
      busy_for(barger_hold);
    }
  });
  std::uint64_t timed_out = 0;
  for (int i = 0; i < 20; ++i) {
    if (!m.try_lock_for("k", 2ms).owns_lock()) ++timed_out;
  }
  stop.store(true, std::memory_order_relaxed);
  barger.join();
  EXPECT_EQ(m.stats().timeouts, timed_out + 1);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.waiting(), 0u);
}

TEST_F(KeyedMutexFairness, UnderEventualALeaseThatRunsOutPassesTheKeyToTheWaiter) {
  keyed_mutex<> m(eventual(never_due));
  key_guard g = m.lock("k", lease{50ms});
  std::uint64_t token = 0;
  blocking_call waiter([&] { token = m.lock("k").token(); });
  waiter.join();  // granted when the lease runs out: the timer frees the key and wakes it
  EXPECT_TRUE(g.expired());
  EXPECT_GT(token, g.token());
  g.unlock();  // does nothing: the lease expired
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.stats().lease_expiries, 1u);
}

// --- async waiters ------------------------------------------------------------------------

TEST_F(KeyedMutexFairness, UnderEventualCallbackAndCoroutineWaitersAreHandedTheKey) {
  keyed_mutex<> m(eventual(never_due));
  key_guard g = m.lock("k");
  key_guard kept;
  m.lock_async("k", [&](key_guard w) { kept = std::move(w); });
  async_outcome out;
  await_lock([&] { return m.async_lock("k"); }, &out, true);
  g.unlock();  // hands the key to the callback, which runs here
  ASSERT_TRUE(kept.owns_lock());
  EXPECT_FALSE(m.try_lock("k").owns_lock());  // handed over: never free in between
  kept.unlock();                              // hands it to the coroutine, resumed here
  ASSERT_TRUE(out.done());
  EXPECT_TRUE(out.owned);
  EXPECT_GT(out.token, kept.token());
  EXPECT_FALSE(m.try_lock("k").owns_lock());
  out.kept.unlock();
  EXPECT_EQ(m.size(), 0u);
}

}  // namespace
