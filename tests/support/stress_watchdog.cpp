// Every stress test runs under a watchdog: a test still running 60 s past its planned
// length (a lost message leaves an owner spinning for it, a lost wake-up a sender
// blocked) aborts the binary with the test's name, long before ctest's own timeout.
#include <gtest/gtest.h>

#include "stress_seconds.hpp"
#include "test_timeout.hpp"

#include <chrono>
#include <cmath>

namespace {

const bool registered = handoff::test::register_timeout_each_test(
    std::chrono::seconds(static_cast<long long>(std::ceil(handoff::test::stress_seconds())) + 60));

}  // namespace
