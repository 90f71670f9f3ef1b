// handoff::redis::keyed_mutex against a real redis-server: one test per point of
// the contract in include/handoff/redis/keyed_mutex.hpp: exclusion and FIFO across
// processes and instances, try_lock and timeouts, leases and extend, fencing tokens,
// the watchdog, a server that dies mid-hold, dead waiters, async waiting, lock_all and
// with_lock, options, and what stays on the server.
//
// Each test starts its own server (tests/redis/redis_server.hpp) on a free loopback port,
// so that ctest -j runs them side by side and a test may kill and restart its server.
// Cross-process tests drive tests/redis/redis_lock_helper.cpp with posix_spawn. Waiters are
// put in a known order by polling the key's queue on the server (LLEN) between requests.
// Time bounds are generous (seconds), for loaded machines and sanitizer builds.
#include <handoff/actor.hpp>
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <latch>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../unit/test_support.hpp"
#include "../unit/test_timeout.hpp"
#include "redis_server.hpp"
#include "redis_test_support.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::lease;
using handoff::lock_expired;
using handoff::redis::keyed_mutex;
using handoff::redis::options;
using handoff::test::eventually;
using handoff::test::fire_and_forget;
using handoff::test::helper_process;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::since;
using handoff::test::test_timeout;
using steady = std::chrono::steady_clock;
using redis_error = handoff::redis::error;

// --- helpers ----------------------------------------------------------------------------

// One test's server and its options: short intervals so that the suite stays fast, with
// margins that hold on a loaded machine.
class RedisKeyedMutex : public testing::Test {
 protected:
  options opts(std::chrono::milliseconds recheck = 200ms) const {
    options o;
    o.port = server_.port();
    o.connect_timeout = 1s;
    o.command_timeout = 2s;
    o.recheck_interval = recheck;
    o.watchdog_lease = 5s;
    return o;
  }
  std::string port() const { return std::to_string(server_.port()); }

  test_timeout timeout_{90s};
  redis_server server_;
  raw_redis raw_{server_.port()};
};

// --- mutual exclusion ---------------------------------------------------------------------

TEST_F(RedisKeyedMutex, ExcludesHoldersInOtherProcesses) {
  constexpr int processes = 3;
  constexpr int iterations = 200;
  std::vector<std::unique_ptr<helper_process>> helpers;
  for (int i = 0; i < processes; ++i) {
    helpers.push_back(std::make_unique<helper_process>(
        std::vector<std::string>{port(), "200", "shared", "count", std::to_string(iterations), "counter"}));
  }
  for (auto& h : helpers) EXPECT_EQ(h->wait(60s), 0);
  // An unprotected GET/SET under the lock: any overlap of two holders loses an increment.
  EXPECT_EQ(raw_.string({"GET", "counter"}), std::to_string(processes * iterations));
  // Tokens, appended under the lock, increase across the processes' grants.
  const std::vector<std::string> tokens = raw_.strings({"LRANGE", "counter:tokens", "0", "-1"});
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(processes * iterations));
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    EXPECT_LT(std::stoull(tokens[i - 1]), std::stoull(tokens[i])) << "at " << i;
  }
}

TEST_F(RedisKeyedMutex, ExcludesHoldersInOtherThreadsWithTheirOwnInstances) {
  constexpr int threads = 4;
  constexpr int iterations = 60;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<long> counter{0};
  std::atomic<std::uint64_t> last_token{0};
  std::atomic<int> token_errors{0};
  std::vector<std::unique_ptr<keyed_mutex>> mutexes;
  for (int i = 0; i < threads; ++i) mutexes.push_back(std::make_unique<keyed_mutex>(opts()));
  handoff::test::run_threads(threads, [&](int t) {
    for (int i = 0; i < iterations; ++i) {
      auto g = mutexes[static_cast<std::size_t>(t)]->lock("shared");
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      // A read-modify-write that loses updates if two holders overlap (atomic accesses
      // only so that ThreadSanitizer sees no data race: Redis orders the holders).
      const long v = counter.load(std::memory_order_relaxed);
      std::this_thread::yield();
      counter.store(v + 1, std::memory_order_relaxed);
      if (g.token() <= last_token.load(std::memory_order_relaxed)) token_errors.fetch_add(1);
      last_token.store(g.token(), std::memory_order_relaxed);
      inside.fetch_sub(1);
      g.unlock();
    }
  });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter.load(), threads * iterations);
  EXPECT_EQ(token_errors.load(), 0);
}

// A handler of A posts to an idle actor J (this thread now owns J only through its run
// queue), then blocks on a held key: J runs before the thread blocks, not after the lock.
TEST_F(RedisKeyedMutex, ABlockingLockInsideAHandlerFirstRunsTheThreadsQueue) {
  keyed_mutex holder_side(opts());
  keyed_mutex m(opts());
  auto held = holder_side.lock("k");
  handoff::actor<int> a{0};
  handoff::actor<int> j{0};
  std::atomic<bool> j_ran{false};
  std::atomic<bool> locked{false};
  std::jthread handler_thread([&] {
    a.post([&](int&) {
      j.post([&](int&) { j_ran.store(true); });
      auto g = m.lock("k");
      locked.store(g.owns_lock());
    });
  });
  EXPECT_TRUE(eventually([&] { return j_ran.load(); })) << "J waited for the lock to return";
  EXPECT_FALSE(locked.load());
  held.unlock();
  handler_thread.join();
  EXPECT_TRUE(locked.load());
}

TEST_F(RedisKeyedMutex, ASecondLockOfAHeldKeyOnTheSameInstanceIsNotGranted) {
  keyed_mutex m(opts());
  auto g = m.lock("k");
  EXPECT_FALSE(m.try_lock("k").owns_lock());
  EXPECT_FALSE(m.try_lock_for("k", 200ms).owns_lock());
  g.unlock();
  EXPECT_TRUE(m.try_lock("k").owns_lock());
}

// --- FIFO ---------------------------------------------------------------------------------

