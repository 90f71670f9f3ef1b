// handoff::redis on a Redis Cluster (redis_cluster.hpp, started once for the whole binary):
// the hash slots, the stores, the lock and the actors over every primary, reshardings
// followed through ASK and MOVED, and failovers.
#include <handoff/redis/actor_system.hpp>
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../lib/redis/actor/actor_core.hpp"
#include "../../lib/redis/actor/shard_owner.hpp"
#include "../../lib/redis/actor/shard_store.hpp"
#include "../../lib/redis/common/router.hpp"
#include "../support/redis_actor_check.hpp"
#include "../support/redis_cluster.hpp"

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

// A primary other than the one at `port`: where a test moves a slot.
int another_primary(int port) {
  for (const int p : cluster().primaries()) {
    if (p != port) return p;
  }
  throw std::runtime_error("one primary only");
}

TEST(RedisCluster, HashSlotsMatchTheServersKeyslotHashTagsIncluded) {
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
  // Every slot has a tag of its own (the lock's sharded grant channels are named with it).
  for (int s = 0; s < static_cast<int>(hr::detail::cluster_slots); ++s) {
    const std::string channel =
        "handoff:notify:{" + std::string(hr::detail::slot_tag(static_cast<std::uint16_t>(s))) + "}0123456789abcdef";
    ASSERT_EQ(hr::detail::hash_slot(channel), s) << channel;
    if (s % 1000 == 0) {
      EXPECT_EQ(r.integer({"CLUSTER", "KEYSLOT", channel}), s) << channel;
    }
  }
}

