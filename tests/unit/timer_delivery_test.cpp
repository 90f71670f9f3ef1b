// Where a due timer's handler runs, on real threads: never inside the driver's send, so a
// cancel never waits for a handler and the rest of the due timers go out first.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/thread_pool.hpp>
#include <handoff/timer_service.hpp>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;
using clock_type = std::chrono::steady_clock;

TEST(TimerDelivery, CancelWhileTheTargetsHandlerRunsReturnsAtOnce) {
  test_timeout timeout{10s};
  handoff::timer_service timers;
  timers.start();
  handoff::actor<int> a{0};
  std::promise<void> entered;
  handoff::timer t = timers.after(1ms, a, [&](int&) {
    entered.set_value();
    std::this_thread::sleep_for(300ms);  // on the service's thread, after its batch
  });
  entered.get_future().wait();
  const auto start = clock_type::now();
  EXPECT_FALSE(t.cancel());  // it already runs
  const auto took = clock_type::now() - start;
  // Far below the handler's 300 ms, so a preempted cancel on a loaded machine still passes.
  EXPECT_LT(took, 100ms) << "cancel() waited for the handler";
}

TEST(TimerDelivery, TimersDueWhileAHandlerRunsAreSentWithoutWaitingForIt) {
  test_timeout timeout{10s};
  handoff::thread_pool pool{2};
  handoff::timer_service timers;
  timers.start(pool);
  handoff::actor<int> slow{0};
  handoff::actor<int> other{0};
  std::atomic<bool> slow_done{false};
  std::promise<bool> other_ran;
  std::promise<void> entered;
  auto s = timers.after(1ms, slow, [&](int&) {
    entered.set_value();
    std::this_thread::sleep_for(300ms);  // long enough that a loaded machine still runs the other first
    slow_done = true;
  });
  entered.get_future().wait();
  // Due while the slow handler runs: its batch goes out, and runs, meanwhile.
  auto o = timers.after(1ms, other, [&](int&) { other_ran.set_value(!slow_done.load()); });
  auto f = other_ran.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_TRUE(f.get()) << "the timer waited for another actor's handler";
}

}  // namespace
