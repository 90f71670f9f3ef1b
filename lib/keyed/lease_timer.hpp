// lease_timer: a keyed mutex's deadlines (leases, and async wait times), one thread per
// mutex started by the first of them; and the completion thread that runs what they
// complete. Private to lib/.
//
// The timer thread only fires deadlines and runs the protocol (a lease expiry releases the
// key; a wait time cancels the waiter). The coroutines and callbacks that this grants or
// times out go through complete_waiter to the completion thread: the timer never runs
// user code, so a callback that blocks cannot delay another lease.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "../runtime/task_thread.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_entry.hpp"

namespace handoff::detail {

class lock_table;

// A binary min-heap of deadlines under a mutex. Firing a lease CASes the entry's `leased`
// word under the mutex, so a concurrent unlock or extend sees either the live lease or none.
class lease_timer {
 public:
  // With `start_threads` false (the tests' manual clock), deadlines fire only in advance(),
  // and their completions run on advance()'s caller. Throws std::system_error if a thread
  // cannot start.
  lease_timer(lock_table& t, bool start_threads);
  lease_timer(const lease_timer&) = delete;
  lease_timer& operator=(const lease_timer&) = delete;
  lease_timer(lease_timer&&) = delete;
  lease_timer& operator=(lease_timer&&) = delete;
  ~lease_timer() { stop(); }

  // Joins the timer thread, then runs the completions it queued and joins the completion
  // thread. Idempotent.
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
  void run() noexcept;
  void fire(timer_node* n) noexcept;
  void run_fired() noexcept;
  template <class T>
  static void push(std::vector<T*>& v, T* p) noexcept;

  lock_table& table_;
  // A plain std::mutex (not annotated_mutex): the condition variable needs one. Every
  // member below up to thread_, and every timer_node, is touched only under it.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<timer_node*> heap_;
  std::uint64_t seq_ = 0;
  bool stop_ = false;
  // Fired, not yet processed (see run_fired): touched only by the thread that fired them.
  std::vector<lock_entry*> expired_;
  std::vector<waiter*> timed_out_;
  // Started before the timer thread, stopped after it (stop()); empty with a manual clock.
  std::optional<task_thread> completions_;
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace handoff::detail
