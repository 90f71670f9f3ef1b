// The vocabulary both keyed mutexes share (handoff::keyed_mutex in this process,
// handoff::redis::keyed_mutex across processes): a lease, and the error a guard reports
// once it no longer holds its key.
#pragma once

#include <chrono>
#include <stdexcept>

#include "handoff/detail/clock.hpp"

namespace handoff {

// A lease: the lock is released automatically this long after it is granted (or last
// extended). Any positive length is accepted; a length too long to add to the clock
// ("nanoseconds::max()") means the lease never runs out. Throws std::invalid_argument for
// a length <= 0.
struct lease {
  template <class Rep, class Period>
  explicit lease(std::chrono::duration<Rep, Period> d) : duration(detail::to_ns_saturating(d)) {
    if (d <= std::chrono::duration<Rep, Period>::zero()) {
      throw std::invalid_argument("handoff::lease: duration must be positive");
    }
  }
  std::chrono::nanoseconds duration;  // rounded up; nanoseconds::max() when it saturated
};

// Thrown by a guard's check() when it no longer holds its key.
class lock_expired : public std::runtime_error {
 public:
  lock_expired() : std::runtime_error("handoff: the lock is no longer held (lease expired or unlocked)") {}
};

}  // namespace handoff
