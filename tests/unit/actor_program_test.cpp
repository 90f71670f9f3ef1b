// What actor programs need from handoff::actor and basic_actor: handlers that take their
// own actor, messages that name the actor type handling them, deferred sends, a recursive
// fan-out that stays depth-first, and options given as a null pointer.
// GCC 12 warns (-Wextra) about members left out of a designated initializer, which is how
// actor_options is meant to be written: `actor_options{.executor = pool}`.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;

// ---------------------------------------------------------------------------------------
// Handlers that take their actor

TEST(ActorSelf, PostAskAndAsyncAskHandlersMayTakeTheActorRunningThem) {
  test_timeout limit{30s};
  handoff::actor<std::vector<int>> a;
  const void* seen = nullptr;
  a.post([&](std::vector<int>& s, handoff::actor<std::vector<int>>& self) {
    seen = &self;
    s.push_back(1);
    self.post([](std::vector<int>& t) { t.push_back(3); });  // to itself: queued behind this handler
    s.push_back(2);
  });
  EXPECT_EQ(seen, &a);
  EXPECT_EQ(a.ask([&a](std::vector<int>& s, auto& self) {
               EXPECT_EQ(&self, &a);
               return s;
             }).get(),
            (std::vector<int>{1, 2, 3}));
  std::vector<int> answer;
  [](handoff::actor<std::vector<int>>& a, std::vector<int>& out) -> handoff::test::fire_and_forget {
    out = co_await a.async_ask([&a](std::vector<int>& s, handoff::actor<std::vector<int>>& self) {
      EXPECT_EQ(&self, &a);
      return s;
    });
  }(a, answer);
  EXPECT_EQ(answer, (std::vector<int>{1, 2, 3}));
}

TEST(ActorSelf, AHandlerTakingOnlyTheStateStillWorksAndGenericLambdasGetBoth) {
  handoff::actor<int> a{0};
  a.post([](int& s) { s += 1; });
  a.post([](auto& s, auto& self) {  // both generic: invoked with the state and the actor
    static_assert(std::is_same_v<std::remove_cvref_t<decltype(self)>, handoff::actor<int>>);
    s += 10;
  });
  EXPECT_EQ(a.ask([](int& s) { return s; }).get(), 11);
}

// A counter that counts down by sending to itself: the handler needs its own actor.
struct countdown {
  std::vector<int>* seen;
  void operator()(int n, handoff::basic_actor<int, countdown>& self) {
    seen->push_back(n);
    if (n > 0) self.send(n - 1);  // queued behind this handler: no recursion
  }
};

TEST(ActorSelf, BasicActorHandlersMayTakeTheActor) {
  std::vector<int> seen;
  handoff::basic_actor<int, countdown> a{countdown{&seen}};
  a.send(3);
  EXPECT_EQ(seen, (std::vector<int>{3, 2, 1, 0}));
}

// ---------------------------------------------------------------------------------------
// Messages that name the actor type handling them (incomplete types)

// A request/reply protocol between two actors of one type: the message carries a pointer
// to the actor that should get the reply, of the very type being defined.
struct account;
struct account_msg;
using account_actor = handoff::basic_actor<account_msg, account>;
struct account_msg {
  long amount;
  account_actor* reply_to;  // nullptr: a reply, nothing to answer
};
struct account {
  long* balance;
  std::vector<long>* replies;
  void operator()(account_msg m) {
    if (m.reply_to == nullptr) return replies->push_back(m.amount);
    *balance += m.amount;
    m.reply_to->send(account_msg{*balance, nullptr});
  }
};

TEST(IncompleteTypes, AMessageMayCarryAPointerToTheBasicActorTypeThatHandlesIt) {
  long bank_balance = 0, client_balance = 0;
  std::vector<long> bank_replies, client_replies;
  account_actor bank{account{&bank_balance, &bank_replies}};
  account_actor client{account{&client_balance, &client_replies}};
  bank.send(account_msg{5, &client});
  bank.send(account_msg{7, &client});
  EXPECT_EQ(bank_balance, 12);
  EXPECT_EQ(client_replies, (std::vector<long>{5, 12}));
  EXPECT_TRUE(bank_replies.empty());
}

// Fibonacci with an actor per call: the state names the actor type of its own parent.
// Counts live actors, to show that a recursive fan-out runs depth-first.
struct fib_call {
  fib_call(handoff::actor<fib_call>* p, int k, long* r, std::atomic<long>* l, std::atomic<long>* pk)
      : parent(p), n(k), result(r), live(l), peak_live(pk) {}
  handoff::actor<fib_call>* parent;  // nullptr: the root, which stores its result
  int n;
  long* result;
  std::atomic<long>* live;
  std::atomic<long>* peak_live;
  long sum = 0;
  int pending = 0;
};

void finish(fib_call& s, handoff::actor<fib_call>& self, long value);

