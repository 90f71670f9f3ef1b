// expect(): the examples' only check. The examples are tests (ctest label `example`): a
// failed check prints what failed and ends the process with status 1 at once, from any
// thread, without running destructors that could hang or terminate first.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace example {

inline void expect(bool ok, const char* what) noexcept {
  if (ok) return;
  std::fprintf(stderr, "check failed: %s\n", what);
  std::fflush(stderr);
  std::_Exit(1);
}

}  // namespace example
