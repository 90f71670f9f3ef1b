// Tests for the drain budget of handoff/actor_options.hpp (max_messages, max_time): an owner
// hands the rest of a backlog to the executor (a pool, an inline or throwing executor, an Asio
// io_context), and a budget is checked at construction.

// GCC 12 warns (-Wextra) about members left out of a designated initializer, which is how
// actor_options is meant to be written: `actor_options{.executor = pool, .max_messages = 4}`.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#if __GNUC__ >= 12
#pragma GCC diagnostic ignored "-Wtsan"  // Asio's fences, in its headers; nothing of ours
#endif
#endif

#include <utility>  // before Asio: GCC 12 in C++20 mode needs std::exchange declared first

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <latch>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

#include "../support/executor_test_support.hpp"
#include "handoff/actor.hpp"
#include "handoff/actor_options.hpp"
#include "handoff/basic_actor.hpp"
#include "handoff/executor.hpp"
#include "handoff/thread_pool.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::patience;

// Handlers that ran on this thread; lets a thread count what ran inside one of its calls.
thread_local int handlers_run_here = 0;

// ---------------------------------------------------------------------------------------
// Drain budgets

struct run_record {
  int sender;  // -1: the owner's own message
  int seq;
  std::thread::id thread;
};

// Checks that every sender's messages ran exactly once and in the order it sent them.
void expect_per_sender_fifo(const std::vector<run_record>& runs, int senders, int per_sender) {
  std::vector<int> next(static_cast<std::size_t>(senders), 0);
  for (const run_record& r : runs) {
    if (r.sender < 0) continue;
    ASSERT_LT(r.sender, senders);
    EXPECT_EQ(r.seq, next[static_cast<std::size_t>(r.sender)]) << "sender " << r.sender;
    next[static_cast<std::size_t>(r.sender)] = r.seq + 1;
  }
  for (int s = 0; s < senders; ++s) EXPECT_EQ(next[static_cast<std::size_t>(s)], per_sender) << "sender " << s;
}

// The scenario shared by the budget tests. An owner thread posts a message that blocks on
// a gate, so that `senders` threads build a backlog of `senders * per_sender` messages
// behind it (they only enqueue: the actor is busy). Then the gate opens; the owner's
// post() must return once its budget is spent, leaving the rest to the executor.
struct budget_scenario {
  struct state {
    std::vector<run_record> runs;
    int expected = 0;
    std::promise<void>* all_ran = nullptr;
    std::chrono::milliseconds work{0};  // each message's simulated work, the owner's included
  };

  int senders = 3;
  int per_sender = 20;
  std::chrono::milliseconds work{0};

  // Results.
  int ran_inside_owner_post = -1;  // handlers that ran on the owner thread during its post()
  int ran_on_senders = 0;          // handlers that ran on sender threads (must be 0)
  std::thread::id owner_thread;
  std::vector<std::thread::id> sender_threads;
  std::vector<run_record> runs;

  static void record(state& s, int sender, int seq) {
    ++handlers_run_here;
    s.runs.push_back({sender, seq, std::this_thread::get_id()});
    if (s.work.count() != 0) std::this_thread::sleep_for(s.work);  // simulated work, not synchronization
    if (static_cast<int>(s.runs.size()) == s.expected) s.all_ran->set_value();
  }

