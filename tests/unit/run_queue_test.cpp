// Where code runs: one test per row of the table in docs/runtime.md. Actors, async_ask
// coroutines and the keyed mutex's coroutine and callback waiters share one per-thread run
// queue: what becomes runnable while a handler, a coroutine or a callback runs on a thread
// runs after it returns, depth-first (before older work, in the order it became
// runnable), in constant stack.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "../support/keyed_mutex_support.hpp"
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::fire_and_forget;
using handoff::test::test_timeout;

TEST(WhereCodeRuns, ASendToAnIdleActorRunsOnTheSendingThreadBeforePostReturns) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  std::thread::id ran_on;
  a.post([&](int& s) {
    ran_on = std::this_thread::get_id();
    s = 1;
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(a.ask([](int& s) { return s; }).get(), 1);
}

TEST(WhereCodeRuns, ASendToABusyActorRunsOnTheOwnerThreadAndTheSenderReturnsAtOnce) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  // Busy in a handler on another thread until release(): sends meanwhile queue behind it.
  handoff::test::owner_thread owner([&](auto hold) { a.post([hold](int&) { hold(); }); });
  std::atomic<bool> ran{false};
  std::thread::id ran_on;
  a.post([&](int&) {
    ran_on = std::this_thread::get_id();
    ran.store(true);
  });
  EXPECT_FALSE(ran.load()) << "the sender ran a message of a busy actor";
  owner.release();
  owner.join();
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(ran_on, owner.id());
}

TEST(WhereCodeRuns, ASendFromAHandlerToAnIdleActorRunsOnTheSameThreadAfterTheHandlerReturns) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  std::vector<std::string> order;
  std::thread::id b_ran_on;
  a.post([&](int&) {
    b.post([&](int&) {
      order.emplace_back("b");
      b_ran_on = std::this_thread::get_id();
    });
    order.emplace_back("a returns");
  });
  ASSERT_EQ(order, (std::vector<std::string>{"a returns", "b"}));
  EXPECT_EQ(b_ran_on, std::this_thread::get_id());
}

TEST(WhereCodeRuns, RunnableWorkRunsInTheOrderItBecameRunnableAcrossActorsAndKeyedWaiters) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  handoff::actor<int> c{0};
  handoff::keyed_mutex<> locks;
  auto held = locks.lock("k");
  std::vector<std::string> order;
  locks.lock_async("k", [&](handoff::key_guard) { order.emplace_back("callback"); });
  a.post([&, g = std::move(held)](int&) mutable {
    b.post([&](int&) { order.emplace_back("b"); });
    g.unlock();  // grants the callback: queued behind b
    c.post([&](int&) { order.emplace_back("c"); });
    order.emplace_back("a");
  });
  EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "callback", "c"}));
  EXPECT_EQ(locks.size(), 0U);
}

TEST(WhereCodeRuns, AnAsyncAskCoroutineResumesOnTheAnsweringThreadAfterItsDrain) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  // Busy in a handler on another thread until release(): sends meanwhile queue behind it.
  handoff::test::owner_thread owner([&](auto hold) { a.post([hold](int&) { hold(); }); });
  struct observed {
    std::atomic<bool> later_message_ran{false};
    std::atomic<bool> resumed_after_drain{false};
    std::atomic<bool> resumed{false};
    std::thread::id resumed_on;
  } o;
  // A coroutine lambda without captures: its parameters live in the frame.
  [](handoff::actor<int>& a, observed& o) -> fire_and_forget {
    const int v = co_await a.async_ask([](int& s) { return s + 5; });
    o.resumed_after_drain.store(o.later_message_ran.load());  // queued behind the answer
    o.resumed_on = std::this_thread::get_id();
    o.resumed.store(v == 5);
  }(a, o);
  a.post([&](int&) { o.later_message_ran.store(true); });
  owner.release();
  owner.join();
  EXPECT_TRUE(o.resumed.load());
  EXPECT_EQ(o.resumed_on, owner.id());
  EXPECT_TRUE(o.resumed_after_drain.load()) << "resumed before the owner finished draining";
}