TEST_F(RedisKeyedMutex, GrantsWaitersInOtherProcessesInRequestOrder) {
  keyed_mutex m(opts());
  auto g = m.lock("fifo");
  constexpr int waiters = 4;
  std::vector<std::unique_ptr<helper_process>> helpers;
  for (int i = 0; i < waiters; ++i) {
    // A long re-check interval: a waiter is granted by the release's notification.
    helpers.push_back(std::make_unique<helper_process>(
        std::vector<std::string>{port(), "1000", "fifo", "append", "order", std::to_string(i)}));
    ASSERT_TRUE(raw_.wait_queue_length("fifo", i + 1)) << "waiter " << i << " never queued";
  }
  g.unlock();
  for (auto& h : helpers) EXPECT_EQ(h->wait(), 0);
  EXPECT_EQ(raw_.strings({"LRANGE", "order", "0", "-1"}), (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST_F(RedisKeyedMutex, GrantsWaitersOfOtherInstancesInRequestOrder) {
  keyed_mutex holder(opts(1000ms));
  auto g = holder.lock("fifo");
  constexpr int waiters = 4;
  std::vector<std::unique_ptr<keyed_mutex>> mutexes;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::jthread> threads;
  for (int i = 0; i < waiters; ++i) {
    mutexes.push_back(std::make_unique<keyed_mutex>(opts(1000ms)));
    threads.emplace_back([&, i] {
      auto w = mutexes[static_cast<std::size_t>(i)]->lock("fifo");
      const std::lock_guard lock(mu);
      order.push_back(i);
    });
    ASSERT_TRUE(raw_.wait_queue_length("fifo", i + 1)) << "waiter " << i << " never queued";
  }
  g.unlock();
  threads.clear();  // joins
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(RedisKeyedMutex, AWaiterIsWokenByTheReleaseNotByItsRecheck) {
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts(20s));  // re-checks far later than the test's bound
  auto g = holder.lock("k", lease{30s});
  std::atomic<bool> granted{false};
  std::jthread t([&] {
    auto w = waiter.lock("k");
    granted.store(w.owns_lock());
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(granted.load());
  const auto t0 = steady::now();
  g.unlock();
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 5s));
  EXPECT_LT(since(t0), 5s);
}

// A waiter whose client re-checks rarely (long heartbeat) must keep its place when a
// waiter of a client with a short heartbeat leaves the queue: the queue's expiry set by the
// short-heartbeat waiter must not take the long-heartbeat waiter out with it.
TEST_F(RedisKeyedMutex, AWaiterKeepsItsPlaceWhenAWaiterWithAShorterHeartbeatGivesUp) {
  keyed_mutex holder(opts());
  keyed_mutex slow(opts(3s));    // heartbeat 9 s
  keyed_mutex fast(opts(50ms));  // heartbeat 150 ms
  keyed_mutex late(opts(3s));
  auto g = holder.lock("k", lease{30s});
  std::mutex mu;
  std::vector<std::string> order;
  std::jthread first([&] {
    auto w = slow.lock("k");
    const std::lock_guard lock(mu);
    order.emplace_back("first");
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  EXPECT_FALSE(fast.try_lock_for("k", 300ms).owns_lock());  // queues, refreshes, gives up
  std::this_thread::sleep_for(500ms);                       // past the fast waiter's heartbeat
  EXPECT_EQ(raw_.queue_length("k"), 1) << "the first waiter was dropped from the queue";
  std::jthread second([&] {
    auto w = late.lock("k");
    const std::lock_guard lock(mu);
    order.emplace_back("second");
  });
  EXPECT_TRUE(raw_.wait_queue_length("k", 2, 3s));
  g.unlock();
  first.join();
  second.join();
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
}

// --- try_lock and timeouts ----------------------------------------------------------------

TEST_F(RedisKeyedMutex, TryLockFailsWhileHeldAndDoesNotJumpANonEmptyQueue) {
  keyed_mutex m(opts());
  keyed_mutex other(opts());
  auto g = m.lock("k");
  EXPECT_FALSE(other.try_lock("k").owns_lock());
  EXPECT_EQ(raw_.queue_length("k"), 0) << "try_lock must never queue";

  // A waiter in a stopped process, and the holder's lease runs out: the key is free, but
  // someone waits.
  auto leased = other.lock("j", lease{300ms});
  helper_process waiter({port(), "3000", "j", "append", "order", "waiter"});
  ASSERT_TRUE(raw_.wait_queue_length("j", 1));
  waiter.signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return !raw_.locked("j"); }));
  ASSERT_EQ(raw_.queue_length("j"), 1);
  EXPECT_FALSE(other.try_lock("j").owns_lock()) << "try_lock jumped the queue";
  EXPECT_TRUE(raw_.locked("j")) << "the key is passed to the waiter in front";
  EXPECT_EQ(raw_.queue_length("j"), 0);
  EXPECT_FALSE(other.try_lock("j", lease{10s}).owns_lock());
  EXPECT_FALSE(m.try_lock_for("j", 0ms).owns_lock());
  waiter.signal(SIGCONT);
  EXPECT_EQ(waiter.wait(), 0);
  EXPECT_EQ(raw_.strings({"LRANGE", "order", "0", "-1"}), std::vector<std::string>{"waiter"});
  EXPECT_TRUE(other.try_lock("j").owns_lock());
}

TEST_F(RedisKeyedMutex, TryLockForTimesOutWhileQueuedAndIsNeverGrantedAfterwards) {
  keyed_mutex holder(opts());
  keyed_mutex timed(opts());
  keyed_mutex next(opts());
  auto g = holder.lock("k");
  const auto t0 = steady::now();
  auto t = timed.try_lock_for("k", 300ms);
  const auto waited = since(t0);
  EXPECT_FALSE(t.owns_lock());
  EXPECT_EQ(t.token(), 0U);
  EXPECT_GE(waited, 290ms);
  EXPECT_LT(waited, 5s);
  EXPECT_EQ(raw_.queue_length("k"), 0) << "the timed-out waiter stayed in the queue";
  EXPECT_EQ(raw_.integer({"ZCARD", raw_redis::waiters_key("k")}), 0);

  std::atomic<bool> granted{false};
  std::jthread waiter([&] {
    auto w = next.lock("k");
    granted.store(w.owns_lock());
    std::this_thread::sleep_for(300ms);  // held while the test looks at the timed-out guard
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  g.unlock();
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 5s)) << "the next waiter was not granted";
  EXPECT_FALSE(t.owns_lock());
  waiter.join();
  // Nobody holds the key: the timed-out request was not granted behind the scenes.
  EXPECT_FALSE(raw_.locked("k"));
  EXPECT_TRUE(timed.try_lock("k").owns_lock());
}

TEST_F(RedisKeyedMutex, TryLockUntilGrantsWhenTheHolderUnlocksInTime) {
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts());
  auto g = holder.lock("k");
  std::jthread unlocker([&] {
    std::this_thread::sleep_for(200ms);
    g.unlock();
  });
  auto w = waiter.try_lock_until("k", steady::now() + 10s);
  EXPECT_TRUE(w.owns_lock());
  EXPECT_EQ(w.key(), "k");
}

// --- leases -------------------------------------------------------------------------------

TEST_F(RedisKeyedMutex, ALeaseExpiresOnTheServerAndTheNextWaiterGetsTheKey) {
  keyed_mutex m(opts());
  keyed_mutex other(opts(5s));  // woken by the lease's end (PTTL), not by its re-check
  auto g = m.lock("k", lease{600ms});
  ASSERT_TRUE(g.owns_lock());
  EXPECT_EQ(g.lease_duration(), 600ms);
  const long long pttl = raw_.pttl("k");
  EXPECT_GT(pttl, 0);
  EXPECT_LE(pttl, 600);

  std::promise<handoff::redis::guard> next;
  std::jthread waiter([&] { next.set_value(other.lock("k")); });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  ASSERT_TRUE(eventually([&] { return g.expired(); }, 5s));
  EXPECT_FALSE(g.owns_lock());
  EXPECT_THROW(g.check(), lock_expired);
  auto f = next.get_future();
  ASSERT_EQ(f.wait_for(4s), std::future_status::ready) << "the next waiter did not get the key";
  auto w = f.get();
  EXPECT_TRUE(w.owns_lock());
  EXPECT_GT(w.token(), g.token()) << "the stale holder's token must be lower";
  EXPECT_NO_THROW(g.unlock());  // a no-op: must not release the new holder's key
  EXPECT_TRUE(g.expired());
  EXPECT_TRUE(raw_.locked("k"));
  EXPECT_TRUE(w.owns_lock());
  EXPECT_FALSE(m.try_lock("k").owns_lock());
}

TEST_F(RedisKeyedMutex, ExtendKeepsALeaseAliveAndReturnsFalseOnceLost) {
  keyed_mutex m(opts());
  auto g = m.lock("k", lease{800ms});
  for (int i = 0; i < 4; ++i) {  // 1.2 s in all, longer than the lease
    std::this_thread::sleep_for(300ms);
    ASSERT_TRUE(g.extend(800ms)) << "round " << i;
  }
  EXPECT_TRUE(g.owns_lock());
  EXPECT_GT(raw_.pttl("k"), 0);
  EXPECT_EQ(g.lease_duration(), 800ms);
  EXPECT_THROW((void)g.extend(0ms), std::invalid_argument);

  ASSERT_TRUE(g.extend(lease{5s}));  // the lease type, as lock() takes it
  EXPECT_GT(raw_.pttl("k"), 1000);
  EXPECT_EQ(g.lease_duration(), 5s);
  // Lost on the server while the local clock still says held (data loss): extend says so.
  raw_.command({"DEL", raw_redis::lock_key("k")});
  EXPECT_FALSE(g.extend(5s));
  EXPECT_TRUE(g.expired());
  EXPECT_FALSE(g.owns_lock());
  EXPECT_THROW(g.check(), lock_expired);

  // Lost by running out.
  auto h = m.lock("j", lease{300ms});
  ASSERT_TRUE(eventually([&] { return h.expired(); }, 5s));
  keyed_mutex other(opts());
  auto o = other.lock("j");
  EXPECT_FALSE(h.extend(1s));
  EXPECT_TRUE(o.owns_lock());
}

TEST_F(RedisKeyedMutex, ExtendingAnotherHoldersKeyFailsOnTheServer) {
  keyed_mutex m(opts());
  keyed_mutex other(opts());
  auto g = m.lock("k", lease{30s});
  // The key is taken over behind this guard's back (an operator, or a lost lease whose
  // local clock ran slow): compare-on-token keeps the new holder's key untouched.
  raw_.command({"SET", raw_redis::lock_key("k"), "someone-else", "PX", "30000"});
  EXPECT_FALSE(g.extend(60s));
  EXPECT_LE(raw_.pttl("k"), 30000);
  EXPECT_NO_THROW(g.unlock());
  EXPECT_EQ(raw_.string({"GET", raw_redis::lock_key("k")}), "someone-else");
}

TEST_F(RedisKeyedMutex, UnlockReleasesOnlyItsOwnGrant) {
  keyed_mutex m(opts());
  auto g = m.lock("k", lease{30s});
  raw_.command({"SET", raw_redis::lock_key("k"), "someone-else", "PX", "30000"});
  EXPECT_NO_THROW(g.unlock());
  EXPECT_FALSE(g.owns_lock());
  EXPECT_EQ(raw_.string({"GET", raw_redis::lock_key("k")}), "someone-else");
}

// --- fencing tokens -----------------------------------------------------------------------

TEST_F(RedisKeyedMutex, FencingTokensIncreaseAcrossGrantsDataLossAndARestart) {
  std::uint64_t last = 0;
  auto grant = [&](keyed_mutex& m, const char* what) {
    auto g = m.lock("k");
    EXPECT_GT(g.token(), last) << what;
    last = g.token();
    g.unlock();
    EXPECT_EQ(g.token(), last) << "kept after unlock";
  };
  {
    keyed_mutex a(opts());
    keyed_mutex b(opts());
    for (int i = 0; i < 3; ++i) {
      grant(a, "instance a");
      grant(b, "instance b");
    }
    auto t = a.try_lock("k");
    ASSERT_TRUE(t.owns_lock());
    EXPECT_GT(t.token(), last);
    last = t.token();
    t.unlock();
    // Other keys have counters of their own, also increasing.
    auto o1 = b.lock("other");
    auto o2 = std::move(o1);
    o2.unlock();
    auto o3 = b.lock("other");
    EXPECT_GT(o3.token(), o2.token());
    o3.unlock();

    // The counter is lost (expired, evicted, FLUSHALL): tokens still increase.
    raw_.command({"DEL", raw_redis::fence_key("k")});
    grant(a, "after the fence key was deleted");
    grant(b, "after the fence key was deleted");
    const long long fence_ttl = raw_.integer({"PTTL", raw_redis::fence_key("k")});
    EXPECT_GT(fence_ttl, 0);
    EXPECT_LE(fence_ttl, 3600 * 1000);
  }
  server_.kill();
  server_.restart();
  keyed_mutex c(opts());
  grant(c, "after a restart of the server");
  grant(c, "after a restart of the server");
}

// --- the watchdog -------------------------------------------------------------------------

TEST_F(RedisKeyedMutex, TheWatchdogKeepsALeaselessHoldAndStopsAfterUnlock) {
  options o = opts();
  o.watchdog_lease = 750ms;  // renewed every 250 ms
  keyed_mutex m(o);
  raw_redis raw(server_.port());
  auto g = m.lock("k");
  EXPECT_EQ(g.lease_duration(), 750ms);
  const long long first = raw.pttl("k");
  EXPECT_GT(first, 0);
  EXPECT_LE(first, 750);
  std::this_thread::sleep_for(2400ms);  // more than 3 leases
  EXPECT_TRUE(g.owns_lock());
  EXPECT_FALSE(g.expired());
  EXPECT_GT(raw.pttl("k"), 0);
  keyed_mutex other(opts());
  EXPECT_FALSE(other.try_lock("k").owns_lock());

  g.unlock();
  EXPECT_FALSE(raw.locked("k"));
  const long long calls = raw.evalsha_calls();
  EXPECT_GT(calls, 0) << "the library's scripts run as EVALSHA: this check would see nothing";
  std::this_thread::sleep_for(1500ms);  // two leases: several renewals would be due by now
  EXPECT_EQ(raw.evalsha_calls(), calls) << "a renewal was sent after unlock";
  EXPECT_FALSE(raw.locked("k"));

  // Destroying the guard stops it too.
  {
    auto h = m.lock("j");
    std::this_thread::sleep_for(1s);
    EXPECT_TRUE(h.owns_lock());
  }
  EXPECT_FALSE(raw.locked("j"));
  const long long calls2 = raw.evalsha_calls();
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(raw.evalsha_calls(), calls2) << "a renewal was sent after the guard was destroyed";
  EXPECT_FALSE(raw.locked("j"));
}

TEST_F(RedisKeyedMutex, TheWatchdogRenewsTheLeaseGivenToExtend) {
  options o = opts();
  o.watchdog_lease = 600ms;
  keyed_mutex m(o);
  auto g = m.lock("k");
  ASSERT_TRUE(g.extend(3s));
  EXPECT_EQ(g.lease_duration(), 3s);
  std::this_thread::sleep_for(1500ms);  // past a renewal at 1 s
  // Renewed with 3 s: about 2.5 s left; not renewed yet (a slow machine): about 1.5 s.
  const long long pttl = raw_.pttl("k");
  EXPECT_GT(pttl, 700) << "renewed with the watchdog's 600 ms instead of extend's 3 s";
  EXPECT_TRUE(g.owns_lock());
}

TEST_F(RedisKeyedMutex, AHoldTheWatchdogCannotRenewExpires) {
  options o = opts();
  o.watchdog_lease = 600ms;
  keyed_mutex m(o);
  auto g = m.lock("k");
  // Taken over on the server: the next renewal finds the token changed.
  raw_.command({"SET", raw_redis::lock_key("k"), "someone-else", "PX", "30000"});
  EXPECT_TRUE(eventually([&] { return g.expired(); }, 5s));
  EXPECT_FALSE(g.owns_lock());
  EXPECT_THROW(g.check(), lock_expired);
  EXPECT_NO_THROW(g.unlock());
  EXPECT_EQ(raw_.string({"GET", raw_redis::lock_key("k")}), "someone-else");
}

// --- a server that dies -------------------------------------------------------------------

TEST_F(RedisKeyedMutex, AKilledServerGivesErrorsPromptlyAndARestartedOneWorksAgain) {
  keyed_mutex m(opts());
  keyed_mutex m2(opts());
  auto g = m.lock("k", lease{30s});

  // A blocked waiter in another thread, and an async one.
  std::promise<std::string> blocked;
  std::jthread waiter([&] {
    try {
      auto w = m2.lock("k");
      blocked.set_value(w.owns_lock() ? "granted" : "empty guard");
    } catch (const redis_error& e) {
      blocked.set_value(std::string("error: ") + e.what());
    }
  });
  std::promise<std::string> async;
  m2.lock_async("k", [&](handoff::redis::guard w, const std::exception_ptr& e) {
    if (e == nullptr) {
      async.set_value(w.owns_lock() ? "granted" : "empty guard");
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const redis_error& x) {
      async.set_value(std::string("error: ") + x.what());
    } catch (...) {
      async.set_value("other exception");
    }
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 2));

  keyed_mutex m3(opts(20s));  // re-checks far later than the test's bounds

  server_.kill();
  auto t0 = steady::now();
  EXPECT_THROW(g.unlock(), redis_error);
  EXPECT_LT(since(t0), 3s);
  EXPECT_FALSE(g.owns_lock()) << "empty after a failed unlock";
  EXPECT_NO_THROW(g.unlock());

  t0 = steady::now();
  EXPECT_THROW((void)m.lock("j"), redis_error);
  EXPECT_LT(since(t0), 3s);
  t0 = steady::now();
  EXPECT_THROW((void)m.try_lock("j"), redis_error);
  EXPECT_LT(since(t0), 3s);
  t0 = steady::now();
  EXPECT_THROW((void)m.try_lock_for("j", 1s), redis_error);
  EXPECT_LT(since(t0), 4s);

  auto fb = blocked.get_future();
  ASSERT_EQ(fb.wait_for(5s), std::future_status::ready) << "a blocked lock() hangs on a dead server";
  EXPECT_EQ(fb.get().rfind("error: ", 0), 0U);
  auto fa = async.get_future();
  ASSERT_EQ(fa.wait_for(5s), std::future_status::ready) << "an async waiter hangs on a dead server";
  EXPECT_EQ(fa.get().rfind("error: ", 0), 0U);
  waiter.join();

  server_.restart();
  auto a = m.lock("k");
  EXPECT_TRUE(a.owns_lock());
  auto b = m2.try_lock("j");
  EXPECT_TRUE(b.owns_lock());
  EXPECT_FALSE(m2.try_lock("k").owns_lock());
  a.unlock();
  // Notifications work again: m3's subscriber reconnected (a waiter with a long re-check
  // is woken by the release, or by the re-check that follows the reconnection).
  auto c = m.lock("n", lease{30s});
  std::atomic<bool> granted{false};
  std::jthread w3([&] {
    auto x = m3.lock("n");
    granted.store(x.owns_lock());
  });
  ASSERT_TRUE(raw_redis(server_.port()).wait_queue_length("n", 1));
  c.unlock();
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 5s));
}

