// How long each stress test runs: HANDOFF_STRESS_SECONDS, or 2 s.
#pragma once

#include <cstdlib>

namespace handoff::test {

inline double stress_seconds() {
  const char* s = std::getenv("HANDOFF_STRESS_SECONDS");
  return s != nullptr ? std::atof(s) : 2.0;
}

}  // namespace handoff::test
