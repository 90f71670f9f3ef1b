// HANDOFF_ASSERT (detail/assert.hpp): aborts with the file, line and condition when
// HANDOFF_ASSERTIONS is defined (this project's Debug and sanitizer builds), and neither
// evaluates nor checks the condition otherwise (release builds).
#include <handoff/detail/assert.hpp>

#include <gtest/gtest.h>

#include <chrono>

#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;

class HandoffAssert : public testing::Test {
 protected:
  handoff::test::test_timeout timeout_{60s};
};

TEST_F(HandoffAssert, AFalseConditionAbortsNamingItWhenAssertionsAreOnAndIsNotEvaluatedOtherwise) {
  int evaluated = 0;
  HANDOFF_ASSERT(++evaluated == 1);  // true: never aborts
#if defined(HANDOFF_ASSERTIONS)
  EXPECT_EQ(evaluated, 1);
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the timeout thread: re-execute, not fork
  EXPECT_DEATH(HANDOFF_ASSERT(evaluated == 2), "invariant violated: evaluated == 2");
#else
  EXPECT_EQ(evaluated, 0);         // compiled out: the side effect never ran
  HANDOFF_ASSERT(evaluated == 2);  // and a false one does nothing
#endif
}

}  // namespace