  void run(const handoff::actor_options& options) {
    std::latch entered(1);
    std::latch gate(1);
    std::promise<void> all_ran;
    auto all_ran_future = all_ran.get_future();
    {
      handoff::actor<state> a{options};
      const int total = senders * per_sender + 1;
      // Configure the state through the actor itself (ask() answers inline: it is idle).
      a.ask([&](state& s) {
         s.expected = total;
         s.all_ran = &all_ran;
         s.work = work;
       }).get();

      std::jthread owner([&] {
        owner_thread = std::this_thread::get_id();
        handlers_run_here = 0;
        a.post([&](state& s) {
          entered.count_down();
          gate.wait();
          record(s, -1, 0);
        });
        ran_inside_owner_post = handlers_run_here;
      });

      entered.wait();  // the owner owns the actor and is blocked inside its handler
      std::vector<int> ran_on_sender(static_cast<std::size_t>(senders), 0);
      sender_threads.assign(static_cast<std::size_t>(senders), {});
      {
        std::vector<std::jthread> threads;
        for (int t = 0; t < senders; ++t) {
          threads.emplace_back([&, t] {
            sender_threads[static_cast<std::size_t>(t)] = std::this_thread::get_id();
            for (int i = 0; i < per_sender; ++i) a.post([t, i](state& s) { record(s, t, i); });
            ran_on_sender[static_cast<std::size_t>(t)] = handlers_run_here;
          });
        }
      }  // every backlog message is in the mailbox now
      for (int n : ran_on_sender) ran_on_senders += n;
      gate.count_down();
      owner.join();
      ASSERT_EQ(all_ran_future.wait_for(patience), std::future_status::ready) << "messages were lost or stranded";
      runs = a.ask([](state& s) { return s.runs; }).get();
    }  // ~actor waits for the executor to finish with it
  }

  int ran_on(std::thread::id t) const {
    int n = 0;
    for (const run_record& r : runs) n += r.thread == t;
    return n;
  }
  bool ran_on_a_sender_or_main(const run_record& r) const {
    if (r.thread == std::this_thread::get_id()) return true;
    for (std::thread::id s : sender_threads) {
      if (r.thread == s) return true;
    }
    return false;
  }
};

// Every message ran once, in per-sender order; the owner's post() ran exactly
// `owner_runs` of them (its turn) and no sender to the busy actor ran any.
void expect_owner_turn(const budget_scenario& sc, int owner_runs) {
  ASSERT_EQ(static_cast<int>(sc.runs.size()), sc.senders * sc.per_sender + 1);
  EXPECT_EQ(sc.ran_inside_owner_post, owner_runs) << "the owner's turn did not match its budget";
  EXPECT_EQ(sc.ran_on(sc.owner_thread), owner_runs);
  EXPECT_EQ(sc.ran_on_senders, 0) << "a sender to a busy actor ran a handler";
  expect_per_sender_fifo(sc.runs, sc.senders, sc.per_sender);
}

TEST(DrainBudget, OwnerPostingIntoABacklogReturnsAfterMaxMessagesAndThePoolRunsTheRest) {
  constexpr std::uint32_t budget = 4;
  handoff::thread_pool pool(2);
  budget_scenario sc;
  sc.run(handoff::actor_options{.executor = pool, .max_messages = budget});
  if (HasFatalFailure()) return;

  const int total = sc.senders * sc.per_sender + 1;
  expect_owner_turn(sc, static_cast<int>(budget));
  EXPECT_EQ(sc.runs.front().sender, -1);
  // Everything past the owner's turn ran on pool workers: not the owner, senders or main.
  int on_pool = 0;
  for (std::size_t i = budget; i < sc.runs.size(); ++i) {
    const run_record& r = sc.runs[i];
    EXPECT_NE(r.thread, sc.owner_thread) << "message " << i;
    EXPECT_FALSE(sc.ran_on_a_sender_or_main(r)) << "message " << i;
    ++on_pool;
  }
  EXPECT_EQ(on_pool, total - static_cast<int>(budget));
}

TEST(DrainBudget, PoolContinuationsAlsoStopAtTheBudgetAndStillRunEverythingOnce) {
  // A budget of 1 on the pool side: every continuation runs one message and re-posts
  // itself. All messages still run exactly once, in per-sender order.
  handoff::thread_pool pool(2);
  budget_scenario sc;
  sc.senders = 4;
  sc.per_sender = 50;
  sc.run(handoff::actor_options{.executor = pool, .max_messages = 1});
  if (HasFatalFailure()) return;
  expect_owner_turn(sc, 1);
}

