// The one clock and deadline convention (handoff/detail/clock.hpp) and the lease length
// (handoff/lease.hpp): every conversion saturates, "huge" means never, and a wait of zero
// means "do not wait".
#include <handoff/detail/clock.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/lease.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::detail::add_saturating;
using handoff::detail::deadline_after;
using handoff::detail::deadline_at;
using handoff::detail::no_deadline;
using handoff::detail::to_ns_saturating;
using handoff::test::test_timeout;

TEST(Clock, AddingADurationSaturatesAtNoDeadlineAndIgnoresNegativeOnes) {
  EXPECT_EQ(add_saturating(100, 5), 105);
  EXPECT_EQ(add_saturating(100, no_deadline), no_deadline);
  EXPECT_EQ(add_saturating(100, no_deadline - 100), no_deadline);
  EXPECT_EQ(add_saturating(100, no_deadline - 101), no_deadline - 1);
  EXPECT_EQ(add_saturating(100, -5), 100);
}

TEST(Clock, DurationsConvertToNanosecondsRoundingUpAndSaturating) {
  EXPECT_EQ(to_ns_saturating(std::chrono::nanoseconds::max()), no_deadline);
  EXPECT_EQ(to_ns_saturating(std::chrono::hours::max()), no_deadline);
  EXPECT_EQ(to_ns_saturating(std::chrono::duration<double>(1e300)), no_deadline);
  EXPECT_EQ(to_ns_saturating(std::chrono::duration<double, std::nano>(1.5)), 2);
  EXPECT_EQ(to_ns_saturating(3ms), 3'000'000);
  EXPECT_EQ(to_ns_saturating(-3ms), 0);
}

TEST(Clock, AWaitOfZeroOrLessIsADeadlineOfNow) {
  EXPECT_EQ(deadline_after(1000, 0ms), 1000);
  EXPECT_EQ(deadline_after(1000, -1s), 1000);
  EXPECT_EQ(deadline_after(1000, std::chrono::nanoseconds::max()), no_deadline);
}

TEST(Clock, TimePointsAtTheEndOfTheirRangeAreNoDeadline) {
  using steady_seconds = std::chrono::time_point<std::chrono::steady_clock, std::chrono::seconds>;
  EXPECT_EQ(deadline_at(1000, steady_seconds::max()), no_deadline);
  EXPECT_EQ(deadline_at(1000, std::chrono::steady_clock::time_point::max()), no_deadline);
  using system_seconds = std::chrono::time_point<std::chrono::system_clock, std::chrono::seconds>;
  EXPECT_EQ(deadline_at(1000, system_seconds::max()), no_deadline);
  // system_clock's own max is "only" ~230 years away: far, and never before it.
  EXPECT_GT(deadline_at(1000, std::chrono::system_clock::time_point::max()),
            1000 + 200LL * 365 * 24 * 3600 * 1'000'000'000);
  const auto soon = std::chrono::steady_clock::now() + 1s;
  EXPECT_EQ(deadline_at(1000, soon), std::chrono::nanoseconds(soon.time_since_epoch()).count());
  EXPECT_EQ(deadline_at(1000, std::chrono::system_clock::now() - 1s), 1000);  // past: now
}

TEST(Clock, TheLibraryClockIsSteadyClockInNanoseconds) {
  const std::int64_t before = std::chrono::nanoseconds(std::chrono::steady_clock::now().time_since_epoch()).count();
  const std::int64_t now = handoff::detail::now_ns();
  const std::int64_t after = std::chrono::nanoseconds(std::chrono::steady_clock::now().time_since_epoch()).count();
  EXPECT_LE(before, now);
  EXPECT_LE(now, after);
}

TEST(Lease, ALengthTooLongForTheClockSaturatesAndZeroIsRejected) {
  EXPECT_EQ(handoff::lease{std::chrono::hours::max()}.duration, std::chrono::nanoseconds::max());
  EXPECT_EQ(handoff::lease{std::chrono::nanoseconds::max()}.duration, std::chrono::nanoseconds::max());
  EXPECT_EQ(handoff::lease{std::chrono::duration<double>(0.5)}.duration, 500ms);
  EXPECT_THROW(handoff::lease{0s}, std::invalid_argument);
  EXPECT_THROW(handoff::lease{-1ms}, std::invalid_argument);
}

TEST(Clock, AZeroWaitOnAHeldKeyReturnsAtOnceWithoutTheKeyAndOnAFreeKeyWithIt) {
  test_timeout limit{30s};
  handoff::keyed_mutex<> m;
  auto free_now = m.try_lock_for("free", 0ms);
  EXPECT_TRUE(free_now.owns_lock());
  auto held = m.lock("held");
  bool got = true;
  std::chrono::steady_clock::duration took{};
  std::thread([&] {
    const auto start = std::chrono::steady_clock::now();
    got = m.try_lock_for("held", 0ms).owns_lock();
    auto past = m.try_lock_until("held", std::chrono::steady_clock::now() - 1h);
    got = got || past.owns_lock();
    took = std::chrono::steady_clock::now() - start;
  }).join();
  EXPECT_FALSE(got);
  EXPECT_LT(took, 1s);
}

}  // namespace
