// The default timer service, process-wide and per thread (handoff/timer_scope.hpp).
#include <algorithm>
#include <atomic>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "handoff/detail/run_queue.hpp"
#include "handoff/timer_scope.hpp"

namespace handoff {

namespace {
// release in set_default_timer_service; pairs with the acquire in current_timer_service():
// a service set after it was built is seen built.
std::atomic<timer_service*> process_default{nullptr};
thread_local timer_service* thread_current = nullptr;  // this thread's innermost timer_scope

// A test scheduler runs the events of its thread on threads of its own: a scope made on
// the scheduler's thread covers them through this list, which only threads under a
// scheduler ever read. Innermost last.
struct scheduler_scope {
  const detail::test_driver* driver;
  timer_service* service;
};
std::mutex scheduler_scopes_mutex;
std::vector<scheduler_scope> scheduler_scopes;  // guarded by scheduler_scopes_mutex

timer_service* scheduler_current(const detail::test_driver* d) {
  const std::lock_guard g(scheduler_scopes_mutex);
  const auto it = std::find_if(scheduler_scopes.rbegin(), scheduler_scopes.rend(),
                               [d](const scheduler_scope& s) { return s.driver == d; });
  return it == scheduler_scopes.rend() ? nullptr : it->service;
}
}  // namespace

void set_default_timer_service(timer_service* s) noexcept { process_default.store(s, std::memory_order_release); }

timer_service& current_timer_service() {
  if (thread_current != nullptr) return *thread_current;
  if (detail::tls.driver != nullptr) {
    if (timer_service* s = scheduler_current(detail::tls.driver)) return *s;
  }
  if (timer_service* s = process_default.load(std::memory_order_acquire)) return *s;
  throw std::logic_error(
      "handoff: no timer service: call handoff::set_default_timer_service() or make a handoff::timer_scope on this "
      "thread");
}

timer_scope::timer_scope(timer_service& s) : previous_(thread_current) {
  if (detail::tls.driver != nullptr) {
    const std::lock_guard g(scheduler_scopes_mutex);
    scheduler_scopes.push_back({detail::tls.driver, &s});
  }
  thread_current = &s;
}

timer_scope::~timer_scope() {
  if (detail::tls.driver != nullptr) {
    const std::lock_guard g(scheduler_scopes_mutex);
    const auto it = std::find_if(scheduler_scopes.rbegin(), scheduler_scopes.rend(), [&](const scheduler_scope& x) {
      return x.driver == detail::tls.driver && x.service == thread_current;
    });
    if (it != scheduler_scopes.rend()) scheduler_scopes.erase(std::next(it).base());
  }
  thread_current = previous_;
}

}  // namespace handoff