TEST_F(RedisKeyedMutex, AWatchdogHoldExpiresWhenTheServerIsGone) {
  options o = opts();
  o.watchdog_lease = 600ms;
  keyed_mutex m(o);
  auto g = m.lock("k");
  server_.kill();
  EXPECT_TRUE(eventually([&] { return g.expired(); }, 5s));
  EXPECT_FALSE(g.owns_lock());
  EXPECT_NO_THROW(g.unlock());  // expired: nothing to release
  server_.restart();
  EXPECT_TRUE(m.lock("k").owns_lock());
}

// --- dead waiters -------------------------------------------------------------------------

TEST_F(RedisKeyedMutex, ADeadWaiterIsDroppedAfterItsHeartbeatAndTheNextWaiterIsGranted) {
  keyed_mutex m(opts());
  keyed_mutex live(opts(200ms));
  auto g = m.lock("k", lease{30s});
  helper_process dead({port(), "200", "k", "wait"});  // heartbeat 600 ms
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::atomic<bool> granted{false};
  std::jthread waiter([&] {
    auto w = live.lock("k");
    granted.store(w.owns_lock());
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 2));
  dead.kill();
  g.unlock();  // notifies the dead waiter, first in line
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 6s)) << "the live waiter waits behind a dead one";
  waiter.join();
  EXPECT_EQ(raw_.queue_length("k"), 0);
  EXPECT_EQ(raw_.integer({"EXISTS", raw_redis::waiters_key("k")}), 0);
}

