// Batch sends: actor::post_all / try_post_all and basic_actor::send_all / try_send_all.
// One atomic counts the whole batch, so its messages run in order with no other sender's
// message between them; a throw while building sends nothing; a bounded mailbox takes all
// or none. A batch is one mailbox node: a handler that throws, or a budget spent, in the
// middle of it leaves the rest first in the mailbox; destroying the actor runs or destroys
// the rest as for any queued message.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"  // designated actor_options
#endif
#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <iterator>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../support/keyed_mutex_support.hpp"  // blocking_call
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"
#include "handoff/executor.hpp"
#include "handoff/thread_pool.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::blocking_call;
using handoff::test::bounded;
using handoff::test::eventually;
using handoff::test::owner_thread;
using handoff::test::test_timeout;

using log_actor = handoff::actor<std::vector<int>>;
using handler = std::function<void(std::vector<int>&)>;

std::vector<handler> recorders(int from, int n) {
  std::vector<handler> hs;
  for (int i = from; i < from + n; ++i) hs.emplace_back([i](std::vector<int>& v) { v.push_back(i); });
  return hs;
}

std::vector<int> iota(int from, int n) {
  std::vector<int> v;
  for (int i = from; i < from + n; ++i) v.push_back(i);
  return v;
}

// A log actor held busy by another thread, so that sends queue behind it.
struct busy_log {
  explicit busy_log(handoff::actor_options o = {}) : a(std::move(o)) {}
  log_actor a;
  owner_thread owner{[this](auto hold) { a.post([hold](std::vector<int>&) { hold(); }); }};
  std::vector<int> log() {
    owner.release();
    owner.join();
    return a.ask([](std::vector<int>& v) { return v; }).get();
  }
};

TEST(BatchSend, AnIdleActorRunsTheWholeBatchInOrderOnTheCallingThreadBeforePostAllReturns) {
  log_actor a;
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<std::thread::id> ran_on;
  std::vector<handler> hs = recorders(0, 40);
  hs.emplace_back([&](std::vector<int>&) { ran_on.push_back(std::this_thread::get_id()); });
  a.post_all(hs);
  EXPECT_EQ(a.pending(), 0u);
  ASSERT_EQ(ran_on.size(), 1u);
  EXPECT_EQ(ran_on[0], caller);
  EXPECT_EQ(a.ask([](std::vector<int>& v) { return v; }).get(), iota(0, 40));
  EXPECT_EQ(hs.size(), 41u) << "an lvalue range is copied from, not moved";
  EXPECT_TRUE(static_cast<bool>(hs[0]));
}

TEST(BatchSend, ABatchQueuedBehindABusyOwnerRunsAfterWhatWasQueuedBeforeIt) {
  busy_log b;
  b.a.post([](std::vector<int>& v) { v.push_back(-1); });
  b.a.post_all(recorders(0, 100));
  b.a.post([](std::vector<int>& v) { v.push_back(-2); });
  EXPECT_EQ(b.a.pending(), 103u);  // the owner's message, -1, the batch, -2
  std::vector<int> want{-1};
  for (int i : iota(0, 100)) want.push_back(i);
  want.push_back(-2);
  EXPECT_EQ(b.log(), want);
}

TEST(BatchSend, AnEmptyRangeSendsNothing) {
  handoff::basic_actor<int, std::function<void(int)>> a{[](int) { ADD_FAILURE() << "nothing was sent"; }};
  a.send_all(std::vector<int>{});
  EXPECT_TRUE(a.try_send_all(std::vector<int>{}));
  EXPECT_EQ(a.pending(), 0u);
}

