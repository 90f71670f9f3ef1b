// Bounded mailboxes: actor_options::capacity, try_post/try_send, the full_policy of
// post/send/ask/defer, how blocked senders are woken (one at a time, oldest first, none
// left asleep), what a handler's send to a full mailbox does, and defer() from an actor's
// own handler yielding its turn.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // designated actor_options
#endif
#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/metrics.hpp>
#include <handoff/run_deferred.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../support/keyed_mutex_support.hpp"  // blocking_call
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::blocking_call;
using handoff::test::bounded;
using handoff::test::owner_thread;
using handoff::test::test_timeout;

// An actor<std::vector<int>> held busy by another thread, so that sends queue.
struct busy_actor {
  explicit busy_actor(handoff::actor_options o) : a(std::move(o)) {}
  handoff::actor<std::vector<int>> a;
  owner_thread owner{[this](auto hold) { a.post([hold](std::vector<int>&) { hold(); }); }};
  std::vector<int> log() {
    return a.ask([](std::vector<int>& v) { return v; }).get();
  }
};

auto record(int i) {
  return [i](std::vector<int>& v) { v.push_back(i); };
}

TEST(BoundedMailbox, TryPostReturnsFalseOnceTheCapacityIsReachedAndSendsNothing) {
  test_timeout limit{30s};
  busy_actor b{bounded(3)};  // the running handler takes one of the three
  EXPECT_TRUE(b.a.try_post(record(1)));
  EXPECT_TRUE(b.a.try_post(record(2)));
  EXPECT_FALSE(b.a.try_post(record(3)));
  EXPECT_EQ(b.a.pending(), 3U);
  b.owner.release();
  b.owner.join();
  EXPECT_EQ(b.log(), (std::vector<int>{1, 2}));
  EXPECT_TRUE(b.a.try_post(record(4)));  // room again
  EXPECT_EQ(b.log(), (std::vector<int>{1, 2, 4}));
}

TEST(BoundedMailbox, AnUnboundedActorAlwaysAcceptsTryPost) {
  test_timeout limit{30s};
  busy_actor b{handoff::actor_options{}};
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(b.a.try_post(record(i)));
  b.owner.release();
  b.owner.join();
  EXPECT_EQ(b.log().size(), 1000U);
}

TEST(BoundedMailbox, TryPostLeavesTheRejectedCallableUntouched) {
  test_timeout limit{30s};
  busy_actor b{bounded(1)};
  auto payload = std::make_shared<int>(7);
  auto f = [payload](std::vector<int>& v) { v.push_back(*payload); };
  EXPECT_FALSE(b.a.try_post(std::move(f)));
  EXPECT_EQ(payload.use_count(), 2) << "the rejected handler was moved from or destroyed";
  b.owner.release();
  b.owner.join();
  EXPECT_TRUE(b.a.try_post(std::move(f)));
  EXPECT_EQ(b.log(), (std::vector<int>{7}));
}

TEST(BoundedMailbox, UnderTheFailPolicyPostAndAskThrowMailboxFullAndSendNothing) {
  test_timeout limit{30s};
  busy_actor b{bounded(2, handoff::full_policy::fail)};
  b.a.post(record(1));
  EXPECT_THROW(b.a.post(record(2)), handoff::mailbox_full);
  EXPECT_THROW((void)b.a.ask([](std::vector<int>& v) { return v.size(); }), handoff::mailbox_full);
  EXPECT_THROW(b.a.defer(record(3)), handoff::mailbox_full);
  b.owner.release();
  b.owner.join();
  EXPECT_EQ(b.log(), (std::vector<int>{1}));
}

TEST(BoundedMailbox, UnderTheBlockPolicyAPostWaitsForRoomAndThenSends) {
  test_timeout limit{30s};
  busy_actor b{bounded(2)};
  b.a.post(record(1));
  blocking_call sender([&] { b.a.post(record(2)); });
  ASSERT_TRUE(sender.wait_until_blocked()) << "a post to a full mailbox returned without waiting";
  EXPECT_FALSE(sender.returned());
  EXPECT_TRUE(handoff::test::eventually([&] { return b.a.blocked_senders() == 1; }));
  b.owner.release();  // the owner runs 1, making room
  sender.join();
  EXPECT_EQ(b.a.blocked_senders(), 0U);
  b.owner.join();
  EXPECT_EQ(b.log(), (std::vector<int>{1, 2}));
}

