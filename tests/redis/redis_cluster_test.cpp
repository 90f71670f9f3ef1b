// handoff::redis on a Redis Cluster (redis_cluster.hpp, started once for the whole binary):
// the hash slots, the stores over every primary, a resharding followed through ASK and
// MOVED, and the clients that do not run on a cluster yet refusing it clearly.
#include <handoff/redis/actor_system.hpp>
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../../lib/redis/common/router.hpp"
#include "redis_cluster.hpp"

namespace {

using namespace std::chrono_literals;
namespace hr = handoff::redis;
using handoff::test::raw_redis;
using handoff::test::redis_cluster;

redis_cluster& cluster() {
  static redis_cluster c;  // one per binary: the suite runs as one ctest
  return c;
}

hr::options on_cluster() {
  hr::options o;
  o.port = cluster().seed_port();
  o.command_timeout = 2s;
  return o;
}

// A user key whose record, "handoff:{<key>}:fenced", hashes to `slot`.
std::string key_in_slot(int slot, const std::string& stem) {
  for (int i = 0;; ++i) {
    const std::string k = stem + std::to_string(i);
    if (handoff::redis::detail::hash_slot("{" + k + "}") == slot) return k;
  }
}

TEST(RedisCluster, hash_slots_match_the_servers_keyslot_hash_tags_included) {
  raw_redis r(cluster().seed_port());
  const std::vector<std::string> keys{"",
                                      "foo",
                                      "bar",
                                      "{user1000}.following",
                                      "{user1000}.followers",
                                      "foo{}{bar}",
                                      "foo{{bar}}zap",
                                      "foo{bar}{zap}",
                                      "{",
                                      "}",
                                      "{}",
                                      "handoff:{player:42}:lock",
                                      "a\x01(b",
                                      std::string("nul\0key", 7)};
  for (const std::string& k : keys) {
    EXPECT_EQ(static_cast<long long>(handoff::redis::detail::hash_slot(k)), r.integer({"CLUSTER", "KEYSLOT", k})) << k;
  }
  for (int i = 0; i < 2000; ++i) {
    const std::string k = "key:" + std::to_string(i * 7919);
    ASSERT_EQ(static_cast<long long>(handoff::redis::detail::hash_slot(k)), r.integer({"CLUSTER", "KEYSLOT", k})) << k;
  }
}

TEST(RedisCluster, stores_spread_their_records_over_every_primary_and_keep_their_guarantees) {
  hr::fenced_store fenced(on_cluster());
  hr::versioned_store versioned(on_cluster());
  for (int i = 0; i < 60; ++i) {
    const std::string k = "account:" + std::to_string(i);
    ASSERT_TRUE(fenced.write(k, "v" + std::to_string(i), 10));
    EXPECT_FALSE(fenced.write(k, "stale", 9));
    ASSERT_TRUE(versioned.compare_and_set(k, 0, "first"));
    EXPECT_FALSE(versioned.compare_and_set(k, 0, "again"));
  }
  for (int i = 0; i < 60; ++i) {
    const std::string k = "account:" + std::to_string(i);
    EXPECT_EQ(fenced.read(k).value, "v" + std::to_string(i));
    EXPECT_EQ(fenced.read(k).token, 10U);
    EXPECT_EQ(versioned.read(k).version, 1U);
  }
  for (const int port : cluster().primaries()) {
    EXPECT_GT(raw_redis(port).integer({"DBSIZE"}), 10) << "the primary at port " << port << " holds few records";
  }
  // The empty key keeps a hash tag of its own on a cluster: its record and fence share a slot.
  EXPECT_TRUE(fenced.write("", "empty", 2));
  EXPECT_FALSE(fenced.write("", "stale", 1));
  EXPECT_EQ(fenced.read("").value, "empty");
  EXPECT_EQ(fenced.read("\x01").token, 0U) << "the key \"\\x01\" is another key";
  EXPECT_TRUE(versioned.compare_and_set("", 0, "one key, one slot"));
}

TEST(RedisCluster, a_prefix_that_would_start_the_hash_tag_is_refused_on_a_cluster_only) {
  hr::options o = on_cluster();
  for (const char* prefix : {"app{", "{app}:", "a{}:"}) {
    o.prefix = prefix;
    EXPECT_THROW(hr::fenced_store{o}, std::invalid_argument) << prefix;
  }
  o.prefix = "app}:";  // a '}' alone leaves the key's tag as it is
  hr::fenced_store fenced(o);
  EXPECT_TRUE(fenced.write("k", "v", 1));
  handoff::test::redis_server one;
  hr::options single;
  single.port = one.port();
  single.prefix = "{app}:";
  hr::fenced_store on_one_server(single);
  EXPECT_TRUE(on_one_server.write("k", "v", 1));
}

TEST(RedisCluster, a_resharding_is_followed_through_ask_tryagain_and_moved_without_losing_a_record) {
  hr::fenced_store fenced(on_cluster());
  hr::versioned_store versioned(on_cluster());
  const int slot = handoff::redis::detail::hash_slot("{moving}");
  const int from = cluster().primary_of(slot);
  int to = 0;
  for (const int p : cluster().primaries()) {
    if (p != from) to = p;
  }
  ASSERT_TRUE(fenced.write("moving", "before", 5));

  // The target imports the slot: the source still serves the keys it has, and sends a key
  // it does not have to the target (ASK).
  cluster().migrate(slot, to, redis_cluster::step::importing);
  EXPECT_EQ(fenced.read("moving").value, "before");
  const std::string fresh = key_in_slot(slot, "fresh");
  ASSERT_TRUE(versioned.compare_and_set(fresh, 0, "new"));
  raw_redis target(to);
  target.command({"ASKING"});
  EXPECT_EQ(target.integer({"EXISTS", "handoff:{" + fresh + "}:versioned"}), 1) << "the new record went to the target";
  EXPECT_EQ(raw_redis(from).integer({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(slot)}), 1)
      << "the source holds the old record only";

  // Every key has moved: the source answers ASK for each. A fenced write (its record and
  // the fence counter, which does not exist) gets TRYAGAIN from the target until the slot
  // is the target's, then MOVED from the source.
  cluster().migrate(slot, to, redis_cluster::step::keys_moved);
  EXPECT_EQ(fenced.read("moving").value, "before");
  std::future<bool> during = std::async(std::launch::async, [&] { return fenced.write("moving", "during", 6); });
  EXPECT_EQ(during.wait_for(300ms), std::future_status::timeout) << "a write mid-migration waits for its end";
  cluster().migrate(slot, to, redis_cluster::step::done);
  EXPECT_TRUE(during.get());
  EXPECT_EQ(cluster().primary_of(slot), to);
  EXPECT_EQ(fenced.read("moving").value, "during");
  EXPECT_FALSE(fenced.write("moving", "stale", 5)) << "the token survived the move";
  EXPECT_EQ(versioned.read(fresh).value, "new");
}

TEST(RedisCluster, seed_nodes_are_tried_in_order_until_one_answers) {
  hr::options o;
  o.port = 1;  // not used: the seeds are
  o.connect_timeout = 300ms;
  o.cluster_seeds = {"127.0.0.1:1", "127.0.0.1:" + std::to_string(cluster().seed_port())};
  hr::fenced_store fenced(o);
  EXPECT_TRUE(fenced.write("seeded", "v", 1));
  EXPECT_EQ(fenced.read("seeded").value, "v");
}

TEST(RedisCluster, bad_seeds_fail_clearly) {
  hr::options o;
  o.connect_timeout = 300ms;
  o.cluster_seeds = {"127.0.0.1:1", "127.0.0.1:2"};
  try {
    hr::fenced_store s(o);
    ADD_FAILURE() << "no seed answered, yet the store was made";
  } catch (const hr::error& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("no cluster seed answered"), std::string::npos) << why;
    EXPECT_NE(why.find("127.0.0.1:2"), std::string::npos) << why;
  }
  handoff::test::redis_server plain;
  o.cluster_seeds = {"127.0.0.1:" + std::to_string(plain.port())};
  try {
    hr::versioned_store s(o);
    ADD_FAILURE() << "a plain server was taken for a cluster seed";
  } catch (const hr::error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a Redis Cluster node"), std::string::npos) << e.what();
  }
  for (const char* bad : {"localhost", "127.0.0.1:", ":6379", "127.0.0.1:0", "127.0.0.1:70000", "h:12x"}) {
    o.cluster_seeds = {bad};
    EXPECT_THROW(hr::fenced_store{o}, std::invalid_argument) << bad;
  }
}

