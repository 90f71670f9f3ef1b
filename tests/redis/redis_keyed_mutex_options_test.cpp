// handoff::redis::keyed_mutex against a real redis-server: the options and the connection
// (passwords, ACL users, a unix socket, min_replicas, databases and prefixes, eviction).
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>

#include "../support/redis_keyed_mutex_fixture.hpp"

namespace {

using namespace handoff::test::redis_keyed_mutex_tests;  // redis_keyed_mutex_fixture.hpp

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

// --- databases and prefixes ---------------------------------------------------------------

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

}  // namespace