TEST_F(RedisKeyedMutex, TryLockSucceedsOnceTheOnlyWaiterIsDeadAndItsHeartbeatPassed) {
  keyed_mutex m(opts());
  auto g = m.lock("k", lease{30s});
  helper_process dead({port(), "500", "k", "wait"});  // heartbeat 1.5 s
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  dead.kill();
  g.unlock();
  EXPECT_FALSE(m.try_lock("k").owns_lock()) << "a waiter within its heartbeat keeps its place";
  handoff::redis::guard t;
  EXPECT_TRUE(eventually(
      [&] {
        t = m.try_lock("k");
        return t.owns_lock();
      },
      8s));
  EXPECT_EQ(raw_.queue_length("k"), 0);
}

TEST_F(RedisKeyedMutex, ADeadHoldersWatchdogLeaseFreesTheKey) {
  keyed_mutex m(opts());
  // The helper holds the key with its 10 s watchdog lease: shorten it, then kill it.
  helper_process holder({port(), "200", "k", "wait"});
  ASSERT_TRUE(eventually([&] { return raw_.locked("k"); }));
  holder.kill();
  raw_.command({"PEXPIRE", raw_redis::lock_key("k"), "500"});
  auto t0 = steady::now();
  auto g = m.try_lock_for("k", 10s);
  EXPECT_TRUE(g.owns_lock());
  EXPECT_LT(since(t0), 5s);
}

