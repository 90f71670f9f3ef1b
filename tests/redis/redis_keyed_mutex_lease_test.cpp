// handoff::redis::keyed_mutex against a real redis-server: leases and extend, fencing
// tokens, the watchdog that renews a hold without a lease, and a lease too long to expire.
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <stdexcept>
#include <thread>
#include <utility>

#include "../support/redis_keyed_mutex_fixture.hpp"

namespace {

using namespace handoff::test::redis_keyed_mutex_tests;  // redis_keyed_mutex_fixture.hpp

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

}  // namespace
