// timer_core: the state of a handoff::timer_service (handoff/timer_service.hpp), which the
// service, its handles and the deliveries it posted share. Private to lib/timer/.
//
// One spin lock guards everything below it: the wheel, the entry pool, every entry's
// fields but the payload (see handoff/detail/timer_entry.hpp), the counts. Critical sections are
// a few loads and stores; user code (sends, payload moves that may run user code,
// non-trivial payload destructors) never runs under it. An entry's life:
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
//
// Timers by target: targets_ (lib/timer/target_table.hpp) lists, per actor address, the
// entries aimed at it that are not over (from schedule until their payload is
// destroyed), threaded through the entries. When an actor is destroyed, the process-wide
// hook (lib/timer/registry.cpp, handoff/detail/actor_destroy_hook.hpp) asks each live
// service whether it has timers for it (one probe of the table) and calls forget(): it
// cancels them, waits for a send of one of them in progress on another thread, and
// finishes them, visiting that actor's entries only.
//
// The core is deleted when the service is gone, no entry is allocated (no handle, no
// delivery refers to it) and no hook holds it pinned: whichever thread sees that last
// deletes it.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "entry_pool.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/spin_lock.hpp"
#include "handoff/detail/timer_entry.hpp"
#include "handoff/executor.hpp"
#include "handoff/timer.hpp"
#include "lateness.hpp"
#include "target_table.hpp"
#include "wheel.hpp"

namespace handoff::detail {

class test_driver;

class timer_core {
 public:
  // timer_entry::flags (handoff/detail/timer_entry.hpp)
  static constexpr std::uint8_t live = timer_flag::live;
  static constexpr std::uint8_t handle = timer_flag::handle;
  static constexpr std::uint8_t payload = timer_flag::payload;
  static constexpr std::uint8_t trivial = timer_flag::trivial;
  static constexpr std::uint8_t destroying = timer_flag::destroying;
  static constexpr std::uint8_t delivers = timer_flag::delivers;
  static constexpr unsigned kind_shift = timer_flag::kind_shift;

  timer_core(std::int64_t resolution_ns, test_driver* driver, metrics_sink* metrics = nullptr);
  timer_core(const timer_core&) = delete;
  timer_core& operator=(const timer_core&) = delete;
  timer_core(timer_core&&) = delete;
  timer_core& operator=(timer_core&&) = delete;
  ~timer_core() = default;  // by unlock_and_maybe_delete, once gone()

  [[nodiscard]] std::int64_t now() const noexcept;
  // What a duration is added to: >= now() (lib/timer/deadline_clock.hpp); never compared
  // with deadlines to send.
  [[nodiscard]] std::int64_t deadline_now() const noexcept;

  // The calls of handoff/detail/timer_entry.hpp.
  timer_entry* schedule(const timer_request& r);
  bool cancel(timer_entry* e) noexcept;
  bool rearm(timer_entry* e, std::int64_t deadline) noexcept;
  bool active(timer_entry* e) noexcept;
  void detach(timer_entry* e) noexcept;
  bool delivery_begin(timer_entry* e, std::uint64_t gen) noexcept;
  void delivery_end(timer_entry* e, bool ran) noexcept;

  // Driving (lib/timer/drive.cpp). send_due: sends what is due; an actor a send wins is
  // queued on this thread's run queue, not drained. run_due_pinned: send_due, then (at
  // top level) runs that queue; the caller holds a pin (the core's thread, or run_due).
  // run_due: the same under a pin of its own; may delete this.
  std::size_t run_due(std::int64_t now);
  std::size_t run_due_pinned(std::int64_t now);
  std::size_t send_due(std::int64_t now);
  [[nodiscard]] std::int64_t next_deadline() noexcept;  // also what set_wakeup compares with
  void set_wakeup(work w) noexcept;
  void start(executor_ref ex);
  void stop() noexcept;
  // The service is destroyed: stops, drops pending timers; may delete this.
  void close() noexcept;

  // The actor-destruction hook (lib/timer/registry.cpp). pin_if_targets: under the
  // registry's mutex; if timers aimed at `actor` were not yet forgotten, marks them so and
  // pins the core (it is not deleted until forget() returns). forget: cancels them, waits
  // for a send of one on another thread (not this one: a handler run by that send is below
  // us), destroys their callables, unpins; may delete this.
  bool pin_if_targets(const void* actor) noexcept;
  void forget(const void* actor) noexcept;
  [[nodiscard]] timer_stats stats() noexcept;
  // For tests: adds n to every entry's generation, as n re-arms would (one step instead of
  // billions).
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
  void destroy_unlocked(timer_entry* e) noexcept;  // then tidies again; may delete this
  // The same, unlocked on entry and locked on return: never deletes this.
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
  [[nodiscard]] bool gone() const noexcept { return closed_ && pool_.allocated() == 0 && pins_ == 0; }
  void unlock_and_maybe_delete() noexcept {
    const bool last = gone();
    lock_.unlock();
    if (last) [[unlikely]]
      delete this;
  }
  // Whether this thread is inside a run_due of this core (a handler it runs).
  [[nodiscard]] bool driving_here() noexcept;
  // The service's thread: drives until stopped, then lets go of its pin (may delete this).
  void run_thread(std::uint64_t epoch, executor_ref ex) noexcept;
  void drive_until_stopped(std::uint64_t epoch, executor_ref ex) noexcept;
  void send_batch(std::int64_t now, executor_ref ex);

  spin_lock lock_;
  // Guarded by lock_.
  timer_wheel wheel_;
  entry_pool pool_;
  target_table targets_;
  std::uint64_t wake_tick_ = ~std::uint64_t{0};  // the earliest tick the driver will wake for
  timer_entry* firing_ = nullptr;                // the entry being sent, unlocked, by firing_thread_
  std::thread::id firing_thread_;
  timer_stats stats_;
  lateness_recorder lateness_;  // its histogram guarded by lock_
  // Holders that keep the core from being deleted: hooks between pin_if_targets and the
  // end of forget, a run_due in progress, the service's thread while it runs.
  std::size_t pins_ = 0;
  work wakeup_{};  // set before any schedule (see set_wakeup)

  test_driver* driver_;     // the scheduler whose clock this is; nullptr: steady_clock
  std::mutex drive_mutex_;  // one run_due at a time
  // The service's thread: m_ guards stop_, epoch_ and notified_. A thread stopped from a
  // handler it runs is detached, and ends after its batch; epoch_ (bumped by each
  // start) tells it apart from a thread started since.
  std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t epoch_ = 0;
  std::thread thread_;  // touched by start(), stop() and close(), never concurrently
  // The flags, together (no padding between them). Guarded by lock_: closed_ (the service
  // is gone), notify_ (a thread or a wakeup waits on wake_tick_), threaded_ (set by
  // start(), cleared by stop()). Guarded by m_: stop_, notified_.
  bool closed_ = false;
  bool notify_ = false;
  bool threaded_ = false;
  bool stop_ = false;
  bool notified_ = false;
};

// The process-wide registry of live cores, which the actor-destruction hook visits
// (lib/timer/registry.cpp). The first registered installs the hook, the last removed
// uninstalls it. register_core may throw std::bad_alloc.
void register_core(timer_core* c);
void unregister_core(timer_core* c) noexcept;
// For tests: skip_generations(n) on every live core.
void skip_generations_of_every_core(std::uint64_t n) noexcept;
// For tests: the entries forget() has visited in this process, in every core.
std::uint64_t entries_visited_by_forget() noexcept;

}  // namespace handoff::detail
