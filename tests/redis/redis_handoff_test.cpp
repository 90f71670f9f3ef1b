// The hand-off of handoff::redis::keyed_mutex: a release grants the key to the first live
// waiter on the server. Two layers:
//  - The Lua scripts of lib/redis/lock/scripts.hpp driven step by step against a real
//    redis-server, with hand-made requests: every race of a grant in flight (the waiter
//    gives up, died, missed its notification, was granted a key whose lease then ran out),
//    one schedule at a time.
//  - The client end to end: a granted waiter takes no round trip of its own, its lease
//    clock never outlasts the server's, and waiters that time out while keys are handed to
//    them never break exclusion or strand the key.
//  - The client's side of the protocol (lib/redis/lock/acquire_step.hpp) driven step by
//    step without a server: which grant a request takes, when its lease clock starts,
//    when it re-checks, and when giving up must cancel.
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../../lib/redis/lock/acquire_step.hpp"
#include "../../lib/redis/lock/scripts.hpp"
#include "../support/redis_server.hpp"
#include "../support/redis_test_support.hpp"
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::lease;
using handoff::redis::keyed_mutex;
using handoff::redis::options;
using handoff::test::eventually;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::test_timeout;
namespace scripts = handoff::redis::detail::scripts;

// The scripts, loaded on the test's server, and hand-made requests of a fictitious client
// "c0" on the key "k" of the default prefix.
class RedisHandoffScripts : public testing::Test {
 protected:
  RedisHandoffScripts() {
    acquire_ = load(scripts::acquire_source());
    release_ = load(scripts::release_source());
    cancel_ = load(scripts::cancel_source());
  }

  std::string load(const std::string& source) { return raw_.string({"SCRIPT", "LOAD", source}); }

  // A request id (lib/redis/lock/scripts.hpp): lease ms ("w" prefix: lease-less), heartbeat ms, blocking.
  static std::string id(int n, const std::string& lease_ms = "30000", int heartbeat_ms = 3000, bool blocking = true) {
    return "c0:" + std::to_string(n) + ":" + lease_ms + ":" + std::to_string(heartbeat_ms) + (blocking ? ":l" : "");
  }
  static std::vector<std::string> keys() {
    return {raw_redis::lock_key("k"), raw_redis::queue_key("k"), raw_redis::waiters_key("k"),
            raw_redis::fence_key("k")};
  }
  static std::string grant_list(const std::string& request) { return "handoff:{k}:grant:" + request; }

  struct attempt {
    long long granted, value, extra;
  };
  // The acquire script for request `r` (queue: wait in line; blpop: a BLPOP's timeout behind
  // it; listed: its reply is skipped, so the poke says what the reply would).
  attempt acquire(const std::string& r, bool queue = true, const std::string& lease_ms = "30000",
                  const std::string& heartbeat_ms = "3000", const std::string& blpop = "0", bool listed = false) {
    std::vector<std::string> args{"EVALSHA", acquire_, "4"};
    for (const std::string& k : keys()) args.push_back(k);
    for (const std::string& a :
         {r, lease_ms, std::string(queue ? "1" : "0"), heartbeat_ms, std::string("handoff:notify:"), blpop}) {
      args.push_back(a);
    }
    if (listed) args.emplace_back("1");
    auto reply = raw_.command(args);
    return {reply->element[0]->integer, reply->element[1]->integer, reply->element[2]->integer};
  }
  long long release(const std::string& value) {
    std::vector<std::string> args{"EVALSHA", release_, "4"};
    for (const std::string& k : keys()) args.push_back(k);
    args.push_back(value);
    args.emplace_back("handoff:notify:");
    return raw_.integer(args);
  }
  long long cancel(const std::string& r) {
    std::vector<std::string> args{"EVALSHA", cancel_, "4"};
    for (const std::string& k : keys()) args.push_back(k);
    args.push_back(r);
    args.emplace_back("handoff:notify:");
    return raw_.integer(args);
  }
  std::string lock_value() { return raw_.string({"GET", raw_redis::lock_key("k")}); }
  // The grant pushed for request r: "<fence> <heartbeat> <ms waited>", or "".
  std::vector<std::string> pushed(const std::string& r) { return raw_.strings({"LRANGE", grant_list(r), "0", "-1"}); }

  test_timeout timeout_{60s};
  redis_server server_;
  raw_redis raw_{server_.port()};
  std::string acquire_, release_, cancel_;
};

