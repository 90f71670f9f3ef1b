#include "handoff/thread_pool.hpp"

#include <atomic>
#include <concurrentqueue/blockingconcurrentqueue.h>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <thread>
#include <vector>

namespace handoff {

struct thread_pool::impl {
  moodycamel::BlockingConcurrentQueue<work> queue;
  // Work submitted and not yet finished. The destructor waits for 0 before stopping the
  // workers, so that work which submits more work (an actor's continuation) is not cut off.
  std::atomic<std::uint64_t> outstanding{0};
  std::vector<std::thread> workers;

  void run() noexcept {
    for (;;) {
      work w;
      queue.wait_dequeue(w);
      if (w.fn == nullptr) return;  // stop sentinel, sent only once outstanding == 0
      w();
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
    while (!impl_->queue.enqueue(work{})) std::this_thread::yield();  // stop sentinels
  }
  for (std::thread& t : impl_->workers) t.join();
}

thread_pool::~thread_pool() {
  for (std::uint64_t n; (n = impl_->outstanding.load(std::memory_order_acquire)) != 0;) {
    impl_->outstanding.wait(n, std::memory_order_acquire);
  }
  stop();
}

void thread_pool::execute(work w) {
  // A null function is the workers' stop sentinel: it would end a worker early.
  if (w.fn == nullptr) throw std::invalid_argument("handoff::thread_pool::execute: work without a function");
  // relaxed: the queue's own release/acquire orders the work; the count only needs to be
  // non-zero before the worker's decrement, which the enqueue below guarantees.
  impl_->outstanding.fetch_add(1, std::memory_order_relaxed);
  if (!impl_->queue.enqueue(w)) {
    impl_->outstanding.fetch_sub(1, std::memory_order_relaxed);
    throw std::bad_alloc();
  }
}

std::size_t thread_pool::size() const noexcept { return impl_->workers.size(); }

}  // namespace handoff
