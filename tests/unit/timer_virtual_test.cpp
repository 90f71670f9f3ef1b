// handoff::timer_service under handoff::testing::scheduler: timers fire on the virtual
// clock as time events, and explore() orders their firing against other messages.
#include <gtest/gtest.h>

#include <handoff/actor.hpp>
#include <handoff/testing.hpp>
#include <handoff/timer_service.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::test::test_timeout;
using handoff::testing::check;
using handoff::testing::explore;
using handoff::testing::scheduler;

// Runs the events that can run now, without letting time pass (run_all would).
void run_ready(scheduler& s) {
  for (auto p = s.pending(); !p.empty() && p.front().kind != handoff::testing::event_kind::time; p = s.pending()) {
    s.run_one();
  }
}

// Periodic tests count ticks exactly: 1 ns resolution, so ticks fall on the deadlines.
constexpr handoff::timer_options exact{.resolution = std::chrono::nanoseconds(1)};

struct offer {
  bool accepted = false;
  bool expired = false;
  handoff::timer expiry;  // cancelled by the handler that accepts
};

TEST(TimerVirtual, AnOfferExpiresAfterTenVirtualSecondsInMicroseconds) {
  test_timeout timeout{10s};
  const auto wall = std::chrono::steady_clock::now();
  scheduler s;
  {
    handoff::timer_service timers;
    handoff::actor<offer> o;
    auto t = timers.after(10s, o, [](offer& x) { x.expired = !x.accepted; });
    s.advance(9999ms);
    EXPECT_FALSE(o.ask([](offer& x) { return x.expired; }).get());
    s.run_all();
    EXPECT_TRUE(o.ask([](offer& x) { return x.expired; }).get());
    EXPECT_GE(s.now(), 10s);        // never early
    EXPECT_LT(s.now(), 10s + 2ms);  // one resolution step late at most
  }
  EXPECT_LT(std::chrono::steady_clock::now() - wall, 1s);  // no real waiting
}

TEST(TimerVirtual, AnOfferAcceptedInTimeNeverExpires) {
  test_timeout timeout{10s};
  scheduler s;
  handoff::timer_service timers;
  handoff::actor<offer> o;
  o.post([&](offer& x, handoff::actor<offer>& self) {
    x.expiry = timers.after(10s, self, [](offer& y) { y.expired = true; });
  });
  run_ready(s);
  s.advance(5s);
  o.post([](offer& x) {
    x.accepted = true;
    x.expiry.cancel();
  });
  run_ready(s);
  s.advance(20s);
  s.run_all();
  EXPECT_FALSE(o.ask([](offer& x) { return x.expired; }).get());
}

TEST(TimerVirtual, CancelStopsAMessageThatFiredAndIsStillQueued) {
  test_timeout timeout{10s};
  scheduler s;
  handoff::timer_service timers;
  handoff::actor<int> a{0};
  auto t = timers.after(1s, a, [](int& n) { ++n; });
  s.advance(2s);  // fired: its delivery waits as an actor event
  ASSERT_EQ(s.pending().size(), 1U);
  EXPECT_TRUE(t.active());  // fired, its delivery not started
  EXPECT_TRUE(t.cancel());
  s.run_all();
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 0);
  EXPECT_EQ(timers.stats().sent, 1U);
}

TEST(TimerVirtual, RearmAfterItFiredMovesTheQueuedMessageToTheNewDeadline) {
  test_timeout timeout{10s};
  scheduler s;
  handoff::timer_service timers;
  handoff::actor<std::vector<std::int64_t>> a;
  auto t = timers.after(1s, a, [&](std::vector<std::int64_t>& v) { v.push_back(s.now() / 1ms); });
  s.advance(2s);             // queued, not run
  EXPECT_TRUE(t.rearm(3s));  // the silent player spoke: the old delivery does nothing
  s.run_all();
  const auto v = a.ask([](std::vector<std::int64_t>& x) { return x; }).get();
  ASSERT_EQ(v.size(), 1U);
  EXPECT_GE(v[0], 5000);  // 2 s + 3 s, not 2 s
}

TEST(TimerVirtual, FixedRateKeepsAtMostOneTickPending) {
  test_timeout timeout{10s};
  scheduler s;
  handoff::timer_service timers{exact};
  handoff::actor<int> a{0};
  auto t = timers.every(50ms, a, [](int& n) { ++n; });
  s.advance(50ms);
  s.advance(50ms);
  s.advance(50ms);  // three ticks due, the first still queued: two skipped
  EXPECT_EQ(timers.stats().sent, 1U);
  EXPECT_EQ(timers.stats().skipped, 2U);
  ASSERT_TRUE(s.run_one());  // the one pending tick runs
  s.advance(50ms);
  ASSERT_TRUE(s.run_one());
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 2);
  EXPECT_TRUE(t.cancel());
}

TEST(TimerVirtual, FixedDelayCountsThePeriodFromWhenTheTickRan) {
  test_timeout timeout{10s};
  scheduler s;
  handoff::timer_service timers{exact};
  std::vector<std::int64_t> at;
  handoff::actor<int> a{0};
  auto t = timers.every(
      50ms, a, [&](int&) { at.push_back(s.now() / 1ms); }, handoff::repeat::fixed_delay);
  s.advance(50ms);
  s.advance(20ms);  // the tick runs at 70 ms: the next is due at 120 ms
  ASSERT_TRUE(s.run_one());
  s.advance(45ms);
  EXPECT_FALSE(s.run_one() && at.size() > 1);
  s.advance(10ms);
  while (at.size() < 2 && s.run_one()) {
  }
  ASSERT_EQ(at.size(), 2U);
  EXPECT_GE(at[1] - at[0], 50);
  EXPECT_TRUE(t.cancel());
}

TEST(TimerVirtual, ADeliveryQueuedWhenTheServiceIsDestroyedStillRuns) {
  test_timeout timeout{10s};
  scheduler s;
  handoff::actor<int> a{0};
  {
    handoff::timer_service timers;
    timers.after(1s, a, [](int& n) { ++n; }).detach();
    s.advance(1s + 2ms);
  }  // the service's state stays until the delivery is done (ASan: no leak, no use after free)
  s.run_all();
  EXPECT_EQ(a.ask([](int& n) { return n; }).get(), 1);
}

// A buyer accepts an offer that expires: which comes first is the scheduler's choice.
void race(scheduler& s, bool& accepted_first) {
  handoff::timer_service timers;
  handoff::actor<std::string> o;
  handoff::actor<int> buyer{0};
  auto expiry = timers.after(10ms, o, [](std::string& log) { log += "expired "; });
  buyer.post([&](int&) { o.post([](std::string& log) { log += "accepted "; }); });
  s.run_all();
  const std::string log = o.ask([](std::string& x) { return x; }).get();
  accepted_first = log.rfind("accepted", 0) == 0;
}

TEST(TimerVirtual, ExploreOrdersATimersFiringBothBeforeAndAfterAMessage) {
  test_timeout timeout{30s};
  const auto accepted_first_always = explore([](scheduler& s) {
    bool accepted_first = false;
    race(s, accepted_first);
    check(accepted_first, "the offer expired before the buyer's accept");
  });
  EXPECT_TRUE(accepted_first_always.failed) << "no seed let the timer fire first";
  const auto expired_first_always = explore([](scheduler& s) {
    bool accepted_first = false;
    race(s, accepted_first);
    check(!accepted_first, "the buyer accepted before the offer expired");
  });
  EXPECT_TRUE(expired_first_always.failed) << "no seed ran the accept first";
}

}  // namespace