// --- async --------------------------------------------------------------------------------

struct async_outcome {
  std::promise<handoff::redis::guard> guard;
  std::promise<std::string> error;
};

fire_and_forget co_lock(keyed_mutex& m, std::string key, std::optional<std::chrono::milliseconds> wait,
                        async_outcome& out) {
  try {
    // (Not `wait ? co_await a : co_await b`: GCC 12 miscompiles co_await in a conditional.)
    handoff::redis::guard g;
    if (wait) {
      g = co_await m.async_lock(std::move(key), *wait);
    } else {
      g = co_await m.async_lock(std::move(key));
    }
    out.guard.set_value(std::move(g));
  } catch (const redis_error& e) {
    out.error.set_value(e.what());
  }
}

TEST_F(RedisKeyedMutex, CoAwaitAsyncLockResumesWithTheLockAfterTheHolderUnlocks) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k");
  async_outcome out;
  auto f = out.guard.get_future();
  co_lock(m, "k", std::nullopt, out);
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  EXPECT_EQ(f.wait_for(300ms), std::future_status::timeout) << "resumed while the key is held";
  g.unlock();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  auto a = f.get();
  EXPECT_TRUE(a.owns_lock());
  EXPECT_GT(a.token(), g.token());
  EXPECT_EQ(a.key(), "k");
  a.unlock();
  EXPECT_FALSE(raw_.locked("k"));

  // On a free key it resumes with the lock at once (on the background thread).
  async_outcome out2;
  auto f2 = out2.guard.get_future();
  co_lock(m, "free", std::nullopt, out2);
  ASSERT_EQ(f2.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(f2.get().owns_lock());
}

TEST_F(RedisKeyedMutex, CoAwaitAsyncLockWithAWaitTimeThatRunsOutGivesAnEmptyGuard) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k");
  async_outcome out;
  auto f = out.guard.get_future();
  const auto t0 = steady::now();
  co_lock(m, "k", 300ms, out);
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_GE(since(t0), 290ms);
  EXPECT_FALSE(f.get().owns_lock());
  EXPECT_EQ(raw_.queue_length("k"), 0) << "the timed-out request stayed in the queue";
  g.unlock();
  EXPECT_TRUE(m.try_lock("k").owns_lock()) << "a timed-out request blocks the key";
}

TEST_F(RedisKeyedMutex, CoAwaitAsyncLockThrowsTheRedisError) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k", lease{30s});
  async_outcome out;
  auto f = out.error.get_future();
  co_lock(m, "k", std::nullopt, out);
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  server_.kill();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready) << "the coroutine was not resumed with the error";
  EXPECT_FALSE(f.get().empty());
  EXPECT_THROW(g.unlock(), redis_error);
}

