// Tests for handoff/thread_pool.hpp and handoff/executor.hpp: the thread pool, the executor
// concept and executor_ref, jobs and handoff::execute, and actors spread to idle workers.

// GCC 12 warns (-Wextra) about members left out of a designated initializer, which is how
// actor_options is meant to be written: `actor_options{.executor = pool, .max_messages = 4}`.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "../support/executor_test_support.hpp"
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"
#include "handoff/actor.hpp"
#include "handoff/actor_options.hpp"
#include "handoff/executor.hpp"
#include "handoff/thread_pool.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::patience;

// ---------------------------------------------------------------------------------------
// thread_pool

TEST(ThreadPool, RunsEveryWorkItemExactlyOnceAcrossManySubmittingThreads) {
  // Many rounds, each with a fresh pool, 8 threads submitting together. Each thread submits
  // fewer items than one moodycamel block (32) per round, so the queue never recycles a
  // block from one producer to another: ThreadSanitizer cannot see the fences that order
  // that recycling and reports a (false) race in concurrentqueue.h.
  constexpr int rounds = 25;
  constexpr int submitters = 8;
  constexpr int per_submitter = 30;
  struct item {
    std::atomic<int> runs{0};
    std::atomic<bool> ran_on_submitter{false};
    std::thread::id submitter;
  };
  int wrong = 0;
  int on_submitter = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<item> items(submitters * per_submitter);
    {
      handoff::thread_pool pool(2);
      std::latch start(submitters);
      std::vector<std::jthread> threads;
      for (int t = 0; t < submitters; ++t) {
        threads.emplace_back([&, t] {
          start.arrive_and_wait();
          for (int i = 0; i < per_submitter; ++i) {
            item& it = items[static_cast<std::size_t>(t * per_submitter + i)];
            it.submitter = std::this_thread::get_id();
            pool.execute(handoff::work{[](void* p) noexcept {
                                         auto* self = static_cast<item*>(p);
                                         self->runs.fetch_add(1, std::memory_order_relaxed);
                                         if (std::this_thread::get_id() == self->submitter)
                                           self->ran_on_submitter = true;
                                       },
                                       &it});
          }
        });
      }
    }  // submitters joined, then the pool destructor runs what is queued and joins
    for (const item& it : items) {
      wrong += it.runs.load() != 1;
      on_submitter += it.ran_on_submitter.load();
    }
  }
  EXPECT_EQ(wrong, 0) << "work items not run exactly once";
  EXPECT_EQ(on_submitter, 0) << "execute() ran work on the submitting thread";
}

TEST(ThreadPool, DestructorRunsQueuedWorkAndTheWorkItSubmitsBeforeJoining) {
  constexpr int queued = 100;
  constexpr int chain_length = 1000;
  struct chain {
    handoff::thread_pool* pool;
    std::atomic<int> left;
    std::atomic<int> ran{0};
    static void step(void* p) noexcept {
      auto* self = static_cast<chain*>(p);
      self->ran.fetch_add(1, std::memory_order_relaxed);
      if (self->left.fetch_sub(1, std::memory_order_relaxed) > 1) self->pool->execute(handoff::work{&step, self});
    }
  };
  std::latch gate(1);
  std::atomic<int> plain_runs{0};
  auto pool = std::make_unique<handoff::thread_pool>(1);
  chain c{pool.get(), chain_length};
  // The only worker blocks, so everything below is still queued when the gate opens.
  pool->execute(handoff::work{[](void* g) noexcept { static_cast<std::latch*>(g)->wait(); }, &gate});
  for (int i = 0; i < queued; ++i) {
    pool->execute(
        handoff::work{[](void* n) noexcept { static_cast<std::atomic<int>*>(n)->fetch_add(1); }, &plain_runs});
  }
  pool->execute(handoff::work{&chain::step, &c});
  gate.count_down();
  pool.reset();  // must not join before the whole chain has run
  EXPECT_EQ(plain_runs.load(), queued);
  EXPECT_EQ(c.ran.load(), chain_length);
}

TEST(ThreadPool, SizeIsTheNumberOfWorkersAndAtLeastOne) {
  EXPECT_EQ(handoff::thread_pool(3).size(), 3u);
  EXPECT_EQ(handoff::thread_pool(1).size(), 1u);
  EXPECT_EQ(handoff::thread_pool(0).size(), 1u);
}

