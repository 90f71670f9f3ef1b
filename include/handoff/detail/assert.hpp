// HANDOFF_ASSERT(cond): invariant checks on the protocols' state changes (counts, waiter
// states, lease words). On in Debug builds and in the sanitizer builds (the build defines
// HANDOFF_ASSERTIONS), compiled out otherwise: a failed check prints the condition and
// where, then aborts.
#pragma once

#if defined(HANDOFF_ASSERTIONS)
#include <cstdio>
#include <cstdlib>
#define HANDOFF_ASSERT(cond)                                                                         \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      std::fprintf(stderr, "handoff: invariant violated at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                                  \
    }                                                                                                \
  } while (false)
#else
#define HANDOFF_ASSERT(cond) static_cast<void>(0)
#endif
