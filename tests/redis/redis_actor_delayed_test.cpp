// handoff::redis::actor_system against a real redis-server: delayed posts (post_after,
// post_at, cancel_delayed): never early, once each, moved by sweeps, kept over crashes.
#include <handoff/redis/actor_system.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../support/redis_actor_fixture.hpp"

namespace {

using namespace handoff::test::redis_actor_tests;  // redis_actor_fixture.hpp

// Delayed posts: the log's tag of each message is the steady_clock time (ns) before which
// it must not run, taken before post_after was called.
std::string due_tag(std::chrono::milliseconds delay) {
  return std::to_string(handoff::test::monotonic_ns() + std::chrono::nanoseconds(delay).count());
}

// Every run in `log` started at or after the time its tag names; "" if so.
std::string early_runs(const std::vector<std::string>& log) {
  std::string out;
  for (const std::string& entry : log) {
    std::istringstream in(entry);
    long long due = 0;
    long long seq = 0;
    long long attempt = 0;
    long long start = 0;
    if (!(in >> due >> seq >> attempt >> start)) return "malformed entry: " + entry;
    if (start < due) out += entry + " ran " + std::to_string(due - start) + " ns early; ";
  }
  return out;
}

TEST(RedisActor, ADelayedPostWaitsOutsideTheMailboxAndRunsOnceAtOrAfterItsDelay) {
  recorded t;
  const auto t0 = steady::now();
  const std::string tag = due_tag(300ms);
  const std::string id = t.actors.post_after("late:1", tag + " 0", 300ms);
  EXPECT_FALSE(id.empty());
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(t.actors.pending("late:1"), 0U) << "a delayed message is in no mailbox before it is due";
  ASSERT_TRUE(eventually([&] { return log_of(t.raw, "late:1").size() == 1; }, 10s));
  EXPECT_GE(since(t0), 300ms);
  EXPECT_EQ(early_runs(log_of(t.raw, "late:1")), "");
  EXPECT_EQ(handoff::test::runs_of(log_of(t.raw, "late:1")), (std::vector<std::string>{tag + " 0 1"}));
  std::this_thread::sleep_for(100ms);  // a few sweeps: it is not moved twice
  EXPECT_EQ(log_of(t.raw, "late:1").size(), 1U);
  EXPECT_FALSE(t.actors.cancel_delayed("late:1", id)) << "moved and run: nothing to cancel";
  EXPECT_EQ(t.raw.integer({"EXISTS", "handoff:actors:delayed", "handoff:actors:delayed:body"}), 0)
      << "nothing left once it moved";
}

TEST(RedisActor, PostAtRunsAMessageAtOrAfterAWallClockTime) {
  recorded t;
  const std::string tag = due_tag(250ms);
  t.actors.post_at("late:2", tag + " 0", std::chrono::system_clock::now() + 250ms);
  ASSERT_TRUE(eventually([&] { return log_of(t.raw, "late:2").size() == 1; }, 10s));
  EXPECT_EQ(early_runs(log_of(t.raw, "late:2")), "");
}

TEST(RedisActor, CancelDelayedStopsAMessageBeforeItIsDueAndOnlyForItsOwnKey) {
  recorded t;
  const std::string keep = t.actors.post_after("late:3", due_tag(200ms) + " 0", 200ms);
  const std::string drop = t.actors.post_after("late:3", due_tag(200ms) + " 1", 200ms);
  EXPECT_FALSE(t.actors.cancel_delayed("late:4", drop)) << "another key's message";
  EXPECT_FALSE(t.actors.cancel_delayed("late:3", "no-such-id"));
  EXPECT_TRUE(t.actors.cancel_delayed("late:3", drop));
  EXPECT_FALSE(t.actors.cancel_delayed("late:3", drop)) << "cancelled twice";
  ASSERT_TRUE(eventually([&] { return log_of(t.raw, "late:3").size() == 1; }, 10s));
  std::this_thread::sleep_for(300ms);
  const std::vector<std::string> runs = handoff::test::runs_of(log_of(t.raw, "late:3"));
  ASSERT_EQ(runs.size(), 1U) << "the cancelled message ran";
  EXPECT_EQ(runs[0].substr(runs[0].find(' ')), " 0 1");
  EXPECT_FALSE(t.actors.cancel_delayed("late:3", keep)) << "moved and run";
}

TEST(RedisActor, DelayedMessagesDueTogetherOverManyKeysAllRunOnceInPostingOrderAndNoneEarly) {
  // More than one sweep moves per pending set: the sweeper goes again at once.
  recorded t;
  constexpr int keys = 40;
  constexpr int count = 2500;
  const std::string tag = due_tag(500ms);  // before every post: none may run before it
  for (int i = 0; i < count; ++i) {
    t.actors.post_after("many:" + std::to_string(i % keys), tag + " " + std::to_string(i), 500ms);
  }
  const auto all_ran = [&] {
    std::size_t n = 0;
    for (int k = 0; k < keys; ++k) n += log_of(t.raw, "many:" + std::to_string(k)).size();
    return n == count;
  };
  ASSERT_TRUE(eventually(all_ran, 30s));
  std::map<std::string, long long> seen;
  for (int k = 0; k < keys; ++k) {
    const std::vector<std::string> log = log_of(t.raw, "many:" + std::to_string(k));
    EXPECT_EQ(handoff::test::check_log(log, &seen), "");
    EXPECT_EQ(early_runs(log), "");
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, 1) << message;
}

TEST(RedisActor, ADelayedMessageMovedByAProcessWithoutItsHandlerRunsWhereTheHandlerIs) {
  redis_server server;
  hr::actor_system mover(at(server.port()), quick());  // sweeps, handles "other:" only
  mover.on("other:", [](hr::delivery&) { ADD_FAILURE() << "wrong family"; });
  hr::actor_options a = quick();
  a.sweep_interval = 0ms;  // sweeps only when told to
  hr::actor_system worker(at(server.port()), a);
  std::atomic<int> runs{0};
  std::atomic<std::uint32_t> attempt{0};
  worker.on("job:", [&](hr::delivery& d) {
    attempt = d.attempt();
    ++runs;
  });
  mover.post_after("job:1", "later", 20ms);
  ASSERT_TRUE(eventually([&] { return worker.pending("job:1") == 1; })) << "the mover's sweep moved it";
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(runs.load(), 0) << "run by a process without its handler";
  EXPECT_EQ(worker.sweep(), 1U);
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(attempt.load(), 1U);
  EXPECT_EQ(worker.pending("job:1"), 0U);
}

TEST(RedisActor, ADelayedMessageTakenByASweepSeesTheCommittedStateAndRunsOnceAsAFirstDelivery) {
  for (const bool pooled : {false, true}) {
    SCOPED_TRACE(pooled ? "with an executor (the sweep owns the actor, the executor peeks)"
                        : "without (the sweep's reply delivers the message)");
    redis_server server;
    handoff::thread_pool pool(1);
    hr::actor_options a = quick();
    a.remember_handled = true;
    if (pooled) a.executor = pool;
    hr::actor_system actors(at(server.port()), a);
    std::mutex mu;
    std::vector<std::string> seen;  // "<body> <attempt> <last handled id> <state>"
    actors.on("c:", [&](hr::delivery& d) {
      const std::lock_guard<std::mutex> lock(mu);
      seen.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()) + " " +
                     std::string(d.last_handled_id()) + " " + std::string(d.state()));
      d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
    });
    const std::string first = actors.post("c:1", "now");
    ASSERT_TRUE(eventually([&] { return actors.pending("c:1") == 0; }));
    actors.post_after("c:1", "later", 30ms);
    ASSERT_TRUE(eventually([&] {
      const std::lock_guard<std::mutex> lock(mu);
      return seen.size() == 2;
    }));
    ASSERT_TRUE(eventually([&] { return actors.pending("c:1") == 0; }));
    const std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(seen[1], "later 1 " + first + " 1");
  }
}

