// handoff::actor<State>::ask_for and ask_until (actor.hpp), and the coroutine form
// handoff::async_ask_for / async_ask_until (ask_deadline.hpp): one test per point of their
// contracts (answer in time, expiry, the late answer dropped, exceptions, calls from
// inside a handler).
#include <handoff/actor.hpp>
#include <handoff/ask_deadline.hpp>
#include <handoff/ask_timeout.hpp>
#include <handoff/task.hpp>
#include <handoff/timer_service.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::ask_timeout;
using handoff::test::test_timeout;

struct account {
  int balance = 0;
  std::vector<std::string> log;
};

// Keeps an actor busy on another thread until release(): its handler waits there.
class busy_actor {
 public:
  explicit busy_actor(handoff::actor<account>& a) {
    thread_ = std::thread([&a, this] {
      a.post([this](account&) {
        started_.count_down();
        release_.get_future().wait();
      });
    });
    started_.wait();
  }
  void release() {
    if (!released_) release_.set_value();
    released_ = true;
  }
  ~busy_actor() {
    release();
    thread_.join();
  }
  busy_actor(const busy_actor&) = delete;
  busy_actor& operator=(const busy_actor&) = delete;

 private:
  std::latch started_{1};
  std::promise<void> release_;
  bool released_ = false;
  std::thread thread_;
};

TEST(AskDeadline, IdleActorAnswersInlineWithinTheDeadline) {
  test_timeout limit{30s};
  handoff::actor<account> a{account{5, {}}};
  EXPECT_EQ(a.ask_for([](account& s) { return s.balance; }, 1s), 5);
  a.ask_for([](account& s) { s.balance = 6; }, 1s);  // void
  EXPECT_EQ(a.ask_until([](account& s) { return s.balance; }, std::chrono::steady_clock::now() + 1s), 6);
  EXPECT_EQ(a.ask_until([](account& s) { return s.balance; }, std::chrono::system_clock::now() + 1s), 6);
}

TEST(AskDeadline, BusyActorAnswersWhenFreedBeforeTheDeadline) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  busy_actor busy(a);
  std::thread releaser([&] {
    std::this_thread::sleep_for(10ms);
    busy.release();
  });
  EXPECT_EQ(a.ask_for([](account& s) { return s.balance + 1; }, 20s), 1);
  releaser.join();
}

TEST(AskDeadline, ThrowsAskTimeoutWhileTheActorStaysBusy) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  busy_actor busy(a);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(a.ask_for([](account& s) { return s.balance; }, 30ms), ask_timeout);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  EXPECT_THROW(a.ask_until([](account& s) { return s.balance; }, std::chrono::steady_clock::now() - 1s), ask_timeout);
}

TEST(AskDeadline, LateAnswerRunsExactlyOnceAndIsDropped) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  auto payload = std::make_shared<int>(7);  // the late result: its owner must go with the request
  std::weak_ptr<int> watch = payload;
  {
    busy_actor busy(a);
    EXPECT_THROW(a.ask_for(
                     [p = std::move(payload)](account& s) {
                       s.log.push_back("late");
                       return p;  // a result nobody reads
                     },
                     10ms),
                 ask_timeout);
    EXPECT_THROW(a.ask_for([](account&) -> int { throw std::logic_error("late error"); }, 10ms), ask_timeout);
  }  // the busy handler returns: the late messages run now, on its thread
  const std::vector<std::string> log = a.ask([](account& s) { return s.log; }).get();
  EXPECT_EQ(log, std::vector<std::string>{"late"});
  EXPECT_TRUE(watch.expired());  // the dropped result was destroyed with the request
}

TEST(AskDeadline, RethrowsTheHandlersExceptionInTime) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  EXPECT_THROW(a.ask_for([](account&) -> int { throw std::out_of_range("in time"); }, 1s), std::out_of_range);
  EXPECT_EQ(a.ask_for([](account& s) { return s.balance; }, 1s), 0);  // the actor goes on
}

TEST(AskDeadline, ReturnsAReferenceIntoTheState) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  int& balance = a.ask_for([](account& s) -> int& { return s.balance; }, 1s);
  const int* inside = &a.ask([](account& s) -> int& { return s.balance; }).get();
  EXPECT_EQ(&balance, inside);
}

TEST(AskDeadline, MaximalDurationsWaitForEverWithoutOverflow) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  busy_actor busy(a);
  std::thread releaser([&] {
    std::this_thread::sleep_for(10ms);
    busy.release();
  });
  EXPECT_EQ(a.ask_for([](account& s) { return s.balance + 2; }, std::chrono::nanoseconds::max()), 2);
  EXPECT_EQ(a.ask_for([](account& s) { return s.balance + 3; }, std::chrono::hours::max()), 3);
  EXPECT_EQ(a.ask_until([](account& s) { return s.balance + 4; }, std::chrono::steady_clock::time_point::max()), 4);
  releaser.join();
}

TEST(AskDeadline, FromInsideAHandlerAnIdleTargetAnswersInline) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  handoff::actor<account> b{account{9, {}}};
  const int seen = a.ask([&](account&) { return b.ask_for([](account& s) { return s.balance; }, 1s); }).get();
  EXPECT_EQ(seen, 9);
}

