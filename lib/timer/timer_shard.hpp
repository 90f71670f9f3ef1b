// timer_shard: one shard of a timer service's state (lib/timer/timer_core.hpp): a spin
// lock and what it guards, the entries scheduled by the threads mapped to it. Private to
// lib/timer/.
//
// The lock guards everything below it: the wheel, the entry pool, every entry's fields
// but the payload (see handoff/detail/timer_entry.hpp), the table of targets, the counts.
// Its sections run no user code and allocate from a pool at most (the pool's or the
// table's growth in schedule, before anything changes): user code (sends, payload moves
// that may run user code, non-trivial payload destructors) never runs under it. An entry
// stays in the shard it was scheduled in; any thread finds the shard from the entry
// (entry_pool::owner_of). An entry's life:
//
//   schedule: pool -> live, linked in the wheel, referenced by the handle
//   fire (driver): unlinked, firing_ = it, lock dropped, try_post/try_send (an actor it
//                  wins is queued on the driver's run queue, drained after the batch),
//                  lock again; a one-shot basic_actor message is then over; a fixed-rate
//                  timer is linked again at its next tick, a fixed-delay one a period from
//                  now if its delivery already ended (on another thread, before this
//                  lock); a refused send goes back to the due list
//   delivery (actor<State>): counted in in_flight from the fire until it runs or is
//                  destroyed; begin checks the generation (a one-shot is over from there)
//   cancel / rearm: bump the generation; cancel makes it not live
//   over (not live, unlinked, not firing, no delivery): the payload is destroyed; the
//                  entry returns to the pool once the handle lets go too
// tests/model/timer_entry.pml checks this protocol against a busy owner.
//
// Timers by target: targets_ (lib/timer/target_table.hpp) lists, per actor address, the
// shard's entries aimed at it that are not over (from schedule until their payload is
// destroyed), threaded through the entries. When an actor is destroyed, mark_forgotten and
// forget visit that actor's entries only.
//
// The shard holds its core (timer_core::hold) from its creation until the service is
// closed and its last entry returned to the pool.
#pragma once

#include <cstddef>
#include <cstdint>
#include <thread>

#include "entry_pool.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/spin_lock.hpp"
#include "handoff/detail/timer_entry.hpp"
#include "handoff/timer.hpp"
#include "lateness.hpp"
#include "target_table.hpp"
#include "wheel.hpp"

namespace handoff::detail {

class timer_core;

// Aligned to a cache line: the shards of two threads, often allocated one after the
// other, share no line (one's counts at its end, the next one's lock at its start).
class alignas(64) timer_shard {  // NOLINT(clang-analyzer-optin.performance.Padding): padded on purpose
 public:
  // timer_entry::flags (handoff/detail/timer_entry.hpp)
  static constexpr std::uint8_t live = timer_flag::live;
  static constexpr std::uint8_t handle = timer_flag::handle;
  static constexpr std::uint8_t payload = timer_flag::payload;
  static constexpr std::uint8_t trivial = timer_flag::trivial;
  static constexpr std::uint8_t destroying = timer_flag::destroying;
  static constexpr std::uint8_t delivers = timer_flag::delivers;
  static constexpr unsigned kind_shift = timer_flag::kind_shift;

  // A wheel of the core's epoch and resolution, advanced to `now`; `notify`: see
  // set_notify. Throws std::bad_alloc.
  timer_shard(timer_core* core, std::int64_t epoch, unsigned shift, std::int64_t now, bool notify);
  timer_shard(const timer_shard&) = delete;
  timer_shard& operator=(const timer_shard&) = delete;
  ~timer_shard() = default;  // by the core's destructor

  // The shard an entry belongs to.
  [[nodiscard]] static timer_shard* of(const timer_entry* e) noexcept {
    return static_cast<timer_shard*>(entry_pool::owner_of(e));
  }

  // The calls of handoff/detail/timer_entry.hpp. schedule<true>: timer_schedule_moving.
  template <bool Moving>
  timer_entry* schedule(const timer_request& r);
  bool cancel(timer_entry* e) noexcept;
  bool rearm(timer_entry* e, std::int64_t deadline) noexcept;
  bool active(timer_entry* e) noexcept;
  void detach(timer_entry* e) noexcept;
  bool delivery_begin(timer_entry* e, std::uint64_t gen) noexcept;
  void delivery_end(timer_entry* e, bool ran) noexcept;