TEST(BoundedMailbox, ManySendersWaitingForRoomAreAllWokenAndEveryMessageRunsOnce) {
  test_timeout limit{60s};
  busy_actor b{bounded(1)};  // full while the owner holds it
  std::vector<std::unique_ptr<blocking_call>> senders;
  for (int i = 0; i < 4; ++i) {
    senders.push_back(std::make_unique<blocking_call>([&b, i] { b.a.post(record(i)); }));
  }
  for (auto& s : senders) ASSERT_TRUE(s->wait_until_blocked());
  b.owner.release();
  for (auto& s : senders) s->join();
  b.owner.join();
  auto log = b.log();
  std::sort(log.begin(), log.end());
  EXPECT_EQ(log, (std::vector<int>{0, 1, 2, 3}));
}

// A full mailbox wakes its blocked senders one at a time (the oldest first), and a woken
// sender passes the wake-up on while the mailbox stays at most half full. The tests below
// hang or fail when a drained half-mailbox wakes one sender that never passes it on.

// `n` senders, started one after the other, each waiting for room in a post of one
// message to the full actor `b` before the next starts (so their order is known: the
// library's own count, since a thread seen asleep may be asleep elsewhere, e.g. in a
// sanitizer's allocator).
std::vector<std::unique_ptr<blocking_call>> blocked_senders(busy_actor& b, int n) {
  std::vector<std::unique_ptr<blocking_call>> senders;
  senders.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const std::size_t before = b.a.blocked_senders();
    senders.push_back(std::make_unique<blocking_call>([&b, i] { b.a.post(record(i)); }));
    EXPECT_TRUE(handoff::test::eventually([&] { return b.a.blocked_senders() == before + 1; })) << "sender " << i;
  }
  return senders;
}

TEST(BoundedMailbox, SendersWokenForOneMessageEachDoNotLeaveTheOthersAsleep) {
  // The first woken sender is admitted only after the owner has drained past half (its
  // messages take no time), posts once and returns: no later release crosses half, so
  // it is the one that must wake the next.
  test_timeout limit{10s};
  for (const std::uint32_t capacity : {2U, 4U}) {
    busy_actor b{bounded(capacity)};
    for (std::uint32_t i = 1; i < capacity; ++i) b.a.post(record(-1));  // full
    auto senders = blocked_senders(b, 6);
    b.owner.release();
    for (auto& s : senders) s->join();
    b.owner.join();
    auto log = b.log();
    std::sort(log.begin(), log.end());
    log.erase(log.begin(), log.begin() + (capacity - 1));
    EXPECT_EQ(log, (std::vector<int>{0, 1, 2, 3, 4, 5})) << "capacity " << capacity;
  }
}

TEST(BoundedMailbox, BlockedSendersAreServedInTheOrderTheyBeganToWait) {
  // From capacity 4 on, a woken sender can be admitted behind others (not the owner) and
  // still leave the mailbox at most half full: it must wake the next only once its own
  // message is in, or the next one's message could overtake it.
  test_timeout limit{20s};
  for (const std::uint32_t capacity : {2U, 4U, 8U}) {
    busy_actor b{bounded(capacity)};
    std::vector<int> expected(capacity - 1, -1);
    for (std::uint32_t i = 1; i < capacity; ++i) b.a.post(record(-1));  // full
    auto senders = blocked_senders(b, 8);
    for (int i = 0; i < 8; ++i) expected.push_back(i);
    b.owner.release();
    for (auto& s : senders) s->join();
    b.owner.join();
    EXPECT_EQ(b.log(), expected) << "capacity " << capacity;
  }
}

