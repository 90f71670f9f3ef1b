// handoff::redis::actor_system against a real redis-server: a post made inside other work
// of the library (a Redis handler, an in-process actor's handler, a keyed-mutex callback, a
// resumed coroutine) drains the actor it wins after that work, on the same thread.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/redis/actor_system.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/redis_actor_fixture.hpp"
#include "../support/test_support.hpp"

namespace {

using namespace handoff::test::redis_actor_tests;  // redis_actor_fixture.hpp

TEST(RedisActor, APostFromInsideARedisHandlerDrainsTheWonActorOnTheSameThreadAfterThatHandler) {
  redis_server server;
  hr::actor_system actors(at(server.port()), quick());
  bool in_a = false;
  std::vector<std::pair<std::thread::id, bool>> b_runs;  // (thread, inside a's handler)
  actors.on("a:", [&](hr::delivery&) {
    in_a = true;
    actors.post("b:1", "from a");
    in_a = false;
  });
  actors.on("b:", [&](hr::delivery&) { b_runs.emplace_back(std::this_thread::get_id(), in_a); });
  actors.post("a:1", "go");
  ASSERT_EQ(b_runs.size(), 1U) << "b's message did not run on this thread before the post returned";
  EXPECT_EQ(b_runs[0].first, std::this_thread::get_id());
  EXPECT_FALSE(b_runs[0].second) << "the nested post drained inside a's handler";
  EXPECT_EQ(actors.pending("b:1"), 0U);
}

// A server and an actor_system whose handler records, for each run, its thread and
// whether `inside` was set then.
struct inside_probe {
  inside_probe() {
    actors.on("r:", [this](hr::delivery&) {
      const std::lock_guard<std::mutex> lock(mu);
      runs.emplace_back(std::this_thread::get_id(), inside.load());
    });
  }
  redis_server server;
  hr::actor_system actors{at(server.port()), quick()};
  std::atomic<bool> inside{false};
  std::mutex mu;
  std::vector<std::pair<std::thread::id, bool>> runs;  // guarded by mu
  // The work the post runs inside: sets `inside` around the post.
  void post_inside() {
    inside = true;
    actors.post("r:1", "x");
    inside = false;
  }
  void expect_one_run_here_after_the_work() {
    const std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(runs.size(), 1U) << "the message did not run exactly once on this thread";
    EXPECT_EQ(runs[0].first, std::this_thread::get_id());
    EXPECT_FALSE(runs[0].second) << "the Redis handler ran nested inside the work that posted";
  }
};

TEST(RedisActor, APostFromAnInProcessActorsHandlerDrainsAfterThatHandlerOnTheSameThread) {
  inside_probe probe;
  handoff::actor<int> local{0};
  local.post([&](int&) { probe.post_inside(); });  // at top level: runs here, then the queue
  probe.expect_one_run_here_after_the_work();
  EXPECT_EQ(probe.actors.pending("r:1"), 0U);
}

TEST(RedisActor, APostFromAKeyedMutexCallbackDrainsAfterThatCallbackOnTheSameThread) {
  inside_probe probe;
  handoff::keyed_mutex<std::string> m;
  m.lock_async("k", [&](auto /*guard*/) { probe.post_inside(); });  // free key: runs here
  probe.expect_one_run_here_after_the_work();
}

TEST(RedisActor, APostFromACoroutineTheLibraryResumedDrainsAfterItOnTheSameThread) {
  inside_probe probe;
  handoff::keyed_mutex<std::string> m;
  auto held = m.lock("k");
  [](handoff::keyed_mutex<std::string>& mx, inside_probe& p) -> handoff::test::fire_and_forget {
    auto g = co_await mx.async_lock("k");  // resumed inside held.unlock() below
    p.post_inside();
  }(m, probe);
  held.unlock();
  probe.expect_one_run_here_after_the_work();
}

TEST(RedisActor, PostForOnAFullMailboxInsideAHandlerFirstRunsWhatThisThreadHasQueued) {
  redis_server server;
  hr::actor_options a = quick();
  a.capacity = 1;
  hr::actor_system actors(at(server.port()), a);
  std::atomic<bool> queued_ran{false};
  std::atomic<bool> seen_by_owner{false};
  actors.on("q:", [&](hr::delivery& d) {
    // The owner's m0 keeps the mailbox full until the work queued on the poster's thread ran.
    if (d.body() == "m0") seen_by_owner = eventually([&] { return queued_ran.load(); }, 300ms);
  });
  std::thread owner([&] { actors.post("q:1", "m0"); });
  ASSERT_TRUE(eventually([&] { return actors.pending("q:1") == 1; }));
  handoff::actor<int> x{0};
  handoff::actor<int> y{0};
  x.post([&](int&) {
    y.post([&](int&) { queued_ran = true; });  // idle: queued on this thread, after x's handler
    actors.post_for("q:1", "m1", 10s);
  });
  owner.join();
  EXPECT_TRUE(seen_by_owner.load()) << "post_for slept while this thread's queue held y";
  EXPECT_TRUE(eventually([&] { return actors.pending("q:1") == 0; }));
}

}  // namespace
