// Locking several keys, and running a function under one key, written once for both keyed
// mutexes (handoff::keyed_mutex and handoff::redis::keyed_mutex).
//
//   basic_multi_guard<Guard>   the guards of several keys, taken in one global order
//   detail::lock_in_order      sorts and deduplicates keys, locks them one by one
//   detail::run_locked         runs f under a guard, unlocking after it returns or throws
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <functional>
#include <iterator>
#include <ranges>
#include <type_traits>
#include <utility>
#include <vector>

namespace handoff {

// Guards of several keys, acquired in one global order (see keyed_mutex::lock_all). Like
// the single-key guard: movable, used by one thread at a time.
template <class Guard>
class [[nodiscard]] basic_multi_guard {
 public:
  basic_multi_guard() = default;
  explicit basic_multi_guard(std::vector<Guard> guards) noexcept : guards_(std::move(guards)) {}

  // True when every key is held (and there is at least one).
  [[nodiscard]] bool owns_lock() const noexcept {
    return !guards_.empty() &&
           std::all_of(guards_.begin(), guards_.end(), [](const Guard& g) { return g.owns_lock(); });
  }
  // Unlocks every key, in reverse acquisition order. Never throws: a guard whose unlock
  // can fail (redis::guard) has its error swallowed here, as in its destructor.
  void unlock() noexcept {
    // (not std::views::reverse: clang 14 cannot compile libstdc++ 12's ranges there)
    for (auto it = guards_.rbegin(); it != guards_.rend(); ++it) {  // NOLINT(modernize-loop-convert)
      try {
        it->unlock();
      } catch (...) {  // NOLINT(bugprone-empty-catch): as the guard's destructor does
      }
    }
  }
  ~basic_multi_guard() { unlock(); }
  basic_multi_guard(const basic_multi_guard&) = delete;
  basic_multi_guard& operator=(const basic_multi_guard&) = delete;
  // Moving the multi-key guard moves each of its guards, with the single-key guard's
  // semantics (for key_guard: the hold is no longer tied to the thread that locked it).
  basic_multi_guard(basic_multi_guard&& o) noexcept : guards_(std::move(o.guards_)) { rebind(); }
  basic_multi_guard& operator=(basic_multi_guard&& o) noexcept {
    if (this != &o) {
      unlock();
      guards_ = std::move(o.guards_);
      rebind();
    }
    return *this;
  }

  // The guards in acquisition order (sorted keys, duplicates removed).
  [[nodiscard]] std::size_t size() const noexcept { return guards_.size(); }
  [[nodiscard]] Guard& operator[](std::size_t i) noexcept { return guards_[i]; }
  [[nodiscard]] auto begin() noexcept { return guards_.begin(); }
  [[nodiscard]] auto end() noexcept { return guards_.end(); }

 private:
  // Moving the vector moves no element: move each guard onto itself through a temporary
  // so that it sees the move (no allocation).
  void rebind() noexcept {
    for (Guard& g : guards_) {
      Guard moved(std::move(g));
      g = std::move(moved);
    }
  }

  std::vector<Guard> guards_;
};

namespace detail {

// lock_all for any keyed mutex: copies the keys as Key, sorts them with operator< and
// removes duplicates (by `eq`), then calls add(guards, key) for each in that order;
// `add` appends the key's guard, built in place. A throw releases the guards taken. An
// `add` that returns bool (the timed forms) returns false when it did not get its key:
// the guards taken are then released, in reverse order, and the result is empty.
template <class Key, class Guard, class Keys, class Eq, class Add>
basic_multi_guard<Guard> lock_in_order(const Keys& keys, const Eq& eq, Add&& add) {
  static_assert(std::totally_ordered<Key>, "lock_all sorts the keys: Key needs operator<");
  std::vector<Key> sorted;
  if constexpr (std::ranges::sized_range<Keys>) sorted.reserve(std::ranges::size(keys));
  for (auto&& k : keys) sorted.emplace_back(k);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end(), [&](const Key& a, const Key& b) { return eq(a, b); }),
               sorted.end());
  std::vector<Guard> guards;
  guards.reserve(sorted.size());  // never reallocates: guards are built in place, never moved
  for (const Key& k : sorted) {
    if constexpr (std::is_void_v<std::invoke_result_t<Add&, std::vector<Guard>&, const Key&>>) {
      add(guards, k);
    } else if (!add(guards, k)) {
      basic_multi_guard<Guard> taken(std::move(guards));  // its destructor releases them
      return {};
    }
  }
  return basic_multi_guard<Guard>(std::move(guards));
}

// with_lock for any keyed mutex: runs f() holding `g`, then unlocks. If f throws, the
// guard's destructor unlocks (an unlock error is then swallowed); if f returns, an unlock
// error propagates.
template <class Guard, class F>
decltype(auto) run_locked(Guard g, F& f) {
  if constexpr (std::is_void_v<std::invoke_result_t<F&>>) {
    std::invoke(f);
    g.unlock();
  } else {
    decltype(auto) r = std::invoke(f);
    g.unlock();
    return r;
  }
}

}  // namespace detail
}  // namespace handoff
