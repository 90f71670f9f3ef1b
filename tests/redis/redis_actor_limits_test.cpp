// handoff::redis::actor_system against a real redis-server: limits (mailbox capacity, the
// longest lease, the body size), keys and bodies of any bytes, the prefix's format marker,
// and a stopped server.
#include <handoff/mailbox_full.hpp>
#include <handoff/redis/actor_system.hpp>
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support/redis_actor_fixture.hpp"

namespace {

using namespace handoff::test::redis_actor_tests;  // redis_actor_fixture.hpp

// An owner of "q:1" that is still running the handler of its first message, m0, on a
// thread of its own, until release(): what is posted meanwhile stays in the mailbox.
struct busy_owner {
  explicit busy_owner(hr::actor_system& a) : actors(a) {
    actors.on("q:", [this](hr::delivery& d) {
      if (d.body() == "m0") gate.wait();
    });
    owner = std::thread([this] { actors.post("q:1", "m0"); });
    EXPECT_TRUE(eventually([this] { return actors.pending("q:1") == 1; }));
  }
  busy_owner(const busy_owner&) = delete;
  busy_owner& operator=(const busy_owner&) = delete;
  ~busy_owner() { release(); }
  void release() {
    if (!owner.joinable()) return;
    gate.open();
    owner.join();
  }
  hr::actor_system& actors;
  latch gate;
  std::thread owner;
};

TEST(RedisActor, AFullMailboxRefusesPostsAndPostForWaitsOnlyUntilItsTimeout) {
  redis_server server;
  hr::actor_options a = quick();
  a.capacity = 3;
  hr::actor_system actors(at(server.port()), a);
  busy_owner owner(actors);
  actors.post("q:1", "m1");
  actors.post("q:1", "m2");
  EXPECT_FALSE(actors.try_post("q:1", "m3").has_value());
  // The in-process actors' error, and not a Redis failure.
  EXPECT_THROW(actors.post("q:1", "m3"), handoff::mailbox_full);
  try {
    actors.post("q:1", "m3");
  } catch (const hr::error&) {
    ADD_FAILURE() << "a full mailbox reported as a Redis failure";
  } catch (const handoff::mailbox_full&) {  // NOLINT(bugprone-empty-catch): expected
  }
  const auto t0 = steady::now();
  EXPECT_THROW(actors.post_for("q:1", "m3", 100ms), handoff::mailbox_full);
  EXPECT_GE(since(t0), 100ms);
  EXPECT_EQ(actors.pending("q:1"), 3U);
  std::thread later([&] {
    std::this_thread::sleep_for(50ms);
    owner.release();
  });
  EXPECT_NO_THROW(actors.post_for("q:1", "m3", 10s));
  later.join();
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

TEST(RedisActor, Capacity0MeansAnUnboundedMailbox) {
  redis_server server;
  hr::actor_options a = quick();
  a.capacity = 0;
  hr::actor_system actors(at(server.port()), a);
  busy_owner owner(actors);
  for (int i = 1; i < 20; ++i) EXPECT_TRUE(actors.try_post("q:1", "m" + std::to_string(i)).has_value()) << i;
  EXPECT_EQ(actors.pending("q:1"), 20U);
  owner.release();
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

TEST(RedisActor, AnOwnershipLeaseTooLongForTheClockIsSentAsTheLongestLease) {
  redis_server server;
  hr::actor_options a = quick();
  a.lease = handoff::lease{std::chrono::nanoseconds::max()};
  hr::actor_system actors(at(server.port()), a);
  latch gate;
  actors.on("q:", [&](hr::delivery&) { gate.wait(); });
  std::thread owner([&] { actors.post("q:1", "m0"); });
  raw_redis raw(server.port());
  // 2^42 ms, about 139 years, as the keyed mutex's longest lease.
  constexpr long long longest = 1LL << 42;
  EXPECT_TRUE(eventually([&] { return raw.integer({"PTTL", "handoff:{q:1}:actor:owner"}) > longest - 60'000; }));
  EXPECT_LE(raw.integer({"PTTL", "handoff:{q:1}:actor:owner"}), longest);
  gate.open();
  owner.join();
  EXPECT_EQ(actors.pending("q:1"), 0U);
}

TEST(RedisActor, ABodyOverTheSizeLimitIsRefusedBeforeAnythingIsSent) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_message_bytes = 16;
  hr::actor_system actors(at(server.port()), a);
  actors.on("", [](hr::delivery&) {});
  EXPECT_THROW(actors.post("k", std::string(17, 'x')), std::invalid_argument);
  EXPECT_NO_THROW(actors.post("k", std::string(16, 'x')));
  raw_redis raw(server.port());
  EXPECT_EQ(raw.integer({"DBSIZE"}), 1) << "only the prefix's format marker";
}

TEST(RedisActor, KeysAndBodiesOfAnyBytesReachTheirOwnActorIntact) {
  redis_server server;
  hr::actor_system actors(at(server.port()), quick());
  std::vector<std::string> got;
  actors.on("", [&](hr::delivery& d) { got.push_back(std::string(d.key()) + "=" + std::string(d.body())); });
  const std::vector<std::string> keys = {"a{b}", std::string("a\0b", 3), "a\x01(b", "", "room 7\n*", "{}"};
  std::vector<std::string> want;
  for (const std::string& k : keys) {
    const std::string body = std::string("x \0 y", 5) + k;
    actors.post(k, body);
    want.push_back(k + "=" + body);
  }
  EXPECT_EQ(got, want);
}

TEST(RedisActor, EveryClientRefusesAPrefixThatHoldsDataOfAnotherFormat) {
  redis_server server;
  raw_redis raw(server.port());
  const auto refused = [&](const char* who, auto make) {
    try {
      make();
      ADD_FAILURE() << who << " started beside another format";
    } catch (const hr::error& e) {
      EXPECT_NE(std::string(e.what()).find("format"), std::string::npos) << who << ": " << e.what();
    }
  };
  const auto each_client_refuses = [&] {
    refused("actor_system", [&] { hr::actor_system(at(server.port()), quick()); });
    refused("keyed_mutex", [&] { hr::keyed_mutex(at(server.port())); });
    refused("fenced_store", [&] { hr::fenced_store(at(server.port())); });
    refused("versioned_store", [&] { hr::versioned_store(at(server.port())); });
  };
  hr::options other = at(server.port());
  other.prefix = "other:";
  { hr::actor_system actors(other, quick()); }
  EXPECT_EQ(raw.string({"GET", "other:format"}), "3") << "the first client marks its prefix";
  (void)raw.command({"SET", "handoff:format", "2"});  // the version before's data (a `count` key per actor)
  each_client_refuses();
  (void)raw.command({"SET", "handoff:format", "4"});  // a newer version's data
  each_client_refuses();
  (void)raw.command({"DEL", "handoff:format"});
  // No marker, but actors with messages: data of a build from before the marker.
  (void)raw.command({"ZADD", "handoff:actors:pending", "0", "room:1"});
  each_client_refuses();
  EXPECT_EQ(raw.string({"GET", "handoff:format"}), "") << "a refusing client writes nothing";
  { hr::actor_system actors(other, quick()); }  // another prefix is not affected
}

TEST(RedisActor, AStoppedServerGivesAnErrorWithinTheCommandTimeoutNotAHang) {
  redis_server server;
  hr::options o = at(server.port());
  o.command_timeout = 200ms;
  o.connect_timeout = 200ms;
  hr::actor_system actors(o, quick());
  actors.on("", [](hr::delivery&) {});
  actors.post("k", "warm");  // a pooled connection exists
  ::kill(server.pid(), SIGSTOP);
  const auto t0 = steady::now();
  EXPECT_THROW(actors.post("k", "stalled"), hr::error);
  EXPECT_LT(since(t0), 1000ms);
  ::kill(server.pid(), SIGCONT);
  server.kill();
  const auto t1 = steady::now();
  EXPECT_THROW(actors.post("k", "dead"), hr::error);
  EXPECT_LT(since(t1), 1000ms);
}

}  // namespace