TEST_F(RedisHandoffScripts, AReleaseGrantsTheFirstWaiterAndPushesItsGrant) {
  const attempt a = acquire(id(1));
  ASSERT_EQ(a.granted, 1);
  const std::string holder = id(1) + " " + std::to_string(a.value);
  EXPECT_EQ(lock_value(), holder);
  const attempt w = acquire(id(2));
  ASSERT_EQ(w.granted, 0);
  EXPECT_GT(w.extra, 0) << "the heartbeat's server time";
  ASSERT_EQ(acquire(id(3)).granted, 0);
  EXPECT_EQ(release(holder), 1);
  const std::string v = lock_value();
  ASSERT_EQ(v.rfind(id(2) + " ", 0), 0U) << v;
  const long long fence = std::stoll(v.substr(id(2).size() + 1));
  EXPECT_GT(fence, a.value);
  const std::vector<std::string> grant = pushed(id(2));
  ASSERT_EQ(grant.size(), 1U);
  long long f = 0;
  long long beat = 0;
  long long waited = -1;
  ASSERT_EQ(std::sscanf(grant[0].c_str(), "%lld %lld %lld", &f, &beat, &waited), 3);
  EXPECT_EQ(f, fence);
  EXPECT_EQ(beat, w.extra) << "names the attempt it answers";
  EXPECT_GE(waited, 0);
  EXPECT_GT(raw_.pttl("k"), 29000) << "the waiter's own lease, from the grant";
  EXPECT_EQ(raw_.queue_length("k"), 1) << "the second waiter still waits";
  EXPECT_EQ(release(holder), 0) << "the old holder no longer holds it";
}

TEST_F(RedisHandoffScripts, AWaiterThatGivesUpWhileBeingGrantedPassesTheKeyOn) {
  const attempt a = acquire(id(1));
  ASSERT_EQ(acquire(id(2)).granted, 0);
  ASSERT_EQ(acquire(id(3)).granted, 0);
  ASSERT_EQ(release(id(1) + " " + std::to_string(a.value)), 1);  // granted to 2, which gives up...
  EXPECT_EQ(cancel(id(2)), 1) << "...after the grant: cancel reports it and passes it on";
  EXPECT_EQ(lock_value().rfind(id(3) + " ", 0), 0U);
  EXPECT_TRUE(pushed(id(2)).empty()) << "the given-up grant's list is gone";
  EXPECT_EQ(pushed(id(3)).size(), 1U);
  EXPECT_EQ(raw_.queue_length("k"), 0);
  // The last waiter gives up while granted, with nobody behind: the key is freed.
  EXPECT_EQ(cancel(id(3)), 1);
  EXPECT_FALSE(raw_.locked("k"));
  EXPECT_EQ(raw_.integer({"EXISTS", raw_redis::queue_key("k"), raw_redis::waiters_key("k"), grant_list(id(3))}), 0);
}

TEST_F(RedisHandoffScripts, AWaiterThatGivesUpBeforeTheReleaseIsNeverGranted) {
  const attempt a = acquire(id(1));
  ASSERT_EQ(acquire(id(2)).granted, 0);
  ASSERT_EQ(acquire(id(3)).granted, 0);
  EXPECT_EQ(cancel(id(2)), 0);
  ASSERT_EQ(release(id(1) + " " + std::to_string(a.value)), 1);
  EXPECT_EQ(lock_value().rfind(id(3) + " ", 0), 0U);
  EXPECT_TRUE(pushed(id(2)).empty());
}

TEST_F(RedisHandoffScripts, AReleaseSkipsAWaiterWhoseHeartbeatRanOut) {
  const attempt a = acquire(id(1));
  ASSERT_EQ(acquire(id(2, "30000", 1), true, "30000", "1").granted, 0);  // heartbeat 1 ms: dead soon
  ASSERT_EQ(acquire(id(3)).granted, 0);
  std::this_thread::sleep_for(20ms);
  ASSERT_EQ(release(id(1) + " " + std::to_string(a.value)), 1);
  EXPECT_EQ(lock_value().rfind(id(3) + " ", 0), 0U) << lock_value();
  EXPECT_TRUE(pushed(id(2, "30000", 1)).empty());
  EXPECT_EQ(raw_.queue_length("k"), 0);
}

