// task_thread (see task_thread.hpp).
#include "task_thread.hpp"

#include <thread>
#include <utility>

namespace handoff::detail {

task_thread::task_thread() : thread_([this] { run(); }) {}

void task_thread::post(task* t) noexcept {
  t->next = 0;
  {
    const std::lock_guard lock(mutex_);
    *tail_ = reinterpret_cast<std::uintptr_t>(t);
    tail_ = &t->next;
  }
  wake_.notify_one();
}

void task_thread::flush() noexcept {
  if (std::this_thread::get_id() == thread_.get_id()) return;
  struct marker : task {
    task_thread* owner = nullptr;
    bool done = false;  // under owner->mutex_: the marker is gone once the waiter sees it
  } m;
  m.owner = this;
  m.run = [](task* t) noexcept {
    task_thread& owner = *static_cast<marker*>(t)->owner;
    {
      const std::lock_guard lock(owner.mutex_);
      static_cast<marker*>(t)->done = true;
    }
    owner.flushed_.notify_all();
  };
  post(&m);
  std::unique_lock lock(mutex_);
  flushed_.wait(lock, [&] { return m.done; });
}

void task_thread::stop() noexcept {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void task_thread::run() noexcept {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return head_ != 0 || stop_; });
    if (head_ == 0) return;  // stopping, and everything posted has run
    std::uintptr_t batch = std::exchange(head_, 0);
    tail_ = &head_;
    lock.unlock();
    while (batch != 0) {
      auto* t = reinterpret_cast<task*>(batch);  // NOLINT(performance-no-int-to-ptr): a task's address
      batch = t->next;
      schedule(t);  // at top level: runs t now, then what it made runnable
    }
    lock.lock();
  }
}

}  // namespace handoff::detail
