// Shared by the executor tests (tests/unit/executor_*_test.cpp).
#pragma once

#include <chrono>

namespace handoff::test {

// How long a test waits for something that should happen promptly before failing.
inline constexpr auto patience = std::chrono::seconds(10);

}  // namespace handoff::test