TEST_F(RedisHandoffScripts, ALeaselessWaiterIsGrantedTheShorterOfItsWatchdogLeaseAndItsHeartbeat) {
  const attempt a = acquire(id(1));
  ASSERT_EQ(acquire(id(2, "w30000", 2000)).granted, 0);
  ASSERT_EQ(release(id(1) + " " + std::to_string(a.value)), 1);
  ASSERT_EQ(lock_value().rfind(id(2, "w30000", 2000) + " ", 0), 0U);
  EXPECT_LE(raw_.pttl("k"), 2000) << "a waiter that died just before is not waited for 30 s";
  EXPECT_GT(raw_.pttl("k"), 1000);
}

TEST_F(RedisHandoffScripts, AWaiterThatMissedItsGrantFindsItAtItsNextAttempt) {
  const attempt a = acquire(id(1));
  ASSERT_EQ(acquire(id(2)).granted, 0);
  ASSERT_EQ(release(id(1) + " " + std::to_string(a.value)), 1);
  const std::string v = lock_value();
  const attempt again = acquire(id(2));
  EXPECT_EQ(again.granted, 1);
  EXPECT_EQ(std::to_string(again.value), v.substr(id(2).size() + 1)) << "the same grant, the same token";
  EXPECT_GT(again.extra, 29000) << "the lease left, not a new one";
  EXPECT_TRUE(pushed(id(2)).empty()) << "found here: the pushed copy is dropped";
  EXPECT_EQ(lock_value(), v);
}

TEST_F(RedisHandoffScripts, AGrantWhoseLeaseRanOutBeforeTheWaiterSawItIsDroppedByItsNextAttempt) {
  const attempt a = acquire(id(1));
  ASSERT_EQ(acquire(id(2, "50")).granted, 0);  // a 50 ms lease
  ASSERT_EQ(acquire(id(3)).granted, 0);
  ASSERT_EQ(release(id(1) + " " + std::to_string(a.value)), 1);
  ASSERT_EQ(pushed(id(2, "50")).size(), 1U);
  std::this_thread::sleep_for(100ms);  // 2's lease ran out before it looked
  // Whoever comes next (here 2 itself, with its BLPOP behind) finds the key free with 3 in
  // front: 3 is granted, and 2's stale grant is dropped, so its BLPOP cannot take it.
  const attempt late = acquire(id(2, "50"), true, "50", "3000", "1000");
  EXPECT_EQ(late.granted, 0);
  EXPECT_EQ(lock_value().rfind(id(3) + " ", 0), 0U) << lock_value();
  EXPECT_TRUE(pushed(id(2, "50")).empty() || pushed(id(2, "50")) == std::vector<std::string>{"-"});
}

TEST_F(RedisHandoffScripts, ATryLockOnAKeyFreedByAnExpiredLeaseGrantsTheWaiterInFront) {
  ASSERT_EQ(acquire(id(1, "50"), true, "50").granted, 1);
  ASSERT_EQ(acquire(id(2)).granted, 0);
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(acquire(id(9), false).granted, 0) << "a try_lock never jumps the queue";
  EXPECT_EQ(lock_value().rfind(id(2) + " ", 0), 0U) << "the waiter in front gets it at once";
  EXPECT_EQ(pushed(id(2)).size(), 1U);
}

TEST_F(RedisHandoffScripts, AnAsyncWaitersGrantIsPublishedOnItsClientsChannel) {
  raw_redis sub(server_.port());
  sub.command({"SUBSCRIBE", "handoff:notify:c0"});
  const attempt a = acquire(id(1));
  const std::string async_id = id(2, "30000", 3000, false);
  const attempt w = acquire(async_id);
  ASSERT_EQ(w.granted, 0);
  ASSERT_EQ(release(id(1) + " " + std::to_string(a.value)), 1);
  void* raw = nullptr;
  ASSERT_EQ(redisGetReply(sub.context(), &raw), REDIS_OK);
  const raw_redis::reply m(static_cast<redisReply*>(raw));
  ASSERT_EQ(m->elements, 3U);
  const std::string msg(m->element[2]->str, m->element[2]->len);
  EXPECT_EQ(msg.rfind(async_id + " ", 0), 0U) << msg;
  EXPECT_NE(msg.find(" " + std::to_string(w.extra) + " "), std::string::npos) << msg;
  EXPECT_TRUE(pushed(async_id).empty());
}

