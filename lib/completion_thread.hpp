// completion_thread: where a keyed mutex runs the coroutines and callbacks that its lease
// timer granted or timed out, so that the timer thread never runs user code (a callback
// that blocks there would stop every lease of the mutex).
#pragma once

#include <condition_variable>
#include <mutex>
#include <thread>

#include "handoff/detail/lock_entry.hpp"

namespace handoff::detail {

// One thread and a FIFO of waiters linked through waiter::resume_next (no allocation).
class completion_thread {
 public:
  completion_thread();  // starts the thread; throws std::system_error if it cannot
  // Runs what is queued, then joins (stop()).
  ~completion_thread() { stop(); }
  completion_thread(const completion_thread&) = delete;
  completion_thread& operator=(const completion_thread&) = delete;
  completion_thread(completion_thread&&) = delete;
  completion_thread& operator=(completion_thread&&) = delete;

  // Thread-safe. Queues w; the thread completes it with complete_waiter.
  void post(waiter* w) noexcept;
  // Runs what is queued and joins the thread. Idempotent; not concurrent with post().
  void stop() noexcept;

 private:
  void run() noexcept;

  std::mutex mutex_;  // guards everything below but thread_
  std::condition_variable wake_;
  waiter* head_ = nullptr;
  waiter* tail_ = nullptr;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace handoff::detail
