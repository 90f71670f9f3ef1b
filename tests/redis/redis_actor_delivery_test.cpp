// handoff::redis::actor_system against a real redis-server: batches, handlers that throw,
// dead letters, and the state committed with the dequeue (remember_handled).
#include <handoff/redis/actor_system.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../support/redis_actor_fixture.hpp"

namespace {

using namespace handoff::test::redis_actor_tests;  // redis_actor_fixture.hpp

TEST(RedisActor, AHandlerThatThrowsMidBatchStopsItAndTheMessagesAfterItAreNotCountedAsDelivered) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_attempts = 1;  // a message counted as delivered twice goes to the dead letters
  a.on_error = [](std::string_view, std::exception_ptr) {};
  hr::actor_system actors(at(server.port()), a);
  latch gate;
  std::mutex mu;
  std::vector<std::string> runs;
  actors.on("q:", [&](hr::delivery& d) {
    if (d.body() == "m0") gate.wait();
    const std::lock_guard<std::mutex> lock(mu);
    runs.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()));
    if (d.body() == "b2") throw std::runtime_error("poison");
  });
  std::thread owner([&] { actors.post("q:1", "m0"); });
  ASSERT_TRUE(eventually([&] { return actors.pending("q:1") == 1; }));
  for (int i = 1; i <= 4; ++i) actors.post("q:1", "b" + std::to_string(i));  // one batch after m0
  gate.open();
  owner.join();
  EXPECT_EQ(runs, (std::vector<std::string>{"m0 1", "b1 1", "b2 1", "b3 1", "b4 1"}));
  const std::vector<hr::dead_letter> dead = actors.dead_letters("q:1");
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(dead[0].body, "b2");
  EXPECT_EQ(actors.pending("q:1"), 0U);
}

TEST(RedisActor, ABatchCarriesTheStateFromMessageToMessageAndASpentTimeBudgetGivesBackTheRest) {
  redis_server server;
  handoff::thread_pool pool(1);
  hr::actor_options a = quick();
  a.remember_handled = true;
  a.max_attempts = 1;  // a message counted as delivered without running would be dead-lettered
  a.max_messages = 0;
  a.max_time = 1ms;  // spent after the first message of each batch
  a.executor = pool;
  hr::actor_system actors(at(server.port()), a);
  latch gate;
  std::mutex mu;
  std::vector<std::string> seen;  // "<body> <attempt> <state>"
  std::vector<std::string> ids;   // the ids handled, in order
  std::vector<bool> last_is_previous;
  actors.on("acct:", [&](hr::delivery& d) {
    if (d.body() == "m0") gate.wait();
    std::this_thread::sleep_for(2ms);
    const std::lock_guard<std::mutex> lock(mu);
    last_is_previous.push_back(ids.empty() ? d.last_handled_id().empty() : d.last_handled_id() == ids.back());
    ids.emplace_back(d.id());
    seen.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()) + " " + std::string(d.state()));
    d.set_state(std::to_string(handoff::test::count_of(d.state()) + 1));
  });
  std::thread owner([&] { actors.post("acct:1", "m0"); });
  ASSERT_TRUE(eventually([&] { return actors.pending("acct:1") == 1; }));
  for (int i = 1; i <= 5; ++i) actors.post("acct:1", "b" + std::to_string(i));
  gate.open();
  owner.join();
  ASSERT_TRUE(eventually([&] { return actors.pending("acct:1") == 0; }));
  const std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(seen, (std::vector<std::string>{"m0 1 ", "b1 1 1", "b2 1 2", "b3 1 3", "b4 1 4", "b5 1 5"}));
  EXPECT_EQ(last_is_previous, std::vector<bool>(6, true));
  EXPECT_TRUE(actors.dead_letters("acct:1").empty());
  raw_redis raw(server.port());
  EXPECT_EQ(raw.string({"HGET", "handoff:{acct:1}:actor:state", "value"}), "6");
}

TEST(RedisActor, BatchMustBeFrom1ToMaxBatch) {
  redis_server server;
  hr::actor_options zero = quick();
  zero.batch = 0;
  EXPECT_THROW(hr::actor_system(at(server.port()), zero), std::invalid_argument);
  hr::actor_options over = quick();
  over.batch = hr::actor_options::max_batch + 1;
  EXPECT_THROW(hr::actor_system(at(server.port()), over), std::invalid_argument);
  hr::actor_options one = quick();
  one.batch = 1;
  hr::actor_system actors(at(server.port()), one);
  std::vector<std::string> runs;
  actors.on("", [&](hr::delivery& d) { runs.emplace_back(d.body()); });
  actors.post("k", "a");
  EXPECT_EQ(runs, std::vector<std::string>{"a"});
}

TEST(RedisActor, AMessageThatKeepsFailingGoesToTheDeadLettersAndItsActorMovesOn) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_attempts = 3;
  std::atomic<int> errors{0};
  a.on_error = [&](std::string_view, std::exception_ptr) { errors.fetch_add(1); };
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::string> runs;
  actors.on("job:", [&](hr::delivery& d) {
    runs.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()));
    if (d.body() == "bad") throw std::runtime_error("poison");
  });
  const std::string bad = actors.post("job:1", "bad");
  actors.post("job:1", "good");
  EXPECT_EQ(runs, (std::vector<std::string>{"bad 1", "bad 2", "bad 3", "good 1"}));
  const std::vector<hr::dead_letter> dead = actors.dead_letters("job:1");
  ASSERT_EQ(dead.size(), 1U);
  EXPECT_EQ(dead[0].id, bad);
  EXPECT_EQ(dead[0].body, "bad");
  EXPECT_EQ(errors.load(), 4) << "three handler failures and the move to the dead letters";
  EXPECT_EQ(actors.pending("job:1"), 0U);
}

TEST(RedisActor, RememberHandledCommitsTheStateWithTheDequeueOncePerMessage) {
  redis_server server;
  hr::actor_options a = quick();
  a.remember_handled = true;
  a.on_error = [](std::string_view, std::exception_ptr) {};
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::string> seen;  // "<body> <attempt> <state> <last id is the previous message's>"
  std::vector<std::string> ids;
  actors.on("acct:", [&](hr::delivery& d) {
    const int n = d.state().empty() ? 0 : std::stoi(std::string(d.state()));
    const bool last_is_previous =
        ids.size() < 2 ? d.last_handled_id().empty() : d.last_handled_id() == ids[ids.size() - 2];
    seen.push_back(std::string(d.body()) + " " + std::to_string(d.attempt()) + " " + std::to_string(n) + " " +
                   (last_is_previous ? "prev" : "other"));
    d.set_state(std::to_string(n + 1));
    if (d.body() == "fail-once" && d.attempt() == 1) throw std::runtime_error("after set_state");
  });
  for (const char* body : {"a", "fail-once", "b"}) {
    ids.push_back("");  // the slot of the message being posted
    ids.back() = actors.post("acct:1", body);
  }
  // The failed attempt's state was not committed: the re-run sees the same state and the
  // same last handled id, so it can tell that nothing of the first attempt was kept.
  EXPECT_EQ(seen, (std::vector<std::string>{"a 1 0 prev", "fail-once 1 1 prev", "fail-once 2 1 prev", "b 1 2 prev"}));
  raw_redis raw(server.port());
  EXPECT_EQ(raw.string({"HGET", "handoff:{acct:1}:actor:state", "value"}), "3");
  EXPECT_EQ(raw.string({"HGET", "handoff:{acct:1}:actor:state", "id"}), ids.back());
}

}  // namespace