// Each sender's batches arrive whole: the messages of one batch are consecutive in the
// handler's log, whatever the other senders do meanwhile.
TEST(BatchSend, ConcurrentBatchesAreNeverInterleavedWithOtherSendersMessages) {
  const test_timeout watchdog(60s);
  constexpr int senders = 4;
  constexpr int batches = 300;
  constexpr int batch = 16;
  struct entry {
    int sender;
    int seq;
  };
  struct recorder {
    std::vector<entry>* log;
    void operator()(entry e) const { log->push_back(e); }
  };
  std::vector<entry> log;
  {
    handoff::basic_actor<entry, recorder> a{recorder{&log}};
    std::vector<std::thread> threads;
    for (int s = 0; s < senders; ++s) {
      threads.emplace_back([&a, s] {
        std::array<entry, batch> msgs{};
        for (int b = 0; b < batches; ++b) {
          for (int i = 0; i < batch; ++i) msgs[i] = entry{s, b * batch + i};
          if (b % 2 == 0) {
            a.send_all(msgs);
          } else {
            a.send(msgs[0]);  // single sends between the batches, from the same sender
            a.send_all(msgs.begin() + 1, msgs.end());
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
  }
  ASSERT_EQ(log.size(), std::size_t{senders} * batches * batch);
  std::array<int, senders> next{};
  for (std::size_t i = 0; i < log.size(); ++i) {
    const entry e = log[i];
    ASSERT_EQ(e.seq, next[e.sender]) << "sender " << e.sender << "'s messages out of order at " << i;
    ++next[e.sender];
    // Inside a batch (not its first message), the previous message is the same sender's.
    const int in_batch = e.seq % batch;
    const bool first_of_batch = in_batch == 0 || (in_batch == 1 && (e.seq / batch) % 2 == 1);
    if (!first_of_batch) {
      ASSERT_EQ(log[i - 1].sender, e.sender) << "another sender's message inside a batch at " << i;
    }
  }
}

// A message whose copy throws on its third element: nothing of the batch is sent, and
// what was built is destroyed.
struct fragile {
  static inline int copies_left = 0;
  static inline std::atomic<int> alive{0};
  int v = 0;
  explicit fragile(int x) : v(x) { ++alive; }
  fragile(const fragile& o) : v(o.v) {
    if (copies_left-- == 0) throw std::runtime_error("copy failed");
    ++alive;
  }
  fragile(fragile&& o) noexcept : v(o.v) { ++alive; }
  fragile& operator=(const fragile&) = delete;
  fragile& operator=(fragile&&) = delete;
  ~fragile() { --alive; }
};

TEST(BatchSend, AThrowWhileBuildingTheBatchSendsNothingAndDestroysWhatWasBuilt) {
  int handled = 0;
  handoff::basic_actor<fragile, std::function<void(fragile)>> a{[&](const fragile&) { ++handled; }};
  std::vector<fragile> msgs;
  msgs.reserve(5);
  for (int i = 0; i < 5; ++i) msgs.emplace_back(i);
  const int before = fragile::alive.load();
  fragile::copies_left = 2;
  EXPECT_THROW(a.send_all(msgs), std::runtime_error);
  EXPECT_EQ(handled, 0);
  EXPECT_EQ(a.pending(), 0u);
  EXPECT_EQ(fragile::alive.load(), before) << "messages built before the throw were not destroyed";
  fragile::copies_left = 100;
  a.send_all(msgs);
  EXPECT_EQ(handled, 5);
}

TEST(BatchSend, ABoundedMailboxTakesTheWholeBatchOrNoneOfIt) {
  busy_log b(bounded(8, handoff::full_policy::fail));
  b.a.post_all(recorders(0, 4));  // 1 running + 4 = 5 counted
  EXPECT_FALSE(b.a.try_post_all(recorders(10, 4))) << "9 > 8 must be refused whole";
  EXPECT_EQ(b.a.pending(), 5u);
  EXPECT_THROW(b.a.post_all(recorders(20, 4)), handoff::mailbox_full);
  EXPECT_EQ(b.a.pending(), 5u);
  EXPECT_TRUE(b.a.try_post_all(recorders(30, 3)));  // exactly full
  EXPECT_EQ(b.a.pending(), 8u);
  std::vector<int> want = iota(0, 4);
  for (int i : iota(30, 3)) want.push_back(i);
  EXPECT_EQ(b.log(), want);
}

TEST(BatchSend, ABatchThatCouldNeverFitIsRefusedWithInvalidArgument) {
  log_actor fail(bounded(4, handoff::full_policy::fail));
  EXPECT_THROW(fail.post_all(recorders(0, 5)), std::invalid_argument);
  EXPECT_THROW(static_cast<void>(fail.try_post_all(recorders(0, 5))), std::invalid_argument);
  fail.post_all(recorders(0, 4));  // the whole capacity, where no batch waits
  log_actor block(bounded(4));
  EXPECT_THROW(block.post_all(recorders(0, 3)), std::invalid_argument) << "a waiting batch holds at most half";
  block.post_all(recorders(0, 2));
  log_actor one(bounded(1));
  one.post_all(recorders(0, 1));  // one message always may
  EXPECT_EQ(fail.pending() + block.pending() + one.pending(), 0u);
  EXPECT_EQ(fail.ask([](std::vector<int>& v) { return v; }).get(), iota(0, 4));
}

TEST(BatchSend, ABlockedBatchWaitsForRoomForAllOfItThenGoesInWhole) {
  const test_timeout watchdog(60s);
  busy_log b(bounded(8));
  b.a.post_all(recorders(0, 4));
  b.a.post_all(recorders(4, 3));  // full: 8 counted
  blocking_call sender([&] { b.a.post_all(recorders(100, 4)); });
  ASSERT_TRUE(sender.wait_until_blocked());
  EXPECT_EQ(b.a.pending(), 8u) << "a batch that waits counted nothing";
  b.owner.release();  // the drain makes room: the batch goes in and runs
  sender.join();
  std::vector<int> want = iota(0, 7);
  for (int i : iota(100, 4)) want.push_back(i);
  EXPECT_EQ(b.log(), want);
}

// Five senders blocked on batches of half the capacity: each released batch must leave
// room that wakes the next waiter, or some sender sleeps forever (the watchdog fires).
TEST(BatchSend, FiveSendersOfBlockedBatchesOnCapacityEightAllGetThroughWholeAndInOrder) {
  const test_timeout watchdog(60s);
  constexpr int senders = 5;
  constexpr int batches = 30;
  constexpr int k = 4;
  busy_log b(bounded(8));
  b.a.post_all(recorders(-7, 4));
  b.a.post_all(recorders(-3, 3));  // full: the held message and these 7
  std::vector<std::unique_ptr<blocking_call>> threads;
  for (int s = 0; s < senders; ++s) {
    threads.push_back(std::make_unique<blocking_call>([&b, s] {
      for (int j = 0; j < batches; ++j) b.a.post_all(recorders(1000 * (s + 1) + j * k, k));
    }));
  }
  for (auto& t : threads) ASSERT_TRUE(t->wait_until_blocked());
  b.owner.release();
  for (auto& t : threads) t->join();
  const std::vector<int> log = b.log();
  ASSERT_EQ(log.size(), std::size_t{7 + senders * batches * k});
  EXPECT_EQ(std::vector<int>(log.begin(), log.begin() + 7), iota(-7, 7));
  std::vector<int> next(senders);
  for (int s = 0; s < senders; ++s) next[static_cast<std::size_t>(s)] = 1000 * (s + 1);
  for (std::size_t i = 7; i < log.size(); i += k) {  // whole batches, each sender's in order
    const auto s = static_cast<std::size_t>(log[i] / 1000 - 1);
    ASSERT_LT(s, next.size()) << "at " << i;
    for (int j = 0; j < k; ++j) ASSERT_EQ(log[i + static_cast<std::size_t>(j)], next[s]++) << "at " << i;
  }
}

TEST(BatchSend, APostAllFromInsideAHandlerToAnIdleActorRunsAfterTheHandlerInOrder) {
  std::vector<int> events;  // touched only by this thread: every handler runs here
  handoff::actor<int> target;
  handoff::actor<int> outer;
  std::vector<std::function<void(int&)>> hs;
  for (int i = 0; i < 3; ++i) hs.emplace_back([&events, i](int&) { events.push_back(i); });
  outer.post([&](int&) {
    target.post_all(hs);
    events.push_back(-1);  // before the batch: nothing runs nested inside a handler
  });
  EXPECT_EQ(events, (std::vector<int>{-1, 0, 1, 2}));
  EXPECT_EQ(target.pending(), 0u);
}

TEST(BatchSend, MoveIteratorsMoveTheMessagesIn) {
  std::vector<std::unique_ptr<int>> got;
  handoff::basic_actor<std::unique_ptr<int>, std::function<void(std::unique_ptr<int>)>> a{
      [&](std::unique_ptr<int> p) { got.push_back(std::move(p)); }};
  std::vector<std::unique_ptr<int>> msgs;
  for (int i = 0; i < 3; ++i) msgs.push_back(std::make_unique<int>(i));
  a.send_all(std::make_move_iterator(msgs.begin()), std::make_move_iterator(msgs.end()));
  ASSERT_EQ(got.size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*got[i], i);
  EXPECT_EQ(msgs[0], nullptr);
}

// Values handled, in order; throws on the values listed in `fail` (after logging them).
struct int_log {
  std::vector<int>* log;
  std::vector<int> fail;
  void operator()(int v) const {
    log->push_back(v);
    if (std::find(fail.begin(), fail.end(), v) != fail.end()) throw std::runtime_error("handler failed");
  }
};
using int_actor = handoff::basic_actor<int, int_log>;

TEST(BatchSend, AHandlerThatThrowsInsideABatchLeavesTheRestToRunNextInOrderEachOnce) {
  std::vector<int> log;
  int errors = 0;
  handoff::actor_options o;
  o.on_error = [&](const std::exception_ptr&) { ++errors; };
  int_actor a{o, int_log{&log, {3, 9, 15}}};
  a.send_all(iota(0, 16));  // idle: runs here; the first and the last message throw too
  EXPECT_EQ(log, iota(0, 16));
  EXPECT_EQ(errors, 3);
  EXPECT_EQ(a.pending(), 0u);
}

TEST(BatchSend, AThrowInABatchQueuedBehindABusyOwnerKeepsItAheadOfLaterMessages) {
  std::vector<int> log;
  std::atomic<int> errors{0};
  handoff::actor_options o;
  o.on_error = [&](const std::exception_ptr&) { ++errors; };
  std::atomic<bool> in_handler{false};
  std::atomic<bool> go{false};
  handoff::basic_actor<int, std::function<void(int)>> b{o, [&](int v) {
                                                          log.push_back(v);
                                                          if (v == 100) {
                                                            in_handler = true;
                                                            ASSERT_TRUE(eventually([&] { return go.load(); }));
                                                          }
                                                          if (v == 2 || v == 7)
                                                            throw std::runtime_error("handler failed");
                                                        }};
  std::thread first([&] { b.send(100); });
  ASSERT_TRUE(eventually([&] { return in_handler.load(); }));
  b.send_all(iota(0, 10));  // queued behind 100
  b.send(50);               // after the batch
  go = true;
  first.join();
  std::vector<int> want{100};
  for (int i : iota(0, 10)) want.push_back(i);
  want.push_back(50);
  EXPECT_EQ(log, want);
  EXPECT_EQ(errors.load(), 2);
  EXPECT_EQ(b.pending(), 0u);
}

// Keeps the actor's continuations for the test to run one at a time.
struct held_executor {
  std::mutex mu;
  std::vector<handoff::work> held;
  void execute(handoff::work w) {
    const std::lock_guard g(mu);
    held.push_back(w);
  }
  bool run_one() {
    handoff::work w;
    {
      const std::lock_guard g(mu);
      if (held.empty()) return false;
      w = held.front();
      held.erase(held.begin());
    }
    w();
    return true;
  }
};

TEST(BatchSend, ABudgetSpentInsideABatchHandsTheRestToTheExecutorFirstInLine) {
  std::vector<int> log;
  held_executor ex;
  int_actor a{handoff::actor_options{.executor = ex, .max_messages = 4}, int_log{&log, {}}};
  a.send_all(iota(0, 10));  // idle: this thread runs the budget's four, then hands on
  EXPECT_EQ(log, iota(0, 4));
  EXPECT_EQ(a.pending(), 6u);
  a.send(100);  // counted behind the batch's rest
  ASSERT_TRUE(ex.run_one());
  EXPECT_EQ(log, iota(0, 8));
  ASSERT_TRUE(ex.run_one());
  std::vector<int> want = iota(0, 10);
  want.push_back(100);
  EXPECT_EQ(log, want);
  EXPECT_FALSE(ex.run_one());
  EXPECT_EQ(a.pending(), 0u);
}

TEST(BatchSend, ABoundedActorRunsABatchOneMessageAtATimeAndGivesRoomBackAfterEach) {
  std::vector<int> log;
  held_executor ex;
  handoff::actor_options o = bounded(16, handoff::full_policy::fail);
  o.executor = ex;
  o.max_messages = 3;
  int_actor a{o, int_log{&log, {}}};
  a.send_all(iota(0, 8));
  EXPECT_EQ(log, iota(0, 3));
  EXPECT_EQ(a.pending(), 5u) << "room given back for each message run";
  EXPECT_TRUE(a.try_send_all(iota(8, 11)));  // exactly full again: 5 + 11
  EXPECT_FALSE(a.try_send(99));
  while (ex.run_one()) {
  }
  EXPECT_EQ(log, iota(0, 19));
}

// A message that counts its live copies, so that a test sees every one destroyed.
struct tracked {
  static inline std::atomic<int> alive{0};
  int v;
  explicit tracked(int x) : v(x) { ++alive; }
  tracked(const tracked& o) : v(o.v) { ++alive; }
  tracked(tracked&& o) noexcept : v(o.v) { ++alive; }
  tracked& operator=(const tracked&) = delete;
  tracked& operator=(tracked&&) = delete;
  ~tracked() { --alive; }
};

TEST(BatchSend, AnActorDestroyedByAHandlerInsideABatchDestroysTheRestUnrun) {
  using self_destroying = handoff::basic_actor<tracked, std::function<void(tracked)>>;
  std::vector<int> ran;
  std::unique_ptr<self_destroying> a;
  a = std::make_unique<self_destroying>([&](tracked t) {
    ran.push_back(t.v);
    if (t.v == 3) a.reset();  // from its own handler: the rest must not run
  });
  std::vector<tracked> batch;
  for (int i = 0; i < 10; ++i) batch.emplace_back(i);
  const int before = tracked::alive.load();
  a->send_all(batch);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(ran, iota(0, 4));
  EXPECT_EQ(tracked::alive.load(), before) << "the batch's unrun messages were not destroyed";
}

TEST(BatchSend, DestroyingAnActorWithAPartlyRunBatchWaitsForTheRestToRun) {
  const test_timeout watchdog(60s);
  std::vector<int> log;
  held_executor ex;
  auto a = std::make_unique<int_actor>(handoff::actor_options{.executor = ex, .max_messages = 4}, int_log{&log, {}});
  a->send_all(iota(0, 10));
  ASSERT_EQ(log, iota(0, 4));
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    a.reset();  // blocks until the batch's rest has run
    destroyed = true;
  });
  ASSERT_TRUE(eventually([&] {
    ex.run_one();
    return destroyed.load();
  }));
  destroyer.join();
  EXPECT_EQ(log, iota(0, 10));
}

TEST(BatchSend, ABatchLargerThanThePoolsLargestNodeRunsWholeAndInOrder) {
  // 5,000 strings: a node of about 160 KB, from operator new rather than the pool's slabs.
  std::vector<std::string> got;
  handoff::basic_actor<std::string, std::function<void(std::string)>> a{
      [&](std::string s) { got.push_back(std::move(s)); }};
  std::vector<std::string> batch;
  for (int i = 0; i < 5000; ++i) batch.push_back("message number " + std::to_string(i) + " of a large batch");
  a.send_all(batch);
  EXPECT_EQ(got, batch);
  busy_log b;
  b.a.post_all(recorders(0, 3000));  // queued behind a busy owner, then run by it
  b.a.post([](std::vector<int>& v) { v.push_back(-1); });
  std::vector<int> want = iota(0, 3000);
  want.push_back(-1);
  EXPECT_EQ(b.log(), want);
}

TEST(BatchSend, ASinglePassRangeIsGatheredAndSentAsOneBatch) {
  std::vector<int> log;
  int_actor a{int_log{&log, {}}};
  std::istringstream in("4 5 6 7");
  a.send_all(std::istream_iterator<int>(in), std::istream_iterator<int>());
  EXPECT_EQ(log, iota(4, 4));
}

// Batch senders to an actor with a budget on a pool: every continuation stops inside some
// batch; each sender's messages still run once and in order.
TEST(BatchSend, ConcurrentBatchSendersWithABudgetOnAPoolKeepPerSenderOrderAndLoseNothing) {
  const test_timeout watchdog(60s);
  constexpr int senders = 4;
  constexpr int batches = 200;
  constexpr int k = 16;
  struct entry {
    int sender;
    int seq;
  };
  struct tally {
    std::array<int, senders> next{};
    long total = 0;
    bool ok = true;
  };
  struct checker {
    tally* t;
    void operator()(entry e) const {
      auto& next = t->next[static_cast<std::size_t>(e.sender)];
      t->ok = t->ok && e.seq == next;
      next = e.seq + 1;
      ++t->total;
    }
  };
  tally t;
  {
    handoff::thread_pool pool(2);
    handoff::basic_actor<entry, checker> a{handoff::actor_options{.executor = pool, .max_messages = 5}, checker{&t}};
    std::vector<std::thread> threads;
    for (int s = 0; s < senders; ++s) {
      threads.emplace_back([&a, s] {
        std::array<entry, k> msgs{};
        for (int b = 0; b < batches; ++b) {
          for (int i = 0; i < k; ++i) msgs[static_cast<std::size_t>(i)] = entry{s, b * k + i};
          a.send_all(msgs);
        }
      });
    }
    for (std::thread& th : threads) th.join();
  }  // ~basic_actor waits for every message, then the pool stops
  EXPECT_TRUE(t.ok) << "a sender's messages ran out of order";
  EXPECT_EQ(t.total, long{senders} * batches * k);
}

}  // namespace
