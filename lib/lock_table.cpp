// The keyed mutex's key-independent core: shard tables, the acquire/hand-off protocol
// (overview in include/handoff/detail/lock_table.hpp), blocking waits and the lease timer.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/keyed_mutex.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

namespace handoff::detail {

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::int64_t to_ns(std::chrono::steady_clock::time_point t) noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// --- blocking waits ---------------------------------------------------------------------

namespace {

#if defined(__linux__)
// Sleeps while *word == expected, until woken or `deadline` (CLOCK_MONOTONIC ns, which is
// steady_clock on Linux) passes. Returns on spurious wake-ups too: callers re-check.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::int64_t deadline) noexcept {
  auto* addr = reinterpret_cast<std::uint32_t*>(&word);
  if (deadline == no_deadline) {
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
    return;
  }
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(deadline % 1'000'000'000);
  syscall(SYS_futex, addr, FUTEX_WAIT_BITSET_PRIVATE, expected, &ts, nullptr, FUTEX_BITSET_MATCH_ANY);
}
void futex_wake(std::atomic<std::uint32_t>& word) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}
#else
// Portable fallback: std::atomic::wait has no timeout, so timed waits poll every 50 µs.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::int64_t deadline) noexcept {
  if (deadline == no_deadline) return word.wait(expected, std::memory_order_acquire);
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}
void futex_wake(std::atomic<std::uint32_t>& word) noexcept { word.notify_one(); }
#endif

// Spins before sleeping: a hot key's holder is usually a few hundred nanoseconds from its
// unlock, far less than a futex sleep and wake-up.
constexpr unsigned wait_spins = 256;

// The requester's side of giving up: true if it cancelled, false if a grant won the race.
bool cancel(waiter* w, std::uint32_t seen) noexcept {
  // acquire on failure: the grant's token and the holder's writes become visible.
  return w->state.compare_exchange_strong(seen, waiter::cancelled, std::memory_order_acquire);
}

// The holder's side: hands the key to w unless it gave up. Wakes a sleeping thread.
bool try_grant(waiter* w) noexcept {
  std::uint32_t s = w->state.load(std::memory_order_relaxed);
  for (;;) {
    if (s == waiter::cancelled) return false;
    // release; pairs with the requester's acquire loads of `state`: the token, and every
    // write of the previous holder, are visible to the new one.
    if (w->state.compare_exchange_weak(s, waiter::granted, std::memory_order_release, std::memory_order_relaxed)) {
      if (s == waiter::sleeping) futex_wake(w->state);
      return true;
    }
  }
}

// Blocks the calling thread until w is granted (true) or `deadline` passes and the wait is
// cancelled (false). Spins briefly, then sleeps on the futex.
bool wait_for_grant(waiter* w, std::int64_t deadline) noexcept {
  for (unsigned i = 0; i < wait_spins; ++i) {
    if (w->state.load(std::memory_order_acquire) == waiter::granted) return true;
    backoff(0);
  }
  std::uint32_t seen = waiter::waiting;
  // acquire on failure (granted): as above. (GCC rejects a failure order stronger than
  // the success order, hence acquire for both.)
  if (!w->state.compare_exchange_strong(seen, waiter::sleeping, std::memory_order_acquire)) {
    return true;
  }
  for (;;) {
    futex_wait(w->state, waiter::sleeping, deadline);
    if (w->state.load(std::memory_order_acquire) == waiter::granted) return true;
    if (deadline != no_deadline && steady_ns() >= deadline) return !cancel(w, waiter::sleeping);
  }
}

void run_completion(task* t) noexcept {
  auto* w = static_cast<waiter*>(t);
  const bool granted = w->state.load(std::memory_order_acquire) == waiter::granted;
  if (w->type == waiter::kind::coroutine) {
    w->handle.resume();  // await_resume reads the outcome and drops the requester's reference
  } else {
    w->complete(w, granted);  // calls the callback and drops the requester's reference
  }
}

}  // namespace