TEST(BoundedMailbox, ManyMoreBlockedSendersThanCoresAllGetThroughAndEveryMessageRunsOnceInOrder) {
  test_timeout limit{10s};
  constexpr int senders = 16;
  constexpr int per_sender = 20;
  struct tally {
    std::vector<int> next = std::vector<int>(senders, 0);
    int out_of_order = 0;
  };
  handoff::actor<tally> a{bounded(4)};
  std::latch hold{1};
  std::jthread owner([&] { a.post([&](tally&) { hold.wait(); }); });
  ASSERT_TRUE(handoff::test::eventually([&] { return a.pending() == 1; }));
  for (int i = 0; i < 3; ++i) a.post([](tally&) {});  // full
  std::vector<std::unique_ptr<blocking_call>> threads;
  threads.reserve(senders);
  for (int s = 0; s < senders; ++s) {
    threads.push_back(std::make_unique<blocking_call>([&a, s] {
      for (int i = 0; i < per_sender; ++i) {
        a.post([s, i](tally& t) { t.out_of_order += t.next[s]++ == i ? 0 : 1; });
      }
    }));
  }
  for (auto& t : threads) ASSERT_TRUE(t->wait_until_blocked());
  hold.count_down();
  for (auto& t : threads) t->join();
  owner.join();
  const auto [next, out_of_order] = a.ask([](tally& t) { return std::pair(t.next, t.out_of_order); }).get();
  EXPECT_EQ(next, std::vector<int>(senders, per_sender));
  EXPECT_EQ(out_of_order, 0);
}

void spin_for(std::chrono::nanoseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// The capacity is exact under concurrent senders: every handler, and a thread watching
// meanwhile, finds at most `capacity` messages counted (the running one included).
TEST(BoundedMailbox, ConcurrentSendersNeverHaveMoreThanTheCapacityCountedAndEachKeepsItsOrder) {
  test_timeout limit{60s};
  constexpr std::uint32_t capacity = 8;
  constexpr int per_sender = 2000;
  for (const int senders : {4, 8}) {
    struct tally {
      std::vector<int> next;
      int out_of_order = 0;
      std::uint64_t most = 0;
    };
    handoff::actor<tally> a{bounded(capacity)};
    a.post([senders](tally& t) { t.next.assign(static_cast<std::size_t>(senders), 0); });
    std::atomic<bool> stop{false};
    std::uint64_t watched = 0;
    std::jthread watcher([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        watched = std::max<std::uint64_t>(watched, a.pending());
        std::this_thread::sleep_for(10us);
      }
    });
    std::latch start{senders};
    handoff::test::run_threads(senders, [&a, &start](int s) {
      start.arrive_and_wait();
      for (int i = 0; i < per_sender; ++i) {
        a.post([&a, s, i](tally& t) {
          t.out_of_order += t.next[static_cast<std::size_t>(s)]++ == i ? 0 : 1;
          // The first handler waits for the others to fill the mailbox (they block once it
          // is full), so that the bound is reached in every run however the threads are
          // scheduled; the later ones are slower than the senders.
          if (t.most == 0) (void)handoff::test::eventually([&a] { return a.pending() >= capacity; });
          t.most = std::max<std::uint64_t>(t.most, a.pending());
          spin_for(1us);
        });
      }
    });
    stop = true;
    watcher.join();
    const auto [next, out_of_order, most] =
        a.ask([](tally& t) { return std::tuple(t.next, t.out_of_order, t.most); }).get();
    EXPECT_EQ(next, std::vector<int>(static_cast<std::size_t>(senders), per_sender)) << senders << " senders";
    EXPECT_EQ(out_of_order, 0) << senders << " senders";
    EXPECT_LE(most, capacity) << senders << " senders";
    EXPECT_LE(watched, capacity) << senders << " senders";
    EXPECT_EQ(most, capacity) << senders << " senders: the mailbox never filled";
  }
}

TEST(BoundedMailbox, ASenderWhoseMaxBlockPassesWhileOthersWaitLeavesTheWayClearForThem) {
  test_timeout limit{10s};
  busy_actor b{bounded(2, handoff::full_policy::block, 600ms)};
  b.a.post(record(-1));  // full
  std::atomic<bool> timed_out{false};
  blocking_call first([&] {
    try {
      b.a.post(record(0));
    } catch (const handoff::mailbox_full&) {
      timed_out = true;
    }
  });
  ASSERT_TRUE(handoff::test::eventually([&] { return b.a.blocked_senders() == 1; }));
  std::this_thread::sleep_for(400ms);
  auto later = blocked_senders(b, 3);  // their deadlines pass 400 ms after the first's
  first.join();
  EXPECT_TRUE(timed_out);
  const auto released = std::chrono::steady_clock::now();
  b.owner.release();
  for (auto& s : later) s->join();
  // Woken by the drain, not let in by their own deadline (at least 400 ms away).
  EXPECT_LT(std::chrono::steady_clock::now() - released, 300ms);
  b.owner.join();
  EXPECT_EQ(b.log(), (std::vector<int>{-1, 0, 1, 2}));
}

