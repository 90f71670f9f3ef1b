// What the test scheduler (lib/testing/) and the timer service (lib/timer/) need of each
// other: a service made under a scheduler joins it, and its deadlines become time events.
// Private to lib/.
#pragma once

#include <cstdint>

namespace handoff::detail {

class test_driver;
class timer_core;

// Defined by the scheduler (lib/testing/scheduler.cpp). Attach: when the service is made;
// detach: when it is destroyed (before the scheduler, which it must not outlive).
void timers_attach(test_driver& d, timer_core* c);
void timers_detach(test_driver& d, timer_core* c) noexcept;

// Defined by the timer service (lib/timer/drive.cpp), called on the scheduler's thread.
// The earliest virtual instant at which run_due would send something; no_deadline: none.
std::int64_t timers_next_deadline(timer_core* c) noexcept;
// Sends what is due at `now` (the sends become actor events).
void timers_run_due(timer_core* c, std::int64_t now);

}  // namespace handoff::detail
