// The nested hop: a send from inside a handler that wins an idle actor carries its message
// with the actor into the run queue, in the thread's carry slot, instead of a node in the
// actor's mailbox. One message per thread is carried at a time; the others take a node.
// These tests look at the slot itself (detail::carried) and at what must not change: order,
// exactly once, the error hook, budgets, destruction, executors.
#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
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

bool slot_taken() { return handoff::detail::carried.actor != nullptr; }

template <class Executor>
handoff::actor_options with_executor(Executor& e, std::uint32_t max_messages = 0) {
  handoff::actor_options o;
  o.executor = e;
  o.max_messages = max_messages;
  return o;
}

TEST(NestedHop, ASendThatWinsAnIdleActorInsideAHandlerCarriesItsMessageInTheSlot) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  std::vector<std::string> order;
  bool taken_after_send = false;
  bool taken_in_b = true;
  a.post([&](int&) {
    b.post([&](int& s) {
      taken_in_b = slot_taken();
      s = 7;
      order.emplace_back("b");
    });
    taken_after_send = slot_taken();
    EXPECT_EQ(b.pending(), 1U);
    order.emplace_back("a returns");
  });
  EXPECT_TRUE(taken_after_send) << "the won message went through a node, not the slot";
  EXPECT_FALSE(taken_in_b) << "the slot must be free again while the carried message runs";
  EXPECT_FALSE(slot_taken());
  EXPECT_EQ(order, (std::vector<std::string>{"a returns", "b"}));
  EXPECT_EQ(b.ask([](int& s) { return s; }).get(), 7);
  EXPECT_EQ(b.pending(), 0U);
}

// A fan-out carries its first won message only; the others go through nodes, and the
// depth-first order of the run queue is unchanged: B, C, D, each after the handler, and a
// second message to B (queued in its mailbox) after B's carried one.
TEST(NestedHop, AFanOutCarriesItsFirstSendAndKeepsTheRunQueueOrder) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  handoff::actor<int> c{0};
  handoff::actor<int> d{0};
  std::vector<std::string> order;
  a.post([&](int&) {
    b.post([&](int&) { order.emplace_back("b1"); });
    c.post([&](int&) { order.emplace_back("c"); });
    b.post([&](int&) { order.emplace_back("b2"); });  // B is owned now: its mailbox
    d.post([&](int&) { order.emplace_back("d"); });
    order.emplace_back("a returns");
  });
  EXPECT_EQ(order, (std::vector<std::string>{"a returns", "b1", "b2", "c", "d"}));
  EXPECT_FALSE(slot_taken());
}

// A chain hands the slot on at every hop: each carried message finds it free again.
TEST(NestedHop, EveryHopOfAForwardingChainIsCarried) {
  test_timeout limit{30s};
  struct hop_state {
    handoff::actor<hop_state>* next = nullptr;
    int seen = 0;
  };
  constexpr int length = 1000;
  std::vector<std::unique_ptr<handoff::actor<hop_state>>> chain;
  chain.reserve(length);
  for (int i = 0; i < length; ++i) chain.push_back(std::make_unique<handoff::actor<hop_state>>());
  for (int i = 0; i + 1 < length; ++i) chain[i]->post([n = chain[i + 1].get()](hop_state& s) { s.next = n; });
  int carried_hops = 0;
  struct forward {
    int* carried_hops;
    void operator()(hop_state& s) const {
      ++s.seen;
      if (s.next == nullptr) return;
      s.next->post(forward{carried_hops});
      if (slot_taken()) ++*carried_hops;
    }
  };
  chain[0]->post(forward{&carried_hops});
  EXPECT_EQ(carried_hops, length - 1);
  for (auto& a : chain) EXPECT_EQ(a->ask([](hop_state& s) { return s.seen; }).get(), 1);
}

TEST(NestedHop, AClosureTooLargeForTheSlotTakesANode) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::actor<int> b{0};
  std::array<char, handoff::detail::carry_size + 1> big{};
  big[0] = 'x';
  bool taken = true;
  char seen = 0;
  a.post([&](int&) {
    b.post([&seen, big](int&) { seen = big[0]; });
    taken = slot_taken();
  });
  EXPECT_FALSE(taken);
  EXPECT_EQ(seen, 'x');
}

// A message sent by another thread while B's message waits in the slot is counted behind
// it: it runs after the carried one, once each.
TEST(NestedHop, AMessageSentMeanwhileByAnotherThreadRunsAfterTheCarriedOne) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  handoff::actor<std::vector<int>> b;
  a.post([&](int&) {
    b.post([](std::vector<int>& v) { v.push_back(1); });  // carried
    std::thread other([&] { b.post([](std::vector<int>& v) { v.push_back(2); }); });
    other.join();  // B is owned by this thread: the other sender only enqueued
    EXPECT_EQ(b.pending(), 2U);
  });
  EXPECT_EQ(b.ask([](std::vector<int>& v) { return v; }).get(), (std::vector<int>{1, 2}));
}

