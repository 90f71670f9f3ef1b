// handoff::actor<State>: one test per guarantee of actor.hpp (mutual exclusion, exactly once,
// causal FIFO, no dedicated threads) and per contract of its members.
#include <handoff/actor.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <coroutine>
#include <future>
#include <latch>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include "../support/test_support.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::fire_and_forget;
using handoff::test::owner_thread;
using handoff::test::run_threads;

struct counter {
  long value = 0;
};

TEST(Actor, RunsAnUncontendedPostOnTheCallingThreadBeforeReturning) {
  handoff::actor<counter> a;
  std::thread::id ran_on;
  a.post([&](counter& c) {
    ++c.value;
    ran_on = std::this_thread::get_id();
  });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_EQ(a.ask([](counter& c) { return c.value; }).get(), 1);
}

TEST(Actor, ConstructsStateInPlaceFromArguments) {
  struct pair_state {
    pair_state(int a, std::string b) : n(a), s(std::move(b)) {}
    int n;
    std::string s;
  };
  handoff::actor<pair_state> a{7, std::string("seven")};
  EXPECT_EQ(a.ask([](pair_state& p) { return p.s + std::to_string(p.n); }).get(), "seven7");
}

TEST(Actor, NeverRunsTwoHandlersAtOnceAndLosesNoMessage) {
  struct guarded {
    std::atomic<int> inside{0};
    long plain = 0;  // deliberately not atomic: TSan checks the happens-before edges
    int overlaps = 0;
  };
  handoff::actor<guarded> a;
  constexpr int threads = 4, per_thread = 20000;
  run_threads(threads, [&](int) {
    for (int i = 0; i < per_thread; ++i) {
      a.post([](guarded& g) {
        if (g.inside.fetch_add(1, std::memory_order_relaxed) != 0) ++g.overlaps;
        ++g.plain;
        g.inside.fetch_sub(1, std::memory_order_relaxed);
      });
    }
  });
  auto [plain, overlaps] = a.ask([](guarded& g) { return std::pair(g.plain, g.overlaps); }).get();
  EXPECT_EQ(plain, long{threads} * per_thread);
  EXPECT_EQ(overlaps, 0);
}

TEST(Actor, RunsEveryMessageExactlyOnce) {
  constexpr int threads = 4, per_thread = 10000;
  handoff::actor<std::vector<int>> a{std::vector<int>(threads * per_thread, 0)};
  run_threads(threads, [&](int t) {
    for (int i = 0; i < per_thread; ++i) {
      a.post([id = t * per_thread + i](std::vector<int>& seen) { ++seen[static_cast<std::size_t>(id)]; });
    }
  });
  auto seen = a.ask([](std::vector<int>& s) { return s; }).get();
  for (std::size_t i = 0; i < seen.size(); ++i) ASSERT_EQ(seen[i], 1) << "message " << i;
}

TEST(Actor, RunsEachSendersMessagesInTheOrderSent) {
  constexpr int threads = 4, per_thread = 20000;
  struct order {
    std::vector<int> last = std::vector<int>(threads, -1);
    int violations = 0;
  };
  handoff::actor<order> a;
  run_threads(threads, [&](int t) {
    for (int i = 0; i < per_thread; ++i) {
      a.post([t, i](order& o) {
        if (o.last[static_cast<std::size_t>(t)] != i - 1) ++o.violations;
        o.last[static_cast<std::size_t>(t)] = i;
      });
    }
  });
  auto o = a.ask([](order& s) { return s; }).get();
  EXPECT_EQ(o.violations, 0);
  for (int t = 0; t < threads; ++t) EXPECT_EQ(o.last[static_cast<std::size_t>(t)], per_thread - 1);
}

TEST(Actor, RunsSendsOrderedByHappensBeforeInThatOrderAcrossThreads) {
  // Causal order: thread 1 posts, then tells thread 2, which then posts. Thread 1 may be
  // inside another actor's handler (its send is deferred on its run queue) or the actor
  // may be busy on a third thread: either way the first send must run first.
  struct order {
    std::vector<int> ran;
  };
  handoff::actor<order> a;
  handoff::actor<int> other;
  for (int round = 0; round < 2000; ++round) {
    std::atomic<int> step{0};
    std::jthread second([&] {
      while (step.load(std::memory_order_acquire) == 0) std::this_thread::yield();
      a.post([round](order& o) { o.ran.push_back(2 * round + 1); });
    });
    auto first = [&] {
      a.post([round](order& o) { o.ran.push_back(2 * round); });
      step.store(1, std::memory_order_release);  // happens-before the second send
    };
    if (round % 2 == 0) {
      first();
    } else {
      other.post([&](int&) { first(); });  // the send is made from inside a handler
    }
    second.join();
  }
  auto o = a.ask([](order& s) { return s; }).get();
  ASSERT_EQ(o.ran.size(), 4000u);
  for (std::size_t i = 0; i < o.ran.size(); ++i) ASSERT_EQ(o.ran[i], static_cast<int>(i)) << "position " << i;
}

