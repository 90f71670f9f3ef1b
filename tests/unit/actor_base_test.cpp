// The hand-off protocol driven one step at a time (detail/actor_base.hpp).
#include "../support/core_access.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <initializer_list>
#include <memory>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using access = handoff::detail::actor_core_access;

using handoff::detail::probe;

// A message living on the test's stack; records that it ran.
struct recorded : handoff::detail::message {
  explicit recorded(std::atomic<int>& r) : runs(&r) { invoke = &run; }
  std::atomic<int>* runs;
  static bool run(handoff::detail::message* m, handoff::detail::actor_base*, handoff::detail::turn_tally* turn) {
    if (turn != nullptr) static_cast<recorded*>(m)->runs->fetch_add(1);
    return true;
  }
};

// An executor that keeps work until the test runs it, and records the actor's count at
// the moment the work was handed over.
struct manual_executor {
  std::vector<handoff::work> pending;
  std::vector<std::uint64_t> count_at_handoff;
  const handoff::detail::actor_base* watched = nullptr;
  void execute(handoff::work w) {
    pending.push_back(w);
    count_at_handoff.push_back(access::count(*watched));
  }
};

// Makes this thread the owner (its own message counts as run inline), then counts and
// enqueues `queued` the way losing senders do.
void own_with_queued(probe& a, std::initializer_list<recorded*> queued) {
  ASSERT_TRUE(access::try_acquire(a));
  for (recorded* m : queued) {
    ASSERT_FALSE(access::try_acquire(a));
    access::enqueue(a, m);
  }
}

// A probe whose budget hands off to a manual_executor.
struct budgeted_probe {
  manual_executor ex;
  probe a;
  explicit budgeted_probe(std::uint32_t max_messages) : a(options(ex, max_messages)) { ex.watched = &a; }
  static handoff::actor_options options(manual_executor& ex, std::uint32_t max_messages) {
    handoff::actor_options o;
    o.executor = ex;
    o.max_messages = max_messages;
    return o;
  }
};

TEST(Protocol, OnlyTheSenderThatTakesTheCountFromZeroBecomesOwner) {
  probe a;
  EXPECT_TRUE(access::try_acquire(a));
  EXPECT_FALSE(access::try_acquire(a));
  EXPECT_FALSE(access::try_acquire(a));
  EXPECT_EQ(access::count(a), 3u);
  EXPECT_FALSE(access::try_release(a, 1));  // two still counted: stays owned
  EXPECT_TRUE(access::try_release(a, 2));
  EXPECT_TRUE(access::try_acquire(a));  // released: the next sender owns it
  EXPECT_TRUE(access::try_release(a, 1));
}

TEST(Protocol, DrainRunsMessagesCountedDuringTheRoundBeforeReleasing) {
  probe a;
  std::atomic<int> runs{0};
  recorded m1(runs), m2(runs);
  own_with_queued(a, {&m1, &m2});
  access::drain_now(a, 1);
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(access::count(a), 0u);
}

TEST(Protocol, OwnerWaitsForAMessageCountedButNotYetEnqueuedAndNeverReleasesEarly) {
  probe a;
  std::atomic<int> runs{0};
  recorded late(runs);
  ASSERT_TRUE(access::try_acquire(a));
  ASSERT_FALSE(access::try_acquire(a));  // a sender counted its message...
  std::atomic<bool> drained{false};
  std::thread owner([&] {
    access::drain_now(a, 1);
    drained = true;
  });
  std::this_thread::sleep_for(50ms);  // ...and is slow to enqueue it
  EXPECT_FALSE(drained.load()) << "the owner released while a counted message was in flight";
  EXPECT_EQ(access::count(a), 1u);  // its own message was uncounted, the late one was not
  access::enqueue(a, &late);
  owner.join();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(access::count(a), 0u);
}

// An owner with a budget of two messages: its own inline one and one more.
class BudgetOfTwo : public testing::Test {
 protected:
  budgeted_probe p{2};
  manual_executor& ex = p.ex;
  probe& a = p.a;
  std::atomic<int> runs{0};
  recorded m1{runs}, m2{runs};
};

TEST_F(BudgetOfTwo, HandOffSubtractsBeforePostingTheContinuation) {
  own_with_queued(a, {&m1, &m2});
  access::drain_now(a, 1);  // inline message + m1 spend the budget
  EXPECT_EQ(runs.load(), 1);
  ASSERT_EQ(ex.pending.size(), 1u);
  EXPECT_EQ(ex.count_at_handoff[0], 1u) << "the continuation was posted before the owner's subtraction";
  ex.pending[0]();  // the continuation drains m2 and releases
  EXPECT_EQ(runs.load(), 2);
  EXPECT_EQ(access::count(a), 0u);
}

TEST_F(BudgetOfTwo, SpentWithNothingPendingReleasesWithoutAContinuation) {
  own_with_queued(a, {&m1});
  access::drain_now(a, 1);
  EXPECT_EQ(runs.load(), 1);
  EXPECT_TRUE(ex.pending.empty());
  EXPECT_EQ(access::count(a), 0u);
}

TEST(Protocol, OwnerWithAnExecutorHandsOffInsteadOfWaitingForASlowSender) {
  budgeted_probe p(0);  // an executor, no budget
  auto& [ex, a] = p;
  std::atomic<int> runs{0};
  recorded late(runs);
  ASSERT_TRUE(access::try_acquire(a));
  ASSERT_FALSE(access::try_acquire(a));  // counted, not enqueued
  access::drain_now(a, 1);               // returns instead of spinning on this thread
  ASSERT_EQ(ex.pending.size(), 1u);
  EXPECT_EQ(ex.count_at_handoff[0], 1u);
  access::enqueue(a, &late);
  ex.pending[0]();
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(access::count(a), 0u);
}

}  // namespace
