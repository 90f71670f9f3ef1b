// The server side of a shard (lib/redis/actor/shard_store.hpp), against a real
// redis-server: keys map to shards the same way in every process, a shard's names share
// one Cluster slot, entries keep their bytes, a post beyond the capacity is taken back, a
// lease gives rising tokens and refuses a second owner while it runs, every write of an
// owner whose epoch has passed is refused whole, and a crash's takeover counts a delivery
// for what was queued then.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../../lib/redis/actor/shard_store.hpp"
#include "../../lib/redis/common/router.hpp"
#include "../support/redis_server.hpp"
#include "../support/redis_test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
namespace hr = handoff::redis;
namespace hd = handoff::redis::detail;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::test_timeout;

class RedisShardStore : public testing::Test {
 protected:
  static hr::options opts(int port) {
    hr::options o;
    o.port = port;
    return o;
  }
  // The token's epoch: its digits before the space.
  static long long epoch_of(const std::string& token) { return std::stoll(token.substr(0, token.find(' '))); }

  // The token of a takeover, or std::nullopt (last_left_: the held lease's ms left).
  std::optional<std::string> take(const hd::shard_names& s, const std::string& owner, std::int64_t lease_ms = 30000) {
    std::optional<hd::shard_takeover> t = take_over(s, owner, lease_ms);
    if (!t) return std::nullopt;
    return t->token;
  }
  std::optional<hd::shard_takeover> take_over(const hd::shard_names& s, const std::string& owner,
                                              std::int64_t lease_ms = 30000) {
    std::int64_t left = -1;
    std::optional<hd::shard_takeover> t = leases_.take(s, owner, lease_ms, left);
    if (!t) last_left_ = left;
    return t;
  }

  test_timeout timeout_{60s};
  redis_server server_;
  raw_redis raw_{server_.port()};
  hr::options o_ = opts(server_.port());
  hd::router router_{o_};
  hd::shard_store leases_{router_};
  hd::shard_names shard_{o_.prefix, "room:", 7};
  std::int64_t last_left_ = -1;
};

TEST(RedisShardMap, AKeyMapsToOneShardAndKeysSpreadOverAll) {
  // FNV-1a of "room:7", fixed by the data format: a build that changed it would send a
  // key's messages to another queue than a running process does.
  std::uint64_t h = 14695981039346656037ULL;
  for (const char c : std::string("room:7")) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  EXPECT_EQ(hd::shard_of("room:7", 256), h % 256);
  EXPECT_EQ(hd::shard_of("room:7", 1), 0U);
  std::vector<int> per(256);
  for (int i = 0; i < 25600; ++i) ++per.at(hd::shard_of("player:" + std::to_string(i), 256));
  for (int n : per) EXPECT_GT(n, 50) << "a shard of 256 got too few of 25,600 keys";
}

TEST(RedisShardMap, EveryNameOfAShardSharesItsSlot) {
  for (std::uint32_t i : {0U, 1U, 255U, 256U, 1000U}) {
    const hd::shard_names s("handoff:", "room:{x}", i);
    const std::uint16_t slot = hd::hash_slot(s.queue);
    for (const std::string& n : {s.lease, s.meta, s.done, s.dead("room:1"), s.state("room:{2}"), s.dead("")}) {
      EXPECT_EQ(hd::hash_slot(n), slot) << n;
    }
  }
  EXPECT_NE(hd::hash_slot(hd::shard_names("handoff:", "room:", 1).queue),
            hd::hash_slot(hd::shard_names("handoff:", "room:", 2).queue));
  // Families and indexes keep their names apart.
  std::set<std::string> names;
  for (const char* f : {"room:", "room", "player:"}) {
    for (std::uint32_t i : {1U, 11U, 257U}) EXPECT_TRUE(names.insert(hd::shard_names("p:", f, i).queue).second);
  }
}

TEST(RedisShardEntry, AnEntryKeepsItsIdKeyAndBodyBytes) {
  const std::string key("room 7\0{x}", 11);
  const std::string body("join alice\0\n 3 x", 17);
  for (const auto& [k, b] : {std::pair{key, body}, std::pair{std::string(), std::string()},
                             std::pair{std::string("k"), std::string(" 1 k")}}) {
    const std::string e = hd::entry_text("s1-00000000000000000042", k, b);
    const std::optional<hd::entry_parts> p = hd::parse_entry(e);
    ASSERT_TRUE(p) << e;
    EXPECT_EQ(p->id, "s1-00000000000000000042");
    EXPECT_EQ(p->key, k);
    EXPECT_EQ(p->body, b);
  }
  for (const char* bad : {"", "id", " 1 k", "id x k", "id 3 ab", "id 2", "id 2k", "id -1 k"}) {
    EXPECT_FALSE(hd::parse_entry(bad)) << "parsed \"" << bad << "\"";
  }
}

