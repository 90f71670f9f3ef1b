// The registry of live timer services and the actor-destruction hook it installs
// (handoff/detail/actor_destroy_hook.hpp; lib/timer/timer_core.hpp, "Timers by target").
#include <algorithm>
#include <mutex>
#include <vector>

#include "handoff/detail/actor_destroy_hook.hpp"
#include "timer_core.hpp"

namespace handoff::detail {

namespace {

struct registry {
  std::mutex m;
  std::vector<timer_core*> cores;  // guarded by m
};
registry& the_registry() {
  static auto* r = new registry;  // never destroyed: actors may go after static destructors ran
  return *r;
}

// Visits the services one at a time: the registry's mutex is held only to find and pin
// one that has timers aimed at the actor, never while forget() waits for a send or runs
// the callables' destructors (user code, which may destroy actors or services).
void on_actor_destroyed(const void* actor) noexcept {
  registry& r = the_registry();
  for (;;) {
    timer_core* pinned = nullptr;
    {
      std::lock_guard g(r.m);
      for (timer_core* c : r.cores) {
        if (c->pin_if_targets(actor)) {  // marks them forgotten: the next pass skips them
          pinned = c;
          break;
        }
      }
    }
    if (pinned == nullptr) return;
    pinned->forget(actor);
  }
}

}  // namespace

void register_core(timer_core* c) {
  registry& r = the_registry();
  std::lock_guard g(r.m);
  r.cores.push_back(c);
  if (r.cores.size() == 1) actor_destroy_hook_fn.store(&on_actor_destroyed, std::memory_order_relaxed);
}

void unregister_core(timer_core* c) noexcept {
  registry& r = the_registry();
  std::lock_guard g(r.m);
  r.cores.erase(std::remove(r.cores.begin(), r.cores.end(), c), r.cores.end());
  if (r.cores.empty()) actor_destroy_hook_fn.store(nullptr, std::memory_order_relaxed);
}

void skip_generations_of_every_core(std::uint64_t n) noexcept {
  registry& r = the_registry();
  std::lock_guard g(r.m);
  for (timer_core* c : r.cores) c->skip_generations(n);
}

std::size_t shards_of_every_core() noexcept {
  registry& r = the_registry();
  std::lock_guard g(r.m);
  std::size_t n = 0;
  for (const timer_core* c : r.cores) n += c->shards();
  return n;
}

}  // namespace handoff::detail
