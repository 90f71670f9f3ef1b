// handoff::task<T> and handoff::sync_wait: one test per point of the contract in task.hpp,
// and tasks that await async_ask and async_lock.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/task.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::sync_wait;
using handoff::task;
using handoff::test::test_timeout;

task<int> forty_two() { co_return 42; }
task<> nothing(bool& ran) {
  ran = true;
  co_return;
}
task<int> fails() {
  throw std::runtime_error("boom");
  co_return 0;
}
task<std::unique_ptr<int>> move_only() { co_return std::make_unique<int>(7); }
task<int&> reference_to(int& x) { co_return x; }

TEST(Task, ReturnsItsValueThroughSyncWait) {
  test_timeout limit{30s};
  EXPECT_EQ(sync_wait(forty_two()), 42);
  EXPECT_EQ(*sync_wait(move_only()), 7);
}

TEST(Task, VoidTaskRunsItsBody) {
  test_timeout limit{30s};
  bool ran = false;
  sync_wait(nothing(ran));
  EXPECT_TRUE(ran);
}

TEST(Task, IsLazyAndRunsNothingUntilAwaited) {
  test_timeout limit{30s};
  bool ran = false;
  task<> t = nothing(ran);
  EXPECT_TRUE(t.valid());
  EXPECT_FALSE(t.done());
  EXPECT_FALSE(ran);
  sync_wait(std::move(t));
  EXPECT_TRUE(ran);
}

TEST(Task, RethrowsTheExceptionItsBodyThrew) {
  test_timeout limit{30s};
  EXPECT_THROW(sync_wait(fails()), std::runtime_error);
}

TEST(Task, ReturnsAReferenceWhenTIsAReference) {
  test_timeout limit{30s};
  int x = 1;
  int& r = sync_wait(reference_to(x));
  EXPECT_EQ(&r, &x);
}

task<int> sum_of_nested(int depth) {
  if (depth == 0) co_return 0;
  co_return 1 + co_await sum_of_nested(depth - 1);
}
task<std::string> catches_nested() {
  try {
    co_await fails();
  } catch (const std::runtime_error& e) {
    co_return e.what();
  }
  co_return "not thrown";
}
task<int> awaits_an_lvalue_twice_through_the_result() {
  task<int> t = forty_two();
  int& first = co_await t;  // the result stays in t
  first += 1;
  co_return co_await t;  // awaiting a finished task returns at once
}

TEST(Task, NestedTasksReturnValuesAndPropagateExceptions) {
  test_timeout limit{30s};
  EXPECT_EQ(sync_wait(sum_of_nested(10)), 10);
  EXPECT_EQ(sync_wait(catches_nested()), "boom");
  EXPECT_EQ(sync_wait(awaits_an_lvalue_twice_through_the_result()), 43);
}

// Symmetric transfer runs in constant stack only where the compiler makes the resumption
// a tail call: optimized builds. GCC at -O0 or with a sanitizer does not, and 100,000
// frames would overflow the stack (or ThreadSanitizer's 65,536-frame stack depot) there.
#if defined(__OPTIMIZE__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
constexpr int deep_chain = 100'000;
#else
constexpr int deep_chain = 1'000;
#endif

TEST(Task, DeepChainOfSynchronousTasksDoesNotGrowTheStack) {
  test_timeout limit{60s};
  EXPECT_EQ(sync_wait(sum_of_nested(deep_chain)), deep_chain);
}

struct counted {
  int* destroyed;
  explicit counted(int* d) : destroyed(d) {}
  counted(const counted&) = delete;
  counted& operator=(const counted&) = delete;
  ~counted() { ++*destroyed; }
};
task<int> holds_an_argument(std::shared_ptr<counted> c) { co_return *c->destroyed; }

TEST(Task, DestroyingATaskThatNeverRanFreesItsFrame) {
  test_timeout limit{30s};
  int destroyed = 0;
  {
    task<int> t = holds_an_argument(std::make_shared<counted>(&destroyed));
    EXPECT_EQ(destroyed, 0);  // the frame keeps its parameter
  }
  EXPECT_EQ(destroyed, 1);  // gone with the task, body never run
  task<int> a = holds_an_argument(std::make_shared<counted>(&destroyed));
  task<int> b = std::move(a);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): a moved-from task is empty
  b = holds_an_argument(std::make_shared<counted>(&destroyed));  // frees b's first frame
  EXPECT_EQ(destroyed, 2);
  EXPECT_EQ(sync_wait(std::move(b)), 2);
}

// --- with async_ask and async_lock ------------------------------------------------------

struct account {
  int balance = 0;
};

task<int> deposit_then_read(handoff::actor<account>& a, int n) {
  co_await a.async_ask([n](account& s) { s.balance += n; });
  co_return co_await a.async_ask([](account& s) { return s.balance; });
}

TEST(Task, AwaitsAsyncAskOnAnIdleActor) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  EXPECT_EQ(sync_wait(deposit_then_read(a, 5)), 5);
}

TEST(Task, AwaitsAsyncAskOnABusyActorAndIsResumedByItsOwner) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  std::promise<void> release;
  std::promise<void> started;
  std::thread owner([&] {
    a.post([&](account&) {
      started.set_value();
      release.get_future().wait();
    });
  });
  started.get_future().wait();  // the owner is inside a handler: a is busy
  std::thread releaser([&] {
    std::this_thread::sleep_for(10ms);
    release.set_value();
  });
  EXPECT_EQ(sync_wait(deposit_then_read(a, 3)), 3);
  owner.join();
  releaser.join();
}

task<int> async_ask_throws(handoff::actor<account>& a) {
  co_return co_await a.async_ask([](account&) -> int { throw std::logic_error("handler"); });
}

TEST(Task, RethrowsWhatTheAskedHandlerThrew) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  EXPECT_THROW(sync_wait(async_ask_throws(a)), std::logic_error);
}

task<std::uint64_t> locked_increment(handoff::keyed_mutex<>& m, std::string key, int& counter) {
  auto g = co_await m.async_lock(std::move(key));
  ++counter;
  co_return g.token();
}

TEST(Task, AwaitsAsyncLockAndIsResumedByTheUnlockingThread) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> m;
  int counter = 0;
  EXPECT_NE(sync_wait(locked_increment(m, "k", counter)), 0u);  // free: no suspension
  auto held = m.lock("k");
  std::thread unlocker([&] {
    std::this_thread::sleep_for(10ms);
    held.unlock();
  });
  EXPECT_NE(sync_wait(locked_increment(m, "k", counter)), 0u);  // resumed inside the unlock
  unlocker.join();
  EXPECT_EQ(counter, 2);
  EXPECT_EQ(m.size(), 0u);
}

}  // namespace
