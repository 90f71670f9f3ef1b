// handoff::key_guard: the RAII guard of one key of a handoff::keyed_mutex (which builds
// them), and handoff::multi_guard, the guards of several keys from lock_all. A guard holds
// its key until unlock(), its destruction, or its lease running out; it carries the
// grant's fencing token.
//
// A guard holds either a thin record (an uncontended key: detail/thin_record.hpp), whose
// unlock is one CAS inline, or a lock entry (detail/lock_entry.hpp); the lock table it
// returns an entry to is reached out of line (lib/keyed/key_guard.cpp).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/thin_record.hpp"
#include "handoff/lease.hpp"
#include "handoff/multi_guard.hpp"

namespace handoff {

namespace detail {
class lock_table;
}  // namespace detail

template <class Key, class Hash, class Eq>
class keyed_mutex;

// The RAII guard of one key. Movable, not copyable; not thread-safe itself (use one guard
// from one thread at a time), but it may be moved to and unlocked on another thread.
class [[nodiscard]] key_guard {
 public:
  key_guard() noexcept = default;
  key_guard(const key_guard&) = delete;
  key_guard& operator=(const key_guard&) = delete;
  // A moved-from guard is empty, as if default-constructed. Moving a held guard turns
  // self-deadlock detection off for this hold (see the overview).
  key_guard(key_guard&& o) noexcept
      : table_(o.table_), held_(std::exchange(o.held_, 0)), token_(std::exchange(o.token_, 0)),
        lease_(std::exchange(o.lease_, 0)), expired_(std::exchange(o.expired_, false)) {
    forget_thread();
  }
  // Unlocks what this guard held, then takes o's state.
  key_guard& operator=(key_guard&& o) noexcept {
    if (this != &o) {
      unlock();
      table_ = o.table_;
      held_ = std::exchange(o.held_, 0);
      token_ = std::exchange(o.token_, 0);
      lease_ = std::exchange(o.lease_, 0);
      expired_ = std::exchange(o.expired_, false);
      forget_thread();
    }
    return *this;
  }
  // Unlocks (see unlock()).
  [[gnu::always_inline]] ~key_guard() { unlock(); }

  // True while this guard holds its key: acquired, not unlocked, lease not expired.
  [[nodiscard, gnu::always_inline]] bool owns_lock() const noexcept {
    return held_ != 0 && (lease_ == 0 || !expired());
  }
  explicit operator bool() const noexcept { return owns_lock(); }

  // Releases the key: the next waiter gets it (a coroutine or callback waiter may run on
  // this thread before unlock() returns). A no-op when the guard holds nothing: after
  // unlock(), after a move, or when the lease expired. Never throws.
  [[gnu::always_inline]] void unlock() noexcept {
    if (held_ == 0) return;
    if (lease_ != 0) return unlock_leased();
    const std::uintptr_t p = std::exchange(held_, 0);
    if ((p & thin_tag) != 0) [[likely]] {
      auto* r = reinterpret_cast<detail::thin_record*>(p & ~thin_tag);  // NOLINT(performance-no-int-to-ptr): tagged
      if (!detail::release_thin(r)) release_inflated(r);
      // NOLINTNEXTLINE(performance-no-int-to-ptr): untagged: an entry
    } else if (auto* e = reinterpret_cast<detail::lock_entry*>(p); !detail::release_uncontended(e)) {
      release_held(e);
    }
  }

  // The fencing token of this grant: greater than every earlier grant's token for the same
  // key. 0 if the guard never acquired. Kept after unlock() and expiry, so that it can be
  // sent to a downstream store that rejects writes with a token lower than one it has seen.
  [[nodiscard]] std::uint64_t token() const noexcept { return token_; }

  // True when the lease ran out while this guard held the key (it stays true). It turns
  // true when the timer takes the lease, a moment before the timer hands the key on: the
  // next holder may not have it yet.
  [[nodiscard]] bool expired() const noexcept {
    return expired_ || (held_ != 0 && lease_ != 0 && entry()->leased.load(std::memory_order_acquire) != token_);
  }

  // Throws lock_expired unless owns_lock(): call before acting on the protected resource.
  void check() const {
    if (!owns_lock()) throw lock_expired();
  }

  // Leased guards: renews the lease to `d` from now. Returns false (and changes nothing)
  // if the guard no longer holds the key. Throws std::logic_error for a guard without a
  // lease, std::invalid_argument for d <= 0.
  bool extend(std::chrono::nanoseconds d);

  // The current lease length: as granted, or as last extended; zero when none.
  [[nodiscard]] std::chrono::nanoseconds lease_duration() const noexcept { return std::chrono::nanoseconds(lease_); }
  // Internal: the key that only keyed_mutex can make, which the constructor of a guard of
  // a grant asks for. A pass key rather than a private constructor, so that keyed_mutex can
  // build guards in place inside a vector (lock_all): moving a held guard would turn
  // self-deadlock detection off.
  class pass_key {
    template <class Key, class Hash, class Eq>
    friend class keyed_mutex;
    pass_key() = default;
  };
  // Internal: a guard of a grant; keyed_mutex builds them, in place where it can.
  [[gnu::always_inline]] key_guard(pass_key /*only keyed_mutex*/, detail::lock_table* t,
                                   const detail::grant& g) noexcept
      : table_(t), held_(g.record != nullptr ? reinterpret_cast<std::uintptr_t>(g.record) | thin_tag
                                             : reinterpret_cast<std::uintptr_t>(g.entry)),
        token_(g.token), lease_(g.lease) {}
  // Internal: a thin hold (the uncontended lock's guard).
  [[gnu::always_inline]] key_guard(pass_key /*only keyed_mutex*/, detail::lock_table* t, detail::thin_record* r,
                                   std::uint64_t token) noexcept
      : table_(t), held_(reinterpret_cast<std::uintptr_t>(r) | thin_tag), token_(token) {}

 private:
  // held_'s low bit: a thin record (64-byte aligned) rather than an entry.
  static constexpr std::uintptr_t thin_tag = 1;
  // The held entry (held_ without thin_tag).
  [[nodiscard]] detail::lock_entry* entry() const noexcept {
    return reinterpret_cast<detail::lock_entry*>(held_);  // NOLINT(performance-no-int-to-ptr): untagged: an entry
  }
  // unlock() of an entry's hold without a lease: hands the entry back to the table.
  void release_held(detail::lock_entry* e) noexcept;
  // unlock() of a thin hold whose stripe inflated meanwhile: through the table.
  void release_inflated(detail::thin_record* r) noexcept;
  void unlock_leased() noexcept;
  // Only the holder writes holder_thread, and a guard that holds is the holder (an
  // expired one is not, but then the timer has cleared it already or will).
  void forget_thread() noexcept {
    if (held_ == 0) return;
    if ((held_ & thin_tag) != 0) return forget_thin();
    if (!expired()) entry()->holder_thread.store(0, std::memory_order_relaxed);
  }
  // forget_thread() of a thin hold: its record's thread, and its entry's if it inflated.
  void forget_thin() noexcept;

  detail::lock_table* table_ = nullptr;
  // A thin record | thin_tag, or an entry (holding a reference, and maybe the key); 0: none.
  std::uintptr_t held_ = 0;
  std::uint64_t token_ = 0;
  std::int64_t lease_ = 0;  // ns
  bool expired_ = false;    // the lease ran out (cached once seen at unlock)
};

using multi_guard = basic_multi_guard<key_guard>;

}  // namespace handoff