TEST_F(RedisKeyedMutex, LockAsyncCallsBackWithTheGuardOrAnEmptyOneOnTimeout) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k");
  struct result {
    std::promise<void> done;
    handoff::redis::guard g;
    std::exception_ptr e;
    std::thread::id thread;
  };
  auto callback = [](result& r) {
    return [&r](handoff::redis::guard g, std::exception_ptr e) {
      r.g = std::move(g);
      r.e = std::move(e);
      r.thread = std::this_thread::get_id();
      r.done.set_value();
    };
  };
  result timed;
  result granted;
  auto ft = timed.done.get_future();
  auto fg = granted.done.get_future();
  m.lock_async("k", callback(granted));
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  m.lock_async("k", callback(timed), 300ms);
  ASSERT_EQ(ft.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(timed.g.owns_lock());
  EXPECT_EQ(timed.e, nullptr);
  EXPECT_NE(timed.thread, std::this_thread::get_id());
  EXPECT_EQ(fg.wait_for(100ms), std::future_status::timeout);
  g.unlock();
  ASSERT_EQ(fg.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(granted.g.owns_lock());
  EXPECT_EQ(granted.e, nullptr);

  // With a lease.
  granted.g.unlock();
  result leased;
  auto fl = leased.done.get_future();
  m.lock_async("k", callback(leased), lease{20s});
  ASSERT_EQ(fl.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(leased.g.owns_lock());
  EXPECT_EQ(leased.g.lease_duration(), 20s);
  EXPECT_GT(raw_.pttl("k"), 10000);

  // With a wait and a lease: granted at once when the key is free.
  leased.g.unlock();
  result both;
  auto fb = both.done.get_future();
  m.lock_async("k", callback(both), 1s, lease{15s});
  ASSERT_EQ(fb.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(both.g.owns_lock());
  EXPECT_EQ(both.g.lease_duration(), 15s);
}

// --- lock_all and with_lock ---------------------------------------------------------------

TEST_F(RedisKeyedMutex, LockAllWithOverlappingKeysFromTwoInstancesDoesNotDeadlock) {
  keyed_mutex a(opts());
  keyed_mutex b(opts());
  constexpr int iterations = 40;
  std::atomic<int> inside_c{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> acquired{0};
  auto body = [&](keyed_mutex& m, std::vector<std::string> keys) {
    for (int i = 0; i < iterations; ++i) {
      auto all = m.lock_all(keys);
      if (inside_c.fetch_add(1) != 0) overlaps.fetch_add(1);  // both sets hold "c"
      std::this_thread::yield();
      inside_c.fetch_sub(1);
      acquired.fetch_add(1);
    }
  };
  {
    std::jthread t1([&] { body(a, {"a", "b", "c"}); });
    std::jthread t2([&] { body(b, {"d", "c", "b", "d"}); });
  }
  EXPECT_EQ(acquired.load(), 2 * iterations);
  EXPECT_EQ(overlaps.load(), 0);
  auto all = a.lock_all({"b", "a", "b"});
  EXPECT_TRUE(raw_.locked("a"));
  EXPECT_TRUE(raw_.locked("b"));
}

TEST_F(RedisKeyedMutex, WithLockReturnsTheResultAndReleasesOnThrow) {
  keyed_mutex m(opts());
  keyed_mutex other(opts());
  const int r = m.with_lock("k", [&] {
    EXPECT_TRUE(raw_.locked("k"));
    EXPECT_FALSE(other.try_lock("k").owns_lock());
    return 42;
  });
  EXPECT_EQ(r, 42);
  EXPECT_FALSE(raw_.locked("k"));
  EXPECT_THROW(m.with_lock("k", [&]() -> int { throw std::runtime_error("from f"); }), std::runtime_error);
  EXPECT_FALSE(raw_.locked("k"));
  EXPECT_TRUE(other.try_lock("k").owns_lock());
  int calls = 0;
  m.with_lock("v", [&] { ++calls; });
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(raw_.locked("v"));
}

TEST_F(RedisKeyedMutex, MoveAssigningAGuardReleasesWhatItHeld) {
  keyed_mutex m(opts());
  auto a = m.lock("a");
  auto b = m.lock("b");
  const std::uint64_t token_b = b.token();
  a = std::move(b);
  EXPECT_FALSE(raw_.locked("a")) << "the key the guard held before the assignment";
  EXPECT_TRUE(raw_.locked("b"));
  EXPECT_TRUE(a.owns_lock());
  EXPECT_EQ(a.key(), "b");
  EXPECT_EQ(a.token(), token_b);
  EXPECT_FALSE(b.owns_lock());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b.key(), "");       // NOLINT(bugprone-use-after-move)
  handoff::redis::guard c(std::move(a));
  EXPECT_TRUE(c.owns_lock());
  c = handoff::redis::guard();
  EXPECT_FALSE(raw_.locked("b"));
}

// --- options ------------------------------------------------------------------------------

TEST(RedisKeyedMutexOptions, AWrongOrMissingPasswordFailsAtConstruction) {
  test_timeout timeout{60s};
  redis_server server({"--requirepass", "s3cret"});
  options o;
  o.port = server.port();
  o.password = "wrong";
  EXPECT_THROW(keyed_mutex{o}, redis_error);
  o.password.clear();
  EXPECT_THROW(keyed_mutex{o}, redis_error);
  o.password = "s3cret";
  keyed_mutex m(o);
  EXPECT_TRUE(m.lock("k").owns_lock());
}

TEST_F(RedisKeyedMutex, MinReplicasReturnsAGrantOnlyOnceAReplicaHoldsItAndGivesTheKeyUpOtherwise) {
  options o = opts();
  o.min_replicas = 1;
  o.command_timeout = 200ms;
  keyed_mutex careful(o);
  keyed_mutex plain(opts());
  // No replica: every way of taking the key throws once WAIT runs out, and leaves it free.
  const auto t0 = steady::now();
  EXPECT_THROW((void)careful.lock("k"), redis_error);
  EXPECT_LT(since(t0), 2s);
  EXPECT_THROW((void)careful.try_lock("k"), redis_error);
  EXPECT_FALSE(raw_.locked("k"));
  {  // a hand-off, announced to an async waiter, is refused too
    auto g = plain.lock("k");
    std::promise<std::exception_ptr> failed;
    careful.lock_async("k", [&](handoff::redis::guard w, std::exception_ptr e) {
      EXPECT_FALSE(w.owns_lock());
      failed.set_value(e);
    });
    ASSERT_TRUE(raw_.wait_queue_length("k", 1));
    g.unlock();
    auto f = failed.get_future();
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
    EXPECT_NE(f.get(), nullptr);
  }
  EXPECT_TRUE(eventually([&] { return !raw_.locked("k"); }, 2s));
  EXPECT_TRUE(plain.try_lock("k").owns_lock());

  // With a replica: granted, and the replica holds the grant when lock() returns.
  raw_.command({"CONFIG", "SET", "repl-diskless-sync-delay", "0"});  // sync at once, not after 5 s
  redis_server replica({"--replicaof", "127.0.0.1", port()});
  raw_redis on_replica(replica.port());
  ASSERT_TRUE(eventually(
      [&] {
        raw_.command({"SET", "synced", "1"});  // a write of raw_'s own, which WAIT waits for
        return raw_.integer({"WAIT", "1", "100"}) == 1;
      },
      10s))
      << "the replica never synced";
  o.command_timeout = 2s;  // a loaded machine may delay the replica's acknowledgement
  keyed_mutex patient(o);
  auto g = patient.lock("k");
  EXPECT_TRUE(g.owns_lock());
  EXPECT_EQ(on_replica.string({"GET", raw_redis::lock_key("k")}), raw_.string({"GET", raw_redis::lock_key("k")}));
  EXPECT_EQ(on_replica.string({"GET", raw_redis::fence_key("k")}), std::to_string(g.token()));
}

TEST(RedisKeyedMutexOptions, AnAclUserAndPasswordAuthenticate) {
  test_timeout timeout{60s};
  redis_server server;
  raw_redis raw(server.port());
  raw.command({"ACL", "SETUSER", "alice", "on", ">pw", "~*", "&*", "+@all"});
  raw.command({"ACL", "SETUSER", "default", "off"});
  options o;
  o.port = server.port();
  o.username = "alice";
  o.password = "pw";
  keyed_mutex m(o);
  keyed_mutex other(o);
  auto g = m.lock("k");
  EXPECT_TRUE(g.owns_lock());
  std::atomic<bool> granted{false};
  std::jthread waiter([&] { granted.store(other.lock("k").owns_lock()); });
  std::this_thread::sleep_for(200ms);
  g.unlock();
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 5s));
  o.password = "wrong";
  EXPECT_THROW(keyed_mutex{o}, redis_error);
}

TEST(RedisKeyedMutexOptions, AUnixSocketWorks) {
  test_timeout timeout{60s};
  redis_server server;
  options o;
  o.unix_socket = server.unix_socket();
  o.port = 0;  // ignored with a socket
  o.recheck_interval = 200ms;
  keyed_mutex m(o);
  keyed_mutex other(o);
  auto g = m.lock("k");
  EXPECT_FALSE(other.try_lock("k").owns_lock());
  raw_redis raw(server.port());
  EXPECT_TRUE(raw.locked("k"));
  g.unlock();
  EXPECT_TRUE(other.try_lock("k").owns_lock());
  o.unix_socket += ".missing";
  EXPECT_THROW(keyed_mutex{o}, redis_error);
}

TEST(RedisKeyedMutexOptions, AnUnreachableServerFailsQuickly) {
  test_timeout timeout{60s};
  int port = 0;
  {
    redis_server server;  // a port nobody listens on once it is gone
    port = server.port();
  }
  options o;
  o.port = port;
  o.connect_timeout = 1s;
  const auto t0 = steady::now();
  EXPECT_THROW(keyed_mutex{o}, redis_error);
  EXPECT_LT(since(t0), 3s);
}

TEST(RedisKeyedMutexOptions, NonsensicalOptionsThrowInvalidArgument) {
  test_timeout timeout{60s};
  auto with = [](auto change) {
    options o;
    o.port = 1;  // never connected to: the options are checked first
    change(o);
    return o;
  };
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.port = 0; })}, std::invalid_argument);
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.port = 70000; })}, std::invalid_argument);
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.pool_size = 0; })}, std::invalid_argument);
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.connect_timeout = 0ms; })}, std::invalid_argument);
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.command_timeout = -1ms; })}, std::invalid_argument);
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.recheck_interval = 0ms; })}, std::invalid_argument);
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.watchdog_lease = 2ms; })}, std::invalid_argument);
  EXPECT_THROW(keyed_mutex{with([](options& o) { o.database = -1; })}, std::invalid_argument);
}

