// handoff::redis::keyed_mutex against a real redis-server: mutual exclusion across
// processes, threads and instances, FIFO grants to the waiters, try_lock and timeouts.
#include <handoff/actor.hpp>
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "../support/redis_keyed_mutex_fixture.hpp"

namespace {

using namespace handoff::test::redis_keyed_mutex_tests;  // redis_keyed_mutex_fixture.hpp

// --- mutual exclusion ---------------------------------------------------------------------

TEST_F(RedisKeyedMutex, ExcludesHoldersInOtherProcesses) {
  constexpr int processes = 3;
  constexpr int iterations = 200;
  std::vector<std::unique_ptr<helper_process>> helpers;
  for (int i = 0; i < processes; ++i) {
    helpers.push_back(std::make_unique<helper_process>(
        std::vector<std::string>{port(), "200", "shared", "count", std::to_string(iterations), "counter"}));
  }
  for (auto& h : helpers) EXPECT_EQ(h->wait(60s), 0);
  // An unprotected GET/SET under the lock: any overlap of two holders loses an increment.
  EXPECT_EQ(raw_.string({"GET", "counter"}), std::to_string(processes * iterations));
  // Tokens, appended under the lock, increase across the processes' grants.
  const std::vector<std::string> tokens = raw_.strings({"LRANGE", "counter:tokens", "0", "-1"});
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(processes * iterations));
  for (std::size_t i = 1; i < tokens.size(); ++i) {
    EXPECT_LT(std::stoull(tokens[i - 1]), std::stoull(tokens[i])) << "at " << i;
  }
}

TEST_F(RedisKeyedMutex, ExcludesHoldersInOtherThreadsWithTheirOwnInstances) {
  constexpr int threads = 4;
  constexpr int iterations = 60;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<long> counter{0};
  std::atomic<std::uint64_t> last_token{0};
  std::atomic<int> token_errors{0};
  std::vector<std::unique_ptr<keyed_mutex>> mutexes;
  for (int i = 0; i < threads; ++i) mutexes.push_back(std::make_unique<keyed_mutex>(opts()));
  handoff::test::run_threads(threads, [&](int t) {
    for (int i = 0; i < iterations; ++i) {
      auto g = mutexes[static_cast<std::size_t>(t)]->lock("shared");
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      // A read-modify-write that loses updates if two holders overlap (atomic accesses
      // only so that ThreadSanitizer sees no data race: Redis orders the holders).
      const long v = counter.load(std::memory_order_relaxed);
      std::this_thread::yield();
      counter.store(v + 1, std::memory_order_relaxed);
      if (g.token() <= last_token.load(std::memory_order_relaxed)) token_errors.fetch_add(1);
      last_token.store(g.token(), std::memory_order_relaxed);
      inside.fetch_sub(1);
      g.unlock();
    }
  });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter.load(), threads * iterations);
  EXPECT_EQ(token_errors.load(), 0);
}

// A handler of A posts to an idle actor J (this thread now owns J only through its run
// queue), then blocks on a held key: J runs before the thread blocks, not after the lock.
TEST_F(RedisKeyedMutex, ABlockingLockInsideAHandlerFirstRunsTheThreadsQueue) {
  keyed_mutex holder_side(opts());
  keyed_mutex m(opts());
  auto held = holder_side.lock("k");
  handoff::actor<int> a{0};
  handoff::actor<int> j{0};
  std::atomic<bool> j_ran{false};
  std::atomic<bool> locked{false};
  std::jthread handler_thread([&] {
    a.post([&](int&) {
      j.post([&](int&) { j_ran.store(true); });
      auto g = m.lock("k");
      locked.store(g.owns_lock());
    });
  });
  EXPECT_TRUE(eventually([&] { return j_ran.load(); })) << "J waited for the lock to return";
  EXPECT_FALSE(locked.load());
  held.unlock();
  handler_thread.join();
  EXPECT_TRUE(locked.load());
}

