// The hand-over (detail/ownership.hpp): an owner without an executor that has spent its
// budget offers the drain; the next sender at top level takes it over and the old owner
// returns; with nobody arriving, or the claimant withdrawing past its bound, the owner
// goes on; sends from inside a handler or other work the library runs never take over.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "../support/core_access.hpp"
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"
#include "handoff/actor.hpp"
#include "handoff/actor_options.hpp"
#include "handoff/basic_actor.hpp"
#include "handoff/keyed_mutex.hpp"
#include "handoff/task.hpp"
#include "handoff/testing.hpp"
#include "handoff/timer_service.hpp"

namespace {

using namespace std::chrono_literals;
using access = handoff::detail::actor_core_access;
using handoff::actor_options;
using handoff::test::eventually;
using handoff::test::test_timeout;

// A gate a handler waits at until the test opens it.
struct gate {
  std::atomic<bool> open{false};
  std::atomic<bool> reached{false};
  void wait() {
    reached.store(true);
    ASSERT_TRUE(eventually([&] { return open.load(); }));
  }
};

// Tests that hold the old owner at a gate while a successor waits: the successor must not
// withdraw however slow the test thread is to open the gate.
struct patient_successors {
  std::int64_t before = handoff::detail::successor_wait_ns.exchange(std::int64_t{60'000'000'000});
  ~patient_successors() { handoff::detail::successor_wait_ns.store(before); }
};

struct run_log {
  std::mutex mu;
  std::vector<std::pair<int, std::thread::id>> runs;  // (message, thread that ran it)
  void add(int m) {
    const std::lock_guard g(mu);
    runs.emplace_back(m, std::this_thread::get_id());
  }
  std::thread::id ran_on(int m) {
    const std::lock_guard g(mu);
    for (auto& [k, id] : runs)
      if (k == m) return id;
    return {};
  }
};

// Owner O runs m0 inline (held at g0), m1, m2 and 20 fillers queue behind it; with
// max_messages = 2, O offers after m1 and holds m2 at g2. Returns once O is inside m2
// with the offer out. (An offering owner looks for a successor every 16 messages: the
// fillers let it find one before it reaches a later message.)
struct offered_actor {
  handoff::actor<int> a{actor_options{.max_messages = 2}, 0};
  run_log runs;
  gate g0, g2;
  std::thread owner;
  std::atomic<bool> owner_returned{false};

  void start() {
    owner = std::thread([&] {
      a.post([&](int&) {
        runs.add(0);
        g0.wait();
      });
      owner_returned.store(true);
    });
    ASSERT_TRUE(eventually([&] { return g0.reached.load(); }));
    a.post([&](int&) { runs.add(1); });
    a.post([&](int&) {
      runs.add(2);
      g2.wait();
    });
    for (int i = 0; i < 20; ++i) a.post([&, i](int&) { runs.add(100 + i); });
    g0.open.store(true);
    ASSERT_TRUE(eventually([&] { return g2.reached.load(); }));
    ASSERT_TRUE(access::offered(access::base(a)));
  }
  ~offered_actor() {
    g0.open.store(true);
    g2.open.store(true);
    if (owner.joinable()) owner.join();
  }
};

TEST(ActorHandOver, AnOwnerPastItsBudgetHandsTheDrainToTheNextSender) {
  const test_timeout limit(60s);
  const patient_successors patient;
  offered_actor t;
  t.start();
  std::atomic<bool> successor_returned{false};
  std::thread successor([&] {
    t.a.post([&](int&) { t.runs.add(3); });
    successor_returned.store(true);
  });
  // The successor has claimed the drain and waits for m2's handler to return.
  ASSERT_TRUE(eventually([&] { return access::taken(access::base(t.a)); }));
  EXPECT_FALSE(successor_returned.load());
  const std::thread::id successor_id = successor.get_id();
  t.g2.open.store(true);
  ASSERT_TRUE(eventually([&] { return t.owner_returned.load() && successor_returned.load(); }));
  successor.join();
  EXPECT_EQ(t.runs.ran_on(3), successor_id) << "the old owner ran the successor's message";
  EXPECT_EQ(access::word(access::base(t.a)), 0u);
}

// A budget spent inside a batch: the owner runs the batch's messages up to the offer's next
// check, then hands the actor over; the successor runs the rest of the batch, in order,
// before its own message.
TEST(ActorHandOver, AnOwnerThatSpendsItsBudgetInsideABatchHandsTheRestOfItToTheSuccessor) {
  const test_timeout limit(60s);
  const patient_successors patient;
  handoff::actor<int> a{actor_options{.max_messages = 2}, 0};
  run_log runs;
  gate g0, g2;
  std::thread owner, successor;
  struct on_exit {  // a failed assertion still lets the threads finish
    gate& g0;
    gate& g2;
    std::thread& owner;
    std::thread& successor;
    ~on_exit() {
      g0.open.store(true);
      g2.open.store(true);
      if (owner.joinable()) owner.join();
      if (successor.joinable()) successor.join();
    }
  } const cleanup{g0, g2, owner, successor};
  owner = std::thread([&] {
    a.post([&](int&) {
      runs.add(0);
      g0.wait();
    });
  });
  ASSERT_TRUE(eventually([&] { return g0.reached.load(); }));
  std::vector<std::function<void(int&)>> batch;  // 101 .. 140; 102 holds the owner
  for (int i = 101; i <= 140; ++i) {
    batch.emplace_back([&runs, &g2, i](int&) {
      runs.add(i);
      if (i == 102) g2.wait();
    });
  }
  a.post_all(batch);
  g0.open.store(true);  // the owner spends its budget on 0 and 101, offers, then holds in 102
  ASSERT_TRUE(eventually([&] { return g2.reached.load(); }));
  ASSERT_TRUE(access::offered(access::base(a)));
  successor = std::thread([&] { a.post([&](int&) { runs.add(200); }); });
  ASSERT_TRUE(eventually([&] { return access::taken(access::base(a)); }));
  const std::thread::id owner_id = owner.get_id();
  g2.open.store(true);
  owner.join();
  successor.join();
  const std::lock_guard g(runs.mu);
  ASSERT_EQ(runs.runs.size(), 42u);
  for (std::size_t i = 1; i <= 40; ++i) EXPECT_EQ(runs.runs[i].first, 100 + static_cast<int>(i)) << "at " << i;
  EXPECT_EQ(runs.runs.back().first, 200);
  // The offer's check comes after 16 more messages: 101 .. 117 ran on the old owner.
  for (std::size_t i = 0; i < runs.runs.size(); ++i) {
    const bool old_owner = i <= 17;
    EXPECT_EQ(runs.runs[i].second == owner_id, old_owner) << "message " << runs.runs[i].first;
  }
  EXPECT_EQ(access::word(access::base(a)), 0u);
}

// A sender that holds a lock the old owner's handler waits for: it claims the drain, stops
// waiting for the hand-over past its bound and returns, its message queued; the owner then
// gets the lock and runs everything. A claimant that waited for ever would deadlock here.
TEST(ActorHandOver, AClaimantHoldingALockTheOwnersHandlerNeedsWithdraws) {
  const test_timeout limit(20s);
  handoff::actor<int> a{actor_options{.max_messages = 1}, 0};
  run_log runs;
  gate g0;
  std::mutex held;
  std::atomic<bool> waiting_for_lock{false};
  std::thread owner([&] {
    a.post([&](int&) {
      runs.add(0);
      g0.wait();
    });
  });
  ASSERT_TRUE(eventually([&] { return g0.reached.load(); }));
  a.post([&](int&) {
    waiting_for_lock.store(true);
    const std::lock_guard g(held);
    runs.add(1);
  });
  {
    const std::lock_guard g(held);
    g0.open.store(true);  // spent after m0: the owner offers, then waits for `held` in m1
    ASSERT_TRUE(eventually([&] { return waiting_for_lock.load(); }));
    EXPECT_TRUE(access::offered(access::base(a)));
    a.post([&](int&) { runs.add(2); });  // claims, withdraws, returns
    EXPECT_FALSE(access::taken(access::base(a)));
    EXPECT_TRUE(access::offered(access::base(a))) << "the offer outlives a withdrawn claim";
  }
  const std::thread::id owner_id = owner.get_id();
  owner.join();
  EXPECT_EQ(runs.ran_on(2), owner_id);
  EXPECT_EQ(access::word(access::base(a)), 0u);
}

TEST(ActorHandOver, WithNoSenderArrivingTheOwnerGoesOn) {
  const test_timeout limit(60s);
  handoff::actor<int> a{actor_options{.max_messages = 1}, 0};
  a.post([&a](int&) {
    for (int i = 0; i < 100; ++i) a.post([](int& n) { ++n; });  // nested: queued, never a successor
  });
  // post() returned: nobody could take over, so this thread ran the whole backlog.
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(access::word(access::base(a)), 0u) << "the offer outlived the drain";
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 100);
}

// `context` sends `message` to `a` from some work the library runs, on a thread of its own:
// the send returns while the old owner still holds the actor, and the old owner runs it.
template <class Context>
void expect_no_take_over(Context context) {
  const test_timeout limit(60s);
  const patient_successors patient;  // a claim, if any, would hold on until the gate opens
  offered_actor t;
  t.start();
  std::atomic<bool> sent{false};
  std::thread sender([&] {
    context(
        t.a, [&](int&) { t.runs.add(3); }, sent);
  });
  ASSERT_TRUE(eventually([&] { return sent.load(); }));
  EXPECT_FALSE(access::taken(access::base(t.a)));
  const std::thread::id owner_id = t.owner.get_id();
  t.g2.open.store(true);
  sender.join();
  t.owner.join();
  EXPECT_EQ(t.runs.ran_on(3), owner_id) << "the old owner should have gone on";
  EXPECT_EQ(access::word(access::base(t.a)), 0u);
}

TEST(ActorHandOver, ASendFromInsideAHandlerNeverTakesOver) {
  expect_no_take_over([](handoff::actor<int>& a, auto message, std::atomic<bool>& sent) {
    handoff::actor<int> other;
    other.post([&](int&) { a.post(message); });
    sent.store(true);
  });
}

TEST(ActorHandOver, ASendFromAKeyedGrantNeverTakesOver) {
  expect_no_take_over([](handoff::actor<int>& a, auto message, std::atomic<bool>& sent) {
    handoff::keyed_mutex<> m;
    handoff::key_guard held = m.lock("k");
    m.lock_async("k", [&](handoff::key_guard) { a.post(message); });
    held.unlock();  // grants the callback here, through this thread's run queue
    sent.store(true);
  });
}

TEST(ActorHandOver, ASendFromAResumedCoroutineNeverTakesOver) {
  expect_no_take_over([](handoff::actor<int>& a, auto message, std::atomic<bool>& sent) {
    handoff::keyed_mutex<> m;
    handoff::key_guard held = m.lock("k");
    auto body = [&]() -> handoff::task<> {
      auto g = co_await m.async_lock("k");
      a.post(message);
    };
    std::thread waiter([&] { handoff::sync_wait(body()); });
    ASSERT_TRUE(eventually([&] { return m.waiting() != 0; }));
    held.unlock();  // resumes the coroutine here
    waiter.join();
    sent.store(true);
  });
}

TEST(ActorHandOver, ATimerDeliveryNeverTakesOver) {
  expect_no_take_over([](handoff::actor<int>& a, auto message, std::atomic<bool>& sent) {
    handoff::timer_service timers;
    timers.start();
    const std::uint64_t queued = access::count(access::base(a));
    timers.after(0ms, a, message).detach();  // sent by the service's thread; runs however long it waits
    ASSERT_TRUE(eventually([&] { return access::count(access::base(a)) == queued + 1; }));
    sent.store(true);
  });
}

TEST(ActorHandOver, AskFromTheSuccessorsHandlerStillThrowsDeadlock) {
  const test_timeout limit(60s);
  const patient_successors patient;
  offered_actor t;
  t.start();
  std::atomic<int> outcome{0};
  std::thread successor([&] {
    t.a.post([&](int&) {
      try {
        (void)t.a.ask([](int& n) { return n; });
        outcome.store(1);
      } catch (const std::system_error& e) {
        outcome.store(e.code() == std::errc::resource_deadlock_would_occur ? 2 : 3);
      }
    });
  });
  ASSERT_TRUE(eventually([&] { return access::taken(access::base(t.a)); }));
  t.g2.open.store(true);
  successor.join();
  EXPECT_EQ(outcome.load(), 2);
}

// Destroying an actor whose owner offers the drain (every post returned: a successor's post
// would be a send still running, which destruction must not race) runs every message.
TEST(ActorHandOver, DestroyingAnOfferingActorRunsEveryMessageSentBeforeIt) {
  const test_timeout limit(60s);
  std::atomic<int> ran{0};
  auto owned = std::make_unique<handoff::actor<int>>(actor_options{.max_messages = 1}, 0);
  handoff::actor<int>* a = owned.get();
  gate g0, g1;
  std::thread owner([&] { a->post([&](int&) { g0.wait(); }); });
  ASSERT_TRUE(eventually([&] { return g0.reached.load(); }));
  a->post([&](int&) {
    g1.wait();
    ran.fetch_add(1);
  });
  for (int i = 0; i < 10; ++i) a->post([&](int&) { ran.fetch_add(1); });
  g0.open.store(true);  // spent after m0: offers, then holds the actor in g1
  ASSERT_TRUE(eventually([&] { return g1.reached.load(); }));
  ASSERT_TRUE(access::offered(access::base(*a)));
  std::thread destroyer([&] { owned.reset(); });
  ASSERT_TRUE(eventually([&] { return access::count(access::base(*a)) == 12; }));  // the marker is in
  g1.open.store(true);
  destroyer.join();
  EXPECT_EQ(ran.load(), 11);
  owner.join();
}

// Under the default options (no executor, no budget set) an owner past the default budget
// hands the drain to a sender that arrives.
TEST(ActorHandOver, AnActorWithoutOptionsHandsOverPastTheDefaultBudget) {
  const test_timeout limit(60s);
  const patient_successors patient;
  constexpr int budget = static_cast<int>(handoff::detail::default_max_messages);
  constexpr int backlog = budget + 40;
  constexpr int hold = budget + 5;  // offered at the budget; the next look for a claim 16 later
  handoff::actor<int> a;
  run_log runs;
  gate held;
  std::thread owner([&] {
    a.post([&](int&) {
      for (int i = 1; i <= backlog; ++i) {
        a.post([&, i](int&) {
          runs.add(i);
          if (i == hold) held.wait();
        });
      }
    });
  });
  ASSERT_TRUE(eventually([&] { return held.reached.load(); }));
  std::thread successor([&] { a.post([&](int&) { runs.add(-1); }); });
  ASSERT_TRUE(eventually([&] { return access::taken(access::base(a)); }));
  const std::thread::id owner_id = owner.get_id(), successor_id = successor.get_id();
  held.open.store(true);
  owner.join();
  successor.join();
  EXPECT_EQ(runs.ran_on(hold), owner_id);
  EXPECT_EQ(runs.ran_on(backlog), successor_id);
  EXPECT_EQ(runs.ran_on(-1), successor_id);
}

// Many senders, a budget of a few messages: exactly once, per-sender order and mutual
// exclusion hold across every hand-over, and no post runs more than its share.
template <class Post>
void many_senders_hand_over(Post post, int senders, int each) {
  std::vector<std::thread> threads;
  for (int s = 0; s < senders; ++s)
    threads.emplace_back([&, s] {
      for (int i = 0; i < each; ++i) post(s, i);
    });
  for (auto& t : threads) t.join();
}

struct checked {
  std::vector<int> next;
  int inside = 0;
  long total = 0;
  bool ok = true;
  void run(int s, int i) {
    if (++inside != 1 || next[s] != i) ok = false;
    next[s] = i + 1;
    ++total;
    --inside;
  }
};

TEST(ActorHandOver, ManySendersKeepExactlyOnceOrderAndExclusion) {
  const test_timeout limit(120s);
  constexpr int senders = 4;
  constexpr int each = 5000;
  for (std::uint32_t budget : {1U, 4U, 0U}) {  // 0: the default budget
    handoff::actor<checked> a{actor_options{.max_messages = budget}, checked{std::vector<int>(senders), 0, 0, true}};
    many_senders_hand_over([&](int s, int i) { a.post([s, i](checked& c) { c.run(s, i); }); }, senders, each);
    const checked c = a.ask([](checked& st) { return st; }).get();
    EXPECT_TRUE(c.ok) << "budget " << budget;
    EXPECT_EQ(c.total, long{senders} * each);
    EXPECT_EQ(access::word(access::base(a)), 0u);
  }
}

// Batches take over too: half the senders post four messages at a time with post_all.
TEST(ActorHandOver, BatchSendersKeepExactlyOnceOrderAndExclusion) {
  const test_timeout limit(120s);
  constexpr int senders = 4;
  constexpr int each = 8000;
  handoff::actor<checked> a{actor_options{.max_messages = 2}, checked{std::vector<int>(senders), 0, 0, true}};
  const auto message = [](int s, int i) { return [s, i](checked& c) { c.run(s, i); }; };
  many_senders_hand_over(
      [&](int s, int i) {
        if (s % 2 == 0) return a.post(message(s, i));
        if (i % 4 != 0) return;
        std::vector<decltype(message(0, 0))> batch;
        for (int k = i; k < i + 4; ++k) batch.push_back(message(s, k));
        a.post_all(batch);
      },
      senders, each);
  const checked c = a.ask([](checked& st) { return st; }).get();
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.total, long{senders} * each);
  EXPECT_EQ(access::word(access::base(a)), 0u);
}

struct checked_handler {
  checked* c;
  void operator()(std::pair<int, int> m) const { c->run(m.first, m.second); }
};

TEST(ActorHandOver, BasicActorSendsHandOverToo) {
  const test_timeout limit(120s);
  constexpr int senders = 4;
  constexpr int each = 10000;
  checked c{std::vector<int>(senders), 0, 0, true};
  {
    handoff::basic_actor<std::pair<int, int>, checked_handler> a{actor_options{.max_messages = 2}, checked_handler{&c}};
    many_senders_hand_over([&](int s, int i) { a.send({s, i}); }, senders, each);
  }
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.total, long{senders} * each);
}