TEST_F(RedisShardStore, APostBeyondTheCapacityIsTakenBackAndReadsSeeTheQueueInOrder) {
  const std::string e1 = hd::entry_text("a-1", "room:1", "x");
  const std::string e2 = hd::entry_text("a-2", "room:2", "y");
  const std::string e3 = hd::entry_text("a-3", "room:1", "z");
  EXPECT_EQ(leases_.post(shard_, e1, 2), 1U);
  EXPECT_EQ(leases_.post(shard_, e2, 2), 2U);
  EXPECT_EQ(leases_.post(shard_, e3, 2), 0U) << "the third entry of a capacity-2 shard";
  EXPECT_EQ(leases_.read(shard_, 0, 10), (std::vector<std::string>{e1, e2}));
  EXPECT_EQ(leases_.read(shard_, 1, 1), (std::vector<std::string>{e2}));
  EXPECT_TRUE(leases_.read(shard_, 2, 5).empty());
  EXPECT_EQ(leases_.post(shard_, e3, 0), 3U) << "capacity 0: unbounded";
}

TEST_F(RedisShardStore, ATakeoverAfterACrashCountsADeliveryForWhatWasQueued) {
  for (int i = 0; i < 3; ++i) leases_.post(shard_, hd::entry_text("a-" + std::to_string(i), "k", "b"), 0);
  // The first owner of a shard finds entries nobody ran: no mark.
  const std::optional<hd::shard_takeover> a = take_over(shard_, "A", 50);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->trimmed, 0U);
  EXPECT_TRUE(a->marks.empty());
  EXPECT_EQ(a->delivery(0), 1U);
  // A dies (its lease runs out); two more entries come; B takes over.
  for (int i = 3; i < 5; ++i) leases_.post(shard_, hd::entry_text("a-" + std::to_string(i), "k", "b"), 0);
  std::optional<hd::shard_takeover> b;
  for (int i = 0; i < 200 && !b; ++i) {
    b = take_over(shard_, "B", 50);
    if (!b) std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(b);
  EXPECT_EQ(b->marks, std::vector<std::uint64_t>{5});
  EXPECT_EQ(b->delivery(0), 2U);
  EXPECT_EQ(b->delivery(4), 2U);
  EXPECT_EQ(b->delivery(5), 1U) << "an entry posted after the takeover";
  // B acknowledges two and dies: C counts a third delivery for the rest.
  hd::shard_ack_write two;
  two.trim = 2;
  ASSERT_EQ(leases_.ack(shard_, b->token, two), hd::shard_store::acked::written);
  std::optional<hd::shard_takeover> c;
  for (int i = 0; i < 200 && !c; ++i) {
    c = take_over(shard_, "C");
    if (!c) std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(c);
  EXPECT_EQ(c->trimmed, 2U);
  EXPECT_EQ(c->marks, (std::vector<std::uint64_t>{5, 5}));
  EXPECT_EQ(c->delivery(2), 3U);
  // C acknowledges everything: the marks go with the entries; its clean release leaves
  // none for D.
  hd::shard_ack_write rest;
  rest.trim = 3;
  ASSERT_EQ(leases_.ack(shard_, c->token, rest), hd::shard_store::acked::written);
  EXPECT_EQ(raw_.integer({"HEXISTS", shard_.meta, "marks"}), 0);
  leases_.post(shard_, hd::entry_text("a-5", "k", "b"), 0);
  ASSERT_TRUE(leases_.release(shard_, c->token, true));
  const std::optional<hd::shard_takeover> d = take_over(shard_, "D");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->trimmed, 5U);
  EXPECT_TRUE(d->marks.empty());
  EXPECT_EQ(d->delivery(5), 1U);
}

