// handoff::thread_pool: a fixed set of worker threads, an executor for actors.
//
// Workers block on a moodycamel BlockingConcurrentQueue (a lock-free queue plus a
// semaphore): an idle pool burns no CPU. Work runs in roughly FIFO order per submitting
// thread; no order is promised across submitters.
#pragma once

#include <cstddef>
#include <memory>

#include "handoff/executor.hpp"

namespace handoff {

class thread_pool {
 public:
  // Starts `threads` workers (0 gives one). Throws std::system_error if a thread cannot
  // be started (the workers already started are stopped and joined first), or
  // std::bad_alloc.
  explicit thread_pool(std::size_t threads);
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  // Runs every work item already submitted, and any work those submit in turn, then joins
  // the workers. Must not be called from a worker. Submitting from other threads while the
  // destructor runs is a precondition violation.
  ~thread_pool();

  // Thread-safe, never blocks. Queues `j` to run once on a worker, never inside this call
  // (not even from a worker); what the caller did before execute() happens-before `j`
  // runs. Takes any callable: `pool.execute([p = std::move(p)] { ... })`, a `work`
  // included; a small one is stored without allocating (see handoff::job). An exception
  // thrown by the callable is printed to stderr and the worker goes on. What the job
  // left on the worker's run queue (defer() to an actor without an executor) runs right
  // after it, on that worker. Throws
  // std::invalid_argument for an empty job (a work item without a function),
  // std::bad_alloc if the queue cannot grow; after a throw `j` was not queued.
  void execute(job j);

  // Thread-safe, approximate: whether some worker is waiting for work. Actors that use
  // this pool read it to spread over the workers (see executor_ref::has_idle_workers).
  [[nodiscard]] bool has_idle_workers() const noexcept;

  // Thread-safe: the number of workers.
  [[nodiscard]] std::size_t size() const noexcept;

 private:
  void stop() noexcept;  // after the outstanding work: sentinels, then joins
  struct impl;
  std::unique_ptr<impl> impl_;
};

static_assert(executor<thread_pool>);

}  // namespace handoff