  // Driving, under the core's drive mutex (lib/timer/drive.cpp). send_due: sends what is
  // due at `now`, recording each accepted send's lateness and reporting it to `sink`; the
  // caller holds a pin on the core.
  std::size_t send_due(std::int64_t now, lateness_recorder& lateness, metrics_sink* sink);
  // The earliest tick with an entry (a retry: the next tick), UINT64_MAX if none; the
  // shard wakes the driver for an earlier one from then on.
  [[nodiscard]] std::uint64_t next_tick() noexcept;
  // Lowers the tick the shard wakes the driver below (the earliest of every shard's).
  void wake_below(std::uint64_t t) noexcept;
  [[nodiscard]] std::int64_t time_of(std::uint64_t t) const noexcept { return wheel_.time_of(t); }
  // Whether a schedule that makes the earliest deadline earlier wakes the driver (a
  // thread or a wakeup waits).
  void set_notify(bool on) noexcept;
  // The service is destroyed. close, under the drive mutex (or in the batch this thread
  // runs): drops the pending timers and returns those whose payload the caller must
  // destroy, through destroy_dropped once the drive mutex is let go; from then on the
  // shard lets go of the core once its pool is empty.
  timer_entry* close() noexcept;
  void destroy_dropped(timer_entry* list) noexcept;

  // The actor-destruction hook (lib/timer/registry.cpp). mark_forgotten: under the
  // registry's mutex; true if timers aimed at `actor` were not yet forgotten (marks them
  // so). forget: cancels them, waits for a send of one on another thread (not this one:
  // a handler run by that send is below us), destroys their callables. The caller holds
  // a pin on the core.
  bool mark_forgotten(const void* actor) noexcept;
  void forget(const void* actor) noexcept;
  // Adds the shard's counts to s.
  void add_stats(timer_stats& s) noexcept;
  void skip_generations(std::uint64_t n) noexcept;

 private:
  static timer_kind kind_of(const timer_entry* e) noexcept { return static_cast<timer_kind>(e->flags >> kind_shift); }
  // Under the lock. Finishes an over entry: see the overview. True: the caller must
  // destroy the payload after unlocking, through destroy_unlocked.
  bool tidy(timer_entry* e) noexcept {
    if ((e->flags & (live | destroying)) != 0 || e->where != timer_wheel::nowhere || e->in_flight != 0 ||
        firing_ == e) {
      return false;
    }
    if ((e->flags & payload) != 0) {
      e->flags &= static_cast<std::uint8_t>(~payload);
      targets_.remove(pool_, e);  // over: it never touches the target again
      if ((e->flags & trivial) == 0) {
        e->flags |= destroying;  // its destructor may be user code: not under the lock
        return true;
      }
    }
    if ((e->flags & handle) == 0) recycle(e);
    return false;
  }
  void destroy_unlocked(timer_entry* e) noexcept;  // then tidies again; may release the core
  // The same, unlocked on entry and locked on return: never releases the core.
  void destroy_payload(timer_entry* e) noexcept;
  void recycle(timer_entry* e) noexcept {
    HANDOFF_ASSERT(e->where == timer_wheel::nowhere && e->in_flight == 0 &&
                   (e->flags & (live | handle | payload)) == 0);
    ++e->gen;  // a stale delivery of it never matches again
    e->flags = 0;
    pool_.give(e);
  }
  // cancel() but its common case, entered with the lock held; out of line, so that the
  // common case saves no registers.
  [[gnu::noinline]] bool cancel_locked(timer_entry* e) noexcept;
  // Under the lock: links e; true if the wakeup must be called (after unlocking).
  bool link(timer_entry* e) noexcept {
    wheel_.insert(e);
    return wake_for(e);
  }
  bool wake_for(const timer_entry* e) noexcept {  // the same for an entry linked already
    if (!notify_) return false;
    const std::uint64_t t = wheel_.tick_of(e->deadline);
    if (t >= wake_tick_) return false;
    wake_tick_ = t;
    return true;
  }
  void wake() noexcept;
  // Unlocks; once the service is closed and the pool empty, lets go of the core (which
  // may delete it, and this shard with it).
  void unlock_and_maybe_release() noexcept {
    const bool last = closed_ && holds_core_ && pool_.allocated() == 0;
    if (last) holds_core_ = false;
    lock_.unlock();
    if (last) [[unlikely]]
      release_core();
  }
  void release_core() noexcept;

  timer_core* const core_;
  spin_lock lock_;
  // Guarded by lock_.
  timer_wheel wheel_;
  entry_pool pool_;
  target_table targets_;
  std::uint64_t wake_tick_ = ~std::uint64_t{0};  // the driver wakes for an earlier tick
  timer_entry* firing_ = nullptr;                // the entry being sent, unlocked, by firing_thread_
  std::thread::id firing_thread_;
  timer_stats stats_;
  bool notify_;             // a thread or a wakeup waits on wake_tick_
  bool closed_ = false;     // the service is gone
  bool holds_core_ = true;  // the shard's hold on the core, let go once
};

}  // namespace handoff::detail