void release_waiter(waiter* w) noexcept {
  // acq_rel: the last owner's free happens after every other owner's last use.
  if (w->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (w->destroy != nullptr) return w->destroy(w);
  delete_node(w);
}

void complete_waiter(waiter* w) noexcept {
  w->run = &run_completion;
  schedule(w);
}

// --- shards -----------------------------------------------------------------------------

void lock_shard::resize(std::size_t capacity) {
  table_slot* const from = slots;
  const std::size_t from_mask = mask;
  table_slot* to = inline_table;
  if (capacity > inline_slots) to = new table_slot[capacity]();  // else from a heap table: inline_table is empty
  for (std::size_t i = 0; i <= from_mask; ++i) {
    if (from[i].entry != nullptr) place(to, capacity - 1, from[i].entry);
  }
  if (from != inline_table) {
    delete[] from;
  } else {
    std::fill_n(inline_table, inline_slots, table_slot{0, nullptr});  // unused until a shrink refills it
  }
  slots = to;
  mask = capacity - 1;
}

void lock_shard::shrink() noexcept {
  std::size_t capacity = mask + 1;
  while (capacity > inline_slots && std::size_t{size} * 8 < capacity) capacity /= 2;
  try {
    resize(capacity);
  } catch (const std::bad_alloc&) {
    // keep the bigger table
  }
}

lock_shard::~lock_shard() {
  if (slots != inline_table) delete[] slots;
}

// --- the lease timer --------------------------------------------------------------------

// One thread per keyed_mutex, started by the first lease or async wait time: a binary
// min-heap of deadlines under a mutex. Firing a lease CASes the entry's `leased` word under
// the mutex, so a concurrent unlock or extend sees either the live lease or none.
class lease_timer {
 public:
  // With `start_thread` false (the tests' manual clock), deadlines fire only in advance().
  lease_timer(lock_table& t, bool start_thread) : table_(t) {
    if (start_thread) thread_ = std::thread([this] { run(); });
  }
  lease_timer(const lease_timer&) = delete;
  lease_timer& operator=(const lease_timer&) = delete;
  lease_timer(lease_timer&&) = delete;
  lease_timer& operator=(lease_timer&&) = delete;
  ~lease_timer() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  std::mutex& mutex() noexcept { return mutex_; }

  // Schedules n at `deadline`, or moves it there if already scheduled.
  void schedule(timer_node* n, std::int64_t deadline) noexcept {
    n->deadline = deadline;
    n->seq = ++seq_;
    if (n->index == timer_node::npos) {
      n->index = heap_.size();
      push(heap_, n);  // out of memory here would lose a lease: terminate (see push)
    }
    fix(n->index);
    if (heap_.front() == n) wake_.notify_one();
  }

  // True if n was scheduled (and is now not).
  bool cancel(timer_node* n) {
    if (n->index == timer_node::npos) return false;
    const std::size_t i = n->index;
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

  // Manual clock: fires, one at a time and in (deadline, schedule) order, every deadline up
  // to `to`, with the clock set to each deadline while it fires.
  void advance(std::atomic<std::int64_t>& clock, std::int64_t to) {
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

 private:
  void swap_at(std::size_t a, std::size_t b) noexcept {
    std::swap(heap_[a], heap_[b]);
    heap_[a]->index = a;
    heap_[b]->index = b;
  }
  static bool before(const timer_node* a, const timer_node* b) noexcept {
    return a->deadline != b->deadline ? a->deadline < b->deadline : a->seq < b->seq;
  }
  void fix(std::size_t i) noexcept {
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

  void run() {
    std::unique_lock lock(mutex_);
    while (!stop_) {
      if (heap_.empty()) {
        wake_.wait(lock);
        continue;
      }
      const std::int64_t now = steady_ns();
      if (heap_.front()->deadline > now) {
        // wait_until on the absolute deadline: a wait_for of (deadline - now) would overflow
        // inside the standard library for a deadline far in the future.
        wake_.wait_until(lock,
                         std::chrono::steady_clock::time_point(std::chrono::nanoseconds(heap_.front()->deadline)));
        continue;
      }
      while (!heap_.empty() && heap_.front()->deadline <= now) {
        timer_node* n = heap_.front();
        cancel(n);
        fire(n);
      }
      // Hand-offs and completions run user code: never under the timer's mutex.
      lock.unlock();
      run_fired();
      lock.lock();
    }
  }

  // Under the mutex: decides the outcome of a due deadline; the work is left in
  // expired_/timed_out_ for run_fired().
  void fire(timer_node* n) noexcept {
    if (n->is_lease) {
      auto* e = static_cast<lock_entry*>(n->owner);
      std::uint64_t token = e->lease_token;
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
      s.lock.unlock();
      push(expired_, e);
      return;
    }
    auto* w = static_cast<waiter*>(n->owner);
    if (cancel_waiting(w)) {
      push(timed_out_, w);
    } else {
      release_waiter(w);  // granted first: the timer's reference is all that is left to drop
    }
  }

  // Without the mutex: releases expired keys and completes timed-out waiters. Only the
  // thread that fired them (the timer thread, or advance()'s caller) touches the lists.
  void run_fired() noexcept {
    for (lock_entry* e : expired_) table_.release(e);
    for (waiter* w : timed_out_) {
      complete_waiter(w);
      release_waiter(w);  // the timer's reference
    }
    expired_.clear();
    timed_out_.clear();
  }

  static bool cancel_waiting(waiter* w) noexcept {
    // Coroutine waiters never sleep; acquire on failure as in cancel().
    std::uint32_t seen = waiter::waiting;
    return w->state.compare_exchange_strong(seen, waiter::cancelled, std::memory_order_acquire);
  }
  template <class T>
  static void push(std::vector<T*>& v, T* p) noexcept {
    try {
      v.push_back(p);
    } catch (...) {
      std::fputs("handoff: out of memory in the lease timer\n", stderr);
      std::terminate();
    }
  }

  lock_table& table_;
  // A plain std::mutex (not annotated_mutex): the condition variable needs one. Every
  // member below, and every timer_node, is touched only under it.
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<timer_node*> heap_;
  std::uint64_t seq_ = 0;
  bool stop_ = false;
  std::vector<lock_entry*> expired_;  // fired, not yet released (see run_fired)
  std::vector<waiter*> timed_out_;
  std::thread thread_;  // last: started once the members it uses exist
};

// --- the table --------------------------------------------------------------------------

lock_table::lock_table(destroy_fn destroy)
    : shard_shift_(64 - shard_bits), shards_(std::make_unique<lock_shard[]>(shard_count())), destroy_(destroy) {}

lock_table::~lock_table() {
  timer_.reset();  // joins the timer thread before anything it might touch goes away
  if (const std::size_t live = size(); live != 0) {
    std::fprintf(stderr,
                 "handoff: keyed_mutex destroyed while %zu key(s) still have a guard or a waiter; "
                 "they would refer to freed memory\n",
                 live);
    std::terminate();
  }
}

std::size_t lock_table::size() const noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < shard_count(); ++i) {
    lock_shard& s = shards_[i];
    s.lock.lock();
    n += s.size;
    s.lock.unlock();
  }
  return n;
}

lease_timer& lock_table::timer() {
  std::call_once(timer_once_, [this] {
    timer_ = std::make_unique<lease_timer>(*this, !manual_clock_);
    timer_started_.store(true, std::memory_order_release);  // pairs with timer_if_started()
  });
  return *timer_;
}

void lock_table::advance_manual_clock(std::int64_t to) { timer().advance(manual_now_, to); }

lease_timer* lock_table::timer_if_started() noexcept {
  return timer_started_.load(std::memory_order_acquire) ? timer_.get() : nullptr;
}

std::int64_t lock_table::now() const noexcept {
  return manual_clock_ ? manual_now_.load(std::memory_order_relaxed) : steady_ns();
}

grant lock_table::acquire(lock_shard& s, lock_entry* e, const lock_request& r) {
  const std::uintptr_t me = this_thread_id();
  if (e->count.load(std::memory_order_relaxed) == 0) {
    // Free: nobody else counts under this lock, and the last release zeroed it here, so
    // its writes (the token included) are visible.
    e->count.store(1, std::memory_order_relaxed);
    const std::uint64_t token = ++e->token;
    e->holder_thread.store(me, std::memory_order_relaxed);
    s.lock.unlock();
    if (r.lease != 0) arm_lease(e, token, r.lease);
    return {e, token, r.lease};
  }
  if (r.mode == lock_request::wait_mode::none || (r.mode == lock_request::wait_mode::until && r.deadline <= now())) {
    s.lock.unlock();
    return {};
  }
  if (e->holder_thread.load(std::memory_order_relaxed) == me) {
    s.lock.unlock();
    // Unless our lease has just expired: the timer clears holder_thread under its mutex
    // when it takes the key from us, so look again under that mutex (not under the shard
    // lock: the timer takes the two in the other order). The entry may be gone by then:
    // the caller looks it up again.
    if (lease_timer* t = timer_if_started()) {
      std::lock_guard lock(t->mutex());
      if (e->holder_thread.load(std::memory_order_relaxed) != me) return {.retry = true};
    }
    throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                            "handoff::keyed_mutex: this thread already holds the key");
  }
  waiter* w;
  try {
    w = new_node<waiter>();
  } catch (...) {
    s.lock.unlock();
    throw;
  }
  w->entry = e;
  w->table = this;
  e->count.fetch_add(1, std::memory_order_relaxed);
  e->waiters.push(w);
  s.lock.unlock();

  run_before_blocking();  // inside a handler: what this thread owns through its queue runs first
  const bool granted = wait_for_grant(w, r.mode == lock_request::wait_mode::until ? r.deadline : no_deadline);
  const std::uint64_t token = granted ? w->token : 0;  // written before the grant; racy otherwise
  release_waiter(w);
  if (!granted) return {};  // cancelled: still counted, the holder skips and uncounts it
  e->holder_thread.store(me, std::memory_order_relaxed);
  if (r.lease != 0) arm_lease(e, token, r.lease);
  return {e, token, r.lease};
}

bool lock_table::acquire_or_enqueue(lock_shard& s, lock_entry* e, waiter* w, std::int64_t deadline) {
  if (e->count.load(std::memory_order_relaxed) == 0) {
    e->count.store(1, std::memory_order_relaxed);
    ++e->token;
    s.lock.unlock();
    return true;
  }
  w->entry = e;
  w->table = this;
  if (deadline != no_deadline) w->timeout.owner = w;  // before the push: the granter reads it
  e->count.fetch_add(1, std::memory_order_relaxed);
  e->waiters.push(w);
  s.lock.unlock();
  if (deadline != no_deadline) {
    // After the push, w may be granted at any moment. A grant cancels the timeout under
    // the timer mutex, so check under it: granted before we got here, there is nothing to
    // schedule and the timer's reference (counted in by the caller) is ours to drop.
    lease_timer& t = *timer_;  // started by the caller (start_timer)
    std::lock_guard lock(t.mutex());
    if (w->state.load(std::memory_order_relaxed) == waiter::waiting) {
      t.schedule(&w->timeout, deadline);
    } else {
      release_waiter(w);
    }
  }
  return false;
}

void lock_table::release(lock_entry* e) noexcept {
  e->holder_thread.store(0, std::memory_order_relaxed);
  std::uint64_t uncounted = 1;
  for (;;) {
    auto* w = e->waiters.looks_empty() ? nullptr : static_cast<waiter*>(e->waiters.pop());
    if (w == nullptr) {
      lock_shard& s = shard_for(e->hash);
      s.lock.lock();
      // Requests are counted and pushed under this lock: the mailbox is exact here.
      w = e->waiters.looks_empty() ? nullptr : static_cast<waiter*>(e->waiters.pop());
      if (w == nullptr) {
        e->count.store(0, std::memory_order_relaxed);  // == uncounted: nobody else is counted
        lock_entry* dead = remove_if_unused(s, e);
        s.lock.unlock();
        if (dead != nullptr) recycle(dead);
        return;
      }
      s.lock.unlock();
    }
    e->count.fetch_sub(uncounted, std::memory_order_relaxed);  // w is counted: stays >= 1
    uncounted = 1;                                             // w's own, should it turn out to have given up
    const std::uint64_t token = e->token + 1;                  // tokens of skipped waiters are burnt: still monotonic
    e->token = token;
    w->token = token;
    if (try_grant(w)) {
      if (w->type != waiter::kind::thread) {
        if (w->timeout.owner != nullptr) {
          lease_timer& t = *timer_;  // started before w was queued with a wait time
          std::lock_guard lock(t.mutex());
          if (t.cancel(&w->timeout)) release_waiter(w);  // the timer's reference
        }
        complete_waiter(w);
      }
      release_waiter(w);  // the holder's (queue's) reference
      return;
    }
    release_waiter(w);
  }
}

void lock_table::drop_ref(lock_entry* e) noexcept {
  lock_shard& s = shard_for(e->hash);
  s.lock.lock();
  --e->refs;
  lock_entry* dead = e->count.load(std::memory_order_relaxed) == 0 ? remove_if_unused(s, e) : nullptr;
  s.lock.unlock();
  if (dead != nullptr) recycle(dead);
}

lock_entry* lock_table::remove_if_unused(lock_shard& s, lock_entry* e) noexcept {
  if (e->refs != 0) return nullptr;
  s.token_floor = std::max(s.token_floor, e->token);
  s.erase(e);
  return e;
}

// --- the per-thread entry cache ---------------------------------------------------------

HANDOFF_TLS_MODEL constinit thread_local entry_cache cached_entry{};

namespace {
// Frees the thread's cached entry when the thread exits.
struct entry_reaper {
  entry_reaper() = default;
  entry_reaper(const entry_reaper&) = delete;
  entry_reaper& operator=(const entry_reaper&) = delete;
  entry_reaper(entry_reaper&&) = delete;
  entry_reaper& operator=(entry_reaper&&) = delete;
  ~entry_reaper() {
    entry_cache& c = cached_entry;
    if (c.entry != nullptr) c.destroy(std::exchange(c.entry, nullptr));
    c.dead = true;
  }
};

// Registers the reaper on the thread's first cached entry (a cold path).
void arm_entry_reaper() noexcept {
  static thread_local entry_reaper reaper;
  (void)reaper;
  cached_entry.reaper_armed = true;
}
}  // namespace

void lock_table::recycle(lock_entry* e) noexcept {
  entry_cache& c = cached_entry;
  if (c.dead) return destroy_(e);
  if (c.entry != nullptr) {
    if (c.destroy == destroy_) return destroy_(e);  // one is enough
    c.destroy(c.entry);                             // another key type: keep the newest
  }
  if (!c.reaper_armed) arm_entry_reaper();
  c.entry = e;
  c.destroy = destroy_;
}

void lock_table::arm_lease(lock_entry* e, std::uint64_t token, std::int64_t lease) noexcept {
  const std::int64_t deadline = add_saturating(now(), lease);  // no_deadline: a lease that never runs out
  lease_timer& t = *timer_;                                    // started by the request (start_timer)
  std::lock_guard lock(t.mutex());
  e->lease.owner = e;
  e->lease.is_lease = true;
  e->lease_token = token;
  e->leased.store(token, std::memory_order_relaxed);  // read by the holder and under this mutex
  if (deadline != no_deadline) t.schedule(&e->lease, deadline);
}

bool lock_table::disarm_lease(lock_entry* e, std::uint64_t token) noexcept {
  lease_timer& t = *timer_;  // armed before, so the timer exists
  std::lock_guard lock(t.mutex());
  // acq_rel; pairs with the timer's CAS in fire(): exactly one of them releases the key.
  if (!e->leased.compare_exchange_strong(token, 0, std::memory_order_acq_rel)) return false;
  t.cancel(&e->lease);
  return true;
}

bool lock_table::extend_lease(lock_entry* e, std::uint64_t token, std::int64_t lease) {
  const std::int64_t deadline = add_saturating(now(), lease);
  lease_timer& t = *timer_;
  std::lock_guard lock(t.mutex());
  if (e->leased.load(std::memory_order_relaxed) != token) return false;
  if (deadline == no_deadline) {
    (void)t.cancel(&e->lease);  // never runs out now
  } else {
    t.schedule(&e->lease, deadline);
  }
  return true;
}

}  // namespace handoff::detail

namespace handoff {

void key_guard::unlock_leased() noexcept {
  detail::lock_entry* e = std::exchange(entry_, nullptr);
  if (table_->disarm_lease(e, token_)) return table_->release(e);
  expired_ = true;  // the timer released the key; only our reference is left
  table_->drop_ref(e);
}

bool key_guard::extend(std::chrono::nanoseconds d) {
  if (lease_ == 0) throw std::logic_error("handoff::key_guard::extend: the lock has no lease");
  if (d <= std::chrono::nanoseconds::zero())
    throw std::invalid_argument("handoff::key_guard::extend: duration must be positive");
  if (entry_ == nullptr) return false;
  if (!table_->extend_lease(entry_, token_, d.count())) return false;
  lease_ = d.count();
  return true;
}

}  // namespace handoff
