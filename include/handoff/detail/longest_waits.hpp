// longest_waits<Key, Eq>: the keys with the longest lock waits, kept for
// keyed_mutex::stats() (the lock table reports waits to it through detail/lock_stats.hpp's
// wait_recorder). Slow paths only: the uncontended lock and unlock never touch it.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

#include "handoff/detail/keyed_entry.hpp"
#include "handoff/detail/lock_stats.hpp"
#include "handoff/keyed_mutex_options.hpp"

namespace handoff::detail {

// The keys with the longest waits since the last take(), each key once, at most `limit`.
// A wait shorter than every kept one, with the list full, costs one relaxed load; a longer
// one takes a mutex and copies its key (a slow path: the request waited microseconds).
template <class Key, class Eq>
class longest_waits final : public wait_recorder {
 public:
  longest_waits(std::size_t limit, const Eq& eq) : limit_(limit), eq_(eq) {}

  void record(const lock_entry* e, std::int64_t waited_ns) noexcept override {
    // relaxed: a hint; the decision is made again under mu_.
    if (limit_ == 0 || waited_ns <= floor_.load(std::memory_order_relaxed)) return;
    const Key& key = static_cast<const keyed_entry<Key>*>(e)->key;
    const std::chrono::nanoseconds waited(waited_ns);
    const std::lock_guard lock(mu_);
    try {
      auto same = std::find_if(kept_.begin(), kept_.end(), [&](const key_wait<Key>& w) { return eq_(w.key, key); });
      if (same != kept_.end()) {
        same->waited = std::max(same->waited, waited);
      } else if (kept_.size() < limit_) {
        kept_.emplace_back(key, waited);
      } else {
        auto least = std::min_element(kept_.begin(), kept_.end(), by_wait);
        if (least->waited < waited) *least = key_wait<Key>(key, waited);
      }
    } catch (...) {  // NOLINT(bugprone-empty-catch): a key that cannot be copied is not listed
    }
    const bool full = kept_.size() >= limit_;
    floor_.store(full ? std::min_element(kept_.begin(), kept_.end(), by_wait)->waited.count() : 0,
                 std::memory_order_relaxed);
  }

  // The waits kept, longest first; starts a new window. Allocates (the returned vector).
  std::vector<key_wait<Key>> take() {
    std::vector<key_wait<Key>> out;
    {
      const std::lock_guard lock(mu_);
      out.swap(kept_);
      floor_.store(0, std::memory_order_relaxed);
    }
    std::sort(out.begin(), out.end(), [](const key_wait<Key>& a, const key_wait<Key>& b) { return by_wait(b, a); });
    return out;
  }

 private:
  static bool by_wait(const key_wait<Key>& a, const key_wait<Key>& b) noexcept { return a.waited < b.waited; }

  const std::size_t limit_;
  const Eq& eq_;  // the mutex's: outlives this
  std::mutex mu_;
  std::vector<key_wait<Key>> kept_;  // guarded by mu_
  // The shortest kept wait when the list is full, else 0: shorter waits are not recorded.
  std::atomic<std::int64_t> floor_{0};
};

}  // namespace handoff::detail