TEST(DrainBudget, TimeBudgetHandsOffOnceASlowMessageHasSpentIt) {
  // Each message works 3 ms against a 1 ms budget: the owner's turn ends after the first
  // message, its own inline one (the turn's clock starts before it).
  handoff::thread_pool pool(2);
  budget_scenario sc;
  sc.senders = 2;
  sc.per_sender = 4;
  sc.work = 3ms;
  sc.run(handoff::actor_options{.executor = pool, .max_time = 1ms});
  if (HasFatalFailure()) return;
  const int total = sc.senders * sc.per_sender + 1;
  expect_owner_turn(sc, 1);  // the owner's time budget was spent by its own message
  int on_pool = 0;
  for (const run_record& r : sc.runs) {
    if (r.thread == sc.owner_thread) continue;
    EXPECT_FALSE(sc.ran_on_a_sender_or_main(r));
    ++on_pool;
  }
  EXPECT_GE(on_pool, total - 2);
}

struct inline_executor {
  int calls = 0;
  void execute(handoff::work w) {
    ++calls;
    w();
  }
};

TEST(DrainBudget, AnInlineExecutorKeepsDrainingOnTheOwnerWithoutGrowingTheStack) {
  // The continuation is run inside execute(), i.e. inside the drain that handed off: it
  // must be queued on the thread's run queue, not recurse once per hand-off.
  constexpr int backlog = 5000;
  struct state {
    int runs = 0;
    int off_thread = 0;
    std::thread::id thread;
    std::uintptr_t min_frame = UINTPTR_MAX;
    std::uintptr_t max_frame = 0;
  };
  inline_executor ex;
  handoff::actor<state> a{handoff::actor_options{.executor = ex, .max_messages = 1}};
  auto probe = [](state& s) {
    ++s.runs;
    s.off_thread += std::this_thread::get_id() != s.thread;
    const auto frame = reinterpret_cast<std::uintptr_t>(__builtin_frame_address(0));
    s.min_frame = std::min(s.min_frame, frame);
    s.max_frame = std::max(s.max_frame, frame);
  };
  a.post([&](state& s) {
    s.thread = std::this_thread::get_id();
    for (int i = 0; i < backlog; ++i) a.post(probe);  // nested self-sends: queued
  });
  const state s = a.ask([](state& st) { return st; }).get();
  EXPECT_EQ(s.runs, backlog);
  EXPECT_EQ(s.off_thread, 0);
  EXPECT_GE(ex.calls, backlog - 1) << "the budget of one message did not hand off";
  EXPECT_LT(s.max_frame - s.min_frame, 64u * 1024u) << "each hand-off nested a drain on the stack";
}

// An executor that refuses all work, as one out of memory would.
struct throwing_executor {
  int calls = 0;
  void execute(handoff::work) {
    ++calls;
    throw std::bad_alloc();
  }
};

TEST(DrainBudget, AnExecutorWhoseExecuteThrowsLeavesTheActorToThisThreadsRunQueueAndLosesNothing) {
  // Every hand-off of the budget fails: each time, the actor must go to this thread's run
  // queue and go on there (terminating, or stranding the backlog, would fail the test).
  constexpr int backlog = 50;
  struct state {
    int runs = 0;
    int off_thread = 0;
    std::thread::id thread;
  };
  throwing_executor ex;
  handoff::actor<state> a{handoff::actor_options{.executor = ex, .max_messages = 1}};
  a.post([&](state& s) {
    s.thread = std::this_thread::get_id();
    for (int i = 0; i < backlog; ++i) {
      a.post([](state& st) {
        ++st.runs;
        st.off_thread += std::this_thread::get_id() != st.thread;
      });
    }
  });
  // post() returned: this thread ran its run queue, so the whole backlog has run here.
  const state s = a.ask([](state& st) { return st; }).get();
  EXPECT_EQ(s.runs, backlog);
  EXPECT_EQ(s.off_thread, 0);
  EXPECT_GE(ex.calls, backlog - 1) << "the budget did not try the executor";
}

