// Whether a GoogleTest failure recorded inside an explore() body fails that run. The one
// test here records a failure on purpose in the body's third run, so GoogleTest reports
// it failed; ctest judges the exploration's own report on stdout instead of the exit code
// (tests/CMakeLists.txt, testing_gtest_failure_fails_the_run).
#include <gtest/gtest.h>

#include <handoff/testing.hpp>

#include <cstdio>

TEST(TestingGtestProbe, AFailureRecordedInTheBodyFailsTheRun) {
  int run = 0;
  const auto r = handoff::testing::explore(
      [&](handoff::testing::scheduler&) {
        if (++run == 3) ADD_FAILURE() << "planted in run 3";
      },
      {.runs = 10});
  std::printf("probe: failed=%d runs=%zu\n", r.failed ? 1 : 0, r.runs);
}