TEST_F(RedisKeyedMutex, ADatabaseAndAPrefixSeparateTheLocks) {
  options o = opts();
  o.database = 3;
  o.prefix = "app1:";
  keyed_mutex m(o);
  keyed_mutex other(opts());  // database 0, prefix "handoff:"
  auto g = m.lock("k");
  EXPECT_TRUE(other.try_lock("k").owns_lock()) << "another database and prefix: another lock";
  raw_.command({"SELECT", "3"});
  EXPECT_EQ(raw_.integer({"EXISTS", "app1:{k}:lock"}), 1);
  raw_.command({"SELECT", "0"});
  EXPECT_EQ(m.config().prefix, "app1:");
  EXPECT_EQ(m.config().database, 3);
}

// --- what stays on the server -------------------------------------------------------------

TEST_F(RedisKeyedMutex, OnlyFenceCountersStayOnTheServerOnceEveryGuardIsGone) {
  {
    keyed_mutex m(opts());
    keyed_mutex other(opts());
    auto g = m.lock("a");
    EXPECT_FALSE(other.try_lock_for("a", 200ms).owns_lock());  // queued, timed out
    std::atomic<bool> granted{false};
    std::jthread waiter([&] { granted.store(other.lock("a").owns_lock()); });
    ASSERT_TRUE(raw_.wait_queue_length("a", 1));
    g.unlock();
    waiter.join();
    EXPECT_TRUE(granted.load());
    auto leased = m.lock("b", lease{200ms});  // left to expire
    auto all = m.lock_all({"c", "d"});
    all = {};
    async_outcome out;
    auto f = out.guard.get_future();
    auto held = m.lock("e");
    co_lock(other, "e", 200ms, out);  // times out while queued
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
    EXPECT_FALSE(f.get().owns_lock());
    held.unlock();
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(leased.expired());
  }
  std::vector<std::string> keys = raw_.strings({"KEYS", "*"});
  EXPECT_EQ(std::erase(keys, "handoff:format"), 1U) << "the prefix's format marker";
  EXPECT_EQ(keys.size(), 5U);
  for (const std::string& k : keys) {
    EXPECT_TRUE(k.ends_with(":fence")) << k;
    EXPECT_GT(raw_.integer({"PTTL", k}), 0) << k << " never expires";
  }
}

// --- extreme values and faults ------------------------------------------------------------

TEST_F(RedisKeyedMutex, AHugeLeaseNeverExpiresAndAWaiterBehindItDoesNotStorm) {
  keyed_mutex m(opts());
  auto g = m.lock("k", lease{std::chrono::nanoseconds::max()});
  ASSERT_TRUE(g.owns_lock());
  EXPECT_FALSE(g.expired());
  EXPECT_EQ(g.lease_duration(), std::chrono::nanoseconds::max());
  EXPECT_GT(raw_.pttl("k"), 100LL * 365 * 24 * 3600 * 1000) << "the lease is not years long on the server";
  keyed_mutex other(opts());
  const long long before = raw_.evalsha_calls();
  EXPECT_FALSE(other.try_lock_for("k", 600ms).owns_lock());
  // A waiter re-checks every recheck_interval (200 ms here): a handful of calls, not a
  // loop of them (an overflowing re-check time made it hundreds of thousands).
  EXPECT_LT(raw_.evalsha_calls() - before, 30);
  EXPECT_TRUE(g.extend(std::chrono::nanoseconds::max()));
  EXPECT_FALSE(g.expired());
  g.unlock();
  EXPECT_FALSE(raw_.locked("k")) << "unlock skipped the release";
  EXPECT_TRUE(other.try_lock("k").owns_lock());
}

TEST_F(RedisKeyedMutex, DistinctPrefixAndKeyPairsNeverNameTheSameLock) {
  options a = opts();
  a.prefix = "p:";
  options b = opts();
  b.prefix = "p:{a";
  keyed_mutex ma(a);
  keyed_mutex mb(b);
  auto first = ma.lock("a{b");  // named "p:{a{b}:lock" before keys were escaped
  auto second = mb.try_lock("b");
  EXPECT_TRUE(second.owns_lock()) << "two different locks share one Redis key";
  // Keys with any bytes stay distinct, the escape byte and braces included.
  keyed_mutex m(opts());
  auto x = m.lock(std::string("x\x01(y", 4));
  auto y = m.try_lock("x{y");
  auto z = m.try_lock(std::string("x\0y", 3));
  EXPECT_TRUE(y.owns_lock());
  EXPECT_TRUE(z.owns_lock());
  EXPECT_FALSE(m.try_lock("x{y").owns_lock());
}

TEST_F(RedisKeyedMutex, AServerKilledWhileALargeCommandIsWrittenIsAnErrorNotTheEndOfTheProcess) {
  const std::string key(8U << 20U, 'k');  // each script call writes it four times
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> errors{0};
    {
      keyed_mutex m(opts());
      std::atomic<bool> started{false};
      std::jthread locker([&] {
        for (;;) {
          try {
            started.store(true);
            auto g = m.lock(key, lease{10s});
          } catch (const redis_error&) {
            errors.fetch_add(1);
            return;
          }
        }
      });
      ASSERT_TRUE(eventually([&] { return started.load(); }));
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + 10 * round));
      server_.kill();  // mid-write, often: a write to a closed socket raises SIGPIPE
    }
    EXPECT_EQ(errors.load(), 1);
    server_.restart();
  }
}