TEST(Actor, MakesEachHandlersWritesVisibleToTheNextHandlerOnAnotherThread) {
  // A non-atomic vector grown by handlers that run on different threads: any missing
  // happens-before edge is a data race TSan reports, and a lost write shows in the content.
  struct log {
    std::vector<long> values;
    std::set<std::thread::id> threads;
  };
  handoff::actor<log> a;
  constexpr int threads = 3, per_thread = 5000;
  run_threads(threads, [&](int t) {
    for (int i = 0; i < per_thread; ++i) {
      a.post([v = long{t} * per_thread + i](log& l) {
        l.values.push_back(v);
        l.threads.insert(std::this_thread::get_id());
      });
    }
  });
  auto l = a.ask([](log& s) { return s; }).get();
  ASSERT_EQ(l.values.size(), std::size_t{threads} * per_thread);
  std::set<long> distinct(l.values.begin(), l.values.end());
  EXPECT_EQ(distinct.size(), l.values.size());
  EXPECT_GE(l.threads.size(), 1u);
}

TEST(Actor, RunsHandlersOnlyOnSendingThreads) {
  handoff::actor<std::set<std::thread::id>> a;
  std::mutex m;
  std::set<std::thread::id> senders;
  run_threads(4, [&](int) {
    {
      std::lock_guard lock(m);
      senders.insert(std::this_thread::get_id());
    }
    for (int i = 0; i < 5000; ++i) {
      a.post([](std::set<std::thread::id>& s) { s.insert(std::this_thread::get_id()); });
    }
  });
  senders.insert(std::this_thread::get_id());  // the ask below may run on this thread
  auto ran_on = a.ask([](std::set<std::thread::id>& s) { return s; }).get();
  for (auto id : ran_on) EXPECT_TRUE(senders.count(id)) << "a handler ran on a thread that never sent";
}

TEST(Actor, RunsAMessageSentFromAHandlerAfterThatHandlerReturns) {
  auto shared = std::make_shared<std::vector<std::string>>();
  handoff::actor<int> b;
  handoff::actor<int> a;
  a.post([&](int&) {
    shared->push_back("a begins");
    b.post([&](int&) { shared->push_back("b runs"); });
    shared->push_back("a ends");  // b was idle, yet its message waits: no recursion
  });
  EXPECT_EQ(*shared, (std::vector<std::string>{"a begins", "a ends", "b runs"}));
}

TEST(Actor, RunsAMessageAHandlerSendsToItsOwnActorAfterTheCurrentOne) {
  handoff::actor<std::vector<int>> a;
  a.post([&](std::vector<int>& v) {
    v.push_back(1);
    a.post([](std::vector<int>& w) { w.push_back(3); });
    v.push_back(2);
  });
  EXPECT_EQ(a.ask([](std::vector<int>& v) { return v; }).get(), (std::vector<int>{1, 2, 3}));
}

TEST(Actor, ForwardsOneMessageThroughAMillionActorsWithoutGrowingTheStack) {
  constexpr int length = 1'000'000;
  struct link {
    handoff::actor<link>* next = nullptr;
    long* delivered = nullptr;
  };
  long delivered = 0;
  std::vector<std::unique_ptr<handoff::actor<link>>> chain;
  chain.reserve(length);
  for (int i = 0; i < length; ++i) chain.push_back(std::make_unique<handoff::actor<link>>(link{nullptr, &delivered}));
  for (int i = 0; i + 1 < length; ++i) {
    chain[static_cast<std::size_t>(i)]->post(
        [next = chain[static_cast<std::size_t>(i) + 1].get()](link& l) { l.next = next; });
  }
  struct forward {
    void operator()(link& l) const {
      ++*l.delivered;
      if (l.next != nullptr) l.next->post(forward{});
    }
  };
  chain.front()->post(forward{});  // recursion would need ~1M frames and overflow the stack
  EXPECT_EQ(delivered, length);
}

TEST(Actor, AskReturnsTheHandlersResult) {
  handoff::actor<counter> a{counter{41}};
  EXPECT_EQ(a.ask([](counter& c) { return ++c.value; }).get(), 42);
  a.ask([](counter& c) { c.value = 0; }).get();  // void result
  EXPECT_EQ(a.ask([](counter& c) { return c.value; }).get(), 0);
}