TEST(RedisCluster, StoresSpreadTheirRecordsOverEveryPrimaryAndKeepTheirGuarantees) {
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

TEST(RedisCluster, APrefixThatWouldStartTheHashTagIsRefusedOnAClusterOnly) {
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

TEST(RedisCluster, AReshardingIsFollowedThroughAskTryagainAndMovedWithoutLosingARecord) {
  hr::fenced_store fenced(on_cluster());
  hr::versioned_store versioned(on_cluster());
  const int slot = handoff::redis::detail::hash_slot("{moving}");
  const int from = cluster().primary_of(slot);
  const int to = another_primary(from);
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

TEST(RedisCluster, SeedNodesAreTriedInOrderUntilOneAnswers) {
  hr::options o;
  o.port = 1;  // not used: the seeds are
  o.connect_timeout = 300ms;
  o.cluster_seeds = {"127.0.0.1:1", "127.0.0.1:" + std::to_string(cluster().seed_port())};
  hr::fenced_store fenced(o);
  EXPECT_TRUE(fenced.write("seeded", "v", 1));
  EXPECT_EQ(fenced.read("seeded").value, "v");
}

TEST(RedisCluster, BadSeedsFailClearly) {
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

TEST(RedisCluster, AnAclUserAndPasswordAreUsedOnEveryNode) {
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

// Every run of the actor tests' handlers, per key, as check_log (redis_actor_check.hpp)
// reads it: "<tag> <sequence> <attempt> <start ns> <end ns>".
struct actor_log {
  void record(const hr::delivery& d) {
    const long long start = handoff::test::monotonic_ns();
    const std::lock_guard<std::mutex> lock(mu);
    runs[std::string(d.key())].push_back(std::string(d.body()) + " " + std::to_string(d.attempt()) + " " +
                                         std::to_string(start) + " " + std::to_string(handoff::test::monotonic_ns()));
  }
  std::size_t size() {
    const std::lock_guard<std::mutex> lock(mu);
    std::size_t n = 0;
    for (const auto& [key, log] : runs) n += log.size();
    return n;
  }
  // check_log of every key: "" if fine. `seen` counts the runs of each message.
  std::string check(std::map<std::string, long long>& seen) {
    const std::lock_guard<std::mutex> lock(mu);
    for (const auto& [key, log] : runs) {
      const std::string why = handoff::test::check_log(log, &seen);
      if (!why.empty()) return key + ": " + why;
    }
    return "";
  }
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> runs;
};

// The slot of an actor's names: its slot group's (the library's layout).
int actor_slot(const std::string& key) { return hr::detail::hash_slot(hr::detail::actor_names("", key, true).mailbox); }

// A key whose actor lives on the primary at `port`.
std::string actor_key_on(int port, const std::string& stem) {
  for (int i = 0;; ++i) {
    const std::string k = stem + std::to_string(i);
    if (cluster().primary_of(actor_slot(k)) == port) return k;
  }
}

// The names under `prefix` left on any primary, the format marker aside.
std::vector<std::string> left_under(const std::string& prefix) {
  std::vector<std::string> left;
  for (const int port : cluster().primaries()) {
    for (const std::string& k : raw_redis(port).strings({"KEYS", prefix + "*"})) {
      if (k != prefix + "format") left.push_back(k);
    }
  }
  return left;
}

TEST(RedisCluster, ActorsOnEveryPrimaryRunEachMessageOnceInSenderOrderAndCommitStateOnce) {
  hr::options o = on_cluster();
  o.prefix = "spread:";
  std::vector<std::string> keys;
  for (const int port : cluster().primaries()) {
    keys.push_back(actor_key_on(port, "a"));
    keys.push_back(actor_key_on(port, "b"));
  }
  keys.emplace_back();       // the empty key
  keys.emplace_back("{x}");  // braces
  // Every script of an actor touches its names and its group's pending set: one slot.
  raw_redis seed(cluster().seed_port());
  for (const std::string& key : keys) {
    const hr::detail::actor_names n(o.prefix, key, true);
    const long long slot = seed.integer({"CLUSTER", "KEYSLOT", n.mailbox});
    for (const std::string& name : {n.owner, n.delivered, n.dead, n.state, n.pending}) {
      EXPECT_EQ(seed.integer({"CLUSTER", "KEYSLOT", name}), slot) << name;
    }
  }

  actor_log log;
  hr::actor_options a;
  a.lease = handoff::lease{2s};
  a.sweep_interval = 20ms;
  a.remember_handled = true;  // each handler adds 1 to its key's state: committed once per message
  hr::actor_system plain(o, a);
  handoff::thread_pool pool(2);
  a.executor = pool;
  a.max_messages = 2;  // steps of actors on every primary, sent together by the executor
  a.batch = 2;
  hr::actor_system pooled(o, a);
  for (hr::actor_system* s : {&plain, &pooled}) {
    s->on("", [&](hr::delivery& d) {
      log.record(d);
      d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
    });
  }

  constexpr int senders = 3;
  constexpr int count = 20;  // per sender and key
  std::vector<std::thread> threads;
  for (int t = 0; t < senders; ++t) {
    threads.emplace_back([&, t] {
      hr::actor_system& via = t % 2 == 0 ? plain : pooled;
      for (int i = 0; i < count; ++i) {
        for (const std::string& key : keys) (void)via.post(key, "s" + std::to_string(t) + " " + std::to_string(i));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::size_t total = senders * count * keys.size();
  ASSERT_TRUE(handoff::test::eventually([&] { return log.size() == total; }, 20s)) << log.size() << " of " << total;
  std::map<std::string, long long> seen;
  EXPECT_EQ(log.check(seen), "");
  EXPECT_EQ(seen.size(), senders * count);  // per key: the same tags and sequences
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, static_cast<long long>(keys.size())) << message;
  for (const std::string& key : keys) {
    EXPECT_TRUE(handoff::test::eventually([&] { return plain.pending(key) == 0; }));
    const hr::detail::actor_names n(o.prefix, key, true);
    EXPECT_EQ(raw_redis(cluster().primary_of(actor_slot(key))).string({"HGET", n.state, "value"}),
              std::to_string(senders * count))
        << key;
  }
  // A drained actor leaves its state only: no count, owner or mailbox, nor its group's
  // pending set.
  EXPECT_TRUE(handoff::test::eventually([&] {
    for (const std::string& name : left_under(o.prefix)) {
      if (!name.ends_with(":actor:state")) return false;
    }
    return true;
  })) << left_under(o.prefix).size()
      << " names left";
}

TEST(RedisCluster, ShardOwnersOnEveryPrimaryRunEachEntryOnceAndWriteOnlyInTheirShardsSlots) {
  hr::options o = on_cluster();
  o.prefix = "shards:";
  constexpr std::uint32_t shards = 12;  // 12 slot groups: every primary holds some
  std::set<int> primaries;
  for (std::uint32_t i = 0; i < shards; ++i) {
    primaries.insert(cluster().primary_of(hr::detail::hash_slot(hr::detail::shard_names(o.prefix, "room:", i).queue)));
  }
  EXPECT_EQ(primaries.size(), cluster().primaries().size());
  hr::detail::router servers(o);
  hr::detail::shard_store store(servers);
  hr::detail::shard_store::claim_count(servers, o.prefix, shards);
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> bodies;
  hr::detail::shard_owner_settings s;
  s.prefix = o.prefix;
  s.family = "room:";
  s.shards = shards;
  s.owner_id = "A";
  s.max_attempts = 2;
  hr::detail::shard_owner owner(
      store, s,
      [&](hr::delivery& d) {
        if (d.body() == "bad") throw std::runtime_error("refused");
        const std::lock_guard lock(mu);
        bodies[std::string(d.key())].emplace_back(d.body());
        d.set_state(std::string(d.body()));
      },
      [](std::string_view, const std::exception_ptr&) {});
  for (std::uint32_t i = 0; i < shards; ++i) ASSERT_TRUE(owner.take(i)) << i;
  std::vector<std::string> keys{"", "{x}"};
  for (int k = 0; k < 10; ++k) keys.push_back("room:" + std::to_string(k));
  int id = 0;
  for (int m = 0; m < 10; ++m) {
    for (const std::string& key : keys) {
      const hr::detail::shard_names n(o.prefix, "room:", hr::detail::shard_of(key, shards));
      ASSERT_NE(store.post(n, hr::detail::entry_text("c-" + std::to_string(++id), key, std::to_string(m)), 0), 0U);
    }
  }
  const hr::detail::shard_names bad_shard(o.prefix, "room:", hr::detail::shard_of("room:0", shards));
  ASSERT_NE(store.post(bad_shard, hr::detail::entry_text("c-bad", "room:0", "bad"), 0), 0U);
  const auto left = [&] {
    long long n = 0;
    for (std::uint32_t i = 0; i < shards; ++i) {
      const hr::detail::shard_names names(o.prefix, "room:", i);
      n += servers.command(names.queue, {"LLEN", names.queue}, "LLEN")->integer;
    }
    return n;
  };
  const auto now = [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  ASSERT_TRUE(handoff::test::eventually(
      [&] {
        owner.round(now());
        return left() == 0;
      },
      20s));
  for (const std::string& key : keys) {
    const std::vector<std::string>& b = bodies[key];
    ASSERT_EQ(b.size(), 10U) << key;
    for (int m = 0; m < 10; ++m) EXPECT_EQ(b[static_cast<std::size_t>(m)], std::to_string(m)) << key;
    const hr::detail::shard_names n(o.prefix, "room:", hr::detail::shard_of(key, shards));
    EXPECT_EQ(hr::detail::text(*servers.command(n.state(key), {"HGET", n.state(key), "value"}, "HGET")), "9") << key;
  }
  EXPECT_EQ(servers.command(bad_shard.dead("room:0"), {"LLEN", bad_shard.dead("room:0")}, "LLEN")->integer, 1);
  owner.release_all();
  // What stays: each shard's meta hash, the keys' states and the dead letter.
  for (const std::string& name : left_under(o.prefix)) {
    EXPECT_TRUE(name.ends_with(":meta") || name.ends_with(":actor:state") || name.ends_with(":actor:dead") ||
                name == o.prefix + "actors:shards")
        << name;
  }
}

TEST(RedisCluster, DelayedPostsToActorsOnEveryPrimaryRunOnceInOrderNoneEarlyAndCancel) {
  hr::options o = on_cluster();
  o.prefix = "delayed:";
  std::vector<std::string> keys;
  for (const int port : cluster().primaries()) keys.push_back(actor_key_on(port, "d"));
  keys.emplace_back();       // the empty key
  keys.emplace_back("{x}");  // braces
  // The delayed messages wait beside their group's pending set: one slot with the actor.
  raw_redis seed(cluster().seed_port());
  for (const std::string& key : keys) {
    const hr::detail::actor_names n(o.prefix, key, true);
    const hr::detail::delayed_names d(n.pending);
    const long long slot = seed.integer({"CLUSTER", "KEYSLOT", n.mailbox});
    EXPECT_EQ(seed.integer({"CLUSTER", "KEYSLOT", d.set}), slot) << d.set;
    EXPECT_EQ(seed.integer({"CLUSTER", "KEYSLOT", d.bodies}), slot) << d.bodies;
  }
  actor_log log;
  hr::actor_options a;
  a.lease = handoff::lease{2s};
  a.sweep_interval = 20ms;
  hr::actor_system actors(o, a);
  std::atomic<int> early{0};
  actors.on("", [&](hr::delivery& d) {
    // "<due ns> <sequence>": the steady_clock time taken before post_after was called.
    if (handoff::test::monotonic_ns() < std::stoll(std::string(d.body()))) ++early;
    log.record(d);
  });
  constexpr int count = 30;  // per key
  const long long due = handoff::test::monotonic_ns() + std::chrono::nanoseconds(300ms).count();
  std::vector<std::string> cancelled;
  for (int i = 0; i < count; ++i) {
    for (const std::string& key : keys) {
      const std::string id = actors.post_after(key, std::to_string(due) + " " + std::to_string(i), 300ms);
      if (i == count - 1) cancelled.push_back(id);
    }
  }
  for (std::size_t k = 0; k < keys.size(); ++k) EXPECT_TRUE(actors.cancel_delayed(keys[k], cancelled[k])) << k;
  const std::size_t total = (count - 1) * keys.size();
  ASSERT_TRUE(handoff::test::eventually([&] { return log.size() == total; }, 20s)) << log.size() << " of " << total;
  std::this_thread::sleep_for(100ms);  // a few more sweeps: nothing cancelled or moved twice runs
  EXPECT_EQ(log.size(), total);
  EXPECT_EQ(early.load(), 0);
  std::map<std::string, long long> seen;
  EXPECT_EQ(log.check(seen), "");
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count - 1));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, static_cast<long long>(keys.size())) << message;
  EXPECT_TRUE(handoff::test::eventually([&] { return left_under(o.prefix).empty(); })) << left_under(o.prefix).size();
}

TEST(RedisCluster, ActorsDrainingWhileTheirSlotGroupMovesRunEachMessageOnceInOrder) {
  hr::options o = on_cluster();
  o.prefix = "moving:";
  o.command_timeout = 5s;  // longer than the migration, which makes the actors' scripts wait
  const std::string key = "room:moving";
  const int slot = actor_slot(key);
  const int from = cluster().primary_of(slot);
  const int to = another_primary(from);
  actor_log log;
  hr::actor_options a;
  a.lease = handoff::lease{2s};
  a.sweep_interval = 10ms;
  hr::actor_system drainer(o, a);
  drainer.on("room:", [&](hr::delivery& d) {
    std::this_thread::sleep_for(1ms);
    log.record(d);
  });
  a.sweep_interval = 0ms;
  hr::actor_system poster(o, a);  // no handler: it announces the actor, the drainer's sweeper takes it
  constexpr int count = 150;
  std::thread posting([&] {
    for (int i = 0; i < count; ++i) (void)poster.post(key, "p " + std::to_string(i));
  });
  ASSERT_TRUE(handoff::test::eventually([&] { return log.size() >= 20; }));
  cluster().migrate(slot, to, redis_cluster::step::importing);
  EXPECT_LT(log.size(), count) << "the actor had messages left when its slot began to move";
  std::this_thread::sleep_for(100ms);
  cluster().migrate(slot, to, redis_cluster::step::keys_moved);
  std::this_thread::sleep_for(100ms);
  cluster().migrate(slot, to, redis_cluster::step::done);
  posting.join();
  ASSERT_TRUE(handoff::test::eventually([&] { return log.size() >= count; }, 20s)) << log.size();
  std::map<std::string, long long> seen;
  EXPECT_EQ(log.check(seen), "");
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, 1) << message << " ran again with no owner lost";
  EXPECT_EQ(cluster().primary_of(slot), to);
  EXPECT_TRUE(handoff::test::eventually([&] { return left_under(o.prefix).empty(); }));
}

TEST(RedisCluster, AnActorOwnerKilledMidHandlerLosesNoMessageAndItsRerunIsFlagged) {
  handoff::test::redis_server records;  // the handlers' records (redis_actor_check.hpp)
  const int port = records.port();
  raw_redis raw(port);
  hr::actor_options a;
  a.lease = handoff::lease{300ms};
  a.sweep_interval = 20ms;
  hr::actor_system actors(on_cluster(), a);
  actors.on("", [port](hr::delivery& d) { handoff::test::record_run(port, d); });
  const std::string key = actor_key_on(cluster().primaries().back(), "killed");
  handoff::test::helper_process owner(
      HANDOFF_REDIS_ACTOR_HELPER,
      {std::to_string(port) + "@" + std::to_string(cluster().seed_port()), "300", "hang", key});
  ASSERT_TRUE(handoff::test::eventually([&] { return raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  for (int i = 0; i < 3; ++i) actors.post(key, "t " + std::to_string(i));  // queued behind the owner
  const auto log = [&] { return raw.strings({"LRANGE", "t:log:" + key, "0", "-1"}); };
  EXPECT_TRUE(log().empty()) << "handled while the owner's lease was live";
  owner.kill();  // SIGKILL mid-handler
  ASSERT_TRUE(handoff::test::eventually([&] { return log().size() == 4; }, 10s));
  EXPECT_EQ(handoff::test::runs_of(log()), (std::vector<std::string>{"hang 0 2", "t 0 1", "t 1 1", "t 2 1"}));
  EXPECT_EQ(handoff::test::check_log(log(), nullptr), "");
}

// A key of the lock whose names ("handoff:{<key>}:lock" ...) live on the primary at `port`.
std::string key_on(int port, const std::string& stem) {
  for (int i = 0;; ++i) {
    const std::string k = stem + std::to_string(i);
    if (cluster().primary_of(hr::detail::hash_slot("{" + k + "}")) == port) return k;
  }
}

hr::options lock_options() {
  hr::options o = on_cluster();
  o.recheck_interval = 200ms;
  return o;
}

TEST(RedisCluster, TheLockExcludesAndGivesRisingTokensOnKeysOfEveryPrimary) {
  constexpr int threads = 3;
  constexpr int rounds = 15;
  std::vector<std::unique_ptr<hr::keyed_mutex>> clients;
  for (int t = 0; t < threads; ++t) clients.push_back(std::make_unique<hr::keyed_mutex>(lock_options()));
  std::vector<std::string> keys;
  for (const int port : cluster().primaries()) keys.push_back(key_on(port, "excl"));
  keys.emplace_back();  // the empty key has a slot of its own
  struct per_key {
    int inside = 0;  // written under the lock only
    int count = 0;
    std::vector<std::uint64_t> tokens;
    std::atomic<bool> overlap{false};
  };
  std::map<std::string, per_key> state;
  for (const auto& k : keys) state[k];
  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        for (int i = 0; i < rounds; ++i) {
          for (const auto& k : keys) {
            auto g = clients[static_cast<std::size_t>(t)]->lock(k);
            per_key& s = state.at(k);
            if (++s.inside != 1) s.overlap = true;
            ++s.count;
            s.tokens.push_back(g.token());
            std::this_thread::sleep_for(100us);
            --s.inside;
          }
        }
      });
    }
  }
  for (const auto& k : keys) {
    const per_key& s = state.at(k);
    EXPECT_FALSE(s.overlap) << "two holders of " << k;
    EXPECT_EQ(s.count, threads * rounds) << k;
    for (std::size_t i = 1; i < s.tokens.size(); ++i) ASSERT_LT(s.tokens[i - 1], s.tokens[i]) << k << " grant " << i;
  }
  for (const int port : cluster().primaries()) {
    const std::string k = key_on(port, "excl");
    EXPECT_EQ(raw_redis(port).integer({"EXISTS", "handoff:{" + k + "}:fence"}), 1) << "the fence of " << k;
  }
}

TEST(RedisCluster, TheLockGrantsBlockingAndAsyncWaitersInRequestOrderThroughShardedNotices) {
  for (const int port : cluster().primaries()) {
    const std::string k = key_on(port, "fifo");
    hr::keyed_mutex holder(lock_options());
    hr::options slow = lock_options();
    slow.recheck_interval = 20s;  // far later than the test's bound: the notices wake them
    std::vector<std::unique_ptr<hr::keyed_mutex>> clients;
    for (int i = 0; i < 3; ++i) clients.push_back(std::make_unique<hr::keyed_mutex>(slow));
    raw_redis node(port);
    auto g = holder.lock(k);
    std::mutex mu;
    std::vector<int> order;
    std::vector<std::uint64_t> tokens;
    std::promise<void> async_done;
    std::vector<std::jthread> blocking;
    const auto record = [&](int who, const hr::guard& w) {
      const std::lock_guard lock(mu);
      order.push_back(who);
      tokens.push_back(w.token());
    };
    blocking.emplace_back([&] { record(0, clients[0]->lock(k)); });
    ASSERT_TRUE(node.wait_queue_length(k, 1));
    clients[1]->lock_async(k, [&](hr::guard w, std::exception_ptr e) {
      EXPECT_EQ(e, nullptr);
      record(1, w);
      async_done.set_value();
    });
    ASSERT_TRUE(node.wait_queue_length(k, 2));
    blocking.emplace_back([&] { record(2, clients[2]->lock(k)); });
    ASSERT_TRUE(node.wait_queue_length(k, 3));
    const auto t0 = std::chrono::steady_clock::now();
    g.unlock();
    blocking.clear();  // joins
    ASSERT_EQ(async_done.get_future().wait_for(10s), std::future_status::ready);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "a waiter waited for its re-check";
    EXPECT_EQ(order, (std::vector<int>{0, 1, 2})) << "on the primary at port " << port;
    ASSERT_EQ(tokens.size(), 3U);
    EXPECT_LT(tokens[0], tokens[1]);
    EXPECT_LT(tokens[1], tokens[2]);
    // The async waiter listened on a sharded channel of the lock's slot, on the lock's node.
    const auto channels = node.strings({"PUBSUB", "SHARDCHANNELS", "handoff:notify:{*"});
    ASSERT_EQ(channels.size(), 1U) << "on the primary at port " << port;
    EXPECT_EQ(hr::detail::hash_slot(channels[0]), hr::detail::hash_slot("{" + k + "}"));
  }
}

// A lock_async callback that fulfils `p` with the grant or the error.
auto into(std::promise<hr::guard>& p) {
  return [&p](hr::guard g, std::exception_ptr e) {
    if (e) {
      p.set_exception(e);
    } else {
      p.set_value(std::move(g));
    }
  };
}

TEST(RedisCluster, ALockHeldAndWaitedForWhileItsSlotMovesKeepsOneHolderAndItsQueue) {
  std::promise<hr::guard> async_grant;  // outlives the mutexes, whose destructors may still answer it
  hr::keyed_mutex a(lock_options());
  hr::keyed_mutex b(lock_options());
  hr::keyed_mutex c(lock_options());
  hr::keyed_mutex d(lock_options());
  const std::string k = key_on(cluster().primaries().front(), "moving-lock");
  const int slot = hr::detail::hash_slot("{" + k + "}");
  const int from = cluster().primary_of(slot);
  const int to = another_primary(from);
  auto held = a.lock(k);
  const std::uint64_t first = held.token();
  std::atomic<bool> blocking_granted{false};
  std::jthread waiter([&] {
    auto g = b.lock(k);
    blocking_granted = true;
    // Held until the async waiter is queued behind it, then passed on.
    EXPECT_GT(g.token(), first);
    std::this_thread::sleep_for(300ms);
  });
  ASSERT_TRUE(raw_redis(from).wait_queue_length(k, 1));

  // The keys move while held: the lock, its queue, waiters and fence counter.
  cluster().migrate(slot, to, redis_cluster::step::importing);
  cluster().migrate(slot, to, redis_cluster::step::keys_moved);
  EXPECT_FALSE(c.try_lock(k).owns_lock()) << "a try mid-migration finds the key held (through ASK)";
  // A blocking waiter that queues now: its attempt goes through ASK to the target, and the
  // BLPOP written behind it, which ASKING does not cover, is redirected: it waits again.
  std::atomic<bool> late_granted{false};
  std::jthread late([&] {
    auto g = d.lock(k);
    late_granted = true;
    EXPECT_TRUE(blocking_granted.load()) << "granted after the waiter queued before it";
  });
  const std::string queue = "handoff:{" + k + "}:queue";
  ASSERT_TRUE(handoff::test::eventually([&] {
    raw_redis target(to);
    target.command({"ASKING"});  // the target serves the moved keys only to an ASKING client
    return target.integer({"LLEN", queue}) == 2;
  })) << "the late waiter queued on the target mid-migration";
  cluster().migrate(slot, to, redis_cluster::step::done);
  ASSERT_EQ(cluster().primary_of(slot), to);
  EXPECT_FALSE(c.try_lock(k).owns_lock()) << "the holder kept the key across the move";
  c.lock_async(k, into(async_grant));
  ASSERT_TRUE(raw_redis(to).wait_queue_length(k, 3)) << "the async waiter queued behind the blocking ones";
  EXPECT_FALSE(blocking_granted.load());
  EXPECT_FALSE(late_granted.load());
  held.unlock();  // MOVED: the release goes to the new primary and hands the key on
  waiter.join();
  late.join();
  EXPECT_TRUE(blocking_granted.load());
  EXPECT_TRUE(late_granted.load());
  auto f = async_grant.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  hr::guard last = f.get();
  EXPECT_TRUE(last.owns_lock());
  EXPECT_GT(last.token(), first);
  last.unlock();
  EXPECT_TRUE(c.try_lock(k).owns_lock());
}

// The shard channels of `slot` the node at `port` has subscribers for.
std::vector<std::string> channels_in(int port, int slot) {
  std::vector<std::string> out;
  for (const std::string& c : raw_redis(port).strings({"PUBSUB", "SHARDCHANNELS"})) {
    if (hr::detail::hash_slot(c) == slot) out.push_back(c);
  }
  return out;
}

TEST(RedisCluster, AnAsyncWaiterWhoseSlotMovesSubscribesOnTheNewPrimaryAndIsWokenByItsNotice) {
  std::promise<hr::guard> grant;  // outlives the mutexes, whose destructors may still answer it
  hr::keyed_mutex holder(lock_options());
  hr::options slow = lock_options();
  slow.recheck_interval = 20s;  // far later than the test's bound: only a notice wakes it in time
  hr::keyed_mutex waiter(slow);
  const std::string k = key_on(cluster().primaries().back(), "resubscribed");
  const int slot = hr::detail::hash_slot("{" + k + "}");
  const int from = cluster().primary_of(slot);
  const int to = another_primary(from);
  auto held = holder.lock(k);
  waiter.lock_async(k, into(grant));
  ASSERT_TRUE(raw_redis(from).wait_queue_length(k, 1));
  EXPECT_EQ(channels_in(from, slot).size(), 1U) << "subscribed on the old primary";

  cluster().migrate(slot, to, redis_cluster::step::importing);
  cluster().migrate(slot, to, redis_cluster::step::keys_moved);
  cluster().migrate(slot, to, redis_cluster::step::done);
  // The old primary ended the subscription (sunsubscribe): the waiter re-checks at once,
  // which subscribes it on the new one.
  EXPECT_TRUE(handoff::test::eventually([&] { return channels_in(to, slot).size() == 1; }, 5s))
      << "not subscribed on the new primary";
  EXPECT_TRUE(channels_in(from, slot).empty());
  const auto t0 = handoff::test::steady::now();
  held.unlock();
  auto f = grant.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready) << "the grant's notice did not reach the waiter";
  EXPECT_LT(handoff::test::since(t0), 5s);
  EXPECT_TRUE(f.get().owns_lock());
}

// Mid-failover a cluster can answer CLUSTER SLOTS without a dead primary's slots until a
// replica is promoted. A command on such a slot waits for a node to serve it (until
// command_timeout) rather than failing at once. Here no node has the slot until its
// primary claims it back.
TEST(RedisCluster, ACommandOnASlotNoNodeServesWaitsUntilANodeClaimsIt) {
  const int owner = cluster().primaries().front();
  const std::string k = key_on(owner, "unserved");
  const std::string slot = std::to_string(hr::detail::hash_slot("{" + k + "}"));
  std::vector<int> nodes = cluster().primaries();
  for (const int p : cluster().primaries()) nodes.push_back(cluster().replica_of(p));
  // The other slots stay served, so that the store starts at once, its map without the slot.
  for (const int port : nodes) raw_redis(port).command({"CONFIG", "SET", "cluster-require-full-coverage", "no"});
  for (const int port : nodes) raw_redis(port).command({"CLUSTER", "DELSLOTS", slot});
  {  // the wait ends at command_timeout
    hr::options brief = on_cluster();
    brief.command_timeout = 200ms;
    hr::fenced_store unserved(brief);
    const auto t = handoff::test::steady::now();
    try {
      (void)unserved.write(k, "never", 1);
      ADD_FAILURE() << "written on a slot no node serves";
    } catch (const hr::error& e) {
      EXPECT_NE(std::string(e.what()).find("no node serves its slot"), std::string::npos) << e.what();
    }
    EXPECT_GE(handoff::test::since(t), 150ms) << "gave up before command_timeout";
    EXPECT_LT(handoff::test::since(t), 5s);
  }
  const auto t0 = handoff::test::steady::now();
  std::jthread claim([&] {
    std::this_thread::sleep_for(300ms);
    raw_redis(owner).command({"CLUSTER", "ADDSLOTS", slot});
  });
  hr::options o = on_cluster();
  o.command_timeout = 10s;    // the claim reaches the node asked for the map by gossip
  hr::fenced_store store(o);  // its slot map has no node for the slot
  EXPECT_TRUE(store.write(k, "served", 1));
  EXPECT_GE(handoff::test::since(t0), 300ms) << "written before any node served the slot";
  EXPECT_EQ(store.read(k).value, "served");
  claim.join();
  for (const int port : nodes) raw_redis(port).command({"CONFIG", "SET", "cluster-require-full-coverage", "yes"});
  cluster().wait_until_serving();
}

// The failover tests each kill one of the two primaries other than the seed (which the
// fixture asks), chosen before either runs; they run last and leave the cluster two
// replicas short.
int doomed_primary(std::size_t which) {
  static const std::vector<int> doomed = [] {
    std::vector<int> p;
    for (const int port : cluster().primaries()) {
      if (port != cluster().seed_port()) p.push_back(port);
    }
    return p;
  }();
  return doomed.at(which);
}

hr::options riding_out_a_failover() {
  hr::options o = lock_options();
  o.command_timeout = 15s;  // failure detection (--cluster-node-timeout 500) and an election: 3-6 s here
  return o;
}

TEST(RedisCluster, AFailoverLosesAGrantItsReplicaNeverGotWhichMinReplicasRefusesToReturn) {
  const int doomed = doomed_primary(1);
  const std::string lost_key = key_on(doomed, "lost");
  const std::string refused_key = key_on(doomed, "refused");
  hr::keyed_mutex holder(riding_out_a_failover());
  hr::keyed_mutex other(riding_out_a_failover());
  hr::options acked = lock_options();
  acked.min_replicas = 1;
  acked.command_timeout = 300ms;
  hr::keyed_mutex careful(acked);

  std::uint64_t replicated = 0;  // a first grant: its fence counter reaches the replica
  {
    auto g = holder.lock(lost_key);
    replicated = g.token();
  }
  const int replica = cluster().replica_of(doomed);
  (void)cluster().replica_holding(doomed, "handoff:{" + lost_key + "}:fence");
  {
    hr::options patient = acked;
    patient.command_timeout = 5s;  // a loaded machine may delay the replica's acknowledgement
    EXPECT_TRUE(hr::keyed_mutex(patient).lock(refused_key).owns_lock()) << "with the replica there, it is met";
  }

  // The replica stops, its link is cut: nothing written from now on reaches it.
  cluster().pause(replica);
  raw_redis(doomed).command({"CLIENT", "KILL", "TYPE", "replica"});
  const auto t0 = handoff::test::steady::now();
  try {
    (void)careful.lock(refused_key);
    ADD_FAILURE() << "a grant no replica held was returned";
  } catch (const hr::error& e) {
    EXPECT_NE(std::string(e.what()).find("0 of the 1 replicas"), std::string::npos) << e.what();
  }
  EXPECT_LT(handoff::test::since(t0), 2s) << "WAIT is bounded by command_timeout";
  EXPECT_TRUE(other.try_lock(refused_key).owns_lock()) << "the refused grant gave the key up";

  auto lost = holder.lock(lost_key);  // min_replicas = 0: returned at once, on the primary only
  EXPECT_EQ(lost.token(), replicated + 1);
  cluster().kill(doomed);
  cluster().resume(replica);

  // The promoted replica never had that grant: the key is free, and the token is given again.
  auto second = other.lock(lost_key);
  EXPECT_TRUE(second.owns_lock());
  EXPECT_TRUE(lost.owns_lock()) << "the first holder is not told: two holders until its lease ends";
  EXPECT_EQ(second.token(), lost.token()) << "the counter's last increment was lost with the grant";
}

TEST(RedisCluster, AfterAPrimaryIsKilledItsReplicaServesRecordsAndGrantsMinReplicasConfirmed) {
  cluster().wait_until_serving();  // after the failover of the test before
  hr::options o = riding_out_a_failover();
  hr::fenced_store fenced(o);
  const int doomed = doomed_primary(0);
  const std::string key = key_on(doomed, "failover");
  const int slot = handoff::redis::detail::hash_slot("{" + key + "}");
  ASSERT_TRUE(fenced.write(key, "kept", 3));
  const int replica = cluster().replica_holding(doomed, "handoff:{" + key + "}:fenced");
  const std::string lock_key = key_on(doomed, "failover-lock");  // its fence is not the record's
  hr::keyed_mutex other(o);
  o.min_replicas = 1;
  hr::keyed_mutex locks(o);
  std::uint64_t last = 0;
  for (int i = 0; i < 5; ++i) {
    auto g = locks.lock(lock_key);
    EXPECT_GT(g.token(), last);
    last = g.token();
  }
  auto held = locks.lock(lock_key);
  EXPECT_GT(held.token(), last);
  last = held.token();

  cluster().kill(doomed);
  const auto t0 = handoff::test::steady::now();
  EXPECT_EQ(fenced.read(key).value, "kept") << "the replica had it before the crash";
  EXPECT_LT(handoff::test::since(t0), o.command_timeout + 1s);
  EXPECT_TRUE(handoff::test::eventually([&] { return cluster().primary_of(slot) == replica; }, 5s))
      << "the seed, which the fixture asks, learns of the failover by gossip";
  EXPECT_FALSE(fenced.write(key, "stale", 2));
  EXPECT_TRUE(fenced.write(key, "after", 4));
  EXPECT_EQ(fenced.read(key).value, "after");

  // Every grant that returned was on the replica: the key is still held, tokens go on rising.
  EXPECT_FALSE(other.try_lock(lock_key).owns_lock()) << "the confirmed grant survived the failover";
  held.unlock();
  auto next = other.lock(lock_key);
  EXPECT_GT(next.token(), last);
  next.unlock();
  // The promoted replica has no replica of its own: min_replicas = 1 cannot be met now.
  o.command_timeout = 300ms;
  hr::keyed_mutex careful(o);
  EXPECT_THROW((void)careful.lock(lock_key), hr::error);
  EXPECT_TRUE(other.try_lock(lock_key).owns_lock()) << "the refused grant gave the key up";
}

}  // namespace
