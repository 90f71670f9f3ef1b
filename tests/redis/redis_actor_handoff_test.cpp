// handoff::redis::actor_system against a real redis-server: the hand-off across processes
// (one owner at a time, sender order), owners and senders killed mid-work, a process
// without the key's handler, and a server restart with persistence.
#include <handoff/redis/actor_system.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../support/redis_actor_fixture.hpp"

namespace {

using namespace handoff::test::redis_actor_tests;  // redis_actor_fixture.hpp

TEST(RedisActor, APostToAnIdleActorRunsItsHandlerOnThePostingThreadAndLeavesNoKeys) {
  redis_server server;
  hr::actor_system actors(at(server.port()), quick());
  std::thread::id ran_on;
  std::string seen;
  std::uint32_t attempt = 0;
  actors.on("room:", [&](hr::delivery& d) {
    ran_on = std::this_thread::get_id();
    seen = std::string(d.key()) + "/" + std::string(d.body());
    attempt = d.attempt();
  });
  const std::string id = actors.post("room:7", "join alice");
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(seen, "room:7/join alice");
  EXPECT_EQ(attempt, 1U);
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(actors.pending("room:7"), 0U);
  raw_redis raw(server.port());
  EXPECT_EQ(raw.strings({"KEYS", "*"}), std::vector<std::string>{"handoff:format"})
      << "a released actor leaves nothing on the server but the prefix's format marker";
}

TEST(RedisActor, MessagesOfOneKeyRunOneAtATimeAndInSenderOrderAcrossProcesses) {
  recorded t;  // its sweeper continues what the helpers hand on
  const int port = t.port;
  raw_redis& raw = t.raw;
  constexpr int senders = 4;
  constexpr int count = 150;  // half to the shared key, half to the sender's own
  std::vector<std::unique_ptr<helper_process>> procs;
  procs.reserve(senders);
  for (int p = 0; p < senders; ++p) {
    procs.push_back(helper({std::to_string(port), "300", "send", "p" + std::to_string(p), std::to_string(count),
                            "room:shared", "room:" + std::to_string(p)}));
  }
  for (auto& p : procs) EXPECT_EQ(p->wait(60s), 0);
  ASSERT_TRUE(eventually(
      [&] {
        return raw.integer({"LLEN", "t:log:room:shared"}) == senders * count / 2;
      },
      20s))
      << raw.integer({"LLEN", "t:log:room:shared"});
  std::map<std::string, long long> seen;
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:shared"), &seen), "");
  for (int p = 0; p < senders; ++p) {
    const std::string key = "room:" + std::to_string(p);
    ASSERT_TRUE(eventually([&] { return raw.integer({"LLEN", "t:log:" + key}) == count / 2; }, 20s));
    EXPECT_EQ(handoff::test::check_log(log_of(raw, key), &seen), "");
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(senders * count));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, 1) << message << " ran more than once without a crash";
}

TEST(RedisActor, APostFromAProcessWithoutAHandlerForTheKeyIsHandledByOneThatHasIt) {
  redis_server server;
  hr::actor_system sender(at(server.port()), quick());  // handles "other:" only
  sender.on("other:", [](hr::delivery&) { ADD_FAILURE() << "wrong family"; });
  hr::actor_system worker(at(server.port()), quick());
  std::promise<std::string> got;
  worker.on("job:", [&](hr::delivery& d) { got.set_value(std::string(d.body())); });
  sender.post("job:1", "payload");
  auto f = got.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "announced, but no sweeper took it";
  EXPECT_EQ(f.get(), "payload");
  EXPECT_TRUE(eventually([&] { return sender.pending("job:1") == 0; }));
}

