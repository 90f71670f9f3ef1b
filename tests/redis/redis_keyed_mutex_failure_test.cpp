// handoff::redis::keyed_mutex against a real redis-server: a server that dies or stalls
// (errors within the documented bounds, recovery after a restart) and dead waiters and holders.
#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <future>
#include <latch>
#include <string>
#include <thread>

#include <sys/types.h>

#include "../support/redis_keyed_mutex_fixture.hpp"

namespace {

using namespace handoff::test::redis_keyed_mutex_tests;  // redis_keyed_mutex_fixture.hpp

// --- a server that dies -------------------------------------------------------------------

TEST_F(RedisKeyedMutex, AKilledServerGivesErrorsPromptlyAndARestartedOneWorksAgain) {
  keyed_mutex m(opts());
  keyed_mutex m2(opts());
  auto g = m.lock("k", lease{30s});

  // A blocked waiter in another thread, and an async one.
  std::promise<std::string> blocked;
  std::jthread waiter([&] {
    try {
      auto w = m2.lock("k");
      blocked.set_value(w.owns_lock() ? "granted" : "empty guard");
    } catch (const redis_error& e) {
      blocked.set_value(std::string("error: ") + e.what());
    }
  });
  std::promise<std::string> async;
  m2.lock_async("k", [&](handoff::redis::guard w, const std::exception_ptr& e) {
    if (e == nullptr) {
      async.set_value(w.owns_lock() ? "granted" : "empty guard");
      return;
    }
    try {
      std::rethrow_exception(e);
    } catch (const redis_error& x) {
      async.set_value(std::string("error: ") + x.what());
    } catch (...) {
      async.set_value("other exception");
    }
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 2));

  keyed_mutex m3(opts(20s));  // re-checks far later than the test's bounds

  server_.kill();
  auto t0 = steady::now();
  EXPECT_THROW(g.unlock(), redis_error);
  EXPECT_LT(since(t0), 3s);
  EXPECT_FALSE(g.owns_lock()) << "empty after a failed unlock";
  EXPECT_NO_THROW(g.unlock());

  t0 = steady::now();
  EXPECT_THROW((void)m.lock("j"), redis_error);
  EXPECT_LT(since(t0), 3s);
  t0 = steady::now();
  EXPECT_THROW((void)m.try_lock("j"), redis_error);
  EXPECT_LT(since(t0), 3s);
  t0 = steady::now();
  EXPECT_THROW((void)m.try_lock_for("j", 1s), redis_error);
  EXPECT_LT(since(t0), 4s);

  auto fb = blocked.get_future();
  ASSERT_EQ(fb.wait_for(5s), std::future_status::ready) << "a blocked lock() hangs on a dead server";
  EXPECT_EQ(fb.get().rfind("error: ", 0), 0U);
  auto fa = async.get_future();
  ASSERT_EQ(fa.wait_for(5s), std::future_status::ready) << "an async waiter hangs on a dead server";
  EXPECT_EQ(fa.get().rfind("error: ", 0), 0U);
  waiter.join();

  server_.restart();
  auto a = m.lock("k");
  EXPECT_TRUE(a.owns_lock());
  auto b = m2.try_lock("j");
  EXPECT_TRUE(b.owns_lock());
  EXPECT_FALSE(m2.try_lock("k").owns_lock());
  a.unlock();
  // Notifications work again: m3's subscriber reconnected (a waiter with a long re-check
  // is woken by the release, or by the re-check that follows the reconnection).
  auto c = m.lock("n", lease{30s});
  std::atomic<bool> granted{false};
  std::jthread w3([&] {
    auto x = m3.lock("n");
    granted.store(x.owns_lock());
  });
  ASSERT_TRUE(raw_redis(server_.port()).wait_queue_length("n", 1));
  c.unlock();
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 5s));
}

TEST_F(RedisKeyedMutex, AWatchdogHoldExpiresWhenTheServerIsGone) {
  options o = opts();
  o.watchdog_lease = 600ms;
  keyed_mutex m(o);
  auto g = m.lock("k");
  server_.kill();
  EXPECT_TRUE(eventually([&] { return g.expired(); }, 5s));
  EXPECT_FALSE(g.owns_lock());
  EXPECT_NO_THROW(g.unlock());  // expired: nothing to release
  server_.restart();
  EXPECT_TRUE(m.lock("k").owns_lock());
}