TEST_F(RedisKeyedMutex, ASecondLockOfAHeldKeyOnTheSameInstanceIsNotGranted) {
  keyed_mutex m(opts());
  auto g = m.lock("k");
  EXPECT_FALSE(m.try_lock("k").owns_lock());
  EXPECT_FALSE(m.try_lock_for("k", 200ms).owns_lock());
  g.unlock();
  EXPECT_TRUE(m.try_lock("k").owns_lock());
}

// --- FIFO ---------------------------------------------------------------------------------

TEST_F(RedisKeyedMutex, GrantsWaitersInOtherProcessesInRequestOrder) {
  keyed_mutex m(opts());
  auto g = m.lock("fifo");
  constexpr int waiters = 4;
  std::vector<std::unique_ptr<helper_process>> helpers;
  for (int i = 0; i < waiters; ++i) {
    // A long re-check interval: a waiter is granted by the release's notification.
    helpers.push_back(std::make_unique<helper_process>(
        std::vector<std::string>{port(), "1000", "fifo", "append", "order", std::to_string(i)}));
    ASSERT_TRUE(raw_.wait_queue_length("fifo", i + 1)) << "waiter " << i << " never queued";
  }
  g.unlock();
  for (auto& h : helpers) EXPECT_EQ(h->wait(), 0);
  EXPECT_EQ(raw_.strings({"LRANGE", "order", "0", "-1"}), (std::vector<std::string>{"0", "1", "2", "3"}));
}

TEST_F(RedisKeyedMutex, GrantsWaitersOfOtherInstancesInRequestOrder) {
  keyed_mutex holder(opts(1000ms));
  auto g = holder.lock("fifo");
  constexpr int waiters = 4;
  std::vector<std::unique_ptr<keyed_mutex>> mutexes;
  std::mutex mu;
  std::vector<int> order;
  std::vector<std::jthread> threads;
  for (int i = 0; i < waiters; ++i) {
    mutexes.push_back(std::make_unique<keyed_mutex>(opts(1000ms)));
    threads.emplace_back([&, i] {
      auto w = mutexes[static_cast<std::size_t>(i)]->lock("fifo");
      const std::lock_guard lock(mu);
      order.push_back(i);
    });
    ASSERT_TRUE(raw_.wait_queue_length("fifo", i + 1)) << "waiter " << i << " never queued";
  }
  g.unlock();
  threads.clear();  // joins
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3}));
}

TEST_F(RedisKeyedMutex, AWaiterIsWokenByTheReleaseNotByItsRecheck) {
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts(20s));  // re-checks far later than the test's bound
  auto g = holder.lock("k", lease{30s});
  std::atomic<bool> granted{false};
  std::jthread t([&] {
    auto w = waiter.lock("k");
    granted.store(w.owns_lock());
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::this_thread::sleep_for(100ms);
  EXPECT_FALSE(granted.load());
  const auto t0 = steady::now();
  g.unlock();
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 5s));
  EXPECT_LT(since(t0), 5s);
}

