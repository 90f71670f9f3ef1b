// handoff::redis::keyed_mutex::stats() and the events its client reports to a metrics sink:
// round trips, reconnects, notifications lost and re-checks, and the wait of a blocking
// lock, each provoked against a real redis-server (tests/support/redis_server.hpp).
#include <handoff/metrics.hpp>
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "../support/counting_sink.hpp"
#include "../support/redis_server.hpp"
#include "../support/redis_test_support.hpp"
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::lease;
using handoff::metric_counter;
using handoff::redis::keyed_mutex;
using handoff::redis::options;
using handoff::test::counting_sink;
using handoff::test::eventually;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::test_timeout;

class RedisStats : public testing::Test {
 protected:
  options opts(std::chrono::milliseconds recheck = 200ms) {
    options o;
    o.port = server_.port();
    o.command_timeout = 2s;
    o.recheck_interval = recheck;
    o.watchdog_lease = 5s;
    o.metrics = &sink_;
    return o;
  }

  test_timeout timeout_{90s};
  redis_server server_;
  raw_redis raw_{server_.port()};
  counting_sink sink_;
};

TEST_F(RedisStats, ATryLockAndItsUnlockOnAFreeKeyAreTwoRoundTrips) {
  keyed_mutex m(opts());
  const auto before = m.stats();
  { auto g = m.try_lock("k"); }
  const auto after = m.stats();
  EXPECT_EQ(after.round_trips - before.round_trips, 2u);
  EXPECT_EQ(after.rechecks, 0u);
  EXPECT_EQ(after.reconnects, 0u);
  EXPECT_EQ(sink_.count(metric_counter::redis_round_trips), after.round_trips);
}

TEST_F(RedisStats, AWaiterThatNoNotificationAnswersRechecksAndItsWaitIsObserved) {
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts(50ms));
  auto held = holder.lock("k", lease{30s});
  std::atomic<bool> granted{false};
  std::jthread t([&] { granted.store(waiter.lock("k").owns_lock()); });
  std::this_thread::sleep_for(400ms);  // about eight re-checks, none answered
  held.unlock();
  ASSERT_TRUE(eventually([&] { return granted.load(); }, 10s));
  t.join();
  EXPECT_GE(waiter.stats().rechecks, 3u);
  EXPECT_EQ(holder.stats().rechecks, 0u);
  EXPECT_EQ(sink_.count(metric_counter::redis_rechecks), waiter.stats().rechecks);
  const auto waits = sink_.waits(handoff::metric_wait::redis_lock);
  ASSERT_EQ(waits.size(), 1u);  // the holder's lock found the key free: no wait
  EXPECT_GE(waits[0], 300ms);
}

TEST_F(RedisStats, ADroppedSubscriptionCountsAsLostNotificationsAndIsReconnected) {
  keyed_mutex m(opts());
  EXPECT_EQ(m.stats().notifications_lost, 0u);
  raw_.command({"CLIENT", "KILL", "TYPE", "pubsub"});
  EXPECT_TRUE(eventually([&] { return m.stats().notifications_lost == 1 && m.stats().reconnects >= 1; }, 10s));
  EXPECT_EQ(sink_.count(metric_counter::redis_notifications_lost), 1u);
}

TEST_F(RedisStats, ACommandConnectionClosedByTheServerIsReplacedAndCounted) {
  keyed_mutex m(opts());
  { auto g = m.try_lock("k"); }  // a pooled connection, idle now
  const auto before = m.stats().reconnects;
  raw_.command({"CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"});
  std::this_thread::sleep_for(50ms);  // the close reaches the client's sockets
  auto g = m.try_lock("k");
  EXPECT_TRUE(g.owns_lock());
  EXPECT_GE(m.stats().reconnects, before + 1);
  EXPECT_GE(sink_.count(metric_counter::redis_reconnects), 1u);
}

}  // namespace
