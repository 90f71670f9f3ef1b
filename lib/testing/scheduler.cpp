// handoff::testing::scheduler: the loop, the contexts that run events, and the library's
// hooks (lib/testing/driver.hpp has the design).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

#include "../keyed/driver_interface.hpp"
#include "../timer/driver_interface.hpp"
#include "driver.hpp"
#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/lock_table.hpp"

namespace handoff::testing {

using impl = scheduler::impl;

namespace {

// The context this thread is; nullptr on the test's own thread (and everywhere else).
constinit thread_local impl::context* self = nullptr;

// The carry slot's owner on the scheduler's threads: the slot always looks taken, so a
// won message goes in front of the mailbox and the actor may run on any context.
constinit const detail::runnable slot_taken{};

// A job given to an executor or thread_pool under the scheduler.
struct job_task final : detail::task {
  explicit job_task(job j) noexcept : work(std::move(j)) { run = &run_job; }
  job work;
  static void run_job(detail::task* t) noexcept {
    auto* self = static_cast<job_task*>(t);
    detail::run_reporting(self->work, "a job run by handoff::thread_pool");
    delete self;
  }
};

void enter(impl* d, detail::drain_frame* frame) noexcept {
  detail::tls.driver = d;
  detail::tls.top = frame;  // at "top level" sends queue: nothing runs by itself
  detail::carried.actor = &slot_taken;
}

void leave() noexcept {
  detail::tls.driver = nullptr;
  detail::tls.top = nullptr;
  detail::carried.actor = nullptr;
}

}  // namespace

impl::impl(std::uint64_t seed, unsigned preemptions) : rng_(seed), preemptions_(preemptions) {
  if (detail::tls.driver != nullptr || detail::tls.top != nullptr) {
    throw std::logic_error("handoff::testing::scheduler: this thread already runs a scheduler or a handler");
  }
  if (preemptions_ != 0) shift_ = 1 + static_cast<unsigned>(next_random() % 5);  // 1/2 .. 1/32 per step
  enter(this, &home_frame_);
}

impl::~impl() {
  settle();
  abort_parked();  // what still waits cannot go on: it gives up
  settle();
  for (auto& c : contexts_) {
    if (c->parked) {
      std::fprintf(stderr, "handoff::testing: the scheduler ends with %s still waiting\n%s", c->what.c_str(),
                   trace_.c_str());
      std::terminate();  // its thread is inside user code that cannot be unwound
    }
    c->stop = true;
    c->go.release();
    c->thread.join();
  }
  leave();
}

bool impl::at_top_level() const noexcept { return self == nullptr; }

std::uint64_t impl::next_random() noexcept {
  // splitmix64 (Steele, Lea, Flood: "Fast splittable pseudorandom number generators").
  std::uint64_t z = (rng_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::size_t impl::choose(std::size_t n) {
  if (n < 2 || preemptions_ == 0) return 0;
  if ((next_random() & ((std::uint64_t{1} << shift_) - 1)) != 0) return 0;
  --preemptions_;
  return 1 + static_cast<std::size_t>(next_random() % (n - 1));
}

void impl::note(std::string_view line) {
  if (failed_) return;  // the trace ends with the failure
  trace_ += line;
  trace_ += '\n';
}

std::string impl::actor_name(const void* a) const {
  auto [it, fresh] = actors_.try_emplace(a, 0);
  if (fresh) it->second = ++actor_count_;  // made before the scheduler: named when first seen
  return "actor " + std::to_string(it->second);
}

void impl::actor_created(const void* a) noexcept {
  try {
    actors_[a] = ++actor_count_;
  } catch (...) {  // out of memory: it is named when first seen
  }
}

void impl::actor_destroyed(const void* a) noexcept { actors_.erase(a); }

event impl::name_entry(std::uintptr_t e) const {
  if ((e & 1U) != 0) {
    // NOLINTNEXTLINE(performance-no-int-to-ptr): a tagged run-queue entry is an actor
    auto* r = reinterpret_cast<detail::runnable*>(e & ~std::uintptr_t{1});
    return {event_kind::actor, actor_name(static_cast<detail::actor_base*>(r))};
  }
  auto* t = reinterpret_cast<detail::task*>(e);  // NOLINT(performance-no-int-to-ptr): untagged: a task
  if (t->run == &detail::resumable::resume_handle) return {event_kind::coroutine, "coroutine"};
  if (detail::is_completion(t)) {
    auto* w = static_cast<detail::waiter*>(t);
    const bool granted = w->state.load(std::memory_order_relaxed) == detail::waiter::granted;  // decided before
    return {event_kind::grant, "key " + w->table->describe(w->entry) + (granted ? ": granted" : ": timed out")};
  }
  return {event_kind::job, "job"};
}

void impl::collect() {
  for (std::uintptr_t e; (e = detail::pop_entry()) != 0;) queued_.push_back({e, seq_++, name_entry(e)});
}

std::int64_t impl::tables_deadline() const {
  std::int64_t t = detail::no_deadline;
  for (detail::lock_table* table : tables_) t = std::min(t, table->next_deadline());
  for (detail::timer_core* timers : timer_services_) t = std::min(t, detail::timers_next_deadline(timers));
  return t;
}

std::int64_t impl::next_deadline() const {
  std::int64_t t = tables_deadline();
  for (const auto& c : contexts_) {
    if (c->parked && c->deadline > now_ && !c->ready(c->arg)) t = std::min(t, c->deadline);
  }
  if (home_deadline_ > now_) t = std::min(t, home_deadline_);
  return t;
}

std::vector<impl::candidate> impl::candidates() {
  std::vector<candidate> cs;
  for (std::size_t i = 0; i < queued_.size(); ++i) cs.push_back({candidate::type::entry, queued_[i].seq, i, 0});
  for (std::size_t i = 0; i < contexts_.size(); ++i) {
    const context& c = *contexts_[i];
    if (c.parked && (c.ready(c.arg) || c.deadline <= now_)) cs.push_back({candidate::type::resume, c.seq, i, 0});
  }
  std::sort(cs.begin(), cs.end(), [](const candidate& a, const candidate& b) { return a.seq < b.seq; });
  if (const std::int64_t t = next_deadline(); t != detail::no_deadline) {
    cs.push_back({candidate::type::time, ~std::uint64_t{0}, 0, std::max(t, now_)});
  }
  return cs;
}

event impl::describe(const candidate& c) const {
  switch (c.kind) {
    case candidate::type::entry:
      return queued_[c.index].ev;
    case candidate::type::resume:
      return {event_kind::resume, contexts_[c.index]->what};
    case candidate::type::time:
      break;
  }
  std::string when(1, '+');  // appended, not "+" + s: GCC 12 warns falsely (-Wrestrict) on that
  when += duration_text(c.at - now_);
  when += " (at " + duration_text(c.at - start_) + ")";
  return {event_kind::time, std::move(when)};
}

bool impl::step() {
  take_refused_wait();
  collect();
  const std::vector<candidate> cs = candidates();
  if (cs.empty()) return false;
  const candidate c = cs[choose(cs.size())];
  ++steps_;
  event ev = describe(c);
  const bool named = ev.kind == event_kind::actor || ev.kind == event_kind::grant;  // "3. actor 2", "4. resume ..."
  note(std::to_string(steps_) + ". " + (named ? "" : std::string(to_string(ev.kind)) + " ") + ev.subject);
  switch (c.kind) {
    case candidate::type::entry: {
      const std::uintptr_t e = queued_[c.index].entry;
      queued_.erase(queued_.begin() + static_cast<std::ptrdiff_t>(c.index));
      run_in_context(e, std::move(ev.subject));
      break;
    }
    case candidate::type::resume:
      resume(*contexts_[c.index]);
      break;
    case candidate::type::time:
      pass_time_to(c.at);
      break;
  }
  return true;
}

void impl::pass_time_to(std::int64_t to) {
  now_ = std::max(now_, to);
  for (detail::lock_table* table : tables_) table->advance_manual_clock(now_);              // what they complete queues
  for (detail::timer_core* timers : timer_services_) detail::timers_run_due(timers, now_);  // sends queue
}

void impl::run_in_context(std::uintptr_t entry, std::string subject) {
  context* c = nullptr;
  for (auto& x : contexts_) {
    if (!x->busy) {
      c = x.get();
      break;
    }
  }
  if (c == nullptr) {
    auto fresh = std::make_unique<context>();
    fresh->thread = std::thread([this, p = fresh.get()] { work(p); });
    c = contexts_.emplace_back(std::move(fresh)).get();
  }
  c->busy = true;
  c->entry = entry;
  c->running = std::move(subject);
  c->go.release();  // release/acquire pairs: one thread runs at a time (see driver.hpp)
  back_.acquire();
}

void impl::resume(context& c) {
  c.parked = false;
  c.go.release();
  back_.acquire();
}

void impl::work(context* c) noexcept {
  self = c;
  detail::drain_frame frame{nullptr, 0, nullptr};
  enter(this, &frame);
  for (;;) {
    c->go.acquire();
    if (c->stop) break;
    detail::run_entry(c->entry, &frame);
    c->entry = 0;
    collect();  // what the event made runnable
    c->busy = false;
    back_.release();
  }
  leave();
}

bool impl::block_until(ready_fn ready, const void* arg, std::int64_t deadline, std::string_view what, bool may_throw) {
  if (detail::tls.driver != this) refuse_wait(what);  // a thread of the test's own: it cannot park
  context* c = self;
  if (c != nullptr) {
    if (failed_ && may_throw)
      throw deadlock("handoff::testing: the run has failed; " + std::string(what) + " gives up");
    collect();
    c->parked = true;
    c->may_throw = may_throw;
    c->ready = ready;
    c->arg = arg;
    c->deadline = deadline;
    c->what = c->running + ": " + std::string(what);
    c->seq = seq_++;
    back_.release();
    c->go.acquire();
    if (c->abort) {
      c->abort = false;
      throw deadlock("handoff::testing: deadlock; " + c->what + " gives up");
    }
    return ready(arg);
  }
  // The test itself waits: it runs events until it can go on.
  home_deadline_ = deadline;  // a time event can end the wait
  bool done = false;
  try {
    done = home_wait(ready, arg, deadline, what, may_throw);
  } catch (...) {
    home_deadline_ = detail::no_deadline;
    throw;
  }
  home_deadline_ = detail::no_deadline;
  return done;
}

bool impl::home_wait(ready_fn ready, const void* arg, std::int64_t deadline, std::string_view what, bool may_throw) {
  for (;;) {
    if (ready(arg)) return true;
    if (now_ >= deadline) return false;
    if (failed_ && may_throw && !thrown_) rethrow_failure();
    if (step()) continue;
    if (!failed_) {
      const std::string parked = parked_list();
      fail("deadlock: the test waits in " + std::string(what) + " and no event can run" +
           (parked.empty() ? "" : "; waiting: " + parked));
    }
    const bool any = std::any_of(contexts_.begin(), contexts_.end(), [](auto& x) { return x->parked && x->may_throw; });
    if (any) {
      abort_parked();  // they give up; what they held may let this call go on
      continue;
    }
    if (may_throw) {
      thrown_ = true;
      throw deadlock("handoff::testing: deadlock: the test waits in " + std::string(what) + " for ever");
    }
    std::fprintf(stderr, "handoff::testing: deadlock in %.*s, which cannot give up\n%s", static_cast<int>(what.size()),
                 what.data(), trace_.c_str());
    std::terminate();
  }
}

void impl::yield(std::string_view what) {
  // Neither the test's own requests nor those of threads it started are scheduling points.
  if (self != nullptr && !failed_) {
    (void)block_until([](const void*) noexcept { return true; }, nullptr, detail::no_deadline, what, true);
  }
}

void impl::abort_parked() noexcept {
  for (bool again = true; again;) {
    again = false;
    for (auto& c : contexts_) {  // only the loop makes contexts: the vector stays as it is
      if (!c->parked || !c->may_throw) continue;
      c->abort = true;
      resume(*c);
      again = true;
    }
  }
}

std::string impl::parked_list() const {
  std::string s;
  for (const auto& c : contexts_) {
    if (!c->parked) continue;
    if (!s.empty()) s += "; ";
    s += c->what;
  }
  return s;
}

void impl::settle() noexcept {
  if (self != nullptr) return;  // only the test's thread runs the loop
  try {
    while (step()) {
    }
  } catch (...) {
    fail("exception while settling: " + describe_exception(std::current_exception()));
  }
}

void impl::attach(detail::lock_table* t) { tables_.push_back(t); }

void impl::detach(detail::lock_table* t) noexcept { std::erase(tables_, t); }

void impl::attach_timers(detail::timer_core* t) { timer_services_.push_back(t); }

void impl::detach_timers(detail::timer_core* t) noexcept { std::erase(timer_services_, t); }

void impl::execute(job j) {
  auto* t = new job_task(std::move(j));
  detail::push_later(reinterpret_cast<std::uintptr_t>(t), &t->next);  // collected as an event
}

}  // namespace handoff::testing

namespace handoff::detail {

// The only test_driver is the scheduler (lib/testing/driver.hpp).
void timers_attach(test_driver& d, timer_core* c) { static_cast<testing::scheduler::impl&>(d).attach_timers(c); }
void timers_detach(test_driver& d, timer_core* c) noexcept {
  static_cast<testing::scheduler::impl&>(d).detach_timers(c);
}

}  // namespace handoff::detail
