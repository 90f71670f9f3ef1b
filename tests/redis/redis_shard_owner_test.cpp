// A process's ownership of shards (lib/redis/actor/shard_owner.hpp), against a real
// redis-server: every entry runs once per key in queue order and leaves nothing behind, a
// slow key holds only itself, a crashed owner's unacknowledged entries run again flagged,
// an owner whose lease was taken writes nothing more, a failing message goes to its key's
// dead letters, and a clean release leaves the next owner no redelivery.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../../lib/redis/actor/shard_owner.hpp"
#include "../../lib/redis/actor/shard_store.hpp"
#include "../../lib/redis/common/router.hpp"
#include "../support/redis_server.hpp"
#include "../support/redis_test_support.hpp"
#include "../support/test_timeout.hpp"
#include "handoff/thread_pool.hpp"

namespace {

using namespace std::chrono_literals;
namespace hr = handoff::redis;
namespace hd = handoff::redis::detail;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::test_timeout;

std::int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What the handlers saw: per key, the bodies in the order run, and each run's attempt.
struct seen {
  std::mutex mu;
  std::map<std::string, std::vector<std::string>> bodies;
  std::map<std::string, std::uint32_t> attempts;  // body -> the last run's attempt
  std::vector<std::string> errors;
  std::size_t runs() {
    const std::lock_guard lock(mu);
    std::size_t n = 0;
    for (const auto& [k, v] : bodies) n += v.size();
    return n;
  }
};

class RedisShardOwner : public testing::Test {
 protected:
  static constexpr std::uint32_t shards = 8;

  hd::shard_owner_settings settings(const std::string& owner, std::int64_t lease_ms = 30000) const {
    hd::shard_owner_settings s;
    s.prefix = o_.prefix;
    s.family = "room:";
    s.shards = shards;
    s.owner_id = owner;
    s.lease_ms = lease_ms;
    s.max_attempts = 3;
    return s;
  }
  std::unique_ptr<hd::shard_owner> owner(seen& log, const std::string& id, std::int64_t lease_ms = 30000,
                                         handoff::executor_ref ex = {}, std::function<void(hr::delivery&)> extra = {}) {
    hd::shard_owner_settings s = settings(id, lease_ms);
    s.executor = ex;
    return std::make_unique<hd::shard_owner>(
        store_, s,
        [&log, extra](hr::delivery& d) {
          if (extra) extra(d);
          const std::lock_guard lock(log.mu);
          log.bodies[std::string(d.key())].emplace_back(d.body());
          log.attempts[std::string(d.body())] = d.attempt();
        },
        [&log](std::string_view key, const std::exception_ptr& e) {
          try {
            std::rethrow_exception(e);
          } catch (const std::exception& x) {
            const std::lock_guard lock(log.mu);
            log.errors.push_back(std::string(key) + ": " + x.what());
          }
        });
  }
  void post(const std::string& key, const std::string& body) {
    const hd::shard_names s(o_.prefix, "room:", hd::shard_of(key, shards));
    ASSERT_NE(store_.post(s, hd::entry_text("t-" + std::to_string(++ids_), key, body), 0), 0U);
  }
  // Rounds until pred() or 10 s.
  template <class Pred>
  bool rounds(hd::shard_owner& o, Pred pred) {
    for (const auto until = std::chrono::steady_clock::now() + 10s; std::chrono::steady_clock::now() < until;) {
      o.round(now_ms());
      if (pred()) return true;
      std::this_thread::sleep_for(1ms);
    }
    return false;
  }
  long long queued() {
    long long n = 0;
    for (std::uint32_t i = 0; i < shards; ++i)
      n += raw_.integer({"LLEN", hd::shard_names(o_.prefix, "room:", i).queue});
    return n;
  }
  long long done_sets() {
    long long n = 0;
    for (std::uint32_t i = 0; i < shards; ++i)
      n += raw_.integer({"EXISTS", hd::shard_names(o_.prefix, "room:", i).done});
    return n;
  }
  void take_all(hd::shard_owner& o) {
    for (std::uint32_t i = 0; i < shards; ++i) ASSERT_TRUE(o.take(i)) << i;
  }

