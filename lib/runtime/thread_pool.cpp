#include "handoff/thread_pool.hpp"

#include <atomic>
#include <concurrentqueue/blockingconcurrentqueue.h>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "handoff/detail/run_queue.hpp"
#include "handoff/detail/test_driver.hpp"

namespace handoff {

struct thread_pool::impl {
  moodycamel::BlockingConcurrentQueue<job> queue;
  // Workers blocked (or about to block) waiting for work. relaxed: a hint for
  // has_idle_workers(); nothing is published through it.
  std::atomic<std::uint32_t> idle{0};
  // Work submitted and not yet finished. The destructor waits for 0 before stopping the
  // workers, so that work which submits more work (an actor's continuation) is not cut off.
  std::atomic<std::uint64_t> outstanding{0};
  std::vector<std::thread> workers;

  void run() noexcept {
    for (;;) {
      job j;
      // A busy worker never touches `idle`: only one that finds the queue empty does.
      if (!queue.try_dequeue(j)) {
        idle.fetch_add(1, std::memory_order_relaxed);
        queue.wait_dequeue(j);
        idle.fetch_sub(1, std::memory_order_relaxed);
      }
      if (!j) return;  // stop sentinel, sent only once outstanding == 0
      detail::run_reporting(j, "a job run by handoff::thread_pool");
      // What the job deferred to actors without an executor: this is the worker's next drain.
      if (detail::has_queued()) detail::run_queued();
      j = job{};  // destroy the callable before the count says it is done
      // acq_rel: the release publishes what the work did to the destructor's acquire load.
      if (outstanding.fetch_sub(1, std::memory_order_acq_rel) == 1) outstanding.notify_all();
    }
  }
};

thread_pool::thread_pool(std::size_t threads) : impl_(std::make_unique<impl>()) {
  if (threads == 0) threads = 1;
  impl_->workers.reserve(threads);
  try {
    for (std::size_t i = 0; i < threads; ++i) impl_->workers.emplace_back([p = impl_.get()] { p->run(); });
  } catch (...) {
    stop();  // a joinable std::thread must not be destroyed
    throw;
  }
}

void thread_pool::stop() noexcept {
  for (std::size_t i = 0; i < impl_->workers.size(); ++i) {
    while (!impl_->queue.enqueue(job{})) std::this_thread::yield();  // stop sentinels
  }
  for (std::thread& t : impl_->workers) t.join();
}

thread_pool::~thread_pool() {
  for (std::uint64_t n; (n = impl_->outstanding.load(std::memory_order_acquire)) != 0;) {
    impl_->outstanding.wait(n, std::memory_order_acquire);
  }
  stop();
}

void thread_pool::execute(job j) {
  // An empty job is the workers' stop sentinel: it would end a worker early.
  if (!j) throw std::invalid_argument("handoff::thread_pool::execute: an empty job (work without a function)");
  if (detail::tls.driver != nullptr) [[unlikely]]
    return detail::tls.driver->execute(std::move(j));  // under a test scheduler: an event
  // relaxed: the queue's own release/acquire orders the work; the count only needs to be
  // non-zero before the worker's decrement, which the enqueue below guarantees.
  impl_->outstanding.fetch_add(1, std::memory_order_relaxed);
  if (!impl_->queue.enqueue(std::move(j))) {
    impl_->outstanding.fetch_sub(1, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
}

std::size_t thread_pool::size() const noexcept { return impl_->workers.size(); }

bool thread_pool::has_idle_workers() const noexcept { return impl_->idle.load(std::memory_order_relaxed) != 0; }

}  // namespace handoff
