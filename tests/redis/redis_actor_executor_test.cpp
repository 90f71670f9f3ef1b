// handoff::redis::actor_system against a real redis-server: an executor (what runs on the
// posting thread and what on the executor, deferred dequeues), and the drain budget.
#include <handoff/executor.hpp>
#include <handoff/redis/actor_system.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "../support/redis_actor_fixture.hpp"

namespace {

using namespace handoff::test::redis_actor_tests;  // redis_actor_fixture.hpp

// Runs m0 on a thread of its own (it owns the actor and blocks in the handler until the
// latch opens), posts m1..m9 behind it through `poster`, opens the latch; returns the
// thread each message ran on, in order.
std::vector<std::thread::id> backlog_run(hr::actor_system& poster, std::vector<hr::actor_system*> handlers,
                                         std::thread::id& owner_thread) {
  latch gate;
  std::mutex mu;
  std::vector<std::string> order;
  std::vector<std::thread::id> threads;
  for (hr::actor_system* s : handlers) {
    s->on("q:", [&](hr::delivery& d) {
      if (d.body() == "m0") gate.wait();
      const std::lock_guard<std::mutex> lock(mu);
      order.emplace_back(d.body());
      threads.push_back(std::this_thread::get_id());
    });
  }
  std::thread owner([&] { poster.post("q:1", "m0"); });
  owner_thread = owner.get_id();
  EXPECT_TRUE(eventually([&] { return poster.pending("q:1") == 1; }));
  for (int i = 1; i < 10; ++i) poster.post("q:1", "m" + std::to_string(i));
  gate.open();
  owner.join();
  EXPECT_TRUE(eventually([&] {
    const std::lock_guard<std::mutex> lock(mu);
    return order.size() == 10;
  }));
  const std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(order, (std::vector<std::string>{"m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "m9"}));
  return threads;
}

TEST(RedisActor, WithAnExecutorAPostsOwnerRunsOnlyItsOwnMessageAndTheExecutorTheRest) {
  redis_server server;
  handoff::thread_pool pool(1);
  hr::actor_options a = quick();
  a.executor = pool;
  a.sweep_interval = 0ms;  // only the executor can continue it
  hr::actor_system actors(at(server.port()), a);
  std::thread::id owner;
  const auto threads = backlog_run(actors, {&actors}, owner);
  ASSERT_EQ(threads.size(), 10U);
  EXPECT_EQ(threads[0], owner);
  for (std::size_t i = 1; i < threads.size(); ++i) {
    EXPECT_NE(threads[i], owner) << "message " << i << " ran on the posting thread";
    EXPECT_NE(threads[i], std::this_thread::get_id());
  }
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

// An executor whose jobs wait until the test runs them, so that a test sees what a post
// leaves to the executor before it runs.
class held_executor {
 public:
  void execute(handoff::work w) {
    const std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(w));
  }
  [[nodiscard]] std::size_t queued() {
    const std::lock_guard<std::mutex> lock(mu_);
    return jobs_.size();
  }
  // Runs the jobs queued now and those they queue, until none is left; how many ran.
  std::size_t run_all() {
    std::size_t ran = 0;
    for (;;) {
      handoff::work w;
      {
        const std::lock_guard<std::mutex> lock(mu_);
        if (jobs_.empty()) return ran;
        w = std::move(jobs_.front());
        jobs_.pop_front();
      }
      w();
      ++ran;
    }
  }

 private:
  std::mutex mu_;
  std::deque<handoff::work> jobs_;
};

TEST(RedisActor, APostThatWinsAnIdleActorReturnsAfterItsHandlerAndTheExecutorSendsItsDequeue) {
  redis_server server;
  raw_redis raw(server.port());
  held_executor ex;
  hr::actor_options a = quick();
  a.executor = ex;
  a.sweep_interval = 0ms;
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::string> ran;
  actors.on("room:", [&](hr::delivery& d) { ran.emplace_back(d.body()); });
  for (const char* key : {"room:1", "room:2", "room:3"}) actors.post(key, std::string("hello ") + key);
  EXPECT_EQ(ran, (std::vector<std::string>{"hello room:1", "hello room:2", "hello room:3"}));
  // Handled, not dequeued yet: each actor is still owned, its message still counted.
  for (const char* key : {"room:1", "room:2", "room:3"}) {
    EXPECT_EQ(actors.pending(key), 1U) << key;
    EXPECT_EQ(raw.strings({"KEYS", std::string("*{") + key + "}:actor:owner"}).size(), 1U) << key;
  }
  // The three steps wait in one job, which sends them together and releases every actor.
  EXPECT_EQ(ex.queued(), 1U);
  EXPECT_EQ(ex.run_all(), 1U);
  for (const char* key : {"room:1", "room:2", "room:3"}) EXPECT_EQ(actors.pending(key), 0U) << key;
  EXPECT_EQ(raw.strings({"KEYS", "*actor*"}), std::vector<std::string>{});
  EXPECT_EQ(ran.size(), 3U);  // nothing ran twice
}

TEST(RedisActor, AMessagePostedWhileTheOwnersDequeueWaitsOnTheExecutorRunsThereInOrder) {
  redis_server server;
  held_executor ex;
  hr::actor_options a = quick();
  a.executor = ex;
  a.sweep_interval = 0ms;
  hr::actor_system actors(at(server.port()), a);
  std::vector<std::pair<std::string, std::thread::id>> ran;
  actors.on("q:", [&](hr::delivery& d) { ran.emplace_back(d.body(), std::this_thread::get_id()); });
  actors.post("q:1", "m0");  // runs here, its step waits in the executor
  actors.post("q:1", "m1");  // queued behind the owner: returns at once
  actors.post("q:1", "m2");
  ASSERT_EQ(ran.size(), 1U);
  EXPECT_EQ(actors.pending("q:1"), 3U);
  std::thread worker([&] { ex.run_all(); });  // the executor's thread
  const std::thread::id executor_thread = worker.get_id();
  worker.join();
  ASSERT_EQ(ran.size(), 3U);
  EXPECT_EQ(ran[1], std::make_pair(std::string("m1"), executor_thread));
  EXPECT_EQ(ran[2], std::make_pair(std::string("m2"), executor_thread));
  EXPECT_EQ(actors.pending("q:1"), 0U);
}

TEST(RedisActor, ADeferredDequeueThatFindsTheServerGoneIsReportedAndTheMessageRunsAgainLater) {
  redis_server server({"--appendonly", "yes", "--appendfsync", "always"});
  held_executor ex;
  std::mutex mu;
  std::vector<std::string> errors;
  hr::actor_options a = quick();
  a.executor = ex;
  a.sweep_interval = 20ms;
  a.on_error = [&](std::string_view, const std::exception_ptr& e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      const std::lock_guard<std::mutex> lock(mu);
      errors.emplace_back(x.what());
    }
  };
  hr::options o = at(server.port());
  o.command_timeout = 200ms;
  hr::actor_system actors(o, a);
  std::atomic<int> runs{0};
  std::atomic<std::uint32_t> last_attempt{0};
  actors.on("q:", [&](hr::delivery& d) {
    last_attempt = d.attempt();
    ++runs;
  });
  actors.post("q:1", "m0");
  EXPECT_EQ(runs.load(), 1);
  server.kill();
  ex.run_all();  // the step cannot be sent: reported, the message stays in the mailbox
  {
    const std::lock_guard<std::mutex> lock(mu);
    ASSERT_FALSE(errors.empty());
    EXPECT_NE(errors.front().find("handoff::redis"), std::string::npos) << errors.front();
  }
  server.restart();  // the same directory: the append-only file is read back
  // The owner's lease runs out; the sweeper takes the actor over and runs m0 again, flagged.
  std::thread worker([&] {
    const auto end = std::chrono::steady_clock::now() + 5s;
    while (runs.load() < 2 && std::chrono::steady_clock::now() < end) {
      ex.run_all();
      std::this_thread::sleep_for(5ms);
    }
    ex.run_all();
  });
  worker.join();
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(last_attempt.load(), 2U);
  EXPECT_TRUE(eventually([&] {
    ex.run_all();
    return actors.pending("q:1") == 0;
  }));
}

TEST(RedisActor, AnExecutorThatRunsJobsInlineSendsTheDequeuesInRoundsWithoutNesting) {
  redis_server server;
  // Runs each job inside execute(), on the caller's thread; counts how deep jobs nest.
  struct inline_executor {
    std::atomic<int> depth{0};
    std::atomic<int> deepest{0};
    void execute(handoff::work w) {
      const int d = ++depth;
      int seen = deepest.load();
      while (d > seen && !deepest.compare_exchange_weak(seen, d)) {
      }
      w();
      --depth;
    }
  };
  inline_executor ex;
  hr::actor_options a = quick();
  a.executor = ex;
  hr::actor_system actors(at(server.port()), a);
  std::mutex mu;
  std::map<std::string, std::vector<int>> seen;  // sender -> its messages in the order run
  actors.on("q:", [&](hr::delivery& d) {
    const std::string body(d.body());
    const auto space = body.find(' ');
    const std::lock_guard<std::mutex> lock(mu);
    seen[body.substr(0, space)].push_back(std::stoi(body.substr(space + 1)));
  });
  constexpr int per_sender = 200;
  std::vector<std::thread> senders;
  for (const char* name : {"a", "b"}) {
    senders.emplace_back([&, name] {
      for (int i = 0; i < per_sender; ++i) actors.post("q:1", std::string(name) + " " + std::to_string(i));
    });
  }
  for (auto& t : senders) t.join();
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
  const std::lock_guard<std::mutex> lock(mu);
  for (const char* name : {"a", "b"}) {
    std::vector<int> expected(per_sender);
    for (int i = 0; i < per_sender; ++i) expected[static_cast<std::size_t>(i)] = i;
    EXPECT_EQ(seen[name], expected) << name;  // each once, in the order sent
  }
  // A job runs inside execute(), and at most a job inside that one's execute().
  EXPECT_LE(ex.deepest.load(), 2);
}

TEST(RedisActor, ADequeueTheExecutorRefusesIsReportedAndItsMessageRunsAgainAfterTheLease) {
  redis_server server;
  // Refuses its first job (as an executor out of memory would), then runs jobs on a pool.
  struct refuses_once {
    handoff::thread_pool* pool;
    std::atomic<bool> refused{false};
    void execute(handoff::work w) {
      if (!refused.exchange(true)) throw std::bad_alloc();
      pool->execute(std::move(w));
    }
  };
  handoff::thread_pool pool(1);
  refuses_once ex{&pool};
  std::atomic<int> errors{0};
  hr::actor_options a = quick();
  a.executor = ex;
  a.on_error = [&](std::string_view, const std::exception_ptr&) { ++errors; };
  hr::actor_system actors(at(server.port()), a);
  std::mutex mu;
  std::vector<std::uint32_t> attempts;
  actors.on("q:", [&](hr::delivery& d) {
    const std::lock_guard<std::mutex> lock(mu);
    attempts.push_back(d.attempt());
  });
  actors.post("q:1", "m0");  // runs here; the job that would send its dequeue is refused
  EXPECT_EQ(errors.load(), 1);
  // The lease runs out; the sweeper takes the actor over and runs m0 again, flagged.
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }, 10s));
  const std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(attempts, (std::vector<std::uint32_t>{1, 2}));
}