TEST(RedisCluster, an_acl_user_and_password_are_used_on_every_node) {
  for (const int port : cluster().primaries()) {
    raw_redis(port).command({"ACL", "SETUSER", "app", "on", ">app-secret", "~*", "&*", "+@all"});
  }
  hr::options o = on_cluster();
  o.username = "app";
  o.password = "wrong";
  EXPECT_THROW(hr::fenced_store{o}, hr::error);
  o.password = "app-secret";
  hr::fenced_store fenced(o);
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(fenced.write("acl:" + std::to_string(i), "v", 1));
  for (const int port : cluster().primaries()) {
    EXPECT_NE(raw_redis(port).string({"CLIENT", "LIST"}).find("user=app"), std::string::npos)
        << "no connection of user app on the primary at port " << port;
  }
}

TEST(RedisCluster, the_lock_and_the_actors_refuse_a_cluster_with_a_clear_error) {
  try {
    hr::keyed_mutex m(on_cluster());
    ADD_FAILURE() << "keyed_mutex accepted a cluster";
  } catch (const hr::error& e) {
    EXPECT_NE(std::string(e.what()).find("keyed_mutex does not run on Redis Cluster yet"), std::string::npos)
        << e.what();
  }
  try {
    hr::actor_system a(on_cluster());
    ADD_FAILURE() << "actor_system accepted a cluster";
  } catch (const hr::error& e) {
    EXPECT_NE(std::string(e.what()).find("actor_system does not run on Redis Cluster yet"), std::string::npos)
        << e.what();
  }
  hr::options seeded;
  seeded.cluster_seeds = {"127.0.0.1:" + std::to_string(cluster().seed_port())};
  EXPECT_THROW(hr::keyed_mutex{seeded}, hr::error);
  EXPECT_THROW(hr::actor_system{seeded}, hr::error);
}