TEST(RedisKeyedMutexOptions, AServerThatMayEvictKeysIsRefusedOrWarnedAbout) {
  test_timeout limit{60s};
  for (const char* policy : {"allkeys-lru", "volatile-lru", "allkeys-random"}) {
    SCOPED_TRACE(policy);
    redis_server server({"--maxmemory", "100mb", "--maxmemory-policy", policy});
    options o;
    o.port = server.port();
    try {
      keyed_mutex m(o);
      ADD_FAILURE() << "a server that may evict lock keys was accepted";
    } catch (const redis_error& e) {
      EXPECT_NE(std::string(e.what()).find("evict"), std::string::npos) << e.what();
    }
    o.if_server_evicts = handoff::redis::eviction_check::warn;
    testing::internal::CaptureStderr();
    {
      keyed_mutex m(o);
      EXPECT_TRUE(m.try_lock("k").owns_lock());
    }
    EXPECT_NE(testing::internal::GetCapturedStderr().find("warning"), std::string::npos);
    o.if_server_evicts = handoff::redis::eviction_check::allow;
    EXPECT_NO_THROW(keyed_mutex{o});
  }
  redis_server no_eviction({"--maxmemory", "100mb", "--maxmemory-policy", "noeviction"});
  options o;
  o.port = no_eviction.port();
  EXPECT_NO_THROW(keyed_mutex{o});
  redis_server no_limit({"--maxmemory", "0", "--maxmemory-policy", "allkeys-lru"});
  o.port = no_limit.port();
  EXPECT_NO_THROW(keyed_mutex{o}) << "without maxmemory nothing is evicted";
}

TEST_F(RedisKeyedMutex, ABusyCallbackCostsNoQueuedWaiterOfItsClientItsPlace) {
  keyed_mutex holder(opts());
  keyed_mutex a(opts());  // heartbeats every 200 ms: a waiter 600 ms silent counts as dead
  keyed_mutex c(opts());
  auto held = holder.lock("k");
  std::atomic<int> next{0};
  std::atomic<int> a_turn{-1};
  std::latch a_done{1};
  a.lock_async("k", [&](handoff::redis::guard g, std::exception_ptr) {
    if (g.owns_lock()) a_turn.store(next.fetch_add(1));
    a_done.count_down();
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::latch busy_started{1};
  a.lock_async("busy", [&](handoff::redis::guard, std::exception_ptr) {
    busy_started.count_down();
    std::this_thread::sleep_for(1500ms);  // a slow callback of the same client
  });
  busy_started.wait();
  std::atomic<int> c_turn{-1};
  std::jthread second([&] {
    auto g = c.try_lock_for("k", 20s);
    if (g.owns_lock()) c_turn.store(next.fetch_add(1));
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 2));
  std::this_thread::sleep_for(900ms);  // past the heartbeat of a waiter whose client is silent
  held.unlock();
  a_done.wait();
  second.join();
  EXPECT_EQ(a_turn.load(), 0) << "the first waiter lost its place while its client ran a slow callback";
  EXPECT_EQ(c_turn.load(), 1);
}

// A stalled server (SIGSTOP: connections stay open, nothing answers) bounds every call by
// the documented failure bound: its wait plus two command timeouts (the attempt, and the
// cancel of a queued request), plus a connect timeout when a connection must be opened.
TEST_F(RedisKeyedMutex, AStalledServerFailsEachCallWithinItsWaitPlusTwoCommandTimeouts) {
  options o = opts();
  o.command_timeout = 300ms;
  o.connect_timeout = 300ms;
  keyed_mutex m(o);
  { auto warm = m.try_lock("warm"); }  // one pooled connection open
  ::kill(server_.pid(), SIGSTOP);
  struct resume_server {
    pid_t pid;
    ~resume_server() { ::kill(pid, SIGCONT); }
  } resume{server_.pid()};
  const auto bound = [&](std::chrono::milliseconds wait) { return wait + 2 * o.command_timeout + o.connect_timeout; };
  auto t0 = steady::now();
  EXPECT_THROW((void)m.try_lock("k"), redis_error);
  const auto try_lock_took = since(t0);
  t0 = steady::now();
  EXPECT_THROW((void)m.try_lock_for("k", 100ms), redis_error);
  const auto try_lock_for_took = since(t0);
  t0 = steady::now();
  EXPECT_THROW((void)m.lock("k"), redis_error);
  const auto lock_took = since(t0);
  std::printf("stalled server: try_lock %lld ms, try_lock_for(100ms) %lld ms, lock %lld ms (command_timeout 300 ms)\n",
              static_cast<long long>(try_lock_took.count()), static_cast<long long>(try_lock_for_took.count()),
              static_cast<long long>(lock_took.count()));
  EXPECT_LE(try_lock_took, bound(0ms) + 200ms);  // + scheduling slack on a loaded machine
  EXPECT_LE(try_lock_for_took, bound(100ms) + 200ms);
  EXPECT_LE(lock_took, bound(0ms) + 200ms);  // lock() fails at its first attempt
}

TEST_F(RedisKeyedMutex, AServerThatStallsWhileACallWaitsEndsItWithinItsWaitPlusTwoCommandTimeouts) {
  options o = opts();
  o.command_timeout = 300ms;
  keyed_mutex holder(o);
  keyed_mutex m(o);
  auto held = holder.lock("k");
  std::atomic<long long> took_ms{-1};
  std::atomic<bool> threw{false};
  std::jthread waiter([&] {
    const auto t0 = steady::now();
    try {
      (void)m.try_lock_for("k", 400ms);
    } catch (const redis_error&) {
      threw.store(true);
    }
    took_ms.store(since(t0).count());
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  ::kill(server_.pid(), SIGSTOP);
  waiter.join();
  ::kill(server_.pid(), SIGCONT);
  std::printf("stalled while queued: try_lock_for(400ms) ended after %lld ms\n", took_ms.load());
  EXPECT_TRUE(threw.load());
  EXPECT_LE(took_ms.load(), 400 + 2 * 300 + 200);
}

TEST_F(RedisKeyedMutex, AnErrorAboutAHugeKeyQuotesOnlyTheStartOfIt) {
  const std::string key(2U << 20U, 'k');
  options o = opts();
  o.command_timeout = 200ms;
  keyed_mutex m(o);
  { auto warm = m.try_lock("warm"); }  // a pooled connection: the failure is the command's
  ::kill(server_.pid(), SIGSTOP);
  struct resume_server {
    pid_t pid;
    ~resume_server() { ::kill(pid, SIGCONT); }
  } resume{server_.pid()};
  try {
    (void)m.try_lock(key);
    ADD_FAILURE() << "no error from a stalled server";
  } catch (const redis_error& e) {
    EXPECT_LT(std::string(e.what()).size(), 400U);
    EXPECT_NE(std::string(e.what()).find("2097152 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
