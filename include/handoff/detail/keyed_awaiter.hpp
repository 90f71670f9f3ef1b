// keyed_lock_awaiter: what `co_await m.async_lock(key)` awaits (keyed_mutex.hpp). It
// looks the key up (under a test scheduler, after a scheduling point) and asks the mutex's
// table for the key, which grants a free one at once (the coroutine goes on without
// suspending) or queues a coroutine waiter; the holder's unlock (or, at a wait timeout, the
// process-wide completion thread) resumes the coroutine, whose await_resume asks the table
// for the waiter's outcome and turns it into a guard. It reaches the mutex's table, hash
// and lookup as its friend.
#pragma once

#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_shard.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/node_pool.hpp"

namespace handoff::detail {

template <class Mutex>
class [[nodiscard]] keyed_lock_awaiter {
  using key_type = typename Mutex::key_type;
  using guard = typename Mutex::guard;

 public:
  keyed_lock_awaiter(Mutex& m, key_type key, std::int64_t deadline, std::int64_t lease_ns)
      : m_(m), key_(std::move(key)), deadline_(deadline), lease_(lease_ns) {}
  keyed_lock_awaiter(const keyed_lock_awaiter&) = delete;
  keyed_lock_awaiter& operator=(const keyed_lock_awaiter&) = delete;
  ~keyed_lock_awaiter() = default;
  [[nodiscard]] bool await_ready() const noexcept { return false; }

  bool await_suspend(std::coroutine_handle<> h) {
    if (deadline_ != no_deadline || lease_ != 0) m_.table_.start_timer();
    const std::size_t hash = mix_hash(m_.hash_(key_));  // first: a throw leaves nothing to free
    auto* w = new_node<waiter>();
    w->type = waiter::kind::coroutine;
    w->handle = h;
    lock_shard& s = m_.table_.shard_for(hash);
    lock_entry* e;
    try {
      e = m_.lock_entry_of(s, hash, key_);
    } catch (...) {
      delete_node(w);
      throw;
    }
    // Stored before the enqueue: once queued, the coroutine may be resumed on another
    // thread at any moment, and *this must not be touched after that.
    w_ = w;
    if (const grant g = m_.table_.acquire_or_enqueue(s, e, w, deadline_); g.token != 0) {
      w_ = nullptr;
      delete_node(w);
      result_ = g;
      return false;  // free: continue without suspending
    }
    return true;
  }

  guard await_resume() {
    if (w_ != nullptr) {
      waiter* w = std::exchange(w_, nullptr);
      result_ = m_.table_.outcome(w);
      release_waiter(w);
      if (result_.token == 0) return guard();
    }
    if (lease_ != 0) m_.table_.arm_lease(result_.entry, result_.token, lease_);
    return Mutex::make_guard(&m_.table_, {result_.entry, result_.token, lease_});
  }

 private:
  Mutex& m_;
  key_type key_;
  std::int64_t deadline_;
  std::int64_t lease_;
  waiter* w_ = nullptr;
  grant result_;
};

}  // namespace handoff::detail