TEST_F(RedisHandoffScripts, AnAttemptWithABlpopBehindItIsPokedWhenItMustNotWaitThatLong) {
  // Granted at once: poked, so that the BLPOP behind returns at once.
  ASSERT_EQ(acquire(id(1), true, "300", "3000", "1000").granted, 1);
  EXPECT_EQ(pushed(id(1)), std::vector<std::string>{"-"});
  // Queued behind a holder whose lease (300 ms) ends before the BLPOP (1 s) would time out.
  ASSERT_EQ(acquire(id(2), true, "30000", "3000", "1000").granted, 0);
  EXPECT_EQ(pushed(id(2)), std::vector<std::string>{"-"});
  // Queued behind a longer lease: not poked.
  raw_.command({"PEXPIRE", raw_redis::lock_key("k"), "30000"});
  ASSERT_EQ(acquire(id(3), true, "30000", "3000", "1000").granted, 0);
  EXPECT_TRUE(pushed(id(3)).empty());
}

TEST_F(RedisHandoffScripts, AnAttemptWhoseReplyIsSkippedSaysInItsPokeWhatTheReplyWould) {
  // Granted at once: "g <fence> -1" (the whole lease from now), as {1, fence, -1}.
  const attempt first = acquire(id(1), true, "300", "3000", "1000", true);
  ASSERT_EQ(first.granted, 1);
  EXPECT_EQ(pushed(id(1)), std::vector<std::string>{"g " + std::to_string(first.value) + " -1"});
  // Queued behind a holder whose lease ends before the BLPOP would time out: "- <PTTL>".
  const attempt second = acquire(id(2), true, "30000", "3000", "1000", true);
  ASSERT_EQ(second.granted, 0);
  ASSERT_GE(second.value, 0);
  const std::vector<std::string> poke = pushed(id(2));
  ASSERT_EQ(poke.size(), 1U);
  long long pttl = -1;
  ASSERT_EQ(std::sscanf(poke[0].c_str(), "- %lld", &pttl), 1) << poke[0];
  EXPECT_GE(pttl, 0);
  EXPECT_LE(pttl, 300);
  // Granted by the release while it waited, found by its next attempt: "g <fence> <lease left>".
  ASSERT_EQ(release(lock_value()), 1);
  raw_.command({"DEL", grant_list(id(2))});  // as if that BLPOP had timed out before the push
  const attempt again = acquire(id(2), true, "30000", "3000", "1000", true);
  ASSERT_EQ(again.granted, 1);
  const std::vector<std::string> found = pushed(id(2));
  ASSERT_EQ(found.size(), 1U);
  long long fence = 0;
  long long left = -1;
  ASSERT_EQ(std::sscanf(found[0].c_str(), "g %lld %lld", &fence, &left), 2) << found[0];
  EXPECT_EQ(fence, again.value);
  EXPECT_GT(left, 0);
  EXPECT_LE(left, 30000);
}

// --- the client, end to end ---------------------------------------------------------------

class RedisHandoff : public testing::Test {
 protected:
  options opts(std::chrono::milliseconds recheck = 200ms) const {
    options o;
    o.port = server_.port();
    o.command_timeout = 2s;
    o.recheck_interval = recheck;
    o.watchdog_lease = 5s;
    return o;
  }
  test_timeout timeout_{90s};
  redis_server server_;
  raw_redis raw_{server_.port()};
};

TEST_F(RedisHandoff, AWaiterGrantedByTheReleaseTakesNoRoundTripOfItsOwn) {
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts(20s));  // no re-check within the test
  auto g = holder.lock("k", lease{30s});
  std::atomic<bool> granted{false};
  std::jthread t([&] {
    auto w = waiter.lock("k");
    granted.store(w.owns_lock());
    std::this_thread::sleep_for(200ms);  // hold, so that the counts below see no unlock
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::this_thread::sleep_for(50ms);  // its BLPOP is on the server
  const long long before = raw_.evalsha_calls();
  g.unlock();
  ASSERT_TRUE(eventually([&] { return granted.load(); }, 5s));
  EXPECT_EQ(raw_.evalsha_calls() - before, 1) << "the release only: the waiter sent no script";
}

TEST_F(RedisHandoff, AGrantedWaitersLeaseNeverOutlastsTheServersLease) {
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts());
  auto g = holder.lock("k");
  std::promise<handoff::redis::guard> next;
  std::jthread t([&] { next.set_value(waiter.lock("k", lease{300ms})); });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::this_thread::sleep_for(150ms);  // waited a while: its clock must not start at its request
  g.unlock();
  auto w = next.get_future().get();
  ASSERT_TRUE(w.owns_lock());
  // While the guard says it holds, the server must still have the key.
  int samples = 0;
  while (!w.expired()) {
    EXPECT_TRUE(raw_.locked("k")) << "the guard outlived the server's lease";
    ++samples;
    std::this_thread::sleep_for(2ms);
  }
  EXPECT_GT(samples, 20) << "the local lease ended far too early";
}