TEST(RedisActor, SweepsOnTwoThreadsOfOneProcessAtOnceEachDrainWhatTheyTookOver) {
  // The sweeper thread and a caller of sweep() take actors over at the same moments, each
  // draining its own in rounds on its own thread.
  hr::actor_options a = quick();
  a.sweep_interval = 1ms;
  recorded t({}, a);
  constexpr int count = 400;  // one per key, due over 400 ms
  for (int i = 0; i < count; ++i) {
    const auto delay = std::chrono::milliseconds(50 + i);
    t.actors.post_after("both:" + std::to_string(i), due_tag(delay) + " 0", delay);
  }
  std::atomic<bool> done{false};
  std::size_t by_caller = 0;
  std::thread caller([&] {
    while (!done) by_caller += t.actors.sweep();
  });
  const auto all_ran = [&] { return t.raw.string({"GET", "t:runs"}) == std::to_string(count); };
  const bool ran = eventually(all_ran, 20s);
  done = true;
  caller.join();
  ASSERT_TRUE(ran) << t.raw.string({"GET", "t:runs"}) << " of " << count;
  EXPECT_GT(by_caller, 0U) << "the caller's sweeps took nothing: the test did not race";
  for (int i = 0; i < count; ++i) {
    const std::vector<std::string> log = log_of(t.raw, "both:" + std::to_string(i));
    ASSERT_EQ(log.size(), 1U) << i;
    EXPECT_EQ(early_runs(log), "");
  }
}