TEST(Actor, AskDeliversTheHandlersExceptionAndTheActorKeepsWorking) {
  handoff::actor<counter> a;
  auto f = a.ask([](counter&) -> int { throw std::runtime_error("boom"); });
  EXPECT_THROW(f.get(), std::runtime_error);
  EXPECT_EQ(a.ask([](counter& c) { return ++c.value; }).get(), 1);
}

TEST(Actor, AskFromAHandlerRunsAnIdleTargetInlineSoWaitingDoesNotDeadlock) {
  handoff::actor<counter> target{counter{5}};
  handoff::actor<counter> caller;
  auto result = caller.ask([&](counter& c) {
    c.value = target.ask([](counter& t) { return t.value * 2; }).get();  // blocks inside a handler
    return c.value;
  });
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(result.get(), 10);
}

TEST(Actor, AskFromAHandlerReachesATargetThisThreadQueuedEarlier) {
  // The handler's post makes this thread the target's owner (on its run queue); the ask
  // that follows must drain it here rather than wait for a drain that comes later.
  handoff::actor<counter> target;
  handoff::actor<counter> caller;
  auto result = caller.ask([&](counter&) {
    target.post([](counter& t) { t.value += 1; });
    return target.ask([](counter& t) { return t.value + 10; }).get();
  });
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(result.get(), 11);
}

TEST(Actor, AskFromItsOwnHandlerThrowsInsteadOfDeadlocking) {
  handoff::actor<counter> a;
  auto outcome = a.ask([&](counter&) {
    try {
      (void)a.ask([](counter& c) { return c.value; });
      return std::error_code{};
    } catch (const std::system_error& e) {
      return e.code();
    }
  });
  EXPECT_EQ(outcome.get(), std::make_error_code(std::errc::resource_deadlock_would_occur));
  EXPECT_EQ(a.ask([](counter& c) { return c.value; }).get(), 0);  // still usable
}

TEST(Actor, ReportsAPostHandlersExceptionToStderrByDefaultAndContinues) {
  handoff::actor<counter> a;
  testing::internal::CaptureStderr();
  a.post([](counter&) { throw std::runtime_error("handler failed"); });
  a.post([](counter& c) { ++c.value; });
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("handler failed"), std::string::npos) << err;
  EXPECT_EQ(a.ask([](counter& c) { return c.value; }).get(), 1);
}

TEST(Actor, SendsAPostHandlersExceptionToTheErrorHook) {
  std::vector<std::string> errors;
  handoff::actor_options options;
  options.on_error = [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& ex) {
      errors.emplace_back(ex.what());
    }
  };
  handoff::actor<counter> a{options};
  a.post([](counter&) { throw std::logic_error("first"); });
  a.post([](counter& c) { ++c.value; });
  a.post([](counter&) { throw std::logic_error("second"); });
  EXPECT_EQ(a.ask([](counter& c) { return c.value; }).get(), 1);
  EXPECT_EQ(errors, (std::vector<std::string>{"first", "second"}));
}

TEST(Actor, DestroyingAnIdleActorReturnsAtOnce) {
  auto a = std::make_unique<handoff::actor<counter>>();
  a->post([](counter& c) { ++c.value; });
  a.reset();
  SUCCEED();
}

TEST(Actor, DestructorWaitsForMessagesQueuedBehindARunningHandler) {
  std::atomic<int> ran{0};
  auto a = std::make_unique<handoff::actor<counter>>();
  owner_thread owner([&](auto hold) {
    a->post([&, hold](counter&) {
      hold();
      ran.fetch_add(1);
    });
  });
  for (int i = 0; i < 100; ++i) a->post([&](counter&) { ran.fetch_add(1); });
  std::thread release([&] {
    std::this_thread::sleep_for(20ms);  // let the destructor start waiting first
    owner.release();
  });
  a.reset();  // must not free the actor under the running handler
  EXPECT_EQ(ran.load(), 101);
  release.join();
}

TEST(Actor, DestroyedByItsOwnHandlerDropsTheMessagesQueuedBehindIt) {
  auto a = std::make_unique<handoff::actor<counter>>();
  std::atomic<bool> later_ran{false};
  std::optional<std::future_errc> waiter_saw;
  a->post([&](counter&) {
    a->post([&](counter&) { later_ran = true; });
    // A coroutine waiting on the same actor: it must be resumed with an error, not leaked.
    [](handoff::actor<counter>& a, std::optional<std::future_errc>& saw) -> fire_and_forget {
      try {
        co_await a.async_ask([](counter& c) { return c.value; });
      } catch (const std::future_error& e) {
        saw = static_cast<std::future_errc>(e.code().value());
      }
    }(*a, waiter_saw);
    a.reset();  // destroys the actor whose handler is running
  });
  EXPECT_FALSE(later_ran.load());
  EXPECT_EQ(waiter_saw, std::future_errc::broken_promise);
}