TEST(RedisActor, ASpentBudgetWithoutExecutorAnnouncesTheActorAndASweeperContinuesIt) {
  redis_server server;
  hr::actor_options a = quick();
  a.max_messages = 2;
  a.sweep_interval = 0ms;
  hr::actor_system poster(at(server.port()), a);  // never sweeps
  hr::actor_system sweeper(at(server.port()), quick());
  std::thread::id owner;
  const auto threads = backlog_run(poster, {&poster, &sweeper}, owner);
  ASSERT_EQ(threads.size(), 10U);
  EXPECT_EQ(threads[1], owner);
  for (std::size_t i = 2; i < threads.size(); ++i) {
    EXPECT_NE(threads[i], owner);
    EXPECT_NE(threads[i], std::this_thread::get_id());
  }
}

TEST(RedisActor, MaxMessagesAndMaxTime0MeanNoBudgetSoTheOwnerDrainsTheWholeBacklog) {
  redis_server server;
  handoff::thread_pool pool(1);
  hr::actor_options a = quick();
  a.max_messages = 0;
  a.max_time = 0ns;
  a.sweep_interval = 0ms;  // a budget would announce the actor for a sweeper
  hr::actor_system actors(at(server.port()), a);
  std::thread::id owner;
  const auto threads = backlog_run(actors, {&actors}, owner);
  ASSERT_EQ(threads.size(), 10U);
  for (std::size_t i = 0; i < threads.size(); ++i) EXPECT_EQ(threads[i], owner) << "message " << i;

  hr::actor_options negative = quick();
  negative.max_time = -1ns;
  EXPECT_THROW(hr::actor_system(at(server.port()), negative), std::invalid_argument);
}

}  // namespace
