// handoff::redis::keyed_mutex against a real redis-server: waiting without a thread
// (co_await async_lock, lock_async callbacks), lock_all, with_lock, moved guards, and what
// all of these leave on the server.
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/redis_keyed_mutex_fixture.hpp"

namespace {

using namespace handoff::test::redis_keyed_mutex_tests;  // redis_keyed_mutex_fixture.hpp

// --- async --------------------------------------------------------------------------------

struct async_outcome {
  std::promise<handoff::redis::guard> guard;
  std::promise<std::string> error;
};

fire_and_forget co_lock(keyed_mutex& m, std::string key, std::optional<std::chrono::milliseconds> wait,
                        async_outcome& out) {
  try {
    // (Not `wait ? co_await a : co_await b`: GCC 12 miscompiles co_await in a conditional.)
    handoff::redis::guard g;
    if (wait) {
      g = co_await m.async_lock(std::move(key), *wait);
    } else {
      g = co_await m.async_lock(std::move(key));
    }
    out.guard.set_value(std::move(g));
  } catch (const redis_error& e) {
    out.error.set_value(e.what());
  }
}

TEST_F(RedisKeyedMutex, CoAwaitAsyncLockResumesWithTheLockAfterTheHolderUnlocks) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k");
  async_outcome out;
  auto f = out.guard.get_future();
  co_lock(m, "k", std::nullopt, out);
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  EXPECT_EQ(f.wait_for(300ms), std::future_status::timeout) << "resumed while the key is held";
  g.unlock();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  auto a = f.get();
  EXPECT_TRUE(a.owns_lock());
  EXPECT_GT(a.token(), g.token());
  EXPECT_EQ(a.key(), "k");
  a.unlock();
  EXPECT_FALSE(raw_.locked("k"));

  // On a free key it resumes with the lock at once (on the background thread).
  async_outcome out2;
  auto f2 = out2.guard.get_future();
  co_lock(m, "free", std::nullopt, out2);
  ASSERT_EQ(f2.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(f2.get().owns_lock());
}

TEST_F(RedisKeyedMutex, CoAwaitAsyncLockWithAWaitTimeThatRunsOutGivesAnEmptyGuard) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k");
  async_outcome out;
  auto f = out.guard.get_future();
  const auto t0 = steady::now();
  co_lock(m, "k", 300ms, out);
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_GE(since(t0), 290ms);
  EXPECT_FALSE(f.get().owns_lock());
  EXPECT_EQ(raw_.queue_length("k"), 0) << "the timed-out request stayed in the queue";
  g.unlock();
  EXPECT_TRUE(m.try_lock("k").owns_lock()) << "a timed-out request blocks the key";
}

TEST_F(RedisKeyedMutex, CoAwaitAsyncLockThrowsTheRedisError) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k", lease{30s});
  async_outcome out;
  auto f = out.error.get_future();
  co_lock(m, "k", std::nullopt, out);
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  server_.kill();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready) << "the coroutine was not resumed with the error";
  EXPECT_FALSE(f.get().empty());
  EXPECT_THROW(g.unlock(), redis_error);
}

