// task_thread: one thread that runs tasks posted by other threads, each through that
// thread's run queue (so what a task makes runnable runs after it, never nested). The
// keyed mutexes run their user callbacks here instead of on the threads that keep their
// deadlines (the lease timer, the Redis client's background thread), so that a slow or
// blocking callback delays other callbacks only, never a lease, a heartbeat or a renewal.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "handoff/detail/run_queue.hpp"

namespace handoff::detail {

class task_thread {
 public:
  task_thread();  // starts the thread; throws std::system_error if it cannot
  // Runs what is queued, then joins (stop()).
  ~task_thread() { stop(); }
  task_thread(const task_thread&) = delete;
  task_thread& operator=(const task_thread&) = delete;
  task_thread(task_thread&&) = delete;
  task_thread& operator=(task_thread&&) = delete;

  // Thread-safe, never blocks for long, allocates nothing (t is linked through its
  // `next`). t runs once on the thread, after the tasks posted before it.
  void post(task* t) noexcept;
  // Returns once every task posted before the call has run. On the thread itself (from a
  // task) it returns at once: what was posted before runs after that task.
  void flush() noexcept;
  // Runs what is queued and joins the thread. Idempotent; not concurrent with post().
  void stop() noexcept;

 private:
  void run() noexcept;

  std::mutex mutex_;  // guards everything below but thread_
  std::condition_variable wake_;
  std::condition_variable flushed_;  // a flush's marker ran
  std::uintptr_t head_ = 0;          // FIFO of task* through task::next
  std::uintptr_t* tail_ = &head_;    // link word of the last task
  bool stop_ = false;
  std::thread thread_;  // last: started once the members it uses exist
};

}  // namespace handoff::detail