// An actor system on a server of its own whose key "q:1" has a mailbox of one place, held
// by "m 0" (its handler waits for the gate) posted from a thread of its own.
struct one_place_held {
  explicit one_place_held(hr::actor_options a) : actors(at(server.port()), with_capacity_1(a)) {
    actors.on("q:", [this, port = server.port()](hr::delivery& d) {
      if (d.body() == "m 0") gate.wait();
      handoff::test::record_run(port, d);
    });
    owner = std::thread([this] { actors.post("q:1", "m 0"); });
  }
  one_place_held(const one_place_held&) = delete;
  one_place_held& operator=(const one_place_held&) = delete;
  ~one_place_held() {
    if (owner.joinable()) release();
  }
  // Lets "m 0" finish, and its post return.
  void release() {
    gate.open();
    owner.join();
  }
  static hr::actor_options with_capacity_1(hr::actor_options a) {
    a.capacity = 1;
    return a;
  }

  redis_server server;
  raw_redis raw{server.port()};
  hr::actor_system actors;
  latch gate;
  std::thread owner;
};

TEST(RedisActor, ADueDelayedMessageWhoseMailboxIsFullStaysDelayedAndMovesOnceThereIsRoom) {
  one_place_held q(quick());
  hr::actor_system& actors = q.actors;
  raw_redis& raw = q.raw;
  ASSERT_TRUE(eventually([&] { return actors.pending("q:1") == 1; }));
  const std::string id = actors.post_after("q:1", "d 1", 20ms);
  std::this_thread::sleep_for(200ms);  // due, and swept several times meanwhile
  EXPECT_EQ(actors.pending("q:1"), 1U) << "moved past the mailbox's capacity";
  EXPECT_EQ(raw.integer({"ZCARD", "handoff:actors:delayed"}), 1) << "dropped instead of kept for a later sweep";
  q.release();
  ASSERT_TRUE(eventually([&] { return log_of(raw, "q:1").size() == 2; }, 10s));
  EXPECT_EQ(handoff::test::runs_of(log_of(raw, "q:1")), (std::vector<std::string>{"m 0 1", "d 1 1"}));
  EXPECT_FALSE(actors.cancel_delayed("q:1", id));
}