// The two compositions: a keyed waiter granted inside an actor's handler runs after the
// handler returns and the actor is released, so it may ask that same actor.
TEST(WhereCodeRuns, AKeyedCoroutineGrantedInsideAHandlerResumesAfterItAndMayAskThatActor) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> locks;
  handoff::actor<int> room{0};
  auto held = locks.lock("k");
  struct observed {
    std::atomic<bool> in_handler{false};
    std::atomic<bool> resumed_in_handler{true};
    std::atomic<int> asked{-1};
    std::atomic<bool> threw{false};
  } o;
  [](handoff::keyed_mutex<>& locks, handoff::actor<int>& room, observed& o) -> fire_and_forget {
    auto g = co_await locks.async_lock("k");
    o.resumed_in_handler.store(o.in_handler.load());
    try {
      o.asked.store(room.ask([](int& s) { return s; }).get());
    } catch (...) {
      o.threw.store(true);
    }
  }(locks, room, o);
  room.post([&, g = std::move(held)](int& s) mutable {
    o.in_handler.store(true);
    g.unlock();
    s = 7;
    o.in_handler.store(false);
  });
  EXPECT_FALSE(o.resumed_in_handler.load());
  EXPECT_FALSE(o.threw.load()) << "ask() from the resumed coroutine threw";
  EXPECT_EQ(o.asked.load(), 7);
  EXPECT_EQ(locks.size(), 0U);
}

TEST(WhereCodeRuns, ALockAsyncCallbackGrantedInsideAHandlerRunsAfterItAndMayAskThatActor) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> locks;
  handoff::actor<int> room{0};
  auto held = locks.lock("k");
  std::atomic<bool> in_handler{false};
  std::atomic<bool> ran_in_handler{true};
  std::atomic<int> asked{-1};
  locks.lock_async("k", [&](handoff::key_guard g) {
    ran_in_handler.store(in_handler.load());
    EXPECT_TRUE(g.owns_lock());
    asked.store(room.ask([](int& s) { return s; }).get());
  });
  room.post([&, g = std::move(held)](int& s) mutable {
    in_handler.store(true);
    g.unlock();
    s = 9;
    in_handler.store(false);
  });
  EXPECT_FALSE(ran_in_handler.load());
  EXPECT_EQ(asked.load(), 9);
  EXPECT_EQ(locks.size(), 0U);
}

TEST(WhereCodeRuns, AKeyedWaiterGrantedByAnUnlockAtTopLevelRunsInsideThatUnlock) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> locks;
  auto held = locks.lock("k");
  std::thread::id ran_on;
  bool ran = false;
  locks.lock_async("k", [&](handoff::key_guard g) {
    ran = g.owns_lock();
    ran_on = std::this_thread::get_id();
  });
  EXPECT_FALSE(ran);
  held.unlock();
  EXPECT_TRUE(ran) << "the callback did not run before unlock() returned";
  EXPECT_EQ(ran_on, std::this_thread::get_id());
}

TEST(WhereCodeRuns, AChainOfGrantedCallbacksRunsInConstantStack) {
  test_timeout limit{60s};
  handoff::keyed_mutex<int> locks;
  constexpr int chain = 200'000;  // nested on one stack, this would overflow it
  auto first = locks.lock(0);
  int granted = 0;
  for (int i = 0; i < chain; ++i) {
    locks.lock_async(0, [&](handoff::key_guard g) {
      if (g.owns_lock()) ++granted;
    });  // each releases at its end, granting the next from inside this callback
  }
  first.unlock();
  EXPECT_EQ(granted, chain);
  EXPECT_EQ(locks.size(), 0U);
}

TEST(WhereCodeRuns, ABlockedLockWakesOnItsOwnThread) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> locks;
  auto held = locks.lock("k");
  std::atomic<bool> got{false};
  std::thread::id waiter_id;
  std::thread::id woke_on;
  {
    handoff::test::blocking_call waiter([&] {
      waiter_id = std::this_thread::get_id();
      auto g = locks.lock("k");
      woke_on = std::this_thread::get_id();
      got.store(g.owns_lock());
    });
    ASSERT_TRUE(waiter.wait_until_blocked());
    held.unlock();
  }
  EXPECT_TRUE(got.load());
  EXPECT_EQ(woke_on, waiter_id);
}

// The same for a blocking keyed lock, which also joins the key's queue: the queue runs
// before that, so queued work that locks the same key is not stuck behind this thread.
TEST(WhereCodeRuns, AHandlerAboutToBlockOnAKeyedLockFirstRunsItsQueueThenQueuesForTheKey) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> locks;
  auto held = locks.lock("k");
  handoff::actor<int> a{0};
  handoff::actor<int> j{0};
  std::vector<char> order;  // written by the blocked thread only, read after it ends
  {
    handoff::test::blocking_call handler([&] {
      a.post([&](int&) {
        j.post([&](int&) {  // J idle: this thread owns it through its queue
          auto g = locks.lock("k");
          order.push_back('j');
        });
        auto g = locks.lock("k");
        order.push_back('a');
      });
    });
    ASSERT_TRUE(handler.wait_until_blocked());
    held.unlock();
  }
  EXPECT_EQ(order, (std::vector<char>{'j', 'a'}));
  EXPECT_EQ(locks.size(), 0U);
}