// A waiter whose client re-checks rarely (long heartbeat) must keep its place when a
// waiter of a client with a short heartbeat leaves the queue: the queue's expiry set by the
// short-heartbeat waiter must not take the long-heartbeat waiter out with it.
TEST_F(RedisKeyedMutex, AWaiterKeepsItsPlaceWhenAWaiterWithAShorterHeartbeatGivesUp) {
  keyed_mutex holder(opts());
  keyed_mutex slow(opts(3s));    // heartbeat 9 s
  keyed_mutex fast(opts(50ms));  // heartbeat 150 ms
  keyed_mutex late(opts(3s));
  auto g = holder.lock("k", lease{30s});
  std::mutex mu;
  std::vector<std::string> order;
  std::jthread first([&] {
    auto w = slow.lock("k");
    const std::lock_guard lock(mu);
    order.emplace_back("first");
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  EXPECT_FALSE(fast.try_lock_for("k", 300ms).owns_lock());  // queues, refreshes, gives up
  std::this_thread::sleep_for(500ms);                       // past the fast waiter's heartbeat
  EXPECT_EQ(raw_.queue_length("k"), 1) << "the first waiter was dropped from the queue";
  std::jthread second([&] {
    auto w = late.lock("k");
    const std::lock_guard lock(mu);
    order.emplace_back("second");
  });
  EXPECT_TRUE(raw_.wait_queue_length("k", 2, 3s));
  g.unlock();
  first.join();
  second.join();
  EXPECT_EQ(order, (std::vector<std::string>{"first", "second"}));
}

// --- try_lock and timeouts ----------------------------------------------------------------

TEST_F(RedisKeyedMutex, TryLockFailsWhileHeldAndDoesNotJumpANonEmptyQueue) {
  keyed_mutex m(opts());
  keyed_mutex other(opts());
  auto g = m.lock("k");
  EXPECT_FALSE(other.try_lock("k").owns_lock());
  EXPECT_EQ(raw_.queue_length("k"), 0) << "try_lock must never queue";

  // A waiter in a stopped process, and the holder's lease runs out: the key is free, but
  // someone waits.
  auto leased = other.lock("j", lease{300ms});
  helper_process waiter({port(), "3000", "j", "append", "order", "waiter"});
  ASSERT_TRUE(raw_.wait_queue_length("j", 1));
  waiter.signal(SIGSTOP);
  ASSERT_TRUE(eventually([&] { return !raw_.locked("j"); }));
  ASSERT_EQ(raw_.queue_length("j"), 1);
  EXPECT_FALSE(other.try_lock("j").owns_lock()) << "try_lock jumped the queue";
  EXPECT_TRUE(raw_.locked("j")) << "the key is passed to the waiter in front";
  EXPECT_EQ(raw_.queue_length("j"), 0);
  EXPECT_FALSE(other.try_lock("j", lease{10s}).owns_lock());
  EXPECT_FALSE(m.try_lock_for("j", 0ms).owns_lock());
  waiter.signal(SIGCONT);
  EXPECT_EQ(waiter.wait(), 0);
  EXPECT_EQ(raw_.strings({"LRANGE", "order", "0", "-1"}), std::vector<std::string>{"waiter"});
  EXPECT_TRUE(other.try_lock("j").owns_lock());
}

TEST_F(RedisKeyedMutex, TryLockForTimesOutWhileQueuedAndIsNeverGrantedAfterwards) {
  keyed_mutex holder(opts());
  keyed_mutex timed(opts());
  keyed_mutex next(opts());
  auto g = holder.lock("k");
  const auto t0 = steady::now();
  auto t = timed.try_lock_for("k", 300ms);
  const auto waited = since(t0);
  EXPECT_FALSE(t.owns_lock());
  EXPECT_EQ(t.token(), 0U);
  EXPECT_GE(waited, 290ms);
  EXPECT_LT(waited, 5s);
  EXPECT_EQ(raw_.queue_length("k"), 0) << "the timed-out waiter stayed in the queue";
  EXPECT_EQ(raw_.integer({"ZCARD", raw_redis::waiters_key("k")}), 0);

  std::atomic<bool> granted{false};
  std::jthread waiter([&] {
    auto w = next.lock("k");
    granted.store(w.owns_lock());
    std::this_thread::sleep_for(300ms);  // held while the test looks at the timed-out guard
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  g.unlock();
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 5s)) << "the next waiter was not granted";
  EXPECT_FALSE(t.owns_lock());
  waiter.join();
  // Nobody holds the key: the timed-out request was not granted behind the scenes.
  EXPECT_FALSE(raw_.locked("k"));
  EXPECT_TRUE(timed.try_lock("k").owns_lock());
}

TEST_F(RedisKeyedMutex, TryLockUntilGrantsWhenTheHolderUnlocksInTime) {
  keyed_mutex holder(opts());
  keyed_mutex waiter(opts());
  auto g = holder.lock("k");
  std::jthread unlocker([&] {
    std::this_thread::sleep_for(200ms);
    g.unlock();
  });
  auto w = waiter.try_lock_until("k", steady::now() + 10s);
  EXPECT_TRUE(w.owns_lock());
  EXPECT_EQ(w.key(), "k");
}

}  // namespace
