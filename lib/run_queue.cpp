// The per-thread run queue (see detail/run_queue.hpp).
#include "handoff/detail/run_queue.hpp"

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/assert.hpp"

namespace handoff::detail {

HANDOFF_TLS_MODEL constinit thread_local thread_state tls{};

bool run_next(drain_frame* parent) noexcept {
  const std::uintptr_t entry = tls.head;
  if (entry == 0) return false;
  HANDOFF_ASSERT(tls.top == parent);
  if ((entry & 1U) != 0) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a tagged entry (see run_queue.hpp)
    auto* a = reinterpret_cast<actor_base*>(entry & ~std::uintptr_t{1});
    tls.head = a->ready_next_;
    if (tls.head == 0) tls.tail = nullptr;
    a->drain(0, 0);  // pushes its own frame on `parent`
    return true;
  }
  auto* t = reinterpret_cast<task*>(entry);  // NOLINT(performance-no-int-to-ptr): untagged: a task
  tls.head = t->next;
  if (tls.head == 0) tls.tail = nullptr;
  // A sentinel frame: what the task makes runnable queues behind it instead of recursing
  // (a million granted coroutines must not nest), and ask() from it still sees the
  // actors being drained below it.
  drain_frame sentinel{nullptr, parent, false};
  tls.top = &sentinel;
  t->run(t);
  tls.top = parent;
  return true;
}

void run_queued() noexcept {
  HANDOFF_ASSERT(tls.top == nullptr);
  while (run_next(nullptr)) {
  }
}

void run_before_blocking() noexcept {
  drain_frame* const top = tls.top;
  if (top == nullptr) return;
  while (run_next(top)) {
  }
}

void schedule(task* t) noexcept {
  enqueue_runnable(reinterpret_cast<std::uintptr_t>(t), &t->next);
  if (tls.top == nullptr) run_queued();
}

}  // namespace handoff::detail