TEST(AskDeadline, TwoHandlersWaitingOnEachOtherEndByATimeoutInsteadOfADeadlock) {
  test_timeout limit{30s};
  handoff::actor<account> a{account{1, {}}};
  handoff::actor<account> b{account{2, {}}};
  std::latch both_running{2};
  // outcome: the other's balance, or -1 for ask_timeout.
  auto wait_on = [&](handoff::actor<account>& other, std::chrono::milliseconds d, int& outcome) {
    return [&, d](account&) {
      both_running.arrive_and_wait();  // each actor is busy in this handler now
      try {
        outcome = other.ask_for([](account& s) { return s.balance; }, d);
      } catch (const ask_timeout&) {
        outcome = -1;
      }
    };
  };
  int a_saw = 0;
  int b_saw = 0;
  std::thread t1([&] { a.post(wait_on(b, 30ms, a_saw)); });
  std::thread t2([&] { b.post(wait_on(a, 20s, b_saw)); });
  t1.join();
  t2.join();
  EXPECT_EQ(a_saw, -1);  // a's handler gave up first; a then answered b's question
  EXPECT_EQ(b_saw, 1);
}

TEST(AskDeadline, FromAHandlerOfTheSameActorThrowsAsAskDoes) {
  test_timeout limit{30s};
  handoff::actor<account> a;
  std::error_code code;
  a.post([&](account&, handoff::actor<account>& self) {
    try {
      (void)self.ask_for([](account& s) { return s.balance; }, 1s);
    } catch (const std::system_error& e) {
      code = e.code();
    }
  });
  EXPECT_EQ(code, std::errc::resource_deadlock_would_occur);
}

// --- async_ask_for: the coroutine form -------------------------------------------------------

handoff::task<int> balance_within(handoff::actor<account>& a, std::chrono::milliseconds d,
                                  handoff::timer_service& timers) {
  co_return co_await handoff::async_ask_for(
      a, [](account& s) { return s.balance; }, d, timers);
}

TEST(AsyncAskDeadline, AnswersInTimeAndCancelsItsTimer) {
  test_timeout limit{30s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<account> a{account{4, {}}};
  EXPECT_EQ(handoff::sync_wait(balance_within(a, 10s, timers)), 4);
  EXPECT_EQ(timers.stats().pending, 0u);
  EXPECT_EQ(timers.stats().cancelled, 1u);
}

TEST(AsyncAskDeadline, ResumesWithAskTimeoutAtTheDeadlineAndDropsTheLateAnswer) {
  test_timeout limit{30s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<account> a;
  auto payload = std::make_shared<int>(1);
  std::weak_ptr<int> watch = payload;
  // The handler is a named local, not a temporary inside the co_await expression: GCC 12
  // destroys such a temporary's init-captures twice (async_ask too).
  auto late = [&]() -> handoff::task<std::shared_ptr<int>> {
    auto f = [p = std::move(payload)](account& s) {
      s.log.push_back("late");
      return p;
    };
    co_return co_await handoff::async_ask_for(a, std::move(f), 20ms, timers);
  };
  {
    busy_actor busy(a);
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(handoff::sync_wait(late()), ask_timeout);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 20ms);
    EXPECT_THROW(handoff::sync_wait(balance_within(a, 0ms, timers)), ask_timeout);  // already due
  }  // the late messages run now, on the busy handler's thread
  EXPECT_EQ(a.ask([](account& s) { return s.log; }).get(), std::vector<std::string>{"late"});
  EXPECT_TRUE(watch.expired());  // the dropped result went with the request's state
}

TEST(AsyncAskDeadline, AnswersWhenTheBusyActorIsFreedBeforeTheDeadline) {
  test_timeout limit{30s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<account> a{account{8, {}}};
  busy_actor busy(a);
  std::thread releaser([&] {
    std::this_thread::sleep_for(10ms);
    busy.release();
  });
  EXPECT_EQ(handoff::sync_wait(balance_within(a, 20s, timers)), 8);
  releaser.join();
}

TEST(AsyncAskDeadline, RethrowsTheHandlersExceptionAndWaitsForEverWithNoDeadline) {
  test_timeout limit{30s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<account> a;
  auto throws = [&]() -> handoff::task<int> {
    co_return co_await handoff::async_ask_until(
        a, [](account&) -> int { throw std::out_of_range("in time"); }, std::chrono::steady_clock::time_point::max(),
        timers);
  };
  EXPECT_THROW(handoff::sync_wait(throws()), std::out_of_range);
  EXPECT_EQ(timers.stats().scheduled, 0u);  // no deadline: no timer
}

// Starts at once and frees itself: a coroutine a handler can start and leave.
struct detached {
  struct promise_type {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

TEST(AsyncAskDeadline, FromInsideAHandlerAnIdleTargetAnswersAfterTheHandler) {
  test_timeout limit{30s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<account> a;
  handoff::actor<account> b{account{3, {}}};
  std::promise<std::pair<int, std::thread::id>> seen;
  auto ask_b = [&]() -> detached {
    const int v = co_await handoff::async_ask_for(
        b, [](account& s) { return s.balance; }, 10s, timers);
    seen.set_value({v, std::this_thread::get_id()});
  };
  a.post([&](account&) { ask_b(); });  // b runs after this handler, on this thread
  const auto [value, thread] = seen.get_future().get();
  EXPECT_EQ(value, 3);
  EXPECT_EQ(thread, std::this_thread::get_id());
}

}  // namespace
