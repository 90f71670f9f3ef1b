// The watchdog every unit and stress test runs under (tests/support/test_timeout.hpp): a
// test still running past its limit aborts the binary with the test's name; one that ended
// is never aborted, and the one watchdog thread serves the next test.
#include "../support/test_timeout.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

namespace {

using namespace std::chrono_literals;
using handoff::test::timeout_each_test;

const ::testing::TestInfo& this_test() { return *::testing::UnitTest::GetInstance()->current_test_info(); }

TEST(TestTimeout, AHungTestAbortsTheBinaryNamingTheTest) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the binary's watchdog thread: re-execute, not fork
  EXPECT_DEATH(
      {
        timeout_each_test watchdog(1s);
        watchdog.OnTestStart(this_test());
        std::this_thread::sleep_for(30s);
      },
      "TestTimeout.AHungTestAbortsTheBinaryNamingTheTest: still running after 1s");
}

TEST(TestTimeout, ATestThatEndedInTimeIsNotAbortedAndTheNextOneIsWatched) {
  timeout_each_test watchdog(1s);
  watchdog.OnTestStart(this_test());
  watchdog.OnTestEnd(this_test());
  std::this_thread::sleep_for(1500ms);  // past the first test's deadline: still running
  watchdog.OnTestStart(this_test());
  std::this_thread::sleep_for(500ms);
  watchdog.OnTestEnd(this_test());
}

}  // namespace
