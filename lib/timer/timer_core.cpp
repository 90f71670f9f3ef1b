// The timer service's core: its shards, what holds it, the actor-destruction hook's
// calls (lib/timer/timer_core.hpp).
#include "timer_core.hpp"

#include <atomic>
#include <memory>
#include <mutex>

#include "deadline_clock.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/test_driver.hpp"

namespace handoff::detail {

timer_core::timer_core(std::int64_t resolution_ns, test_driver* driver, metrics_sink* metrics)
    : epoch_(driver != nullptr ? driver->now() : now_ns()), shift_([&] {
        unsigned shift = 0;
        while (shift < 40 && (std::int64_t{1} << shift) < resolution_ns) ++shift;
        return shift;
      }()),
      driver_(driver), lateness_(metrics) {
  if (driver == nullptr) deadline_clock_start();
}

timer_core::~timer_core() {
  for (auto& slot : shards_) delete slot.load(std::memory_order_relaxed);  // the last holder: no one else
}

std::int64_t timer_core::now() const noexcept { return driver_ != nullptr ? driver_->now() : now_ns(); }

std::int64_t timer_core::deadline_now() const noexcept {
  return driver_ != nullptr ? driver_->now() : detail::deadline_now();
}

timer_entry* timer_core::schedule_first(const timer_request& r, bool moving) {
  if (this_thread_index == max_shards) {
    // Relaxed: a number only; once per thread in the process, not per service.
    static std::atomic<unsigned> next{0};
    this_thread_index = next.fetch_add(1, std::memory_order_relaxed) % max_shards;
  }
  timer_shard* s = shard_here();
  if (s == nullptr) s = add_shard(this_thread_index);
  return moving ? s->schedule<true>(r) : s->schedule<false>(r);
}

timer_shard* timer_core::add_shard(unsigned i) {
  std::lock_guard g(config_m_);
  if (timer_shard* s = shards_[i].load(std::memory_order_relaxed)) return s;  // made meanwhile, under config_m_
  auto s = std::make_unique<timer_shard>(this, epoch_, shift_, now(), threaded_ || wakeup_.fn != nullptr);
  holds_.fetch_add(1, std::memory_order_relaxed);        // the service's hold is still there: not the first
  shards_[i].store(s.get(), std::memory_order_release);  // pairs with the acquire in shard_here and for_each_shard
  return s.release();
}

std::size_t timer_core::shards() const noexcept {
  std::size_t n = 0;
  for (const auto& slot : shards_) n += slot.load(std::memory_order_acquire) != nullptr ? 1 : 0;
  return n;
}

void timer_core::pin() noexcept {
  // Relaxed: the pinning thread holds another hold (the service's, a shard's under the
  // registry, the run_due caller's service) while it adds this one.
  holds_.fetch_add(1, std::memory_order_relaxed);
}

void timer_core::release() noexcept {
  // acq_rel: each holder's writes happen before the deletion by the last.
  if (holds_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

bool timer_core::pin_if_targets(const void* actor) noexcept {
  bool any = false;
  for_each_shard([&](timer_shard& s) { any = s.mark_forgotten(actor) || any; });
  if (any) pin();  // registered, so the service's hold is still there
  return any;
}

void timer_core::forget(const void* actor) noexcept {
  for_each_shard([&](timer_shard& s) { s.forget(actor); });
  release();
}

timer_stats timer_core::stats() noexcept {
  timer_stats s;
  s.bytes = sizeof(timer_core);
  for_each_shard([&](timer_shard& shard) { shard.add_stats(s); });
  s.lateness = lateness_.take();
  return s;
}

void timer_core::skip_generations(std::uint64_t n) noexcept {
  for_each_shard([&](timer_shard& s) { s.skip_generations(n); });
}

// A call of handoff/detail/timer_entry.hpp: here, beside what it inlines.
std::int64_t timer_deadline_now(const timer_core* c) noexcept { return c->deadline_now(); }

}  // namespace handoff::detail
