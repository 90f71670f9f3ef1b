// The registry of live timer services, the actor-destruction hook it installs
// (handoff/detail/actor_destroy_hook.hpp; lib/timer/timer_core.hpp, "Timers by target"),
// and each shard's share of forgetting an actor.
#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
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

namespace {
std::atomic<std::uint64_t> forget_visits{0};  // relaxed: a count read by tests only
}  // namespace

std::uint64_t entries_visited_by_forget() noexcept { return forget_visits.load(std::memory_order_relaxed); }

bool timer_shard::mark_forgotten(const void* actor) noexcept {
  std::lock_guard g(lock_);
  target_table::slot* s = targets_.find(actor);
  if (s == nullptr || s->forgotten != 0) return false;
  s->forgotten = 1;
  return true;
}

void timer_shard::forget(const void* actor) noexcept {
  lock_.lock();
  // The actor's list: its entries not over. Cancelling them leaves them in it.
  if (const target_table::slot* s = targets_.find(actor)) {
    for (std::uint32_t i = s->head; i != target_table::none;) {
      timer_entry* e = pool_.at(i);
      i = e->target_next;
      forget_visits.fetch_add(1, std::memory_order_relaxed);
      if ((e->flags & live) == 0) continue;
      e->flags &= static_cast<std::uint8_t>(~live);
      ++e->gen;  // a delivery queued in the actor's mailbox does nothing
      wheel_.unlink(e);
      ++stats_.cancelled;
    }
  }
  // A send of one of them on another thread may still be touching the actor: wait it out.
  while (firing_ != nullptr && firing_->target == actor && firing_thread_ != std::this_thread::get_id()) {
    lock_.unlock();
    std::this_thread::yield();
    lock_.lock();
  }
  // Finish what is over; tidy() takes each out of the list, so the next is read first. The
  // list is looked up again: it may have changed while the lock was dropped.
  timer_entry* to_destroy = nullptr;  // through next: tidy left them unlinked and unpooled
  if (const target_table::slot* s = targets_.find(actor)) {
    for (std::uint32_t i = s->head; i != target_table::none;) {
      timer_entry* e = pool_.at(i);
      i = e->target_next;
      forget_visits.fetch_add(1, std::memory_order_relaxed);
      if (tidy(e)) {
        e->next = to_destroy;
        to_destroy = e;
      }
    }
  }
  while (timer_entry* e = to_destroy) {
    to_destroy = e->next;
    e->next = nullptr;
    lock_.unlock();
    destroy_payload(e);  // locks again; the caller's pin keeps the core
  }
  unlock_and_maybe_release();  // the caller's pin keeps the core
}

}  // namespace handoff::detail