TEST_F(RedisShardStore, TokensRiseAndASecondOwnerIsRefusedWhileTheLeaseRuns) {
  const std::optional<std::string> a = take(shard_, "A");
  ASSERT_TRUE(a);
  EXPECT_EQ(*a, "1 A");
  EXPECT_FALSE(take(shard_, "B"));
  EXPECT_GT(last_left_, 25000);
  EXPECT_LE(last_left_, 30000);
  EXPECT_FALSE(leases_.release(shard_, "1 B", false)) << "a token that is not the lease releases nothing";
  EXPECT_EQ(raw_.string({"GET", shard_.lease}), "1 A");
  EXPECT_TRUE(leases_.release(shard_, *a, true));
  EXPECT_FALSE(leases_.release(shard_, *a, true)) << "released twice";
  const std::optional<std::string> b = take(shard_, "B");
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, "2 B");
  // The epoch stays after the lease: a later takeover never reissues a token.
  ASSERT_TRUE(leases_.release(shard_, *b, true));
  EXPECT_EQ(raw_.string({"HGET", shard_.meta, "epoch"}), "2");
  EXPECT_EQ(epoch_of(*take(shard_, "A")), 3);
}

TEST_F(RedisShardStore, AnEmptyAcknowledgementReleasesOnlyAShardWhoseQueueAPostDidNotReach) {
  const std::optional<std::string> a = take(shard_, "A");
  ASSERT_TRUE(a);
  leases_.post(shard_, hd::entry_text("a-1", "k", "b"), 0);
  hd::shard_ack_write release;  // nothing to write: only the release
  release.release_if_empty = true;
  EXPECT_EQ(leases_.ack(shard_, *a, release), hd::shard_store::acked::written);
  EXPECT_EQ(raw_.string({"GET", shard_.lease}), *a) << "released with an entry nobody will read";
  hd::shard_ack_write w;
  w.trim = 1;
  ASSERT_EQ(leases_.ack(shard_, *a, w), hd::shard_store::acked::written);
  EXPECT_EQ(leases_.ack(shard_, *a, release), hd::shard_store::acked::released);
  EXPECT_EQ(raw_.integer({"EXISTS", shard_.lease}), 0);
}

TEST_F(RedisShardStore, AnAcknowledgementThatEmptiesTheQueueMayReleaseTheShardWithIt) {
  const std::optional<std::string> a = take(shard_, "A");
  ASSERT_TRUE(a);
  leases_.post(shard_, hd::entry_text("a-1", "k", "b"), 0);
  leases_.post(shard_, hd::entry_text("a-2", "k", "b"), 0);
  hd::shard_ack_write w;
  w.trim = 1;
  w.release_if_empty = true;
  EXPECT_EQ(leases_.ack(shard_, *a, w), hd::shard_store::acked::written) << "released with an entry queued";
  EXPECT_EQ(raw_.string({"GET", shard_.lease}), *a);
  EXPECT_EQ(leases_.ack(shard_, *a, w), hd::shard_store::acked::released);
  EXPECT_EQ(raw_.integer({"EXISTS", shard_.lease, shard_.queue}), 0);
  EXPECT_EQ(raw_.integer({"HEXISTS", shard_.meta, "owned"}), 0) << "a release with the acknowledgement is clean";
}

TEST_F(RedisShardStore, AnOwnerWhoseLeaseRanOutIsFencedFromEveryWrite) {
  const std::optional<std::string> a = take(shard_, "A", 50);
  ASSERT_TRUE(a);
  raw_.command({"RPUSH", shard_.queue, "e1", "e2", "e3"});
  std::optional<std::string> b;
  for (int i = 0; i < 200 && !b; ++i) {
    b = take(shard_, "B");
    if (!b) std::this_thread::sleep_for(5ms);
  }
  ASSERT_TRUE(b) << "the 50 ms lease never ran out";
  EXPECT_EQ(epoch_of(*b), epoch_of(*a) + 1);
  hd::shard_ack_write w;
  w.trim = 2;
  w.done_add = {"x"};
  w.states.push_back({"room:1", "id1", "s1"});
  w.dead.push_back({"room:1", "id2 body"});
  EXPECT_EQ(leases_.ack(shard_, *a, w), hd::shard_store::acked::refused);
  EXPECT_EQ(raw_.integer({"LLEN", shard_.queue}), 3) << "a fenced acknowledgement trimmed the queue";
  EXPECT_EQ(raw_.integer({"EXISTS", shard_.done, shard_.state("room:1"), shard_.dead("room:1")}), 0)
      << "a fenced acknowledgement wrote part of its writes";
  EXPECT_EQ(leases_.renew({{&shard_, *a}}, 30000), std::vector<bool>{false});
  EXPECT_FALSE(leases_.release(shard_, *a, true));
  EXPECT_EQ(raw_.string({"GET", shard_.lease}), *b);
  EXPECT_EQ(leases_.ack(shard_, *b, w), hd::shard_store::acked::written);
  EXPECT_EQ(raw_.strings({"LRANGE", shard_.queue, "0", "-1"}), std::vector<std::string>{"e3"});
}

