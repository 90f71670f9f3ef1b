// lease_timer: a keyed mutex's deadlines (leases, and async wait times), kept in a heap of
// the mutex and driven by one entry in a timer_service (lib/timer/timer_callback.hpp),
// armed at the heap's earliest deadline: no thread of the mutex's own. Private to lib/.
//
// The service's driver only fires deadlines and runs the protocol (a lease expiry releases
// the key; a wait time cancels the waiter). The coroutines and callbacks that this grants
// or times out go through complete_waiter to the process-wide completion thread
// (completion_thread()): the driver never runs user code, so a callback that blocks
// cannot delay a lease, of this mutex or of any other on the service.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "../runtime/task_thread.hpp"
#include "../timer/timer_callback.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_entry.hpp"

namespace handoff {
class timer_service;
}

namespace handoff::detail {

class lock_table;

// The thread where the deadlines' completions run, one per process: started by the first
// lease_timer on a service, never stopped (a keyed mutex may be destroyed at exit after
// it). Throws std::system_error if it cannot start.
task_thread& completion_thread();
// The service of the mutexes given none: the library's own, started at first use (one
// thread, a resolution of 2^16 ns), never destroyed. Throws std::system_error if its thread cannot start.
timer_service& default_lease_service();

// A binary min-heap of deadlines under a mutex. Firing a lease CASes the entry's `leased`
// word under the mutex, so a concurrent unlock or extend sees either the live lease or none.
class lease_timer {
 public:
  // On `service`, which must outlive this (its destructor terminates otherwise). nullptr
  // (the manual clock of tests and test schedulers): deadlines fire only in advance(), and
  // their completions run on advance()'s caller. Throws std::system_error if the completion
  // thread cannot start, std::bad_alloc.
  lease_timer(lock_table& t, timer_service* service);
  lease_timer(const lease_timer&) = delete;
  lease_timer& operator=(const lease_timer&) = delete;
  lease_timer(lease_timer&&) = delete;
  lease_timer& operator=(lease_timer&&) = delete;
  ~lease_timer() { stop(); }

  // Leaves the service (waits for a firing in progress), then for the completions it
  // queued to run. Idempotent; not from the completion thread (see completion_thread()).
  void stop() noexcept;

  std::mutex& mutex() noexcept { return mutex_; }

  // With mutex() held. Schedules n at `deadline` (never no_deadline), or moves it there.
  void schedule(timer_node* n, std::int64_t deadline) noexcept;
  // With mutex() held. True if n was scheduled (and is now not).
  bool cancel(timer_node* n) noexcept;

  // The earliest deadline scheduled; no_deadline: none.
  [[nodiscard]] std::int64_t next_deadline() noexcept {
    std::lock_guard lock(mutex_);
    return heap_.empty() ? no_deadline : heap_.front()->deadline;
  }

  // Manual clock: fires, one at a time and in (deadline, schedule) order, every deadline up
  // to `to`, with the clock set to each deadline while it fires.
  void advance(std::atomic<std::int64_t>& clock, std::int64_t to);

 private:
  void swap_at(std::size_t a, std::size_t b) noexcept;
  static bool before(const timer_node* a, const timer_node* b) noexcept;
  void fix(std::size_t i) noexcept;
  static void on_due(void* self) noexcept;
  static void on_dropped(void* self) noexcept;
  void fire(timer_node* n) noexcept;
  void run_fired() noexcept;
  template <class T>
  static void push(std::vector<T*>& v, T* p) noexcept;

  lock_table& table_;
  // Every member below but engine_, and every timer_node, is touched only under it.
  std::mutex mutex_;
  std::vector<timer_node*> heap_;
  std::uint64_t seq_ = 0;
  std::int64_t armed_ = no_deadline;  // where engine_ is armed: at or before the heap's front
  bool fired_ = false;                // on_due fired a deadline: stop() waits for its completions
  // Fired, not yet processed (see run_fired): touched only by the thread that fired them
  // (the service calls on_due once at a time).
  std::vector<lock_entry*> expired_;
  std::vector<waiter*> timed_out_;
  task_thread* completions_ = nullptr;    // completion_thread(); nullptr with a manual clock
  std::optional<timer_callback> engine_;  // last: armed once the members it uses exist
};

}  // namespace handoff::detail