TEST(Actor, DestroyedByItsOwnHandlerBreaksThePromisesOfQueuedAsks) {
  auto a = std::make_unique<handoff::actor<counter>>();
  owner_thread owner([&](auto hold) {
    a->post([&, hold](counter&) {
      hold();
      a.reset();
    });
  });
  auto orphan = a->ask([](counter& c) { return c.value; });  // queued behind the handler
  owner.release();
  owner.join();
  try {
    orphan.get();
    ADD_FAILURE() << "the queued ask ran after its actor was destroyed";
  } catch (const std::future_error& e) {
    EXPECT_EQ(e.code(), std::future_errc::broken_promise);
  }
}

TEST(Actor, DestroyingAnActorThisThreadOwnsFromAHandlerRunsItsMessagesFirst) {
  auto target = std::make_unique<handoff::actor<counter>>();
  handoff::actor<counter> caller;
  std::atomic<int> ran{0};
  caller.post([&](counter&) {
    target->post([&](counter&) { ran.fetch_add(1); });  // queued on this thread's run queue
    target.reset();
    EXPECT_EQ(ran.load(), 1);
  });
  EXPECT_EQ(ran.load(), 1);
}

TEST(Actor, IdleActorCostsAtMost64BytesBeyondItsState) {
  struct empty {};
  EXPECT_LE(sizeof(handoff::actor<empty>), 64u);
  EXPECT_LE(sizeof(handoff::actor<long>) - sizeof(long), 64u);
}

TEST(Actor, AsyncAskCompletesWithoutSuspendingOnAnIdleActor) {
  handoff::actor<counter> a{counter{3}};
  std::optional<long> got;
  std::thread::id resumed_on;
  [](handoff::actor<counter>& a, std::optional<long>& got, std::thread::id& on) -> fire_and_forget {
    got = co_await a.async_ask([](counter& c) { return c.value * 3; });
    on = std::this_thread::get_id();
  }(a, got, resumed_on);
  ASSERT_TRUE(got.has_value());  // completed synchronously
  EXPECT_EQ(*got, 9);
  EXPECT_EQ(resumed_on, std::this_thread::get_id());
}

TEST(Actor, AsyncAskSuspendsOnABusyActorAndResumesAfterItsDrain) {
  handoff::actor<counter> a;
  owner_thread owner([&](auto hold) {
    a.post([hold](counter& c) {
      hold();
      c.value = 100;
    });
  });
  std::promise<std::pair<long, bool>> result;
  [](handoff::actor<counter>& a, std::promise<std::pair<long, bool>>& out) -> fire_and_forget {
    long v = co_await a.async_ask([](counter& c) { return c.value + 1; });
    // Resumed after the actor's drain: inside it, a blocking ask() would be refused.
    bool outside_drain = a.ask([](counter& c) { return c.value == 100; }).get();
    out.set_value({v, outside_drain});
  }(a, result);
  auto answer = result.get_future();
  EXPECT_EQ(answer.wait_for(50ms), std::future_status::timeout);  // still waiting for the owner
  owner.release();
  ASSERT_EQ(answer.wait_for(10s), std::future_status::ready);
  auto [value, outside_drain] = answer.get();
  EXPECT_EQ(value, 101);
  EXPECT_TRUE(outside_drain);
}

TEST(Actor, AsyncAskRethrowsTheHandlersException) {
  handoff::actor<counter> a;
  std::string what;
  [](handoff::actor<counter>& a, std::string& what) -> fire_and_forget {
    try {
      co_await a.async_ask([](counter&) -> int { throw std::runtime_error("async boom"); });
    } catch (const std::runtime_error& e) {
      what = e.what();
    }
  }(a, what);
  EXPECT_EQ(what, "async boom");
}

TEST(Actor, AsyncAskFromAHandlerIsAnsweredAfterThatHandler) {
  handoff::actor<counter> a;
  handoff::actor<counter> b{counter{7}};
  std::vector<std::string> events;
  a.post([&](counter&) {
    [](handoff::actor<counter>& b, std::vector<std::string>& events) -> fire_and_forget {
      long v = co_await b.async_ask([](counter& c) { return c.value; });
      events.push_back("resumed with " + std::to_string(v));
    }(b, events);
    events.push_back("handler ends");
  });
  EXPECT_EQ(events, (std::vector<std::string>{"handler ends", "resumed with 7"}));
}

}  // namespace