TEST_F(RedisKeyedMutex, AServerKilledWhileALargeCommandIsWrittenIsAnErrorNotTheEndOfTheProcess) {
  const std::string key(8U << 20U, 'k');  // each script call writes it four times
  for (int round = 0; round < 3; ++round) {
    std::atomic<int> errors{0};
    {
      keyed_mutex m(opts());
      std::atomic<bool> started{false};
      std::jthread locker([&] {
        for (;;) {
          try {
            started.store(true);
            auto g = m.lock(key, lease{10s});
          } catch (const redis_error&) {
            errors.fetch_add(1);
            return;
          }
        }
      });
      ASSERT_TRUE(eventually([&] { return started.load(); }));
      std::this_thread::sleep_for(std::chrono::milliseconds(5 + 10 * round));
      server_.kill();  // mid-write, often: a write to a closed socket raises SIGPIPE
    }
    EXPECT_EQ(errors.load(), 1);
    server_.restart();
  }
}

// --- a server that stalls -----------------------------------------------------------------

// A stalled server (SIGSTOP: connections stay open, nothing answers) bounds every call by
// the documented failure bound: its wait plus two command timeouts (the attempt, and the
// cancel of a queued request), plus a connect timeout when a connection must be opened.
TEST_F(RedisKeyedMutex, AStalledServerFailsEachCallWithinItsWaitPlusTwoCommandTimeouts) {
  options o = opts();
  o.command_timeout = 300ms;
  o.connect_timeout = 300ms;
  keyed_mutex m(o);
  { auto warm = m.try_lock("warm"); }  // one pooled connection open
  ::kill(server_.pid(), SIGSTOP);
  struct resume_server {
    pid_t pid;
    ~resume_server() { ::kill(pid, SIGCONT); }
  } resume{server_.pid()};
  const auto bound = [&](std::chrono::milliseconds wait) { return wait + 2 * o.command_timeout + o.connect_timeout; };
  auto t0 = steady::now();
  EXPECT_THROW((void)m.try_lock("k"), redis_error);
  const auto try_lock_took = since(t0);
  t0 = steady::now();
  EXPECT_THROW((void)m.try_lock_for("k", 100ms), redis_error);
  const auto try_lock_for_took = since(t0);
  t0 = steady::now();
  EXPECT_THROW((void)m.lock("k"), redis_error);
  const auto lock_took = since(t0);
  std::printf("stalled server: try_lock %lld ms, try_lock_for(100ms) %lld ms, lock %lld ms (command_timeout 300 ms)\n",
              static_cast<long long>(try_lock_took.count()), static_cast<long long>(try_lock_for_took.count()),
              static_cast<long long>(lock_took.count()));
  EXPECT_LE(try_lock_took, bound(0ms) + 200ms);  // + scheduling slack on a loaded machine
  EXPECT_LE(try_lock_for_took, bound(100ms) + 200ms);
  EXPECT_LE(lock_took, bound(0ms) + 200ms);  // lock() fails at its first attempt
}