void start(fib_call& s, handoff::actor<fib_call>& self) {
  if (s.n < 2) return finish(s, self, s.n);
  s.pending = 2;
  for (int k : {1, 2}) {
    const long now = s.live->fetch_add(1) + 1;
    if (now > s.peak_live->load()) s.peak_live->store(now);
    auto* child = new handoff::actor<fib_call>(&self, s.n - k, s.result, s.live, s.peak_live);
    child->post(start);
  }
}

void finish(fib_call& s, handoff::actor<fib_call>& self, long value) {
  if (s.parent == nullptr) {
    *s.result = value;
    return;
  }
  s.parent->post([value](fib_call& p, handoff::actor<fib_call>& parent) {
    p.sum += value;
    if (--p.pending == 0) finish(p, parent, p.sum);
  });
  s.live->fetch_sub(1);
  delete &self;  // from its own handler: nothing is queued behind this one
}

TEST(IncompleteTypes, AnActorStateMayNameItsOwnActorTypeAndAFanOutRunsDepthFirst) {
  test_timeout limit{60s};
  constexpr int n = 20;  // 21,891 calls
  long result = 0;
  std::atomic<long> live{1}, peak{1};
  handoff::actor<fib_call> root{nullptr, n, &result, &live, &peak};
  root.post(start);
  EXPECT_EQ(result, 6765);
  EXPECT_EQ(live.load(), 1);  // every child deleted itself
  // Depth-first keeps one path of the call tree alive (both children of each call on it:
  // 2n), plus what the bounded depth-first streak lets wait; breadth-first kept 13,585.
  EXPECT_LE(peak.load(), 4 * n) << "the fan-out ran breadth-first";
}

// ---------------------------------------------------------------------------------------
// Deferred sends

TEST(Defer, AtTopLevelWithoutAnExecutorItRunsAtThisThreadsNextDrainNotBefore) {
  test_timeout limit{30s};
  handoff::actor<std::vector<std::string>> a;
  a.defer([](auto& s) { s.emplace_back("deferred"); });
  a.post([](auto& s) { s.emplace_back("posted"); });            // the actor is already ours: queued
  EXPECT_EQ(a.ask([](auto& s) { return s.size(); }).get(), 2U)  // a blocking call drains first
      << "ask() on an actor this thread owns through its queue must run that queue";
  EXPECT_EQ(a.ask([](auto& s) { return s; }).get(), (std::vector<std::string>{"deferred", "posted"}));
  EXPECT_FALSE(handoff::run_deferred());  // nothing left
}

TEST(Defer, RunDeferredRunsEverythingQueuedInOrderAndThenReportsNothing) {
  handoff::actor<int> a{0}, b{0};
  std::vector<std::string> order;
  a.defer([&](int&) { order.emplace_back("a1"); });
  b.defer([&](int&) { order.emplace_back("b"); });
  a.defer([&](int&) { order.emplace_back("a2"); });  // a is already ours: behind a1
  EXPECT_TRUE(order.empty()) << "defer() ran a handler on the calling thread";
  EXPECT_TRUE(handoff::run_deferred());
  EXPECT_EQ(order, (std::vector<std::string>{"a1", "a2", "b"}));
  EXPECT_FALSE(handoff::run_deferred());
}

TEST(Defer, TheNextSendThisThreadRunsAtTopLevelRunsTheDeferredWorkToo) {
  handoff::actor<int> a{0}, other{0};
  std::vector<std::string> order;
  a.defer([&](int&) { order.emplace_back("deferred"); });
  other.post([&](int&) { order.emplace_back("other"); });  // wins `other`, then runs the queue
  EXPECT_EQ(order, (std::vector<std::string>{"other", "deferred"}));
}

TEST(Defer, ABlockingKeyedLockAtTopLevelFirstRunsTheDeferredWork) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> locks;
  handoff::actor<int> a{0};
  auto held = locks.lock("k");
  a.defer([g = std::move(held)](int&) mutable { g.unlock(); });  // the only way "k" is released
  auto again = locks.lock("k");  // would wait for ever if the deferred message did not run first
  EXPECT_TRUE(again.owns_lock());
}

TEST(Defer, DestroyingAnActorThisThreadTookOverByDeferRunsItsMessages) {
  int ran = 0;
  {
    handoff::actor<int> a{0};
    a.defer([&](int&) { ++ran; });
    a.defer([&](int&) { ++ran; });
  }
  EXPECT_EQ(ran, 2);
}

TEST(Defer, AThreadThatEndsWithDeferredWorkRunsItAsItExits) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  std::atomic<bool> ran_on_that_thread{false};
  std::thread t([&] {
    const auto me = std::this_thread::get_id();
    a.defer([&, me](int&) { ran_on_that_thread = std::this_thread::get_id() == me; });
  });
  t.join();
  EXPECT_TRUE(ran_on_that_thread.load());
  EXPECT_EQ(a.ask([](int& s) { return s; }).get(), 0);  // released: a new sender owns it
}

