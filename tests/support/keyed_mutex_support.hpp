// Helpers shared by the keyed_mutex unit tests (tests/unit/keyed_mutex_*_test.cpp).
//
// Queue order is set up without sleeps where it can be: a coroutine or callback request
// joins the key's queue before async_lock/lock_async returns; a blocking request joins it
// before its thread goes to sleep, so a test waits until the requesting thread is seen
// asleep inside the call (blocking_call below, which reads /proc).
#pragma once

#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <sys/syscall.h>
#include <unistd.h>

#include "test_support.hpp"
#include "test_timeout.hpp"

namespace handoff::test {

using namespace std::chrono_literals;
// The names every keyed_mutex test uses; a test file says `using namespace handoff::test;`.
using handoff::key_guard;
using handoff::keyed_mutex;
using handoff::lease;
using steady = std::chrono::steady_clock;

// Every keyed_mutex unit test runs under a 60 s timeout (sanitizer builds included).
class KeyedMutex : public ::testing::Test {
 protected:
  test_timeout timeout_{60s};
};

// The scheduler state of a thread of this process: 'R' running, 'S' asleep, ...; '?' when
// /proc cannot tell.
inline char thread_state(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return '?';
  const auto paren = line.rfind(')');  // the command name may contain spaces
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
}

// Runs `call` on a new thread. wait_until_blocked() returns once that thread is asleep
// inside the call: for a lock request on a held key that means it is queued (a request
// joins the queue before its thread sleeps, and nothing else in the call sleeps when the
// other threads of the test are idle).
class blocking_call {
 public:
  template <class F>
  explicit blocking_call(F call)
      : thread_([this, call]() mutable {
          tid_.store(static_cast<pid_t>(::syscall(SYS_gettid)), std::memory_order_relaxed);
          entered_.store(true, std::memory_order_release);
          call();
          returned_.store(true, std::memory_order_release);
        }) {}
  blocking_call(const blocking_call&) = delete;
  blocking_call& operator=(const blocking_call&) = delete;
  ~blocking_call() { join(); }

  // True once the thread was seen asleep inside the call on three polls in a row (a
  // momentary sleep elsewhere, e.g. in the allocator, does not last that long). Where /proc
  // cannot tell, falls back to a generous 200 ms sleep: the thread spins for microseconds
  // before it sleeps.
  [[nodiscard]] bool wait_until_blocked(std::chrono::milliseconds limit = 10s) const {
    if (!eventually([&] { return entered_.load(std::memory_order_acquire); }, limit)) return false;
    const pid_t tid = tid_.load(std::memory_order_relaxed);
    if (thread_state(tid) == '?') {
      std::this_thread::sleep_for(200ms);
      return !returned();
    }
    int asleep = 0;
    return eventually(
        [&] {
          if (returned()) return false;
          const char s = thread_state(tid);
          asleep = (s == 'S' || s == 'D') ? asleep + 1 : 0;
          return asleep >= 3;
        },
        limit);
  }
  [[nodiscard]] bool returned() const { return returned_.load(std::memory_order_acquire); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> entered_{false};
  std::atomic<bool> returned_{false};
  std::thread thread_;  // last: started once the flags exist
};

// The order in which holders were granted a key (each records itself while holding it).
class grant_log {
 public:
  void add(int who) {
    std::lock_guard lock(mu_);
    order_.push_back(who);
  }
  std::vector<int> order() {
    std::lock_guard lock(mu_);
    return order_;
  }
  std::size_t size() {
    std::lock_guard lock(mu_);
    return order_.size();
  }

 private:
  std::mutex mu_;
  std::vector<int> order_;
};

// What a coroutine waiter saw when it was resumed; `resumptions` is counted last (release).
struct async_outcome {
  std::thread::id thread;
  bool owned = false;
  bool expired_at_grant = false;
  std::uint64_t token = 0;
  key_guard kept;  // the guard, when the coroutine was asked to keep it
  std::atomic<int> resumptions{0};
  bool done() const { return resumptions.load(std::memory_order_acquire) > 0; }
};

// co_awaits make() (which returns an awaiter from async_lock), records the outcome, and
// keeps the guard in `out` or drops it at once (unlocking) as asked.
template <class MakeAwaiter>
fire_and_forget await_lock(MakeAwaiter make, async_outcome* out, bool keep, grant_log* log = nullptr, int who = 0) {
  key_guard g = co_await make();
  out->thread = std::this_thread::get_id();
  out->owned = g.owns_lock();
  out->expired_at_grant = g.expired();
  out->token = g.token();
  if (log != nullptr && g.owns_lock()) log->add(who);
  if (keep) out->kept = std::move(g);
  out->resumptions.fetch_add(1, std::memory_order_release);
  // g (if not kept) unlocks here, handing the key to the next waiter on this thread.
}

template <class F>
std::error_code error_of(F f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return e.code();
  }
  return {};
}
inline const std::error_code would_deadlock = std::make_error_code(std::errc::resource_deadlock_would_occur);

// True if another thread could take the key right now (and it then lets go of it again).
template <class Mutex, class Key>
bool free_elsewhere(Mutex& m, const Key& key) {
  bool got = false;
  std::thread([&] { got = m.try_lock(key).owns_lock(); }).join();
  return got;
}

}  // namespace handoff::test