TEST_F(RedisKeyedMutex, AServerThatStallsWhileACallWaitsEndsItWithinItsWaitPlusTwoCommandTimeouts) {
  options o = opts();
  o.command_timeout = 300ms;
  keyed_mutex holder(o);
  keyed_mutex m(o);
  auto held = holder.lock("k");
  std::atomic<long long> took_ms{-1};
  std::atomic<bool> threw{false};
  std::jthread waiter([&] {
    const auto t0 = steady::now();
    try {
      (void)m.try_lock_for("k", 400ms);
    } catch (const redis_error&) {
      threw.store(true);
    }
    took_ms.store(since(t0).count());
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  ::kill(server_.pid(), SIGSTOP);
  waiter.join();
  ::kill(server_.pid(), SIGCONT);
  std::printf("stalled while queued: try_lock_for(400ms) ended after %lld ms\n", took_ms.load());
  EXPECT_TRUE(threw.load());
  EXPECT_LE(took_ms.load(), 400 + 2 * 300 + 200);
}

TEST_F(RedisKeyedMutex, AnErrorAboutAHugeKeyQuotesOnlyTheStartOfIt) {
  const std::string key(2U << 20U, 'k');
  options o = opts();
  o.command_timeout = 200ms;
  keyed_mutex m(o);
  { auto warm = m.try_lock("warm"); }  // a pooled connection: the failure is the command's
  ::kill(server_.pid(), SIGSTOP);
  struct resume_server {
    pid_t pid;
    ~resume_server() { ::kill(pid, SIGCONT); }
  } resume{server_.pid()};
  try {
    (void)m.try_lock(key);
    ADD_FAILURE() << "no error from a stalled server";
  } catch (const redis_error& e) {
    EXPECT_LT(std::string(e.what()).size(), 400U);
    EXPECT_NE(std::string(e.what()).find("2097152 bytes"), std::string::npos) << e.what();
  }
}

// --- dead waiters -------------------------------------------------------------------------

TEST_F(RedisKeyedMutex, ADeadWaiterIsDroppedAfterItsHeartbeatAndTheNextWaiterIsGranted) {
  keyed_mutex m(opts());
  keyed_mutex live(opts(200ms));
  auto g = m.lock("k", lease{30s});
  helper_process dead({port(), "200", "k", "wait"});  // heartbeat 600 ms
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::atomic<bool> granted{false};
  std::jthread waiter([&] {
    auto w = live.lock("k");
    granted.store(w.owns_lock());
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 2));
  dead.kill();
  g.unlock();  // notifies the dead waiter, first in line
  EXPECT_TRUE(eventually([&] { return granted.load(); }, 6s)) << "the live waiter waits behind a dead one";
  waiter.join();
  EXPECT_EQ(raw_.queue_length("k"), 0);
  EXPECT_EQ(raw_.integer({"EXISTS", raw_redis::waiters_key("k")}), 0);
}

TEST_F(RedisKeyedMutex, TryLockSucceedsOnceTheOnlyWaiterIsDeadAndItsHeartbeatPassed) {
  keyed_mutex m(opts());
  auto g = m.lock("k", lease{30s});
  helper_process dead({port(), "500", "k", "wait"});  // heartbeat 1.5 s
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  dead.kill();
  g.unlock();
  EXPECT_FALSE(m.try_lock("k").owns_lock()) << "a waiter within its heartbeat keeps its place";
  handoff::redis::guard t;
  EXPECT_TRUE(eventually(
      [&] {
        t = m.try_lock("k");
        return t.owns_lock();
      },
      8s));
  EXPECT_EQ(raw_.queue_length("k"), 0);
}

TEST_F(RedisKeyedMutex, ADeadHoldersWatchdogLeaseFreesTheKey) {
  keyed_mutex m(opts());
  // The helper holds the key with its 10 s watchdog lease: shorten it, then kill it.
  helper_process holder({port(), "200", "k", "wait"});
  ASSERT_TRUE(eventually([&] { return raw_.locked("k"); }));
  holder.kill();
  raw_.command({"PEXPIRE", raw_redis::lock_key("k"), "500"});
  auto t0 = steady::now();
  auto g = m.try_lock_for("k", 10s);
  EXPECT_TRUE(g.owns_lock());
  EXPECT_LT(since(t0), 5s);
}

TEST_F(RedisKeyedMutex, ABusyCallbackCostsNoQueuedWaiterOfItsClientItsPlace) {
  keyed_mutex holder(opts());
  keyed_mutex a(opts());  // heartbeats every 200 ms: a waiter 600 ms silent counts as dead
  keyed_mutex c(opts());
  auto held = holder.lock("k");
  std::atomic<int> next{0};
  std::atomic<int> a_turn{-1};
  std::latch a_done{1};
  a.lock_async("k", [&](handoff::redis::guard g, std::exception_ptr) {
    if (g.owns_lock()) a_turn.store(next.fetch_add(1));
    a_done.count_down();
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 1));
  std::latch busy_started{1};
  a.lock_async("busy", [&](handoff::redis::guard, std::exception_ptr) {
    busy_started.count_down();
    std::this_thread::sleep_for(1500ms);  // a slow callback of the same client
  });
  busy_started.wait();
  std::atomic<int> c_turn{-1};
  std::jthread second([&] {
    auto g = c.try_lock_for("k", 20s);
    if (g.owns_lock()) c_turn.store(next.fetch_add(1));
  });
  ASSERT_TRUE(raw_.wait_queue_length("k", 2));
  std::this_thread::sleep_for(900ms);  // past the heartbeat of a waiter whose client is silent
  held.unlock();
  a_done.wait();
  second.join();
  EXPECT_EQ(a_turn.load(), 0) << "the first waiter lost its place while its client ran a slow callback";
  EXPECT_EQ(c_turn.load(), 1);
}

}  // namespace