TEST(Defer, ADeferFromAJobOnAPoolWorkerRunsOnThatWorkerRightAfterTheJob) {
  test_timeout limit{30s};
  handoff::thread_pool pool(1);
  handoff::actor<int> a{0};  // no executor: the worker that defers takes it over
  std::promise<std::thread::id> job_ran_on, deferred_ran_on;
  pool.execute([&] {
    job_ran_on.set_value(std::this_thread::get_id());
    a.defer([&](int&) { deferred_ran_on.set_value(std::this_thread::get_id()); });
  });
  EXPECT_EQ(deferred_ran_on.get_future().get(), job_ran_on.get_future().get());
}

TEST(Defer, FromAHandlerItRunsAfterTheWorkTheHandlerMadeRunnable) {
  handoff::actor<int> a{0}, b{0}, c{0};
  std::vector<std::string> order;
  a.post([&](int&) {
    b.defer([&](int&) { order.emplace_back("b deferred"); });
    c.post([&](int&) { order.emplace_back("c posted"); });
    order.emplace_back("a");
  });
  EXPECT_EQ(order, (std::vector<std::string>{"a", "c posted", "b deferred"}));
}

TEST(Defer, ToABusyActorTheOwnerRunsIt) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::test::owner_thread owner([&](auto hold) { a.post([hold](int&) { hold(); }); });
  std::thread::id ran_on;
  a.defer([&](int&) { ran_on = std::this_thread::get_id(); });
  owner.release();
  owner.join();
  EXPECT_EQ(ran_on, owner.id());
  EXPECT_FALSE(handoff::run_deferred());
}

TEST(Defer, WithAnExecutorTheIdleActorGoesToTheExecutorAtOnce) {
  test_timeout limit{30s};
  handoff::thread_pool pool(1);
  handoff::actor<int> a{handoff::actor_options{.executor = pool}, 0};
  std::promise<std::thread::id> ran_on;
  a.defer([&](int&) { ran_on.set_value(std::this_thread::get_id()); });
  EXPECT_FALSE(handoff::run_deferred()) << "nothing may be left on the sending thread";
  const auto id = ran_on.get_future().get();
  EXPECT_NE(id, std::this_thread::get_id());
}

TEST(Defer, BasicActorDeferQueuesWithoutRunning) {
  std::vector<int> seen;
  handoff::basic_actor<int, countdown> a{countdown{&seen}};
  a.defer(2);
  EXPECT_TRUE(seen.empty());
  EXPECT_TRUE(handoff::run_deferred());
  EXPECT_EQ(seen, (std::vector<int>{2, 1, 0}));
}

TEST(Defer, StartingManyActorsBeforeAnyRuns) {
  // "Start every actor, then let them run": each start message sees every actor created.
  constexpr int n = 50;
  std::vector<std::unique_ptr<handoff::actor<int>>> actors;
  int started = 0;
  std::vector<int> seen_started;
  for (int i = 0; i < n; ++i) {
    actors.push_back(std::make_unique<handoff::actor<int>>(0));
    actors.back()->defer([&](int&) { seen_started.push_back(started); });
    ++started;
  }
  EXPECT_TRUE(seen_started.empty());
  handoff::run_deferred();
  ASSERT_EQ(seen_started.size(), static_cast<std::size_t>(n));
  EXPECT_TRUE(std::all_of(seen_started.begin(), seen_started.end(), [](int s) { return s == n; }));
}

// ---------------------------------------------------------------------------------------
// The pending count

TEST(Pending, CountsWhatIsQueuedAndRunningAndIsZeroOnceIdle) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  EXPECT_EQ(a.pending(), 0U);
  handoff::test::owner_thread owner([&](auto hold) { a.post([hold](int&) { hold(); }); });
  for (int i = 0; i < 5; ++i) a.post([](int& s) { ++s; });
  EXPECT_EQ(a.pending(), 6U);  // the running one and five queued
  owner.release();
  owner.join();
  EXPECT_EQ(a.pending(), 0U);  // the owner released it before returning
  std::vector<int> seen;
  handoff::basic_actor<int, countdown> b{countdown{&seen}};
  b.defer(1);
  EXPECT_EQ(b.pending(), 1U);
  handoff::run_deferred();
  EXPECT_EQ(b.pending(), 0U);
}

// ---------------------------------------------------------------------------------------
// Options given as a null pointer

TEST(NullOptions, ANullOptionsPointerMeansNoOptions) {
  const std::shared_ptr<const handoff::actor_options> none;
  handoff::actor<int> a{none, 41};
  a.post([](int& s) { ++s; });
  EXPECT_EQ(a.ask([](int& s) { return s; }).get(), 42);
  a.post([](int&) { throw std::runtime_error("no hook: printed to stderr"); });  // like no options
  EXPECT_EQ(a.ask([](int& s) { return s; }).get(), 42);

  std::vector<int> seen;
  handoff::basic_actor<int, countdown> b{none, countdown{&seen}};
  b.send(1);
  EXPECT_EQ(seen, (std::vector<int>{1, 0}));
}

}  // namespace