TEST(BoundedMailbox, MaxBlockEndsTheWaitWithMailboxFullAndNothingSent) {
  test_timeout limit{30s};
  busy_actor b{bounded(1, handoff::full_policy::block, 50ms)};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THROW(b.a.post(record(1)), handoff::mailbox_full);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  b.owner.release();
  b.owner.join();
  EXPECT_TRUE(b.log().empty());
}

TEST(BoundedMailbox, AHandlersSendToAFullMailboxThrowsAtOnceWhateverThePolicy) {
  test_timeout limit{30s};
  busy_actor full{bounded(1)};  // block policy, no max_block: waiting here would never end
  std::atomic<bool> threw{false};
  handoff::actor<int> sender;
  sender
      .ask([&](int&) {
        try {
          full.a.post(record(1));
        } catch (const handoff::mailbox_full&) {
          threw = true;
        }
      })
      .get();
  EXPECT_TRUE(threw);
  full.owner.release();
  full.owner.join();
  EXPECT_TRUE(full.log().empty());
}

// A keyed-mutex callback granted at once (its key free) runs inside lock_async on this
// thread, yet counts as inside a handler, as one granted later does: it holds the key, so
// waiting for room could deadlock against the full actor's owner waiting for that key.
TEST(BoundedMailbox, AKeyedCallbackGrantedAtOnceThatPostsToAFullMailboxGetsMailboxFullAtOnce) {
  test_timeout limit{10s};      // today's failure mode is a hang: abort instead
  busy_actor full{bounded(1)};  // block policy, no max_block: waiting here would never end
  handoff::keyed_mutex<> m;
  bool ran = false;
  bool threw = false;
  m.lock_async("free", [&](handoff::key_guard g) {
    ran = g.owns_lock();
    try {
      full.a.post(record(1));
    } catch (const handoff::mailbox_full&) {
      threw = true;
    }
  });
  EXPECT_TRUE(ran);  // granted and run before lock_async returned
  EXPECT_TRUE(threw);
  EXPECT_EQ(m.size(), 0U);
  full.owner.release();
  full.owner.join();
  EXPECT_TRUE(full.log().empty());
}

TEST(BoundedMailbox, AHandlerPostingToItsOwnFullActorGetsMailboxFullNotADeadlock) {
  test_timeout limit{30s};
  handoff::actor<int> a{bounded(1)};  // the running handler fills it
  std::atomic<int> outcome{0};
  a.post([&](int&, handoff::actor<int>& self) {
    try {
      self.post([](int& n) { ++n; });
      outcome = 1;
    } catch (const handoff::mailbox_full&) {
      outcome = 2;
    }
    EXPECT_FALSE(self.try_post([](int& n) { ++n; }));
  });
  EXPECT_EQ(outcome, 2);
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
}

TEST(BoundedMailbox, AnUncaughtMailboxFullInAHandlerGoesToTheSendersErrorHook) {
  test_timeout limit{30s};
  busy_actor full{bounded(1)};
  std::atomic<int> reported{0};
  handoff::actor_options o;
  o.on_error = [&](std::exception_ptr e) {
    try {
      std::rethrow_exception(e);
    } catch (const handoff::mailbox_full&) {
      ++reported;
    }
  };
  handoff::actor<int> sender{std::move(o)};
  sender.post([&](int&) { full.a.post(record(1)); });
  EXPECT_EQ(reported, 1);
  full.owner.release();
}

TEST(BoundedMailbox, AThreadThatOwnsTheFullActorThroughItsQueueRunsItInsteadOfWaitingForever) {
  test_timeout limit{30s};
  handoff::actor<std::vector<int>> a{bounded(1)};
  a.defer(record(1));  // this thread owns `a` now, through its run queue: full, and not running
  EXPECT_EQ(a.pending(), 1U);
  a.post(record(2));  // block policy: runs its queue first, which makes room
  EXPECT_EQ(a.ask([](std::vector<int>& v) { return v; }).get(), (std::vector<int>{1, 2}));
}