TEST_F(RedisShardStore, AnAcknowledgementWritesEverythingInOneStep) {
  const std::optional<std::string> t = take(shard_, "A");
  ASSERT_TRUE(t);
  raw_.command({"RPUSH", shard_.queue, "1 a", "2 b", "3 c", "4 d", "5 e"});
  hd::shard_ack_write w;
  w.trim = 1;
  w.done_add = {"3", "5"};
  w.states.push_back({"room:1", "1", "one"});
  w.states.push_back({"room:{2}", "3", "three"});
  w.states.push_back({"room:1", "5", "five"});  // the later state of the same key wins
  w.dead.push_back({"room:{2}", "4 d"});
  ASSERT_EQ(leases_.ack(shard_, *t, w), hd::shard_store::acked::written);
  EXPECT_EQ(raw_.integer({"LLEN", shard_.queue}), 4);
  EXPECT_EQ(raw_.integer({"SCARD", shard_.done}), 2);
  EXPECT_EQ(raw_.strings({"HMGET", shard_.state("room:1"), "id", "value"}), (std::vector<std::string>{"5", "five"}));
  EXPECT_EQ(raw_.strings({"HMGET", shard_.state("room:{2}"), "id", "value"}), (std::vector<std::string>{"3", "three"}));
  EXPECT_EQ(raw_.strings({"LRANGE", shard_.dead("room:{2}"), "0", "-1"}), std::vector<std::string>{"4 d"});
  // The slow head finishes: everything is trimmed and the done ids are forgotten, so the
  // shard leaves nothing but its lease and meta on the server.
  hd::shard_ack_write rest;
  rest.trim = 4;
  rest.done_remove = {"3", "5"};
  ASSERT_EQ(leases_.ack(shard_, *t, rest), hd::shard_store::acked::written);
  EXPECT_EQ(raw_.integer({"EXISTS", shard_.queue, shard_.done}), 0);
}

TEST_F(RedisShardStore, ThousandsOfDoneIdsGoInSlices) {
  const std::optional<std::string> t = take(shard_, "A");
  ASSERT_TRUE(t);
  hd::shard_ack_write w;
  for (int i = 0; i < 2500; ++i) w.done_add.push_back("id-" + std::to_string(i));
  ASSERT_EQ(leases_.ack(shard_, *t, w), hd::shard_store::acked::written);
  EXPECT_EQ(raw_.integer({"SCARD", shard_.done}), 2500);
  hd::shard_ack_write r;
  r.done_remove = w.done_add;
  ASSERT_EQ(leases_.ack(shard_, *t, r), hd::shard_store::acked::written);
  EXPECT_EQ(raw_.integer({"EXISTS", shard_.done}), 0);
}

TEST_F(RedisShardStore, OneRenewalCoversManyShardsAndNamesTheLostOnes) {
  std::vector<hd::shard_names> shards;
  for (std::uint32_t i = 0; i < 300; ++i) shards.emplace_back(o_.prefix, "room:", i);
  std::vector<std::pair<const hd::shard_names*, std::string>> held;
  for (const hd::shard_names& s : shards) {
    const std::optional<std::string> t = take(s, "A", 1000);
    ASSERT_TRUE(t);
    held.emplace_back(&s, *t);
  }
  // Another process takes shard 17 after its lease was lost (deleted here).
  raw_.command({"DEL", shards[17].lease});
  ASSERT_TRUE(take(shards[17], "B"));
  const std::vector<bool> renewed = leases_.renew(held, 60000);
  ASSERT_EQ(renewed.size(), shards.size());
  for (std::size_t i = 0; i < renewed.size(); ++i) EXPECT_EQ(renewed[i], i != 17) << i;
  EXPECT_GT(raw_.integer({"PTTL", shards[0].lease}), 30000) << "the renewal did not extend the lease";
}

TEST_F(RedisShardStore, AProcessWithAnotherShardCountIsRefused) {
  hd::shard_store::claim_count(router_, o_.prefix, 256);
  hd::shard_store::claim_count(router_, o_.prefix, 256);
  try {
    hd::shard_store::claim_count(router_, o_.prefix, 128);
    ADD_FAILURE() << "a client with 128 shards shared a prefix of 256";
  } catch (const hr::error& e) {
    const std::string why = e.what();
    EXPECT_NE(why.find("256"), std::string::npos) << why;
    EXPECT_NE(why.find("128"), std::string::npos) << why;
  }
  hd::shard_store::claim_count(router_, "other:", 128);  // another prefix is another map
}

}  // namespace