  test_timeout timeout_{60s};
  redis_server server_;
  raw_redis raw_{server_.port()};
  hr::options o_ = [this] {
    hr::options o;
    o.port = server_.port();
    return o;
  }();
  hd::router router_{o_};
  hd::shard_store store_{router_};
  int ids_ = 0;
};

TEST_F(RedisShardOwner, EveryEntryRunsOnceInItsKeysOrderAndNothingStays) {
  seen log;
  auto a = owner(log, "A");
  take_all(*a);
  for (int m = 0; m < 30; ++m) {
    for (int k = 0; k < 20; ++k) post("room:" + std::to_string(k), std::to_string(m));
  }
  ASSERT_TRUE(rounds(*a, [&] { return log.runs() == 600 && queued() == 0; }))
      << log.runs() << " runs, " << queued() << " queued";
  for (int k = 0; k < 20; ++k) {
    const std::vector<std::string>& b = log.bodies["room:" + std::to_string(k)];
    ASSERT_EQ(b.size(), 30U);
    for (int m = 0; m < 30; ++m) EXPECT_EQ(b[static_cast<std::size_t>(m)], std::to_string(m)) << k;
  }
  for (const auto& [body, attempt] : log.attempts) EXPECT_EQ(attempt, 1U) << body;
  EXPECT_EQ(done_sets(), 0);
  EXPECT_TRUE(log.errors.empty()) << log.errors.front();
}

TEST_F(RedisShardOwner, ASlowKeyHoldsOnlyItself) {
  handoff::thread_pool pool(3);
  seen log;
  std::promise<void> go;
  std::shared_future<void> released = go.get_future().share();
  auto a = owner(log, "A", 30000, pool, [released](hr::delivery& d) {
    if (d.body() == "slow") released.wait();
  });
  take_all(*a);
  // Keys of one shard: the slow one first, then 40 messages of the others.
  const std::uint32_t target = hd::shard_of("room:0", shards);
  std::vector<std::string> same;
  for (int k = 1; same.size() < 4; ++k) {
    if (hd::shard_of("room:" + std::to_string(k), shards) == target) same.push_back("room:" + std::to_string(k));
  }
  post("room:0", "slow");
  post("room:0", "after");
  for (int m = 0; m < 10; ++m) {
    for (const std::string& k : same) post(k, std::to_string(m));
  }
  ASSERT_TRUE(rounds(*a, [&] { return log.runs() == 40; })) << "the slow key held its shard's other keys";
  const hd::shard_names s(o_.prefix, "room:", target);
  ASSERT_TRUE(rounds(*a, [&] { return raw_.integer({"SCARD", s.done}) == 40; }));
  EXPECT_EQ(raw_.integer({"LLEN", s.queue}), 42) << "trimmed past an unfinished entry";
  go.set_value();
  ASSERT_TRUE(rounds(*a, [&] { return log.runs() == 42 && queued() == 0; }));
  EXPECT_EQ(done_sets(), 0) << "the done ids stayed after the trim passed them";
  EXPECT_EQ(log.bodies["room:0"], (std::vector<std::string>{"slow", "after"}));
}

TEST_F(RedisShardOwner, ACrashedOwnersUnacknowledgedEntriesRunAgainFlagged) {
  seen log;
  {
    auto a = owner(log, "A", 200);
    take_all(*a);
    for (int m = 0; m < 5; ++m) post("room:1", std::to_string(m));
    // One round reads and runs (no executor: on this thread); the owner dies before the
    // next round would acknowledge.
    a->round(now_ms());
    ASSERT_EQ(log.runs(), 5U);
  }
  seen again;
  auto b = owner(again, "B");
  std::this_thread::sleep_for(250ms);
  take_all(*b);
  post("room:1", "5");
  ASSERT_TRUE(rounds(*b, [&] { return again.runs() == 6 && queued() == 0; }));
  EXPECT_EQ(again.bodies["room:1"], (std::vector<std::string>{"0", "1", "2", "3", "4", "5"}));
  for (int m = 0; m < 5; ++m) EXPECT_EQ(again.attempts[std::to_string(m)], 2U) << m;
  EXPECT_EQ(again.attempts["5"], 1U) << "posted after the takeover";
}

TEST_F(RedisShardOwner, WhatFinishedPastASlowKeyDoesNotRunAgainAfterACrash) {
  const std::uint32_t target = hd::shard_of("room:0", shards);
  std::string other;
  for (int k = 1; other.empty(); ++k) {
    if (hd::shard_of("room:" + std::to_string(k), shards) == target) other = "room:" + std::to_string(k);
  }
  const hd::shard_names s(o_.prefix, "room:", target);
  seen log;
  {
    handoff::thread_pool pool(2);
    std::promise<void> go;
    std::shared_future<void> released = go.get_future().share();
    auto a = owner(log, "A", 200, pool, [released](hr::delivery& d) {
      if (d.body() == "slow") released.wait();
    });
    ASSERT_TRUE(a->take(target));
    post("room:0", "slow");
    for (int m = 0; m < 3; ++m) post(other, std::to_string(m));
    ASSERT_TRUE(rounds(*a, [&] { return raw_.integer({"SCARD", s.done}) == 3; }));
    go.set_value();  // the slow one finishes, and A dies before acknowledging it
    a.reset();
  }
  std::this_thread::sleep_for(250ms);
  seen again;
  auto b = owner(again, "B");
  ASSERT_TRUE(b->take(target));
  ASSERT_TRUE(rounds(*b, [&] { return queued() == 0; }));
  EXPECT_EQ(again.bodies["room:0"], std::vector<std::string>{"slow"});
  EXPECT_EQ(again.attempts["slow"], 2U);
  EXPECT_TRUE(again.bodies[other].empty()) << "entries acknowledged by id ran again";
  EXPECT_EQ(raw_.integer({"EXISTS", s.done}), 0) << "the earlier owner's done ids stayed after the trim";
}

TEST_F(RedisShardOwner, AnOwnerWhoseLeaseWasTakenWritesNothingMore) {
  seen log;
  auto a = owner(log, "A", 100);
  ASSERT_TRUE(a->take(hd::shard_of("room:1", shards)));
  for (int m = 0; m < 3; ++m) post("room:1", std::to_string(m));
  a->round(now_ms());  // read and run, not acknowledged
  ASSERT_EQ(log.runs(), 3U);
  std::this_thread::sleep_for(150ms);
  seen other;
  auto b = owner(other, "B");
  ASSERT_TRUE(b->take(hd::shard_of("room:1", shards)));
  a->round(0);  // no renewal due at 0: the acknowledgement finds the lease taken
  EXPECT_TRUE(a->owned().empty());
  ASSERT_FALSE(log.errors.empty());
  EXPECT_NE(log.errors.front().find("lost shard"), std::string::npos) << log.errors.front();
  EXPECT_EQ(queued(), 3) << "a stale owner trimmed the queue";
  ASSERT_TRUE(rounds(*b, [&] { return other.runs() == 3 && queued() == 0; }));
}

TEST_F(RedisShardOwner, AMessageThatKeepsFailingGoesToItsKeysDeadLetters) {
  seen log;
  std::atomic<int> tries{0};
  auto a = owner(log, "A", 30000, {}, [&tries](hr::delivery& d) {
    if (d.body() == "bad") {
      ++tries;
      throw std::runtime_error("refused");
    }
  });
  take_all(*a);
  post("room:1", "ok1");
  post("room:1", "bad");
  post("room:1", "ok2");
  ASSERT_TRUE(rounds(*a, [&] { return log.runs() == 2 && queued() == 0; }));
  EXPECT_EQ(tries.load(), 3) << "max_attempts 3";
  EXPECT_EQ(log.bodies["room:1"], (std::vector<std::string>{"ok1", "ok2"}));
  const hd::shard_names s(o_.prefix, "room:", hd::shard_of("room:1", shards));
  const std::vector<std::string> dead = raw_.strings({"LRANGE", s.dead("room:1"), "0", "-1"});
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(dead[0].substr(dead[0].find(' ') + 1), "bad");
  EXPECT_EQ(log.errors.size(), 3U);
}

TEST_F(RedisShardOwner, ACleanReleaseLeavesTheNextOwnerNoRedelivery) {
  seen log;
  auto a = owner(log, "A");
  take_all(*a);
  for (int m = 0; m < 4; ++m) post("room:2", std::to_string(m));
  a->round(now_ms());
  a->release_all();
  EXPECT_TRUE(a->owned().empty());
  EXPECT_EQ(queued(), 0);
  post("room:2", "4");
  seen next;
  auto b = owner(next, "B");
  take_all(*b);
  ASSERT_TRUE(rounds(*b, [&] { return next.runs() == 1 && queued() == 0; }));
  EXPECT_EQ(next.attempts["4"], 1U);
}

TEST_F(RedisShardOwner, AnEntryPastItsAttemptsIsADeadLetterWithoutRunning) {
  const std::uint32_t shard = hd::shard_of("room:3", shards);
  const hd::shard_names s(o_.prefix, "room:", shard);
  post("room:3", "doomed");
  // Three owners take the shard and die (their leases run out): three marks above it.
  for (int i = 0; i < 3; ++i) {
    std::int64_t left = 0;
    std::optional<hd::shard_takeover> t;
    for (int j = 0; j < 200 && !t; ++j) {
      t = store_.take(s, "dead" + std::to_string(i), 30, left);
      if (!t) std::this_thread::sleep_for(5ms);
    }
    ASSERT_TRUE(t) << i;
  }
  std::this_thread::sleep_for(50ms);
  seen log;
  auto a = owner(log, "A");
  ASSERT_TRUE(a->take(shard));
  ASSERT_TRUE(rounds(*a, [&] { return queued() == 0; }));
  EXPECT_EQ(log.runs(), 0U) << "a message past max_attempts deliveries ran";
  EXPECT_EQ(raw_.integer({"LLEN", s.dead("room:3")}), 1);
}

TEST_F(RedisShardOwner, AnOwnerTakesBackAShardThatAnotherDrainedMeanwhile) {
  seen log;
  auto a = owner(log, "A");
  auto b = owner(log, "B");
  const std::uint32_t shard = hd::shard_of("room:1", shards);
  int m = 0;
  for (hd::shard_owner* o : {a.get(), b.get(), a.get(), b.get()}) {
    for (int i = 0; i < 3; ++i) post("room:1", std::to_string(m++));
    ASSERT_TRUE(o->take(shard));
    o->drain();
    EXPECT_TRUE(o->owned().empty());
  }
  std::vector<std::string> expected;
  for (int i = 0; i < m; ++i) expected.push_back(std::to_string(i));
  EXPECT_EQ(log.bodies["room:1"], expected);
  EXPECT_EQ(queued(), 0);
}

TEST_F(RedisShardOwner, PostersThatTakeTheirShardAndDrainItLeaveNoEntryBehind) {
  // Posting threads, each a process of its own (its owner), on one shard: a post that
  // takes the queue from empty takes the shard and drains it; a post that finds it owned
  // leaves its entry to the owner, which must not release the shard before reading it.
  constexpr std::size_t posters = 4;
  constexpr int per_thread = 300;
  const std::uint32_t shard = hd::shard_of("room:0", shards);
  std::vector<std::string> keys;
  for (int k = 0; keys.size() < posters; ++k) {
    if (hd::shard_of("room:" + std::to_string(k), shards) == shard) keys.push_back("room:" + std::to_string(k));
  }
  const hd::shard_names s(o_.prefix, "room:", shard);
  std::atomic<int> handled{0};
  seen log;
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < posters; ++t) {
    threads.emplace_back([&, t] {
      auto o = owner(log, "P" + std::to_string(t), 30000, {}, [&handled](hr::delivery&) { ++handled; });
      const std::string& key = keys[t];
      for (int m = 0; m < per_thread; ++m) {
        const std::string id = "p" + std::to_string(t) + "-" + std::to_string(m);
        if (store_.post(s, hd::entry_text(id, key, std::to_string(m)), 0) == 1 && o->take(shard)) o->drain();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (handled.load() < static_cast<int>(posters) * per_thread && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(handled.load(), static_cast<int>(posters) * per_thread) << "entries were left without an owner";
  EXPECT_EQ(queued(), 0);
  EXPECT_EQ(raw_.integer({"EXISTS", s.lease}), 0) << "a drained shard stayed owned";
  for (std::size_t t = 0; t < posters; ++t) {
    const std::vector<std::string>& b = log.bodies[keys[t]];
    ASSERT_EQ(b.size(), static_cast<std::size_t>(per_thread));
    for (int m = 0; m < per_thread; ++m) EXPECT_EQ(b[static_cast<std::size_t>(m)], std::to_string(m));
  }
  EXPECT_TRUE(log.errors.empty()) << log.errors.front();
}

// renew() on a thread of its own, as the process's renewal thread runs it, until stopped.
class renewal_thread {
 public:
  explicit renewal_thread(hd::shard_owner& o)
      : t_([this, &o] {
          while (!stop_.load()) {
            o.renew(now_ms());
            std::this_thread::sleep_for(10ms);
          }
        }) {}
  ~renewal_thread() {
    stop_.store(true);
    t_.join();
  }
  renewal_thread(const renewal_thread&) = delete;
  renewal_thread& operator=(const renewal_thread&) = delete;

 private:
  std::atomic<bool> stop_{false};
  std::thread t_;
};

TEST_F(RedisShardOwner, AHandlerLongerThanTheLeaseKeepsItWhileTheRenewalThreadRuns) {
  seen log;
  // A 600 ms lease (renewed every 200 ms) under a 1.5 s handler.
  auto a = owner(log, "A", 600, {}, [](hr::delivery& d) {
    if (d.body() == "long") std::this_thread::sleep_for(1500ms);
  });
  const std::uint32_t shard = hd::shard_of("room:1", shards);
  ASSERT_TRUE(a->take(shard));
  post("room:1", "long");
  post("room:1", "next");
  std::atomic<bool> taken{false};
  {
    const renewal_thread renewing(*a);
    std::thread rival([&] {
      seen other;
      auto b = owner(other, "B");
      for (int i = 0; i < 32 && !taken.load(); ++i) {
        taken.store(b->take(shard));
        std::this_thread::sleep_for(50ms);
      }
    });
    a->round(now_ms());  // runs both on this thread, well past the lease
    rival.join();
  }
  EXPECT_FALSE(taken.load()) << "another owner took the shard while its handler ran";
  ASSERT_TRUE(rounds(*a, [&] { return queued() == 0; }));
  EXPECT_EQ(log.bodies["room:1"], (std::vector<std::string>{"long", "next"}));
  EXPECT_TRUE(log.errors.empty()) << log.errors.front();
}

TEST_F(RedisShardOwner, AShardLostInTheMiddleOfABatchRunsNoMoreOfItHere) {
  seen log;
  std::promise<void> first;
  std::atomic<int> started{0};
  // A lease of 450 ms: renewed every 150 ms, so the loss is seen within an entry or two
  // of 150 ms (a renewal up to 300 ms late still passes).
  auto a = owner(log, "A", 450, {}, [&](hr::delivery&) {
    if (started.fetch_add(1) == 0) first.set_value();
    std::this_thread::sleep_for(150ms);
  });
  const std::uint32_t shard = hd::shard_of("room:1", shards);
  const hd::shard_names s(o_.prefix, "room:", shard);
  ASSERT_TRUE(a->take(shard));
  for (int m = 0; m < 6; ++m) post("room:1", std::to_string(m));
  seen other;
  auto b = owner(other, "B");
  {
    const renewal_thread renewing(*a);
    std::thread taker([&] {
      first.get_future().wait();
      raw_.command({"DEL", s.lease});  // the lease is lost (as after a stall), and B takes it
      EXPECT_TRUE(b->take(shard));
    });
    a->round(now_ms());  // runs the batch on this thread until the renewal finds the loss
    taker.join();
  }
  EXPECT_LE(started.load(), 4) << "the lost shard's batch ran on";
  a->round(now_ms());
  EXPECT_TRUE(a->owned().empty());
  EXPECT_EQ(queued(), 6) << "the old owner acknowledged";
  ASSERT_TRUE(rounds(*b, [&] { return queued() == 0; }));
  EXPECT_EQ(other.bodies["room:1"], (std::vector<std::string>{"0", "1", "2", "3", "4", "5"}));
}

}  // namespace
