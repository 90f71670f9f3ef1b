// The seam through which a handoff::testing::scheduler (handoff/testing.hpp) takes over
// what the library would otherwise run, wait for or time by itself on a thread.
//
// tls.driver (detail/run_queue.hpp) points at the scheduler on the threads it runs (the
// test's own and the ones it runs events on) and is nullptr on every other thread. A keyed
// mutex's table keeps the pointer it found when it was made (lock_table::driver_), so its
// hooks follow the table whichever thread calls it: a thread the scheduler does not run
// can reach block_until and yield through it (see there).
//
// Each hook is one test of one of those two pointers. Without a scheduler it is a load
// and a branch not taken. Most hooks sit on a path that already waits, allocates or hands
// work on; these sit on paths that need do none of that:
//   an actor's constructor and its destructor, which name actors in the trace
//   the start of a drain turn, so an uncontended post (which runs its handler inline)
//                      tests tls.driver once
//   the keyed mutex's uncontended lock: keyed_mutex's inline lock tests the table's
//                      driver_ (lock_table::driven()) before lock_table::try_acquire_fast
//                      takes a free key
// What each hook does under a scheduler:
//   ask()              answers through block_until instead of the caller's own wait
//   ~actor             waits for its destroy marker through block_until
//   a drain turn       runs one message, then the actor queues again (one event each)
//   continue_elsewhere the actor queues on the run queue instead of going to its executor
//   thread_pool        execute() becomes an event (execute below)
//   a full mailbox     the test's post waits for room through block_until
//   keyed lock         every request (lock, try_lock, try_lock_for, async_lock,
//                      lock_async) is a scheduling point (yield), then runs as without a
//                      scheduler: a free key is taken at once (a lock_async callback runs
//                      inside the call, an async_lock goes on without suspending); a
//                      blocking wait goes through block_until, a queued async request is
//                      kept for the table's destructor (a deadlock if never granted), and
//                      the table's clock is virtual
//   report_to_stderr   a handler's exception that no hook takes fails the run (unhandled)
#pragma once

#include <cstdint>
#include <exception>
#include <string_view>

#include "handoff/executor.hpp"

namespace handoff::detail {

class lock_table;

class test_driver {
 public:
  // Whether a blocked call may return; read by the scheduler while the caller is parked.
  using ready_fn = bool (*)(const void* arg) noexcept;

  // Parks the calling context until ready(arg) or the virtual `deadline` (no_deadline:
  // none) passes, while the scheduler runs other events. True: ready(arg). `what` names
  // the call in the trace ("ask", "lock", "~actor"). Throws handoff::testing::deadlock
  // when the run has failed (a deadlock found, or a check failed) and the call must give
  // up; with `may_throw` false (a noexcept caller) that terminates with the trace instead.
  // Called on a thread the scheduler does not run (one the test started itself, through a
  // keyed mutex made under the scheduler), it waits for nothing: it fails the run and
  // throws std::logic_error naming that thread and `what` (terminates if !may_throw).
  virtual bool block_until(ready_fn ready, const void* arg, std::int64_t deadline, std::string_view what,
                           bool may_throw) = 0;
  // A scheduling point: the scheduler may run other events before the caller goes on.
  // Throws as block_until does. Returns at once on the test's own thread and on a thread
  // the scheduler does not run: neither is an event that could be ordered.
  virtual void yield(std::string_view what) = 0;
  // Whether the caller is the test itself (outside every event): what it calls behaves
  // as at top level (a send to a full mailbox waits for room), not as inside a handler.
  [[nodiscard]] virtual bool at_top_level() const noexcept = 0;
  // The virtual clock, ns (the tables' clock under this scheduler).
  [[nodiscard]] virtual std::int64_t now() const noexcept = 0;
  // A keyed mutex's table made under this scheduler: its leases and wait times fire as
  // time events, and its keys are named in the trace. detach: its destructor, which first
  // runs every pending event (settle) so that no grant outlives it.
  virtual void attach(lock_table* t) = 0;
  virtual void detach(lock_table* t) noexcept = 0;
  // Runs every event that can run (teardown: a table or an actor going away).
  virtual void settle() noexcept = 0;
  // thread_pool::execute and executor work: the job runs as an event.
  virtual void execute(job j) = 0;
  // Fails the run: `why` ends its trace.
  virtual void fail(std::string_view why) noexcept = 0;
  // An exception no hook took (report_to_stderr): fails the run.
  virtual void unhandled(const std::exception_ptr& e, const char* source) noexcept = 0;
  // Actors are named by creation order in the trace.
  virtual void actor_created(const void* a) noexcept = 0;
  virtual void actor_destroyed(const void* a) noexcept = 0;

  test_driver() = default;
  virtual ~test_driver() = default;
  test_driver(const test_driver&) = delete;
  test_driver& operator=(const test_driver&) = delete;
  test_driver(test_driver&&) = delete;
  test_driver& operator=(test_driver&&) = delete;
};

}  // namespace handoff::detail