TEST_F(RedisHandoff, KeysWithSpacesNewlinesGlobCharactersAndBinaryBytesAreHandedOnAndNeverCollide) {
  using namespace std::string_literals;
  const std::vector<std::string> keys = {"a b", "a\nb",  "a*",    "a?",       "[ab]",
                                         "*",   "a\0b"s, "a\0c"s, "\xff\xfe", "a:lock"};
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts());
  std::vector<handoff::redis::guard> held;
  for (const std::string& k : keys) held.push_back(holder.lock(k));  // distinct keys: none waits
  for (std::size_t i = 0; i < keys.size(); ++i) {
    std::promise<std::uint64_t> token;
    std::jthread t([&] { token.set_value(waiter.lock(keys[i]).token()); });
    ASSERT_TRUE(raw_.wait_queue_length(keys[i], 1)) << "key " << i;
    const std::uint64_t before = held[i].token();
    held[i].unlock();
    EXPECT_GT(token.get_future().get(), before) << "key " << i << " was handed on with a later token";
  }
  EXPECT_TRUE(eventually([&] { return raw_.integer({"DBSIZE"}) == static_cast<long long>(keys.size()) + 1; }))
      << "only the fence counters and the prefix's format marker stay";
}

// Threads with clients of their own lock one key, with waits that often run out while the
// key is being handed to them, some blocking and some async: exclusion holds (an
// unprotected increment under the key), and once all are done nothing is left held or
// queued.
TEST_F(RedisHandoff, WaitersTimingOutWhileKeysAreHandedToThemNeverBreakExclusionOrStrandTheKey) {
  constexpr int threads = 4;
  constexpr int iterations = 60;
  std::vector<std::unique_ptr<keyed_mutex>> clients;
  for (int i = 0; i < threads; ++i) clients.push_back(std::make_unique<keyed_mutex>(opts()));
  long long counter = 0;  // only ever touched under the key
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> granted{0};
  std::atomic<int> timed_out{0};
  const auto critical = [&] {
    if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
    const long long v = counter;
    std::this_thread::sleep_for(1ms);
    counter = v + 1;
    inside.fetch_sub(1);
  };
  {
    std::vector<std::jthread> ts;
    for (int t = 0; t < threads; ++t) {
      ts.emplace_back([&, t] {
        std::minstd_rand rng(static_cast<unsigned>(t) + 1);
        for (int i = 0; i < iterations; ++i) {
          const auto wait = std::chrono::microseconds(200 + rng() % 3000);
          if (rng() % 3 == 0) {  // async, through the background thread
            std::promise<handoff::redis::guard> p;
            clients[t]->lock_async(
                "hot", [&p](handoff::redis::guard g, const std::exception_ptr&) { p.set_value(std::move(g)); }, wait);
            auto g = p.get_future().get();
            if (g.owns_lock()) {
              granted.fetch_add(1);
              critical();
            } else {
              timed_out.fetch_add(1);
            }
            continue;
          }
          auto g = clients[t]->try_lock_for("hot", wait);
          if (g.owns_lock()) {
            granted.fetch_add(1);
            critical();
          } else {
            timed_out.fetch_add(1);
          }
        }
      });
    }
  }
  std::printf("%d granted, %d timed out\n", granted.load(), timed_out.load());
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, granted.load());
  EXPECT_GT(timed_out.load(), 0) << "the waits were meant to run out under contention";
  // Nothing stranded: no holder, no queue, no pushed grant left behind.
  EXPECT_TRUE(eventually([&] { return !raw_.locked("hot"); }, 5s)) << "a key granted to nobody";
  EXPECT_EQ(raw_.integer({"EXISTS", raw_redis::queue_key("hot"), raw_redis::waiters_key("hot")}), 0);
  EXPECT_TRUE(raw_.strings({"KEYS", "handoff:{hot}:grant:*"}).empty());
  auto last = clients[0]->try_lock("hot");
  EXPECT_TRUE(last.owns_lock());
}

