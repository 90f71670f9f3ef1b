// The keyed mutex's completion thread (lib/completion_thread.hpp).
#include "completion_thread.hpp"

#include <utility>

namespace handoff::detail {

completion_thread::completion_thread() : thread_([this] { run(); }) {}

void completion_thread::post(waiter* w) noexcept {
  {
    std::lock_guard lock(mutex_);
    w->resume_next = nullptr;
    if (tail_ != nullptr) {
      tail_->resume_next = w;
    } else {
      head_ = w;
    }
    tail_ = w;
  }
  wake_.notify_one();
}

void completion_thread::stop() noexcept {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void completion_thread::run() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return head_ != nullptr || stop_; });
    if (head_ == nullptr) return;  // stopped, and nothing left to run
    waiter* batch = std::exchange(head_, nullptr);
    tail_ = nullptr;
    lock.unlock();
    while (batch != nullptr) {
      waiter* w = std::exchange(batch, batch->resume_next);
      complete_waiter(w);  // on this thread: no redirect here
    }
    lock.lock();
  }
}

}  // namespace handoff::detail