TEST(WhereCodeRuns, AnActorWhoseBudgetIsSpentContinuesOnItsExecutor) {
  test_timeout limit{30s};
  handoff::thread_pool pool(1);
  handoff::actor<int> a{handoff::actor_options{.executor = pool, .max_messages = 1, .max_time = {}, .on_error = {}}, 0};
  std::promise<std::thread::id> second_ran_on;
  // Busy in a handler on another thread until release(): sends meanwhile queue behind it.
  handoff::test::owner_thread owner([&](auto hold) { a.post([hold](int&) { hold(); }); });
  a.post([&](int&) { second_ran_on.set_value(std::this_thread::get_id()); });
  owner.release();
  owner.join();
  const std::thread::id ran_on = second_ran_on.get_future().get();
  EXPECT_NE(ran_on, owner.id()) << "the owner kept draining past its budget";
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

// A handler of A posts to an idle actor J: this thread now owns J only through its run
// queue. If it then blocked on K.ask() while K's handler, on another thread, waits on
// J.ask(), nothing could finish: the thread runs J first, before blocking.
TEST(WhereCodeRuns, AHandlerAboutToBlockOnAskFirstRunsTheActorsItOwnsThroughItsQueue) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::actor<int> j{0};
  handoff::actor<int> k{0};
  std::latch k_running{1};
  std::latch j_owned{1};
  std::atomic<int> k_saw{-1};
  std::jthread other([&] {
    k.post([&](int&) {
      k_running.count_down();
      j_owned.wait();
      k_saw.store(j.ask([](int& s) { return s; }).get());  // J is owned by the first thread
    });
  });
  k_running.wait();
  int answer = 0;
  a.post([&](int&) {
    j.post([](int& s) { s = 42; });  // J idle: this thread owns it through its queue
    j_owned.count_down();
    answer = k.ask([](int&) { return 1; }).get();  // K is busy on the other thread
  });
  other.join();
  EXPECT_EQ(answer, 1);
  EXPECT_EQ(k_saw.load(), 42);
}

TEST(WhereCodeRuns, DestroyingAnActorOwnedThroughTheQueueRunsItsMessagesFirst) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  int ran = 0;
  a.post([&](int&) {
    auto j = std::make_unique<handoff::actor<int>>(0);
    j->post([&](int&) { ++ran; });  // queued on this thread, not running
    j.reset();                      // must run it here, not leave it stranded
    EXPECT_EQ(ran, 1);
  });
  EXPECT_EQ(ran, 1);
}

// What a drain makes runnable runs before work queued earlier: a tree of sends is walked
// depth-first, as calls would be, and each handler's sends run in the order it made them.
TEST(WhereCodeRuns, WorkMadeRunnableByTheCurrentWorkRunsBeforeOlderQueuedWork) {
  test_timeout limit{30s};
  handoff::actor<int> root{0}, a{0}, b{0}, a1{0}, a2{0};
  std::vector<std::string> order;
  auto record = [&](const char* name) { return [&order, name](int&) { order.emplace_back(name); }; };
  root.post([&](int&) {
    a.post([&](int&) {
      a1.post(record("a1"));
      a2.post(record("a2"));
      order.emplace_back("a");
    });
    b.post(record("b"));
    order.emplace_back("root");
  });
  EXPECT_EQ(order, (std::vector<std::string>{"root", "a", "a1", "a2", "b"}));
}

// Two actors that keep winning each other stay at the front of the queue; after a bounded
// streak the rest gets a turn, so a conversation that never ends starves nothing.
TEST(WhereCodeRuns, AConversationThatKeepsRequeueingItselfLetsOlderWorkRunWithinABoundedStreak) {
  test_timeout limit{30s};
  struct side {
    handoff::actor<side>* peer = nullptr;
    int* rounds = nullptr;
    const bool* stop = nullptr;
  };
  int rounds = 0;
  bool stop = false;
  handoff::actor<side> ping, pong;
  ping.post([&](side& s) { s = side{&pong, &rounds, &stop}; });
  pong.post([&](side& s) { s = side{&ping, &rounds, &stop}; });
  auto volley = [](side& s) {
    auto bounce = [](side& t, auto& self_fn) -> void {
      if (*t.stop || ++*t.rounds > 100000) return;
      t.peer->post([self_fn](side& u) { self_fn(u, self_fn); });
    };
    bounce(s, bounce);
  };
  int rounds_when_other_ran = -1;
  handoff::actor<int> starter{0}, other{0};
  starter.post([&](int&) {
    ping.post(volley);  // starts the conversation: ping and pong win each other forever
    other.post([&](int&) {
      rounds_when_other_ran = rounds;
      stop = true;
    });
  });
  EXPECT_GE(rounds_when_other_ran, 1) << "the conversation never started first";
  EXPECT_LE(rounds_when_other_ran, 200) << "older work waited behind the conversation";
}

}  // namespace