// A client whose locks have been queueing sends its next blocking lock's attempt and BLPOP
// with the attempt's reply skipped (CLIENT REPLY SKIP): the server writes one reply, and
// the waiting thread wakes once. Run on `server`, with the waiter's re-checks every
// `recheck`; `between` runs after the waiter's first wait, while the holder has the key
// again and before the waiter asks for it. Returns how long the second lock() took.
std::chrono::nanoseconds second_wait(redis_server& server, std::chrono::milliseconds recheck,
                                     const std::function<void(raw_redis&)>& between) {
  options o;
  o.port = server.port();
  o.command_timeout = 2s;
  o.recheck_interval = recheck;
  raw_redis raw(server.port());
  keyed_mutex holder(o);
  keyed_mutex waiter(o);
  auto g = holder.lock("k", lease{30s});
  std::promise<void> first_done;
  std::promise<void> go;
  std::promise<std::chrono::nanoseconds> second;
  std::jthread t([&] {
    {
      auto w = waiter.lock("k");  // queues: from now on the client takes the key as contended
      EXPECT_TRUE(w.owns_lock());
    }
    first_done.set_value();
    go.get_future().wait();
    const auto start = std::chrono::steady_clock::now();
    auto w = waiter.lock("k");
    EXPECT_TRUE(w.owns_lock());
    second.set_value(std::chrono::steady_clock::now() - start);
  });
  EXPECT_TRUE(raw.wait_queue_length("k", 1));
  g.unlock();
  first_done.get_future().wait();
  g = holder.lock("k", lease{30s});
  between(raw);
  go.set_value();
  EXPECT_TRUE(raw.wait_queue_length("k", 1));
  std::this_thread::sleep_for(100ms);  // the waiter waits in its BLPOP
  g.unlock();
  return second.get_future().get();
}

TEST_F(RedisHandoff, AClientThatHasQueuedBeforeQueuesAndWaitsWithOneReply) {
  long long skips = 0;
  const auto took = second_wait(server_, 20s, [&](raw_redis& raw) { skips = raw.calls("client|reply"); });
  EXPECT_EQ(raw_.calls("client|reply"), skips + 1) << "the second lock skipped its attempt's reply";
  EXPECT_LT(took, 10s) << "granted by the release, not by a re-check";
}

// A script the server forgot (SCRIPT FLUSH, a restart) fails without a reply when the reply
// is skipped: the waiter's BLPOP runs to its re-check, which takes the reply, sees NOSCRIPT,
// loads the script again and queues.
TEST_F(RedisHandoff, AScriptTheServerForgotIsLoadedAgainAtTheWaitersRecheck) {
  const auto took = second_wait(server_, 300ms, [](raw_redis& raw) { raw.command({"SCRIPT", "FLUSH"}); });
  EXPECT_LT(took, 10s);
}

// A server, or a proxy, without CLIENT REPLY: the client sees it when it starts, and
// contended locks take the attempt's reply as before.
TEST(RedisHandoffWithoutClientReply, ContendedLocksTakeTheAttemptsReply) {
  test_timeout timeout{60s};
  redis_server server({"--rename-command", "CLIENT", "CLIENT-renamed-by-the-test"});
  const auto took = second_wait(server, 20s, [](raw_redis&) {});
  EXPECT_LT(took, 10s) << "granted by the release, not by a re-check";
}

// acquire_step with the options' lease clock: a 30 s watchdog lease, re-checks every second
// (so a heartbeat of 3 s), times in ns from an arbitrary start.
class RedisAcquireStep : public testing::Test {
 protected:
  static constexpr std::int64_t ms = 1'000'000;
  static constexpr std::int64_t t0 = 1'000'000 * ms;

  static options opts() {
    options o;
    o.watchdog_lease = 30s;
    o.recheck_interval = 1s;
    return o;
  }
  handoff::redis::detail::acquire_step step(std::int64_t lease_ns, std::int64_t deadline) const {
    return {clock_, handoff::redis::detail::key_names("handoff:", "k", false), "c0:1:w30000:3000:l", lease_ns,
            deadline};
  }

  const options o_ = opts();
  const handoff::redis::detail::lease_clock clock_{o_};
};