TEST_F(RedisKeyedMutex, LockAsyncCallsBackWithTheGuardOrAnEmptyOneOnTimeout) {
  keyed_mutex m(opts());
  keyed_mutex holder(opts());
  auto g = holder.lock("k");
  struct result {
    std::promise<void> done;
    handoff::redis::guard g;
    std::exception_ptr e;
    std::thread::id thread;
  };
  auto callback = [](result& r) {
    return [&r](handoff::redis::guard g, std::exception_ptr e) {
      r.g = std::move(g);
      r.e = std::move(e);
      r.thread = std::this_thread::get_id();
      r.done.set_value();
    };
  };
  result timed;
  result granted;
  auto ft = timed.done.get_future();
  auto fg = granted.done.get_future();
  m.lock_async("k", callback(granted));
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  m.lock_async("k", callback(timed), 300ms);
  ASSERT_EQ(ft.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(timed.g.owns_lock());
  EXPECT_EQ(timed.e, nullptr);
  EXPECT_NE(timed.thread, std::this_thread::get_id());
  EXPECT_EQ(fg.wait_for(100ms), std::future_status::timeout);
  g.unlock();
  ASSERT_EQ(fg.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(granted.g.owns_lock());
  EXPECT_EQ(granted.e, nullptr);

  // With a lease.
  granted.g.unlock();
  result leased;
  auto fl = leased.done.get_future();
  m.lock_async("k", callback(leased), lease{20s});
  ASSERT_EQ(fl.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(leased.g.owns_lock());
  EXPECT_EQ(leased.g.lease_duration(), 20s);
  EXPECT_GT(raw_.pttl("k"), 10000);

  // With a wait and a lease: granted at once when the key is free.
  leased.g.unlock();
  result both;
  auto fb = both.done.get_future();
  m.lock_async("k", callback(both), 1s, lease{15s});
  ASSERT_EQ(fb.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(both.g.owns_lock());
  EXPECT_EQ(both.g.lease_duration(), 15s);
}

// --- lock_all and with_lock ---------------------------------------------------------------

TEST_F(RedisKeyedMutex, LockAllWithOverlappingKeysFromTwoInstancesDoesNotDeadlock) {
  keyed_mutex a(opts());
  keyed_mutex b(opts());
  constexpr int iterations = 40;
  std::atomic<int> inside_c{0};
  std::atomic<int> overlaps{0};
  std::atomic<int> acquired{0};
  auto body = [&](keyed_mutex& m, std::vector<std::string> keys) {
    for (int i = 0; i < iterations; ++i) {
      auto all = m.lock_all(keys);
      if (inside_c.fetch_add(1) != 0) overlaps.fetch_add(1);  // both sets hold "c"
      std::this_thread::yield();
      inside_c.fetch_sub(1);
      acquired.fetch_add(1);
    }
  };
  {
    std::jthread t1([&] { body(a, {"a", "b", "c"}); });
    std::jthread t2([&] { body(b, {"d", "c", "b", "d"}); });
  }
  EXPECT_EQ(acquired.load(), 2 * iterations);
  EXPECT_EQ(overlaps.load(), 0);
  auto all = a.lock_all({"b", "a", "b"});
  EXPECT_TRUE(raw_.locked("a"));
  EXPECT_TRUE(raw_.locked("b"));
}

TEST_F(RedisKeyedMutex, WithLockReturnsTheResultAndReleasesOnThrow) {
  keyed_mutex m(opts());
  keyed_mutex other(opts());
  const int r = m.with_lock("k", [&] {
    EXPECT_TRUE(raw_.locked("k"));
    EXPECT_FALSE(other.try_lock("k").owns_lock());
    return 42;
  });
  EXPECT_EQ(r, 42);
  EXPECT_FALSE(raw_.locked("k"));
  EXPECT_THROW(m.with_lock("k", [&]() -> int { throw std::runtime_error("from f"); }), std::runtime_error);
  EXPECT_FALSE(raw_.locked("k"));
  EXPECT_TRUE(other.try_lock("k").owns_lock());
  int calls = 0;
  m.with_lock("v", [&] { ++calls; });
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(raw_.locked("v"));
}

TEST_F(RedisKeyedMutex, MoveAssigningAGuardReleasesWhatItHeld) {
  keyed_mutex m(opts());
  auto a = m.lock("a");
  auto b = m.lock("b");
  const std::uint64_t token_b = b.token();
  a = std::move(b);
  EXPECT_FALSE(raw_.locked("a")) << "the key the guard held before the assignment";
  EXPECT_TRUE(raw_.locked("b"));
  EXPECT_TRUE(a.owns_lock());
  EXPECT_EQ(a.key(), "b");
  EXPECT_EQ(a.token(), token_b);
  EXPECT_FALSE(b.owns_lock());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b.key(), "");       // NOLINT(bugprone-use-after-move)
  handoff::redis::guard c(std::move(a));
  EXPECT_TRUE(c.owns_lock());
  c = handoff::redis::guard();
  EXPECT_FALSE(raw_.locked("b"));
}

// --- what stays on the server -------------------------------------------------------------

TEST_F(RedisKeyedMutex, OnlyFenceCountersStayOnTheServerOnceEveryGuardIsGone) {
  {
    keyed_mutex m(opts());
    keyed_mutex other(opts());
    auto g = m.lock("a");
    EXPECT_FALSE(other.try_lock_for("a", 200ms).owns_lock());  // queued, timed out
    std::atomic<bool> granted{false};
    std::jthread waiter([&] { granted.store(other.lock("a").owns_lock()); });
    ASSERT_TRUE(raw_.wait_queue_length("a", 1));
    g.unlock();
    waiter.join();
    EXPECT_TRUE(granted.load());
    auto leased = m.lock("b", lease{200ms});  // left to expire
    auto all = m.lock_all({"c", "d"});
    all = {};
    async_outcome out;
    auto f = out.guard.get_future();
    auto held = m.lock("e");
    co_lock(other, "e", 200ms, out);  // times out while queued
    ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
    EXPECT_FALSE(f.get().owns_lock());
    held.unlock();
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(leased.expired());
  }
  std::vector<std::string> keys = raw_.strings({"KEYS", "*"});
  EXPECT_EQ(std::erase(keys, "handoff:format"), 1U) << "the prefix's format marker";
  EXPECT_EQ(keys.size(), 5U);
  for (const std::string& k : keys) {
    EXPECT_TRUE(k.ends_with(":fence")) << k;
    EXPECT_GT(raw_.integer({"PTTL", k}), 0) << k << " never expires";
  }
}

}  // namespace