TEST(ThreadPool, WorkSubmittedFromInsideAWorkerIsQueuedNotRunInline) {
  struct shared {
    handoff::thread_pool* pool = nullptr;
    std::atomic<bool> outer_done{false};
    std::thread::id outer_thread;
    std::promise<std::pair<std::thread::id, bool>> inner;  // thread, outer_done when it ran
  } s;
  auto inner_result = s.inner.get_future();
  handoff::thread_pool pool(1);
  s.pool = &pool;
  pool.execute(handoff::work{[](void* p) noexcept {
                               auto* self = static_cast<shared*>(p);
                               self->outer_thread = std::this_thread::get_id();
                               self->pool->execute(handoff::work{
                                   [](void* q) noexcept {
                                     auto* me = static_cast<shared*>(q);
                                     me->inner.set_value({std::this_thread::get_id(), me->outer_done.load()});
                                   },
                                   self});
                               self->outer_done = true;
                             },
                             &s});
  ASSERT_EQ(inner_result.wait_for(patience), std::future_status::ready);
  auto [inner_thread, outer_was_done] = inner_result.get();
  EXPECT_TRUE(outer_was_done) << "execute() from a worker ran the work inline";
  EXPECT_NE(inner_thread, std::this_thread::get_id());
  EXPECT_EQ(inner_thread, s.outer_thread);  // one worker: the same thread ran both
}

TEST(ThreadPool, RejectsWorkWithoutAFunctionAndKeepsAllItsWorkers) {
  // A null function is the workers' stop sentinel: accepting it would end a worker early
  // and leave the destructor waiting for ever.
  handoff::thread_pool pool(2);
  EXPECT_THROW(pool.execute(handoff::work{}), std::invalid_argument);
  std::atomic<int> ran{0};
  std::latch both(2);
  struct task {
    static void run(void* p) noexcept {
      auto* self = static_cast<std::pair<std::atomic<int>*, std::latch*>*>(p);
      self->first->fetch_add(1);
      self->second->arrive_and_wait();  // needs two workers at once
    }
  };
  std::pair<std::atomic<int>*, std::latch*> arg{&ran, &both};
  pool.execute(handoff::work{&task::run, &arg});
  pool.execute(handoff::work{&task::run, &arg});
  both.wait();
  EXPECT_EQ(ran.load(), 2);
}

// ---------------------------------------------------------------------------------------
// executor concept and executor_ref

struct counting_executor {
  int calls = 0;
  void execute(handoff::work w) {
    ++calls;
    w();
  }
};
struct not_an_executor {
  void execute(int) {}
};

static_assert(handoff::executor<counting_executor>);
static_assert(handoff::executor<handoff::thread_pool>);
static_assert(!handoff::executor<not_an_executor>);
static_assert(!handoff::executor<int>);
static_assert(std::is_trivially_copyable_v<handoff::work>);
static_assert(std::is_nothrow_invocable_v<const handoff::work&>);

TEST(ExecutorRef, ForwardsExecuteToTheReferencedUserExecutor) {
  counting_executor e;
  int ran = 0;
  const handoff::work w{[](void* p) noexcept { ++*static_cast<int*>(p); }, &ran};

  handoff::executor_ref ref = e;
  ASSERT_TRUE(ref);
  ref.execute(w);
  EXPECT_EQ(e.calls, 1);
  EXPECT_EQ(ran, 1);

  const handoff::executor_ref copy = ref;  // a copy refers to the same executor
  copy.execute(w);
  EXPECT_EQ(e.calls, 2);
  EXPECT_EQ(ran, 2);
}

TEST(ExecutorRef, DefaultConstructedIsEmpty) {
  const handoff::executor_ref ref;
  EXPECT_FALSE(ref);
  EXPECT_FALSE(handoff::actor_options{}.executor);
}

// ---------------------------------------------------------------------------------------
// Jobs: any callable on the pool, and on any executor through handoff::execute

TEST(Job, StoresSmallCallablesInlineAndLargeOnesOnTheHeapAndRunsMoveOnlyOnes) {
  auto p = std::make_unique<int>(7);
  int seen = 0;
  long before = handoff::test::allocations_so_far();
  handoff::job small([p = std::move(p), &seen] { seen = *p; });  // two pointers: inline
  handoff::job moved = std::move(small);
  handoff::job from_work(handoff::work{[](void* s) noexcept { ++*static_cast<int*>(s); }, &seen});
  EXPECT_EQ(handoff::test::allocations_so_far() - before, 0) << "a small job allocated";
  EXPECT_FALSE(small);  // NOLINT(bugprone-use-after-move): moved-from jobs are empty
  ASSERT_TRUE(moved);
  moved();
  EXPECT_EQ(seen, 7);
  from_work();
  EXPECT_EQ(seen, 8);

  std::array<long, 16> big{};
  big[15] = 5;
  before = handoff::test::allocations_so_far();
  handoff::job large([big, &seen] { seen = static_cast<int>(big[15]); });
  EXPECT_EQ(handoff::test::allocations_so_far() - before, 1);
  handoff::job large_moved = std::move(large);
  large_moved();
  EXPECT_EQ(seen, 5);
  EXPECT_FALSE(handoff::job(handoff::work{})) << "a work item without a function is an empty job";
}

