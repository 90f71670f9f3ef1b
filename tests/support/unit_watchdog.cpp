// Every unit test runs under a watchdog: a test still running after 60 s (a lost wake-up
// leaves a thread blocked, a lost message an owner spinning) aborts the binary with the
// test's name, well before ctest's own timeout. The longest unit test takes a few seconds
// under ThreadSanitizer.
#include <chrono>

#include "test_timeout.hpp"

namespace {

const bool registered = handoff::test::register_timeout_each_test(std::chrono::seconds(60));

}  // namespace
