// HANDOFF_ASSERT(cond): an invariant check of the library's protocols. Active when
// HANDOFF_ASSERTIONS is defined (this project's Debug and sanitizer builds define it; a
// consumer may define it too), where a false condition prints the file, line and condition
// to stderr and aborts. Otherwise it compiles to nothing and `cond` is not evaluated, so a
// condition must have no side effect.
#pragma once

#if defined(HANDOFF_ASSERTIONS)
#include <cstdio>
#include <cstdlib>

namespace handoff::detail {
[[noreturn]] inline void assertion_failed(const char* file, int line, const char* cond) noexcept {
  std::fprintf(stderr, "handoff: %s:%d: invariant violated: %s\n", file, line, cond);
  std::fflush(stderr);
  std::abort();
}
}  // namespace handoff::detail

#define HANDOFF_ASSERT(cond) \
  ((cond) ? static_cast<void>(0) : ::handoff::detail::assertion_failed(__FILE__, __LINE__, #cond))
#else
// sizeof: the condition is checked for validity and its variables count as used, but it is
// never evaluated.
#define HANDOFF_ASSERT(cond) static_cast<void>(sizeof(!(cond)))
#endif