TEST(ActorOptions, ABudgetWithoutAnExecutorIsRejectedForABoundedActor) {
  using handoff::actor_options;
  EXPECT_THROW((handoff::actor<int>{actor_options{.max_messages = 1, .capacity = 4}, 0}), std::invalid_argument);
  EXPECT_THROW((handoff::actor<int>{actor_options{.max_time = 1ms, .capacity = 4}, 0}), std::invalid_argument);
  EXPECT_THROW(
      (handoff::actor<int>{std::make_shared<const actor_options>(actor_options{.max_messages = 8, .capacity = 4}), 0}),
      std::invalid_argument);
  struct sink {
    void operator()(int) {}
  };
  EXPECT_THROW((handoff::basic_actor<int, sink>{actor_options{.max_messages = 1, .capacity = 4}}),
               std::invalid_argument);
}

TEST(ActorOptions, ANegativeTimeBudgetIsRejectedAtConstruction) {
  using handoff::actor_options;
  handoff::thread_pool pool(1);
  EXPECT_THROW((handoff::actor<int>{actor_options{.executor = pool, .max_time = -1ms}, 0}), std::invalid_argument);
  EXPECT_THROW((handoff::actor<int>{actor_options{.max_time = -1ms}, 0}), std::invalid_argument);
}

TEST(ActorOptions, AnExecutorWithoutABudgetOrAValidBudgetIsAccepted) {
  using handoff::actor_options;
  handoff::thread_pool pool(1);
  handoff::actor<int> plain{actor_options{.executor = pool}, 1};
  handoff::actor<int> both{actor_options{.executor = pool, .max_messages = 3, .max_time = 1ms}, 2};
  EXPECT_EQ(plain.ask([](int& v) { return v; }).get(), 1);
  EXPECT_EQ(both.ask([](int& v) { return v; }).get(), 2);
}

// ---------------------------------------------------------------------------------------
// Asio adapter

struct asio_executor {
  boost::asio::io_context& io;
  void execute(handoff::work w) const { boost::asio::post(io, w); }
};
static_assert(handoff::executor<asio_executor>);

void record_asio(std::vector<run_record>& log, int seq) {
  ++handlers_run_here;
  log.push_back({0, seq, std::this_thread::get_id()});
}

TEST(AsioExecutor, AnActorWithAMessageBudgetContinuesItsDrainInsideIoContextRun) {
  constexpr int backlog = 20;
  boost::asio::io_context io;
  auto guard = boost::asio::make_work_guard(io);
  std::promise<std::thread::id> io_id;
  auto io_id_future = io_id.get_future();
  std::jthread io_thread([&] {
    io_id.set_value(std::this_thread::get_id());
    io.run();
  });
  asio_executor ex{io};
  std::vector<run_record> runs;
  int ran_inside_post = 0;
  {
    handoff::actor<std::vector<run_record>> a{handoff::actor_options{.executor = ex, .max_messages = 1}};
    handlers_run_here = 0;
    a.post([&](std::vector<run_record>& log) {
      record_asio(log, -1);
      for (int i = 0; i < backlog; ++i) a.post([i](std::vector<run_record>& l) { record_asio(l, i); });
    });
    ran_inside_post = handlers_run_here;
    // The ask is queued behind the backlog (or answered inline once the io thread is done).
    runs = a.ask([](std::vector<run_record>& log) { return log; }).get();
  }
  guard.reset();
  io_thread.join();
  const std::thread::id io_tid = io_id_future.get();

  ASSERT_EQ(static_cast<int>(runs.size()), backlog + 1);
  EXPECT_LT(ran_inside_post, backlog + 1) << "post() drained everything instead of handing off";
  int on_io = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].seq, static_cast<int>(i) - 1) << "per-sender FIFO broken at " << i;
    on_io += runs[i].thread == io_tid;
  }
  EXPECT_GT(on_io, 0) << "nothing ran inside io_context::run()";
  EXPECT_EQ(runs.front().thread, std::this_thread::get_id());
}

}  // namespace