// Runs last: it leaves the cluster a replica short.
TEST(RedisCluster, after_a_primary_is_killed_its_replica_serves_its_records_and_no_call_hangs) {
  hr::options o = on_cluster();
  o.command_timeout = 15s;  // failure detection (--cluster-node-timeout 500) and an election: 3-6 s here
  hr::fenced_store fenced(o);
  std::string key;  // a key of a primary other than the seed, which the fixture asks
  for (int i = 0; key.empty(); ++i) {
    const std::string k = "failover" + std::to_string(i);
    if (cluster().primary_of(handoff::redis::detail::hash_slot("{" + k + "}")) != cluster().seed_port()) key = k;
  }
  const int slot = handoff::redis::detail::hash_slot("{" + key + "}");
  const int doomed = cluster().primary_of(slot);
  ASSERT_TRUE(fenced.write(key, "kept", 3));
  const int replica = cluster().replica_holding(doomed, "handoff:{" + key + "}:fenced");

  cluster().kill(doomed);
  const auto t0 = handoff::test::steady::now();
  EXPECT_EQ(fenced.read(key).value, "kept") << "the replica had it before the crash";
  EXPECT_LT(handoff::test::since(t0), o.command_timeout + 1s);
  EXPECT_TRUE(handoff::test::eventually([&] { return cluster().primary_of(slot) == replica; }, 5s))
      << "the seed, which the fixture asks, learns of the failover by gossip";
  EXPECT_FALSE(fenced.write(key, "stale", 2));
  EXPECT_TRUE(fenced.write(key, "after", 4));
  EXPECT_EQ(fenced.read(key).value, "after");
}

}  // namespace