TEST(BoundedMailbox, AsyncAskOnAFullMailboxThrowsFromCoAwait) {
  test_timeout limit{30s};
  busy_actor b{bounded(1)};
  std::atomic<int> outcome{0};
  [](handoff::actor<std::vector<int>>& a, std::atomic<int>& out) -> handoff::test::fire_and_forget {
    try {
      co_await a.async_ask([](std::vector<int>& v) { return v.size(); });
      out = 1;
    } catch (const handoff::mailbox_full&) {
      out = 2;
    }
  }(b.a, outcome);
  EXPECT_EQ(outcome, 2);
}

TEST(BoundedMailbox, TrySendOnAFullBasicActorLeavesTheMessageWithTheCaller) {
  test_timeout limit{30s};
  // Message 0 holds the actor busy until `gate` opens.
  struct gated_sink {
    std::latch* entered;
    std::latch* gate;
    std::vector<int>* seen;
    void operator()(std::unique_ptr<int> m) const {
      if (*m == 0) {
        entered->count_down();
        gate->wait();
      } else {
        seen->push_back(*m);
      }
    }
  };
  std::latch entered{1};
  std::latch gate{1};
  std::vector<int> seen;
  handoff::basic_actor<std::unique_ptr<int>, gated_sink> a{bounded(1), gated_sink{&entered, &gate, &seen}};
  std::jthread owner([&] { a.send(std::make_unique<int>(0)); });
  entered.wait();
  auto m = std::make_unique<int>(5);
  EXPECT_FALSE(a.try_send(std::move(m)));
  ASSERT_NE(m, nullptr) << "the rejected message was moved from";
  EXPECT_EQ(*m, 5);
  gate.count_down();
  owner.join();
  EXPECT_TRUE(a.try_send(std::move(m)));  // idle now: runs here
  EXPECT_EQ(seen, (std::vector<int>{5}));
}

TEST(BoundedMailbox, BlockedSendersCountsTheSendsWaitingForRoomOfEitherActorType) {
  test_timeout limit{30s};
  busy_actor unbounded{handoff::actor_options{}};
  EXPECT_EQ(unbounded.a.blocked_senders(), 0U);
  unbounded.owner.release();
  std::latch entered{1};
  std::latch gate{1};
  auto sink = [&](int m) {
    if (m == 0) {
      entered.count_down();
      gate.wait();
    }
  };
  handoff::basic_actor<int, decltype(sink)> a{bounded(1), sink};
  std::jthread owner([&] { a.send(0); });
  entered.wait();
  EXPECT_EQ(a.blocked_senders(), 0U);
  std::vector<std::unique_ptr<blocking_call>> senders;
  for (int i = 1; i <= 2; ++i) {
    senders.push_back(std::make_unique<blocking_call>([&a, i] { a.send(i); }));
    EXPECT_TRUE(handoff::test::eventually([&] { return a.blocked_senders() == static_cast<std::size_t>(i); }));
  }
  gate.count_down();
  for (auto& s : senders) s->join();
  EXPECT_EQ(a.blocked_senders(), 0U);
}

TEST(BoundedMailbox, EverySendThatFindsTheMailboxFullIsCountedOnceByTheMetricsSink) {
  test_timeout limit{30s};
  struct counting_sink final : handoff::metrics_sink {
    std::atomic<std::uint64_t> full{0};
    void add(handoff::metric_counter c, std::uint64_t n) noexcept override {
      if (c == handoff::metric_counter::mailbox_full) full += n;
    }
    void observe_wait(handoff::metric_wait, std::chrono::nanoseconds) noexcept override {}
  } sink;
  handoff::set_metrics_sink(&sink);
  {
    busy_actor b{bounded(1, handoff::full_policy::block, 20ms)};
    EXPECT_FALSE(b.a.try_post(record(1)));
    EXPECT_FALSE(b.a.try_post(record(2)));
    EXPECT_THROW(b.a.post(record(3)), handoff::mailbox_full);  // waited 20 ms: still one event
    b.owner.release();
    b.owner.join();
    EXPECT_TRUE(b.a.try_post(record(4)));  // room: no event
    b.log();
  }
  handoff::set_metrics_sink(nullptr);
  EXPECT_EQ(sink.full.load(), 3U);
}

TEST(BoundedMailbox, ANegativeMaxBlockIsRejected) {
  EXPECT_THROW(handoff::actor<int>(bounded(4, handoff::full_policy::block, -1ns)), std::invalid_argument);
}

