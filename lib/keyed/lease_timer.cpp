// The keyed mutex's lease timer (lib/keyed/lease_timer.hpp).
#include "lease_timer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <utility>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/test_driver.hpp"
#include "handoff/timer_service.hpp"
#include "lock_parking.hpp"

namespace handoff::detail {

task_thread& completion_thread() {
  static auto* const t = new task_thread();  // never deleted: see the header
  return *t;
}

timer_service& default_lease_service() {
  static timer_service* const s = [] {
    // Made outside any test scheduler the calling thread runs: its clock is steady_clock.
    test_driver* const d = std::exchange(tls.driver, nullptr);
    // A finer resolution than a service's default: a lease is late by up to one step.
    auto* p = new timer_service({.resolution = std::chrono::microseconds(64)});  // never deleted
    try {
      p->start();
    } catch (...) {
      delete p;
      tls.driver = d;
      throw;
    }
    tls.driver = d;
    return p;
  }();
  return *s;
}

lease_timer::lease_timer(lock_table& t, timer_service* service) : table_(t) {
  if (service == nullptr) return;
  completions_ = &completion_thread();
  engine_.emplace(*service, &on_due, &on_dropped, this);
}

void lease_timer::stop() noexcept {
  engine_.reset();  // no on_due runs after this
  // What the firings queued refers to the mutex. Only then: the thread is shared, and a
  // callback of another mutex may be blocking it.
  bool fired = false;
  {
    std::lock_guard lock(mutex_);
    fired = std::exchange(fired_, false);
  }
  if (fired) completions_->flush();
}

void lease_timer::on_dropped(void*) noexcept {
  std::fputs(
      "handoff: a timer_service was destroyed while a keyed_mutex that keeps its leases and "
      "wait times on it still exists; destroy the keyed_mutex first\n",
      stderr);
  std::terminate();
}

void lease_timer::schedule(timer_node* n, std::int64_t deadline) noexcept {
  HANDOFF_ASSERT(deadline != no_deadline);  // "never" is not scheduled
  n->deadline = deadline;
  n->seq = ++seq_;
  if (n->index == timer_node::npos) {
    n->index = heap_.size();
    push(heap_, n);  // out of memory here would lose a lease: terminate (see push)
  }
  fix(n->index);
  if (engine_ && deadline < armed_) {
    armed_ = deadline;
    engine_->arm(deadline);  // under the mutex: arms made in the order of the heap's changes
  }
}

bool lease_timer::cancel(timer_node* n) noexcept {
  if (n->index == timer_node::npos) return false;
  const std::size_t i = n->index;
  HANDOFF_ASSERT(i < heap_.size() && heap_[i] == n);
  n->index = timer_node::npos;
  timer_node* last = heap_.back();
  heap_.pop_back();
  if (last != n) {
    heap_[i] = last;
    last->index = i;
    fix(i);
  }
  return true;
}

void lease_timer::advance(std::atomic<std::int64_t>& clock, std::int64_t to) {
  // relaxed: the manual clock is read and advanced by one thread (see use_manual_clock).
  std::unique_lock lock(mutex_);
  while (!heap_.empty() && heap_.front()->deadline <= to) {
    timer_node* n = heap_.front();
    clock.store(std::max(clock.load(std::memory_order_relaxed), n->deadline), std::memory_order_relaxed);
    cancel(n);
    fire(n);
    lock.unlock();
    run_fired();
    lock.lock();
  }
  clock.store(std::max(clock.load(std::memory_order_relaxed), to), std::memory_order_relaxed);
}

void lease_timer::swap_at(std::size_t a, std::size_t b) noexcept {
  std::swap(heap_[a], heap_[b]);
  heap_[a]->index = a;
  heap_[b]->index = b;
}

bool lease_timer::before(const timer_node* a, const timer_node* b) noexcept {
  return a->deadline != b->deadline ? a->deadline < b->deadline : a->seq < b->seq;
}

void lease_timer::fix(std::size_t i) noexcept {
  while (i > 0 && before(heap_[i], heap_[(i - 1) / 2])) {
    swap_at(i, (i - 1) / 2);
    i = (i - 1) / 2;
  }
  for (;;) {
    std::size_t least = i;
    for (std::size_t c = 2 * i + 1; c <= 2 * i + 2 && c < heap_.size(); ++c) {
      if (before(heap_[c], heap_[least])) least = c;
    }
    if (least == i) return;
    swap_at(i, least);
    i = least;
  }
}

// On the service's driver, once at a time: fires what is due and arms the entry at what
// is left. A cancelled deadline stays armed: its call finds nothing due and re-arms.
void lease_timer::on_due(void* self) noexcept {
  auto& t = *static_cast<lease_timer*>(self);
  redirect_completions(t.completions_);  // user code runs there, never on the driver
  std::unique_lock lock(t.mutex_);
  const std::int64_t now = now_ns();
  while (!t.heap_.empty() && t.heap_.front()->deadline <= now) {
    timer_node* n = t.heap_.front();
    t.cancel(n);
    t.fire(n);
  }
  t.fired_ = t.fired_ || !t.expired_.empty() || !t.timed_out_.empty();
  t.armed_ = t.heap_.empty() ? no_deadline : t.heap_.front()->deadline;
  t.engine_->arm(t.armed_);
  // Releases take shard locks and the timer mutex again: never under the timer's mutex.
  lock.unlock();
  t.run_fired();
  redirect_completions(nullptr);
}

// Under the mutex: decides the outcome of a due deadline; the work is left in
// expired_/timed_out_ for run_fired().
void lease_timer::fire(timer_node* n) noexcept {
  if (n->is_lease) {
    auto* e = static_cast<lock_entry*>(n->owner);
    std::uint64_t token = e->lease_token;
    HANDOFF_ASSERT(token != 0);
    // acq_rel; pairs with the holder's disarm CAS (also under this mutex) and publishes
    // the holder's writes to the release that follows.
    if (!e->leased.compare_exchange_strong(token, 0, std::memory_order_acq_rel)) return;
    e->holder_thread.store(0, std::memory_order_relaxed);  // see the deadlock check in acquire()
    // The expired guard still refers to e: count it before its unlock can see the lease
    // gone (that unlock waits for this mutex) and before the release may free the entry.
    // Lock order: timer mutex, then shard lock (nothing takes them the other way round).
    lock_shard& s = table_.shard_for(e->hash);
    s.lock.lock();
    ++e->refs;
    HANDOFF_ASSERT(e->refs != 0);  // no wrap-around
    s.lock.unlock();
    push(expired_, e);
    return;
  }
  auto* w = static_cast<waiter*>(n->owner);
  // Coroutine and callback waiters never sleep: they are cancelled from `waiting`.
  if (w->state.load(std::memory_order_relaxed) == waiter::waiting && cancel_wait(w, waiter::waiting)) {
    push(timed_out_, w);
  } else {
    release_waiter(w);  // granted first: the timer's reference is all that is left to drop
  }
}

// Without the mutex: releases expired keys and completes timed-out waiters (on the
// completion thread: see complete_waiter). Only the thread that fired them touches the lists.
void lease_timer::run_fired() noexcept {
  for (lock_entry* e : expired_) {
    table_.note_lease_expiry();
    table_.release(e);
  }
  for (waiter* w : timed_out_) {
    table_.note_timeout();
    complete_waiter(w);
    release_waiter(w);  // the timer's reference
  }
  expired_.clear();
  timed_out_.clear();
}

template <class T>
void lease_timer::push(std::vector<T*>& v, T* p) noexcept {
  try {
    v.push_back(p);
  } catch (...) {
    std::fputs("handoff: out of memory in the lease timer\n", stderr);
    std::terminate();
  }
}

}  // namespace handoff::detail