TEST_F(RedisAcquireStep, ADeadlineAlreadyPastIsOneTryThatNeverQueuesNorCancels) {
  auto s = step(0, t0);
  s.start(t0);
  EXPECT_FALSE(s.waiting());
  s.begin_attempt(t0);
  EXPECT_FALSE(s.on_attempt({false, 500, 0}).has_value());
  EXPECT_FALSE(s.queued());
  EXPECT_TRUE(s.expired(t0));
}

TEST_F(RedisAcquireStep, AnAttemptThatGetsTheKeyStartsItsLeaseAtItsSendTime) {
  auto s = step(2000 * ms, t0 + 10'000 * ms);
  s.start(t0);
  s.begin_attempt(t0 + 5 * ms);
  const auto g = s.on_attempt({true, 42, -1});  // granted now: the whole lease
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->fence, 42U);
  EXPECT_EQ(g->clock.valid_until, t0 + 2005 * ms);
  EXPECT_EQ(g->clock.px_ns, 2000 * ms);
  EXPECT_FALSE(s.queued());
}

TEST_F(RedisAcquireStep, AGrantFoundByALaterAttemptKeepsOnlyTheLeaseTheServerHadLeft) {
  auto s = step(0, t0 + 10'000 * ms);  // lease-less: a release granted the heartbeat, 3 s
  s.start(t0);
  s.begin_attempt(t0);
  EXPECT_FALSE(s.on_attempt({false, -1, 100}).has_value());
  EXPECT_TRUE(s.queued());
  s.begin_attempt(t0 + 1000 * ms);
  const auto g = s.on_attempt({true, 43, 250});  // granted by a release, 250 ms left
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->clock.valid_until, t0 + 1250 * ms);
  EXPECT_EQ(g->clock.px_ns, 3000 * ms);
}

TEST_F(RedisAcquireStep, AGrantIsTakenOnlyIfItAnswersTheLastAttempt) {
  auto s = step(0, t0 + 10'000 * ms);
  s.start(t0);
  s.begin_attempt(t0);
  ASSERT_FALSE(s.on_attempt({false, -1, 100}).has_value());  // heartbeat at 100 ms, server time
  EXPECT_FALSE(s.on_grant({}).has_value()) << "no grant";
  EXPECT_FALSE(s.on_grant({7, 99, 5}).has_value()) << "a grant to an older attempt has ended since";
  const auto g = s.on_grant({7, 100, 5});
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->fence, 7U);
  // From the send time plus the 5 ms the server says passed, for the lease a release sets.
  EXPECT_EQ(g->clock.valid_until, t0 + 5 * ms + 3000 * ms);
  s.begin_attempt(t0 + 1000 * ms);
  ASSERT_FALSE(s.on_attempt({false, -1, 1100}).has_value());
  EXPECT_FALSE(s.on_grant({7, 100, 5}).has_value()) << "answers the attempt before the last";
}

TEST_F(RedisAcquireStep, AWaiterRechecksEveryIntervalSoonerWhenTheHoldersLeaseEndsAndAtTheLatestAtItsDeadline) {
  auto s = step(0, t0 + 2500 * ms);
  s.start(t0);
  s.begin_attempt(t0);
  EXPECT_EQ(s.next_check(t0), t0 + 1000 * ms) << "before the reply: the holder's lease is not known";
  ASSERT_FALSE(s.on_attempt({false, -1, 100}).has_value());  // a holder without a lease
  EXPECT_EQ(s.next_check(t0), t0 + 1000 * ms);
  s.begin_attempt(t0 + 1000 * ms);
  ASSERT_FALSE(s.on_attempt({false, 199, 1100}).has_value());  // the holder's lease ends in 199 ms
  EXPECT_EQ(s.next_check(t0 + 1000 * ms), t0 + 1200 * ms);
  s.begin_attempt(t0 + 2000 * ms);
  ASSERT_FALSE(s.on_attempt({false, -1, 2100}).has_value());
  EXPECT_EQ(s.next_check(t0 + 2000 * ms), t0 + 2500 * ms) << "the deadline";
  EXPECT_FALSE(s.expired(t0 + 2499 * ms));
  EXPECT_TRUE(s.expired(t0 + 2500 * ms));
  EXPECT_TRUE(s.queued()) << "giving up now must cancel";
}

}  // namespace