TEST(BoundedMailbox, TheOwnerGivesBackRoomAfterEveryMessageNotOnlyWhenTheMailboxEmpties) {
  test_timeout limit{30s};
  busy_actor b{bounded(2)};
  std::latch in_second{1};
  std::latch leave_second{1};
  b.a.post([&](std::vector<int>&) {  // queued behind the holder: the mailbox is full
    in_second.count_down();
    leave_second.wait();
  });
  EXPECT_FALSE(b.a.try_post(record(1)));
  b.owner.release();  // the holder's handler ends; the same drain goes on into the second
  in_second.wait();
  // The drain has not emptied the mailbox nor ended, but the finished handler's slot is free.
  EXPECT_TRUE(b.a.try_post(record(2)));
  leave_second.count_down();
  b.owner.join();
  EXPECT_EQ(b.log(), (std::vector<int>{2}));
}

TEST(BoundedMailbox, ASenderKeepingABoundedActorFullNeverPushesItsCountPastTheCapacity) {
  test_timeout limit{30s};
  // A sender on another thread keeps a capacity-2 actor full with try_post while the
  // owner drains: every message it got in runs, in order, and the count seen from the
  // handlers never exceeds the capacity.
  handoff::actor<std::vector<int>> a{bounded(2)};
  std::atomic<bool> stop{false};
  std::atomic<int> accepted{0};
  std::atomic<int> max_seen{0};
  std::jthread feeder([&] {
    for (int i = 0; !stop.load(); ++i) {
      if (a.try_post([&, i](std::vector<int>& v) {
            v.push_back(i);
            const int p = static_cast<int>(a.pending());
            int m = max_seen.load();
            while (p > m && !max_seen.compare_exchange_weak(m, p)) {
            }
            std::this_thread::sleep_for(10us);
          })) {
        ++accepted;
      }
    }
  });
  ASSERT_TRUE(handoff::test::eventually([&] { return accepted.load() > 200; }));
  stop = true;
  feeder.join();
  const auto log = a.ask([](std::vector<int>& v) { return v; }).get();
  EXPECT_EQ(static_cast<int>(log.size()), accepted.load());
  EXPECT_TRUE(std::is_sorted(log.begin(), log.end())) << "per-sender FIFO";
  EXPECT_LE(max_seen.load(), 2) << "the count went past the capacity";
}

// ---------------------------------------------------------------------------------------
// defer() from an actor's own handler yields its turn

TEST(DeferYield, AHandlerThatDefersToItsOwnActorLetsTheActorsItWonRunFirst) {
  test_timeout limit{30s};
  std::vector<std::string> order;
  handoff::actor<int> other;
  handoff::actor<int> self_deferring;
  self_deferring.post([&](int&, handoff::actor<int>& self) {
    order.emplace_back("first step");
    other.post([&](int&) { order.emplace_back("other"); });  // won by this thread: queued
    self.defer([&](int&) { order.emplace_back("second step"); });
  });
  EXPECT_EQ(order, (std::vector<std::string>{"first step", "other", "second step"}));
}

TEST(DeferYield, AProducerThatFillsABoundedActorContinuesInDeferredStepsAndLosesNothing) {
  test_timeout limit{30s};
  // The Counting pattern with backpressure: try_post until full, then defer the rest to
  // itself; the counter (owned by this thread through its queue) drains in between.
  constexpr int n = 100000;
  struct counter_state {
    int n = 0;
    std::uint64_t max_pending = 0;
  };
  handoff::actor<counter_state> counter{bounded(64)};
  struct producer_state {
    int sent = 0;
    int yields = 0;
  };
  handoff::actor<producer_state> producer;
  std::function<void(producer_state&, handoff::actor<producer_state>&)> step =
      [&](producer_state& p, handoff::actor<producer_state>& self) {
        while (p.sent < n && counter.try_post([&counter](counter_state& c) {
          ++c.n;
          c.max_pending = std::max<std::uint64_t>(c.max_pending, counter.pending());
        })) {
          ++p.sent;
        }
        if (p.sent < n) {
          ++p.yields;
          self.defer(step);
        }
      };
  producer.post(step);
  const auto [count, max_pending] = counter.ask([](counter_state& c) { return std::pair(c.n, c.max_pending); }).get();
  EXPECT_EQ(count, n);
  EXPECT_LE(max_pending, 64U);
  EXPECT_GE(producer.ask([](producer_state& p) { return p.yields; }).get(), n / 64 - 1);
}

}  // namespace