TEST(NestedHop, ACarriedHandlerThatThrowsGoesToTheErrorHookAndTheActorGoesOn) {
  test_timeout limit{30s};
  int errors = 0;
  handoff::actor<int> a{0};
  handoff::actor_options o;
  o.on_error = [&](const std::exception_ptr&) { ++errors; };
  handoff::actor<int> b{o, 0};
  a.post([&](int&) {
    b.post([](int&) { throw std::runtime_error("carried"); });
    b.post([](int& s) { s = 1; });
  });
  EXPECT_EQ(errors, 1);
  EXPECT_FALSE(slot_taken());
  EXPECT_EQ(b.ask([](int& s) { return s; }).get(), 1);
}

// Destroying, from the handler that won it, an actor whose message waits in the slot runs
// that message first (the destructor runs what this thread owns through its queue).
TEST(NestedHop, DestroyingAnActorWhoseMessageIsCarriedRunsItFirst) {
  test_timeout limit{30s};
  handoff::actor<int> a{0};
  int ran = 0;
  a.post([&](int&) {
    auto b = std::make_unique<handoff::actor<int>>(0);
    b->post([&](int&) { ++ran; });
    EXPECT_TRUE(slot_taken());
    b.reset();
    EXPECT_EQ(ran, 1);
    EXPECT_FALSE(slot_taken());
  });
  EXPECT_EQ(ran, 1);
}

// An executor that reports idle workers takes an actor popped with more work behind it;
// an actor whose message is in this thread's slot must run it here first, since no other
// thread can reach the slot.
struct idle_pool {
  std::vector<handoff::work> jobs;
  void execute(handoff::work w) { jobs.push_back(w); }
  [[nodiscard]] static bool has_idle_workers() noexcept { return true; }
};

TEST(NestedHop, AnActorWithACarriedMessageRunsItOnThisThreadEvenWhenItsExecutorIsIdle) {
  test_timeout limit{30s};
  idle_pool pool;
  handoff::actor<int> a{0};
  handoff::actor<int> b{with_executor(pool), 0};
  handoff::actor<int> c{0};
  std::thread::id b_ran_on;
  a.post([&](int&) {
    b.post([&](int&) { b_ran_on = std::this_thread::get_id(); });  // carried
    c.post([](int&) {});                                           // queued behind it: `more`
  });
  EXPECT_EQ(b_ran_on, std::this_thread::get_id());
  EXPECT_TRUE(pool.jobs.empty());
  EXPECT_FALSE(slot_taken());
}

// A budget counts the carried message: with max_messages = 1, the message queued behind
// it goes to the executor.
TEST(NestedHop, ACarriedMessageCountsAgainstTheBudget) {
  test_timeout limit{30s};
  idle_pool pool;
  handoff::actor<int> a{0};
  handoff::actor<int> b{with_executor(pool, 1), 0};
  int ran = 0;
  a.post([&](int&) {
    b.post([&](int&) { ++ran; });  // carried
    b.post([&](int&) { ++ran; });  // mailbox
  });
  EXPECT_EQ(ran, 1);
  ASSERT_EQ(pool.jobs.size(), 1U);
  handoff::work job = pool.jobs.front();
  pool.jobs.clear();
  job();
  EXPECT_EQ(ran, 2);
}

struct move_only {
  std::string text;
  explicit move_only(std::string t) : text(std::move(t)) {}
  move_only(move_only&& o) noexcept : text(std::move(o.text)) {}
  move_only(const move_only&) = delete;
  move_only& operator=(const move_only&) = delete;
  move_only& operator=(move_only&&) = delete;
  ~move_only() = default;
};

TEST(NestedHop, ABasicActorCarriesItsMessageByValue) {
  test_timeout limit{30s};
  struct collect {
    std::vector<std::string>* out;
    void operator()(move_only m) const { out->push_back(std::move(m.text)); }
  };
  std::vector<std::string> got;
  handoff::basic_actor<move_only, collect> b{collect{&got}};
  handoff::actor<int> a{0};
  bool taken = false;
  a.post([&](int&) {
    b.send(move_only{"a long enough string to live on the heap"});
    taken = slot_taken();
  });
  EXPECT_TRUE(taken);
  EXPECT_EQ(got, (std::vector<std::string>{"a long enough string to live on the heap"}));
}

struct throwing_move {
  int v = 0;
  explicit throwing_move(int x) : v(x) {}
  throwing_move(throwing_move&& o) noexcept(false) : v(o.v) {}
  throwing_move(const throwing_move&) = default;
  throwing_move& operator=(const throwing_move&) = delete;
  throwing_move& operator=(throwing_move&&) = delete;
  ~throwing_move() = default;
};

TEST(NestedHop, AMessageWhoseMoveMayThrowIsNeverCarried) {
  test_timeout limit{30s};
  struct sum {
    int* out;
    void operator()(throwing_move m) const { *out += m.v; }
  };
  int total = 0;
  handoff::basic_actor<throwing_move, sum> b{sum{&total}};
  handoff::actor<int> a{0};
  bool taken = true;
  a.post([&](int&) {
    b.send(throwing_move{5});
    taken = slot_taken();
  });
  EXPECT_FALSE(taken);
  EXPECT_EQ(total, 5);
}

}  // namespace
