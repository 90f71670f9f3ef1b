// The engine of handoff::testing::scheduler (handoff/testing.hpp): the events, the threads
// they run on, virtual time, and the choice of the next event. Private to lib/.
//
// Threads. The test's own thread (home) runs the loop: it picks an event and hands it to
// a context, a thread of the scheduler's, through that context's `go` semaphore, then
// waits on `back_` until the context finishes the event or parks in a blocking call
// (block_until, yield). So exactly one of the scheduler's threads runs at any time, and
// each hand-over is a semaphore release/acquire pair: everything one wrote is visible to
// the next. Every member below is touched only by the running thread.
//
// Events. A run-queue entry (an actor's turn of one message, a coroutine, a keyed grant,
// a job) is taken off the thread that queued it (collect) into queued_; a parked context
// whose condition holds (or whose virtual deadline passed) can resume; and time can pass
// to the earliest deadline (the tables' timers, parked calls'). Candidates are ordered by
// when they became runnable, time last; the strategy runs the first, or, at random steps
// from the seed, another (a preemption).
//
// Threads the test starts itself are none of the scheduler's: their calls are not events,
// and they cannot park. One that would wait on an object made under the scheduler (a keyed
// mutex's table calls block_until on whatever thread locks) is refused: block_until
// records why in foreign_ and throws to it, and the loop fails the run with that reason at
// its next step. Only foreign_ is touched by such threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <semaphore>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "handoff/detail/clock.hpp"
#include "handoff/detail/run_queue.hpp"
#include "handoff/detail/test_driver.hpp"
#include "handoff/testing.hpp"

namespace handoff::detail {
class timer_core;
}

namespace handoff::testing {

// "5 ms", "20 us", "7 ns": a virtual duration in the trace.
std::string duration_text(std::int64_t ns);
// An exception's what(), for the trace.
std::string describe_exception(const std::exception_ptr& e);

// Waits refused on threads the scheduler does not run: recorded by those threads, taken by
// the loop. Thread-safe.
class refused_waits {
 public:
  // Keeps `why` unless an earlier one is still to be taken.
  void record(std::string why);
  // The reason recorded since the last take, if any.
  std::optional<std::string> take();

 private:
  // relaxed: a hint that spares the loop the mutex at each step; the mutex orders first_.
  std::atomic<bool> any_{false};
  std::mutex mutex_;
  std::string first_;  // guarded by mutex_
};

class scheduler::impl final : public detail::test_driver {
 public:
  // `preemptions` 0: always the oldest event (a plain scheduler).
  impl(std::uint64_t seed, unsigned preemptions);
  ~impl() override;
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;
  impl(impl&&) = delete;
  impl& operator=(impl&&) = delete;

  // A thread that runs events.
  struct context {
    std::binary_semaphore go{0};
    std::thread thread;
    std::uintptr_t entry = 0;  // the event to run
    std::string running;       // its subject ("actor 2")
    bool busy = false;         // running or parked
    // Parked (in block_until or yield) until ready(arg) or `deadline`.
    bool parked = false;
    bool may_throw = true;
    bool abort = false;  // resumed to give up: block_until throws deadlock
    bool stop = false;   // resumed to exit
    ready_fn ready = nullptr;
    const void* arg = nullptr;
    std::int64_t deadline = detail::no_deadline;
    std::string what;  // "actor 2: lock \"a\""
    std::uint64_t seq = 0;
  };

  struct queued {
    std::uintptr_t entry = 0;
    std::uint64_t seq = 0;
    event ev;
  };

  struct candidate {
    enum class type : unsigned char { entry, resume, time } kind;
    std::uint64_t seq;
    std::size_t index;  // into queued_ or contexts_
    std::int64_t at;    // time: the deadline it passes to
  };

  // --- detail::test_driver ---
  bool block_until(ready_fn ready, const void* arg, std::int64_t deadline, std::string_view what,
                   bool may_throw) override;
  void yield(std::string_view what) override;
  [[nodiscard]] bool at_top_level() const noexcept override;
  [[nodiscard]] std::int64_t now() const noexcept override { return now_; }
  void attach(detail::lock_table* t) override;
  void detach(detail::lock_table* t) noexcept override;
  void settle() noexcept override;
  void execute(job j) override;
  void fail(std::string_view why) noexcept override;
  void unhandled(const std::exception_ptr& e, const char* source) noexcept override;
  void actor_created(const void* a) noexcept override;
  void actor_destroyed(const void* a) noexcept override;

  // --- the loop (home thread only) ---
  bool step();  // runs one event; false: none can run
  [[nodiscard]] std::vector<candidate> candidates();
  [[nodiscard]] event describe(const candidate& c) const;
  [[nodiscard]] std::int64_t next_deadline() const;
  // The earliest of the tables' timers and the timer services' deadlines.
  [[nodiscard]] std::int64_t tables_deadline() const;
  void attach_timers(detail::timer_core* t);
  void detach_timers(detail::timer_core* t) noexcept;
  void pass_time_to(std::int64_t to);
  void run_in_context(std::uintptr_t entry, std::string subject);
  void resume(context& c);
  bool home_wait(ready_fn ready, const void* arg, std::int64_t deadline, std::string_view what, bool may_throw);
  void abort_parked() noexcept;     // parked calls give up (deadlock)
  std::string parked_list() const;  // for a deadlock's message
  void finish();                    // explore: after the body
  void fail_with(std::string_view why, std::exception_ptr e) noexcept;
  void rethrow_failure();     // once, to the test
  void throw_failure_once();  // failed and not thrown yet: the parked calls give up, then rethrow
  void take_refused_wait();   // fails the run if a thread of the test's own tried to wait

  // --- any running thread ---
  void collect();  // this thread's run queue -> queued_
  [[nodiscard]] event name_entry(std::uintptr_t e) const;
  [[nodiscard]] std::string actor_name(const void* a) const;
  void work(context* c) noexcept;     // a context's thread
  void note(std::string_view line);   // appends to the trace
  std::size_t choose(std::size_t n);  // the strategy
  std::uint64_t next_random() noexcept;
  // block_until on a thread the scheduler does not run: records the refusal and throws it.
  [[noreturn]] void refuse_wait(std::string_view what);

 private:
  friend class scheduler;
  friend struct explorer;

  detail::drain_frame home_frame_{nullptr, 0, nullptr};
  std::vector<queued> queued_;
  std::vector<std::unique_ptr<context>> contexts_;
  std::binary_semaphore back_{0};
  std::int64_t start_ = 1'000'000'000;  // virtual time starts at 1 s: a deadline is never 0
  std::int64_t now_ = start_;
  std::int64_t home_deadline_ = detail::no_deadline;  // the test's own blocked call
  std::vector<detail::lock_table*> tables_;
  std::vector<detail::timer_core*> timer_services_;  // made under this scheduler
  mutable std::unordered_map<const void*, unsigned> actors_;
  mutable unsigned actor_count_ = 0;
  std::uint64_t seq_ = 0;
  std::size_t steps_ = 0;
  // The strategy: at most preemptions_ times, with probability 1 / 2^shift_ per step.
  std::uint64_t rng_;
  unsigned preemptions_;
  unsigned shift_ = 0;
  // The outcome.
  bool failed_ = false;
  bool thrown_ = false;  // the failure went to the test once
  std::exception_ptr failure_;
  std::string trace_;
  refused_waits foreign_;  // the only member other threads touch
};

}  // namespace handoff::testing