TEST(RedisActor, AnOwnerKilledMidHandlerLosesNoMessageAndItsRerunIsFlagged) {
  recorded t;
  const int port = t.port;
  raw_redis& raw = t.raw;
  hr::actor_system& actors = t.actors;
  const auto owner = helper({std::to_string(port), "300", "hang", "room:9"});
  ASSERT_TRUE(eventually([&] { return raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  for (int i = 0; i < 3; ++i) actors.post("room:9", "t " + std::to_string(i));  // queued behind the owner
  EXPECT_TRUE(log_of(raw, "room:9").empty()) << "handled while the owner's lease was live";
  const auto killed = steady::now();
  owner->kill();  // SIGKILL mid-handler
  ASSERT_TRUE(eventually([&] { return log_of(raw, "room:9").size() == 4; }, 10s));
  EXPECT_GE(since(killed), test_lease - 50ms) << "taken over before the owner's lease ran out";
  EXPECT_EQ(handoff::test::runs_of(log_of(raw, "room:9")),
            (std::vector<std::string>{"hang 0 2", "t 0 1", "t 1 1", "t 2 1"}));
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:9"), nullptr), "");
}

TEST(RedisActor, APostQueuesBehindADeadOwnerAndOnlyASweepTakesTheActorOver) {
  hr::actor_options a = quick();
  a.sweep_interval = 0ms;  // this process sweeps only when told to
  recorded t({}, a);
  const auto owner = helper({std::to_string(t.port), "300", "hang", "room:9"});
  ASSERT_TRUE(eventually([&] { return t.raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  owner->kill();                                    // SIGKILL mid-handler
  std::this_thread::sleep_for(test_lease + 100ms);  // its lease has run out
  t.actors.post("room:9", "t 0");
  EXPECT_TRUE(log_of(t.raw, "room:9").empty()) << "a post took over an actor that still had messages";
  EXPECT_EQ(t.actors.pending("room:9"), 2U) << "the dead owner's message and the post's";
  EXPECT_EQ(t.actors.sweep(), 1U);
  EXPECT_EQ(handoff::test::runs_of(log_of(t.raw, "room:9")), (std::vector<std::string>{"hang 0 2", "t 0 1"}));
  EXPECT_EQ(t.actors.pending("room:9"), 0U);
  EXPECT_EQ(t.actors.sweep(), 0U) << "nothing left to take over";
}

TEST(RedisActor, AnOwnerBusyForSeveralLeasesKeepsItsActorWhileItsProcessRenewsTheLease) {
  redis_server server;
  hr::actor_options a = quick();  // a lease of 300 ms, a sweep every 20 ms
  a.batch = 1;
  a.max_messages = 0;  // one drain runs the whole backlog
  a.max_time = 0ns;
  std::atomic<int> errors{0};
  a.on_error = [&](std::string_view, const std::exception_ptr&) { errors.fetch_add(1); };
  hr::actor_system owner(at(server.port()), a);
  hr::actor_system rival(at(server.port()), a);  // its sweeper takes the actor if the lease lapses
  std::mutex mu;
  std::vector<std::string> runs;  // "<body> <attempt>"
  std::atomic<int> inside{0};
  std::atomic<bool> overlapped{false};
  const auto handler = [&](hr::delivery& d) {
    if (inside.fetch_add(1) != 0) overlapped = true;
    {
      const std::lock_guard<std::mutex> lock(mu);
      runs.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()));
    }
    std::this_thread::sleep_for(60ms);
    inside.fetch_sub(1);
  };
  owner.on("b:", handler);
  rival.on("b:", handler);
  constexpr int messages = 15;                          // 0.9 s of handlers: three leases
  std::thread first([&] { owner.post("b:1", "m0"); });  // wins the actor, drains everything
  ASSERT_TRUE(eventually([&] { return inside.load() == 1; }));
  for (int i = 1; i < messages; ++i) rival.post("b:1", "m" + std::to_string(i));  // queued behind it
  first.join();
  std::vector<std::string> want;
  for (int i = 0; i < messages; ++i) want.push_back("m" + std::to_string(i) + " 1");
  EXPECT_EQ(runs, want) << "each message once, in order, by the one owner";
  EXPECT_FALSE(overlapped.load());
  EXPECT_EQ(errors.load(), 0) << "the owner lost its lease";
  EXPECT_EQ(owner.pending("b:1"), 0U);
}

TEST(RedisActor, AnOwnerKilledMidBatchReRunsWhatItHadNotDequeuedFlaggedAndCommitsStateOnce) {
  redis_server server;
  const int port = server.port();
  raw_redis raw(port);
  hr::actor_options silent = quick();
  silent.sweep_interval = 0ms;
  hr::actor_system poster(at(port), silent);  // no handlers: its posts announce the actor
  for (int i = 0; i < 6; ++i) poster.post("room:5", "b " + std::to_string(i));
  // Takes the actor over, peeks all six as one batch, runs b 0 and b 1, hangs in b 2.
  const auto owner = helper({std::to_string(port), "300", "take", "b 2"});
  ASSERT_TRUE(eventually([&] { return raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  poster.post("room:5", "t 0");  // behind the peeked batch
  owner->kill();
  hr::actor_options a = quick();
  a.remember_handled = true;
  hr::actor_system rescuer(at(port), a);
  rescuer.on("", [port](hr::delivery& d) {
    handoff::test::record_run(port, d);
    d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
  });
  ASSERT_TRUE(eventually([&] { return log_of(raw, "room:5").size() == 9; }, 10s)) << log_of(raw, "room:5").size();
  // Nothing of the batch was dequeued when its owner died: all of it runs again, flagged,
  // including the messages the dead owner never started; what came after it is not.
  EXPECT_EQ(
      handoff::test::runs_of(log_of(raw, "room:5")),
      (std::vector<std::string>{"b 0 1", "b 1 1", "b 0 2", "b 1 2", "b 2 2", "b 3 2", "b 4 2", "b 5 2", "t 0 1"}));
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:5"), nullptr), "");
  EXPECT_TRUE(eventually([&] { return rescuer.pending("room:5") == 0; }));
  EXPECT_EQ(raw.string({"HGET", "handoff:{room:5}:actor:state", "value"}), "7")
      << "the state counts each message once: the dead owner's two runs were never committed";
}

TEST(RedisActor, ASenderKilledMidStreamLosesNoAcceptedMessage) {
  recorded t;
  const int port = t.port;
  raw_redis& raw = t.raw;
  hr::actor_system& actors = t.actors;
  const auto sender = helper({std::to_string(port), "300", "send", "s", "1000000", "room:a", "room:b"});
  ASSERT_TRUE(eventually([&] { return raw.integer({"LLEN", "t:accepted:s"}) >= 60; }, 20s));
  sender->kill();  // SIGKILL, maybe mid-post, maybe while owning and draining
  const std::vector<std::string> accepted = raw.strings({"LRANGE", "t:accepted:s", "0", "-1"});
  const long long last = std::stoll(accepted.back());
  ASSERT_TRUE(eventually([&] { return actors.pending("room:a") == 0 && actors.pending("room:b") == 0; }, 10s));
  std::map<std::string, long long> seen;
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:a"), &seen), "");
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:b"), &seen), "");
  for (long long i = 0; i <= last; ++i)
    EXPECT_GE(seen["s " + std::to_string(i)], 1) << "accepted message " << i << " lost";
}

TEST(RedisActor, UnfinishedMessagesSurviveAServerRestartWithPersistenceAndAnOwnerCrash) {
  hr::actor_options a = quick();
  a.on_error = [](std::string_view, std::exception_ptr) {};  // the restart breaks connections
  recorded t({"--appendonly", "yes", "--appendfsync", "always"}, a);
  const int port = t.port;
  hr::actor_system& actors = t.actors;
  const auto owner = helper({std::to_string(port), "300", "hang", "room:r"});
  ASSERT_TRUE(eventually([&] { return t.raw.string({"GET", "t:hanging"}) == "1"; }, 10s));
  for (int i = 0; i < 3; ++i) actors.post("room:r", "t " + std::to_string(i));
  owner->kill();
  t.server.restart();  // SIGKILL, then the same port and directory: the append-only file is read back
  raw_redis raw(port);
  ASSERT_TRUE(eventually([&] { return actors.pending("room:r") == 0 && !log_of(raw, "room:r").empty(); }, 20s));
  std::map<std::string, long long> seen;
  EXPECT_EQ(handoff::test::check_log(log_of(raw, "room:r"), &seen), "");
  for (const char* m : {"hang 0", "t 0", "t 1", "t 2"}) EXPECT_GE(seen[m], 1) << m << " lost";
}

}  // namespace
