// timer_core: the state of a handoff::timer_service (handoff/timer_service.hpp), which the
// service, its handles and the deliveries it posted share. Private to lib/timer/.
//
// Shards (lib/timer/timer_shard.hpp): each holds a spin lock, a wheel, an entry pool and a
// table of targets. A thread schedules into the shard of its index (threads are numbered
// in the order of their first schedule, modulo max_shards), made at its first schedule;
// an entry stays in its shard, which cancel, rearm and the deliveries find from the entry.
// So threads that schedule and cancel their own timers never share a lock or a counter;
// a cancel from another thread takes the entry's shard's lock. All shards' wheels share
// the core's epoch and resolution: the driver advances each to the same instant.
//
// Timers by target: each shard lists its entries by target actor. When an actor is
// destroyed, the process-wide hook (lib/timer/registry.cpp,
// handoff/detail/actor_destroy_hook.hpp) asks each live service whether it has timers for
// it (one probe of each shard's table) and calls forget(), which visits that actor's
// entries only.
//
// Lifetime: holds_ counts what keeps the core: the service (until close), each shard
// (until the service is closed and the shard's pool is empty: no handle or delivery refers
// to an entry), and pins (a hook between pin_if_targets and the end of forget, a run_due in
// progress, the service's thread while it runs). Whoever takes it to 0 deletes the core.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#include "handoff/detail/timer_entry.hpp"
#include "handoff/executor.hpp"
#include "handoff/timer.hpp"
#include "lateness.hpp"
#include "timer_shard.hpp"

namespace handoff::detail {

class test_driver;

class timer_core {
 public:
  // Shards per service: threads beyond it share. Each costs what it holds (a wheel, a
  // chunk of entries, a table of targets) once a thread schedules there.
  static constexpr unsigned max_shards = 16;

  timer_core(std::int64_t resolution_ns, test_driver* driver, metrics_sink* metrics = nullptr);
  timer_core(const timer_core&) = delete;
  timer_core& operator=(const timer_core&) = delete;
  timer_core(timer_core&&) = delete;
  timer_core& operator=(timer_core&&) = delete;
  ~timer_core();  // by release(), once nothing holds it

  [[nodiscard]] std::int64_t now() const noexcept;
  // What a duration is added to: >= now() (lib/timer/deadline_clock.hpp); never compared
  // with deadlines to send.
  [[nodiscard]] std::int64_t deadline_now() const noexcept;

  // The calls of handoff/detail/timer_entry.hpp schedule into this thread's shard, the
  // rest go to the entry's. shard_here: nullptr until this thread's first schedule here,
  // which goes through schedule_first (numbers the thread, makes its shard: throws
  // std::bad_alloc).
  [[nodiscard]] timer_shard* shard_here() const noexcept {
    return shards_[this_thread_index].load(std::memory_order_acquire);  // pairs with add_shard's store
  }
  [[gnu::noinline]] timer_entry* schedule_first(const timer_request& r, bool moving);

  // Driving (lib/timer/drive.cpp). send_due: sends what is due in every shard; an actor a
  // send wins is queued on this thread's run queue, not drained. run_due_pinned:
  // send_due, then (at top level) runs that queue; the caller holds a pin (the core's
  // thread, or run_due). run_due: the same under a pin of its own; may delete this.
  std::size_t run_due(std::int64_t now);
  std::size_t run_due_pinned(std::int64_t now);
  std::size_t send_due(std::int64_t now);
  [[nodiscard]] std::int64_t next_deadline() noexcept;  // also what the shards wake the driver below
  void set_wakeup(work w) noexcept;
  void start(executor_ref ex);
  void stop() noexcept;
  // The service is destroyed: stops, drops pending timers; may delete this.
  void close() noexcept;
  // Wakes the driver: a schedule made the earliest deadline earlier.
  void wake() noexcept;

  // Holds on the core (see the overview): pin adds one, release drops one and deletes the
  // core when it was the last.
  void pin() noexcept;
  void release() noexcept;

  // The actor-destruction hook (lib/timer/registry.cpp). pin_if_targets: under the
  // registry's mutex; if timers aimed at `actor` were not yet forgotten, marks them so and
  // pins the core (it is not deleted until forget() returns). forget: cancels them, waits
  // for a send of one on another thread, destroys their callables, unpins; may delete this.
  bool pin_if_targets(const void* actor) noexcept;
  void forget(const void* actor) noexcept;
  [[nodiscard]] timer_stats stats() noexcept;
  // For tests: adds n to every entry's generation, as n re-arms would (one step instead of
  // billions).
  void skip_generations(std::uint64_t n) noexcept;
  // For tests: the shards made so far.
  [[nodiscard]] std::size_t shards() const noexcept;

 private:
  // The thread's shard index; max_shards (a slot that stays empty) until it is numbered.
  // Inline, with its constant initializer: every file reads it without a wrapper call.
  static inline thread_local unsigned this_thread_index = max_shards;
  timer_shard* add_shard(unsigned i);
  template <class F>
  void for_each_shard(F f) noexcept {
    for (auto& slot : shards_) {
      if (timer_shard* s = slot.load(std::memory_order_acquire)) f(*s);  // pairs with add_shard's store
    }
  }
  // Whether this thread is inside a send_due of this core (a handler it runs).
  [[nodiscard]] bool driving_here() const noexcept {
    // Relaxed: only this thread stores its own id there.
    return driving_thread_.load(std::memory_order_relaxed) == std::this_thread::get_id();
  }
  // The service's thread: drives until stopped, then lets go of its pin (may delete this).
  void run_thread(std::uint64_t epoch, executor_ref ex) noexcept;
  void drive_until_stopped(std::uint64_t epoch, executor_ref ex) noexcept;
  void send_batch(std::int64_t now, executor_ref ex);
  // Under config_m_: pushes whether a thread or a wakeup waits to every shard.
  void notify_shards() noexcept;

  // Set once, before the core is shared.
  std::int64_t epoch_;   // the wheels' tick 0
  unsigned shift_;       // log2 of the resolution in ns
  test_driver* driver_;  // the scheduler whose clock this is; nullptr: steady_clock
  // Made by the first schedule of a thread of that index, under config_m_; deleted by the
  // destructor. One more slot, always empty: where an unnumbered thread looks.
  std::array<std::atomic<timer_shard*>, max_shards + 1> shards_{};
  std::atomic<std::size_t> holds_{1};              // the service's; acq_rel drops: the last sees every write
  std::atomic<std::thread::id> driving_thread_{};  // the thread in send_due, under drive_mutex_
  lateness_recorder lateness_;                     // filled by the shards' sends, its own lock

  // config_m_ guards the shards' creation, wakeup_ and threaded_ (set by start(), cleared
  // by stop()).
  std::mutex config_m_;
  work wakeup_{};  // set before any schedule (see set_wakeup); read by wake() unlocked
  bool threaded_ = false;

  std::mutex drive_mutex_;  // one send_due at a time
  // The service's thread: m_ guards stop_, epoch_ and notified_. A thread stopped from a
  // handler it runs is detached, and ends after its batch; thread_epoch_ (bumped by each
  // start) tells it apart from a thread started since.
  std::mutex m_;
  std::condition_variable cv_;
  std::uint64_t thread_epoch_ = 0;
  std::thread thread_;  // touched by start(), stop() and close(), never concurrently
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
// For tests: the shards made so far, summed over every live core.
std::size_t shards_of_every_core() noexcept;
// For tests: the entries forget() has visited in this process, in every core.
std::uint64_t entries_visited_by_forget() noexcept;

}  // namespace handoff::detail