TEST(RedisActor, DelayedPostsSurviveTheKillOfEveryProcessAndAServerRestartWithPersistence) {
  redis_server server({"--appendonly", "yes", "--appendfsync", "always"});
  const int port = server.port();
  constexpr int count = 200;
  // A sender without handlers (it never sweeps) posts them due 1.5 s later, and is killed.
  const auto sender = helper({std::to_string(port), "300", "delay", std::to_string(count), "1500", "late:a", "late:b"});
  {
    raw_redis raw(port);
    ASSERT_TRUE(eventually([&] { return raw.integer({"LLEN", "t:accepted:delay"}) == count; }, 10s));
  }
  sender->kill();
  server.restart();  // SIGKILL, then the same port and directory: the append-only file is read back
  // A process started after the crash runs every one, once, none early.
  hr::actor_system actors(at(port), quick());
  actors.on("", [port](hr::delivery& d) { handoff::test::record_run(port, d); });
  raw_redis raw(port);
  ASSERT_TRUE(eventually([&] { return log_of(raw, "late:a").size() + log_of(raw, "late:b").size() == count; }, 20s));
  std::map<std::string, long long> seen;
  for (const char* key : {"late:a", "late:b"}) {
    EXPECT_EQ(handoff::test::check_log(log_of(raw, key), &seen), "");
    EXPECT_EQ(early_runs(log_of(raw, key)), "");
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count));
  for (const auto& [message, runs] : seen) EXPECT_EQ(runs, 1) << message;
}

TEST(RedisActor, PostAtAnInstantLongPastIsDueAtTheNextSweep) {
  recorded t;
  t.actors.post_at("past:1", "p 0", std::chrono::system_clock::time_point::min());
  t.actors.post_at("past:1", "p 1", std::chrono::system_clock::now() - std::chrono::hours(24 * 365 * 100));
  ASSERT_TRUE(eventually([&] { return log_of(t.raw, "past:1").size() == 2; }, 5s)) << "stored as due in the far future";
  EXPECT_EQ(handoff::test::runs_of(log_of(t.raw, "past:1")), (std::vector<std::string>{"p 0 1", "p 1 1"}));
}

TEST(RedisActor, ADelayedMessageHeldByAFullMailboxStillRunsBeforeTheSameSendersLaterOnes) {
  hr::actor_options a = quick();
  a.sweep_interval = 0ms;  // sweeps only when told to; a held message waits 100 ms
  one_place_held q(a);
  hr::actor_system& actors = q.actors;
  raw_redis& raw = q.raw;
  ASSERT_TRUE(eventually([&] { return actors.pending("q:1") == 1; }));
  actors.post_after("q:1", "d 1", 5ms);
  std::this_thread::sleep_for(20ms);
  actors.sweep();  // d 1 is due and finds the mailbox full: held
  actors.post_after("q:1", "d 2", 5ms);
  std::this_thread::sleep_for(20ms);  // d 2 is due now, d 1's retry later
  q.release();                        // the mailbox is empty: the next sweep finds room for d 2
  ASSERT_TRUE(eventually(
      [&] {
        actors.sweep();
        return log_of(raw, "q:1").size() == 3;
      },
      10s));
  EXPECT_EQ(handoff::test::runs_of(log_of(raw, "q:1")), (std::vector<std::string>{"m 0 1", "d 1 1", "d 2 1"}));
  EXPECT_EQ(
      raw.integer({"EXISTS", "handoff:actors:delayed", "handoff:actors:delayed:body", "handoff:{q:1}:actor:held"}), 0)
      << "nothing left once they moved";
}

TEST(RedisActor, DelayedMessagesDueInOneMillisecondRunInPostingOrderPastTheThousandth) {
  // The sweep takes messages due in the same millisecond in the order of their ids, so a
  // sender's ids must sort as posted (a fixed-width sequence: "-999" sorts after "-1000").
  hr::actor_options a = quick();
  a.sweep_interval = 0ms;
  recorded t({}, a);
  constexpr int count = 1100;
  std::vector<std::string> ids;
  for (int i = 0; i < count; ++i) ids.push_back(t.actors.post_after("burst:1", "b " + std::to_string(i), 1h));
  EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end())) << "ids do not sort in posting order";
  for (const std::string& id : ids) t.raw.integer({"ZADD", "handoff:actors:delayed", "XX", "1", id});  // one ms, past
  ASSERT_TRUE(eventually(
      [&] {
        t.actors.sweep();
        return log_of(t.raw, "burst:1").size() == count;
      },
      30s));
  std::map<std::string, long long> seen;
  EXPECT_EQ(handoff::test::check_log(log_of(t.raw, "burst:1"), &seen), "") << "out of posting order";
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(count));
}

}  // namespace