// Under a test scheduler nothing is taken over inline: a top-level send past the budget
// runs nothing, and the senders' messages are events that explore() reorders.
TEST(ActorHandOver, UnderATestSchedulerSendsAreEventsThatExploreReorders) {
  const test_timeout limit(60s);
  const auto body = [](handoff::testing::scheduler& s) {
    handoff::actor<std::vector<int>> a{actor_options{.max_messages = 1}, std::vector<int>{}};
    handoff::actor<int> x{0};
    handoff::actor<int> y{0};
    int ran = 0;
    for (int i = 0; i < 3; ++i) {
      a.post([&ran, i](std::vector<int>& v) {
        ++ran;
        v.push_back(i);
      });
    }
    handoff::testing::check(ran == 0, "a send ran a message inline");
    x.post([&](int&) { a.post([](std::vector<int>& v) { v.push_back(10); }); });
    y.post([&](int&) { a.post([](std::vector<int>& v) { v.push_back(20); }); });
    s.run_all();
    const auto v = a.ask([](std::vector<int>& w) { return w; }).get();
    handoff::testing::check(v.size() == 5 && std::is_sorted(v.begin(), v.begin() + 3), "every message once, in order");
    handoff::testing::check(std::find(v.begin(), v.end(), 10) < std::find(v.begin(), v.end(), 20), "x's message first");
  };
  const auto r = handoff::testing::explore(body);
  ASSERT_TRUE(r.failed);
  EXPECT_NE(r.trace.find("x's message first"), std::string::npos) << r.trace;
}

TEST(ActorHandOver, ABudgetWithoutAnExecutorIsAcceptedForAnUnboundedActor) {
  EXPECT_NO_THROW((handoff::actor<int>{actor_options{.max_messages = 1}, 0}));
  EXPECT_NO_THROW((handoff::actor<int>{actor_options{.max_time = 1ms}, 0}));
}

}  // namespace