TEST(ThreadPool, RunsMoveOnlyLambdasAndKeepsGoingAfterOneThrows) {
  handoff::test::test_timeout limit{30s};
  std::promise<int> answer;
  {
    handoff::thread_pool pool(1);
    pool.execute([] { throw std::runtime_error("a throwing job: printed to stderr"); });
    pool.execute([p = std::make_unique<int>(42), &answer] { answer.set_value(*p); });
  }
  EXPECT_EQ(answer.get_future().get(), 42);
}

// An executor that takes only handoff::work, and counts the calls.
struct work_only_executor {
  std::vector<handoff::work> queued;
  void execute(handoff::work w) { queued.push_back(w); }
  void run_all() {
    for (const handoff::work& w : queued) w();
    queued.clear();
  }
};

TEST(Execute, RunsAnyCallableOnAnExecutorThatTakesOnlyWork) {
  work_only_executor e;
  e.queued.reserve(8);  // so that only handoff::execute could allocate below
  int seen = 0;
  long before = handoff::test::allocations_so_far();
  handoff::execute(e, [&seen] { seen += 1; });  // one pointer, trivially copyable: in the argument
  EXPECT_EQ(handoff::test::allocations_so_far() - before, 0);
  handoff::execute(e, [&seen, s = std::string(100, 'x')] { seen += static_cast<int>(s.size()); });
  handoff::execute(e, [] { throw std::runtime_error("thrown inside work: printed to stderr"); });
  ASSERT_EQ(e.queued.size(), 3U);
  e.run_all();
  EXPECT_EQ(seen, 101);
}

TEST(Execute, GivesAThreadPoolAJob) {
  handoff::test::test_timeout limit{30s};
  handoff::thread_pool pool(1);
  std::promise<std::string> answer;
  handoff::execute(pool, [s = std::make_unique<std::string>("moved"), &answer] { answer.set_value(*s); });
  EXPECT_EQ(answer.get_future().get(), "moved");
}

// ---------------------------------------------------------------------------------------
// Spreading actors over a pool

TEST(ThreadPool, ReportsIdleWorkersAndExecutorRefForwardsTheHint) {
  handoff::test::test_timeout limit{30s};
  handoff::thread_pool pool(1);
  EXPECT_TRUE(handoff::test::eventually([&] { return pool.has_idle_workers(); }));
  const handoff::executor_ref ref = pool;
  EXPECT_TRUE(ref.has_idle_workers());
  std::latch entered(1), release(1);
  pool.execute([&] {
    entered.count_down();
    release.wait();
  });
  entered.wait();
  EXPECT_FALSE(pool.has_idle_workers());
  release.count_down();
  counting_executor plain;
  EXPECT_FALSE(handoff::executor_ref(plain).has_idle_workers()) << "no hint: never idle";
}

TEST(Spreading, ActorsMadeRunnableOnABusyWorkerMoveToAnIdleOne) {
  // One handler on a worker makes 40 actors runnable (nested sends: they join that
  // worker's queue). With the other worker idle, the queue hands them to the pool.
  handoff::test::test_timeout limit{60s};
  handoff::thread_pool pool(2);
  ASSERT_TRUE(handoff::test::eventually([&] { return pool.has_idle_workers(); }));
  const auto options = std::make_shared<const handoff::actor_options>(handoff::actor_options{.executor = pool});
  constexpr int n = 40;
  std::vector<std::unique_ptr<handoff::actor<std::thread::id>>> workers;
  for (int i = 0; i < n; ++i) workers.push_back(std::make_unique<handoff::actor<std::thread::id>>(options));
  std::latch all_ran(n);
  handoff::actor<int> fan_out{options, 0};
  fan_out.defer([&](int&) {
    for (auto& w : workers) {
      w->post([&](std::thread::id& ran_on) {
        ran_on = std::this_thread::get_id();
        const auto until = std::chrono::steady_clock::now() + 2ms;  // heavy: worth moving
        while (std::chrono::steady_clock::now() < until) {
        }
        all_ran.count_down();
      });
    }
  });
  all_ran.wait();
  std::vector<std::thread::id> ids;
  for (auto& w : workers) ids.push_back(w->ask([](std::thread::id& t) { return t; }).get());
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(std::unique(ids.begin(), ids.end()) - ids.begin(), 2) << "every actor ran on one worker";
}

}  // namespace
