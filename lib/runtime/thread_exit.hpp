// Per-thread state that must be given back when its thread exits (the node pool's slabs,
// the keyed mutex's cached entry) is kept in trivial thread_locals, reached without a
// TLS-wrapper check on the hot path; a separate hook object, registered on a cold path,
// gives it back.
#pragma once

namespace handoff::detail {

// Registers OnExit to run once when the calling thread exits; later calls on the same
// thread do nothing. Thread-locals constructed before the first call are destroyed after
// OnExit ran and may still use the state: OnExit leaves it marked as given back.
template <void (*OnExit)() noexcept>
void run_at_thread_exit() noexcept {
  struct hook {
    hook() = default;
    hook(const hook&) = delete;
    hook& operator=(const hook&) = delete;
    hook(hook&&) = delete;
    hook& operator=(hook&&) = delete;
    ~hook() { OnExit(); }
  };
  static thread_local hook h;
  (void)h;
}

}  // namespace handoff::detail
