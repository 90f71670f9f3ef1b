// Parking and completing lock waiters (lib/keyed/lock_parking.hpp): futex wait and wake, the
// waiter-state CASes, and complete_waiter, the one place coroutine and callback waiters
// are scheduled to run.
#include "lock_parking.hpp"

#include <atomic>
#include <bit>
#include <chrono>
#include <climits>
#include <thread>

#include "../runtime/task_thread.hpp"
#include "driver_interface.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/node_pool.hpp"

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

namespace handoff::detail {

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
// The futex is the word's low 32 bits, which hold the parked bit: a word whose low half
// equals `parked`'s is thin-held with parked threads, so its unlock wakes them.
std::uint32_t* low_half(std::atomic<std::uintptr_t>& word) noexcept {
  auto* p = reinterpret_cast<std::uint32_t*>(&word);
  return std::endian::native == std::endian::little || sizeof(std::uintptr_t) == 4 ? p : p + 1;
}
void futex_wait_word(std::atomic<std::uintptr_t>& word, std::uintptr_t parked, std::int64_t deadline) noexcept {
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(deadline / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(deadline % 1'000'000'000);
  syscall(SYS_futex, low_half(word), FUTEX_WAIT_BITSET_PRIVATE, static_cast<std::uint32_t>(parked), &ts, nullptr,
          FUTEX_BITSET_MATCH_ANY);
}
void futex_wake_word(std::atomic<std::uintptr_t>& word) noexcept {
  syscall(SYS_futex, low_half(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}
#else
// Portable fallback: std::atomic::wait has no timeout, so timed waits poll.
constexpr auto timed_wait_poll = std::chrono::microseconds(50);  // 1/20 of the shortest wait tests use
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected, std::int64_t deadline) noexcept {
  if (deadline == no_deadline) return word.wait(expected, std::memory_order_acquire);
  std::this_thread::sleep_for(timed_wait_poll);
}
void futex_wake(std::atomic<std::uint32_t>& word) noexcept { word.notify_one(); }
void futex_wait_word(std::atomic<std::uintptr_t>& word, std::uintptr_t parked, std::int64_t /*deadline*/) noexcept {
  if (word.load(std::memory_order_relaxed) == parked) std::this_thread::sleep_for(timed_wait_poll);
}
void futex_wake_word(std::atomic<std::uintptr_t>& /*word*/) noexcept {}
#endif

// Spins before sleeping: a hot key's holder is usually a few hundred nanoseconds from its
// unlock, far less than a futex sleep and wake-up (several microseconds). 256 pauses take
// a few microseconds on the machines measured (docs/design.md, "Waiting"): about the cost
// of the sleep they avoid, so spinning longer never pays.
constexpr unsigned wait_spins = 256;

// Where this thread sends completions instead of running them (see
// redirect_completions()); owned by its thread.
constinit thread_local task_thread* completion_redirect = nullptr;

void run_completion(task* t) noexcept {
  auto* w = static_cast<waiter*>(t);
  HANDOFF_ASSERT(w->state.load(std::memory_order_relaxed) == waiter::granted ||
                 w->state.load(std::memory_order_relaxed) == waiter::cancelled);
  // Each reads the outcome once (lock_table::outcome) and drops the requester's reference.
  if (w->type == waiter::kind::coroutine) {
    w->handle.resume();  // in await_resume
  } else {
    w->complete(w);  // then calls the callback
  }
}

}  // namespace

bool cancel_wait(waiter* w, std::uint32_t seen) noexcept {
  HANDOFF_ASSERT(seen == waiter::waiting || seen == waiter::sleeping || seen == waiter::woken);
  // acquire on failure: the grant's token and the holder's writes become visible.
  const bool cancelled = w->state.compare_exchange_strong(seen, waiter::cancelled, std::memory_order_acquire);
  HANDOFF_ASSERT(cancelled || seen == waiter::granted || seen == waiter::woken);
  return cancelled;
}

bool try_grant(waiter* w) noexcept {
  std::uint32_t s = w->state.load(std::memory_order_relaxed);
  for (;;) {
    if (s == waiter::cancelled) return false;
    HANDOFF_ASSERT(s == waiter::waiting || s == waiter::sleeping || s == waiter::woken);  // granted once only
    // release; pairs with the requester's acquire loads of `state`: the token, and every
    // write of the previous holder, are visible to the new one.
    if (w->state.compare_exchange_weak(s, waiter::granted, std::memory_order_release, std::memory_order_relaxed)) {
      if (s == waiter::sleeping) futex_wake(w->state);
      return true;
    }
  }
}

std::uint32_t try_wake(waiter* w) noexcept {
  std::uint32_t s = w->state.load(std::memory_order_relaxed);
  for (;;) {
    if (s == waiter::cancelled || s == waiter::woken) return s;
    HANDOFF_ASSERT(s == waiter::waiting || s == waiter::sleeping);
    // relaxed: what the woken requester reads next (the entry's `open` and `front`, the
    // token, the last holder's writes) it reads under the shard lock, which the caller holds.
    if (w->state.compare_exchange_weak(s, waiter::woken, std::memory_order_relaxed)) return s;
  }
}

void wake_sleeper(waiter* w) noexcept { futex_wake(w->state); }

void park_on_word(std::atomic<std::uintptr_t>& word, std::uintptr_t parked, std::int64_t deadline) noexcept {
  futex_wait_word(word, parked, deadline);
}
void wake_word(std::atomic<std::uintptr_t>& word) noexcept { futex_wake_word(word); }

std::uint32_t wait_for_turn(waiter* w, std::int64_t deadline) noexcept {
  for (unsigned i = 0; i < wait_spins; ++i) {
    // acquire; pairs with try_grant (the token, the last holder's writes).
    const std::uint32_t s = w->state.load(std::memory_order_acquire);
    if (s == waiter::granted || s == waiter::woken) return s;
    backoff(0);
  }
  std::uint32_t seen = waiter::waiting;
  // acquire on failure (granted): as above. (GCC rejects a failure order stronger than
  // the success order, hence acquire for both.)
  if (!w->state.compare_exchange_strong(seen, waiter::sleeping, std::memory_order_acquire)) {
    HANDOFF_ASSERT(seen == waiter::granted || seen == waiter::woken);  // only the requester cancels it
    return seen;
  }
  for (;;) {
    futex_wait(w->state, waiter::sleeping, deadline);
    const std::uint32_t s = w->state.load(std::memory_order_acquire);  // pairs with try_grant
    if (s != waiter::sleeping) {
      HANDOFF_ASSERT(s == waiter::granted || s == waiter::woken);
      return s;
    }
    if (deadline != no_deadline && now_ns() >= deadline) {
      if (cancel_wait(w, waiter::sleeping)) return waiter::cancelled;
      return w->state.load(std::memory_order_acquire);  // granted or woken first; pairs with try_grant
    }
  }
}

void release_waiter(waiter* w) noexcept {
  // acq_rel: the last owner's free happens after every other owner's last use.
  const std::uint32_t before = w->refs.fetch_sub(1, std::memory_order_acq_rel);
  HANDOFF_ASSERT(before >= 1);
  if (before != 1) return;
  if (w->destroy != nullptr) return w->destroy(w);
  delete_node(w);
}

bool is_completion(const task* t) noexcept { return t->run == &run_completion; }

void redirect_completions(task_thread* to) noexcept { completion_redirect = to; }

void complete_waiter(waiter* w) noexcept {
  w->run = &run_completion;
  if (completion_redirect != nullptr) return completion_redirect->post(w);
  schedule(w);  // at top level now; inside a handler, a coroutine or a callback, after it
}

}  // namespace handoff::detail
