// handoff::test::counting_sink: a metrics_sink (handoff/metrics.hpp) that keeps what it is
// told, for tests to read: counts per counter and every observed wait.
#pragma once

#include <handoff/metrics.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace handoff::test {

class counting_sink final : public handoff::metrics_sink {
 public:
  void add(handoff::metric_counter c, std::uint64_t n) noexcept override {
    counters_[static_cast<std::size_t>(c)].fetch_add(n, std::memory_order_relaxed);
  }
  void observe_wait(handoff::metric_wait w, std::chrono::nanoseconds d) noexcept override {
    const std::lock_guard lock(mu_);
    waits_[static_cast<std::size_t>(w)].push_back(d);
  }
  std::uint64_t count(handoff::metric_counter c) const {
    return counters_[static_cast<std::size_t>(c)].load(std::memory_order_relaxed);
  }
  std::vector<std::chrono::nanoseconds> waits(handoff::metric_wait w) {
    const std::lock_guard lock(mu_);
    return waits_[static_cast<std::size_t>(w)];
  }
  // Every event so far: counts plus observed waits.
  std::size_t events() {
    std::uint64_t n = 0;
    for (const auto& c : counters_) n += c.load(std::memory_order_relaxed);
    const std::lock_guard lock(mu_);
    for (const auto& w : waits_) n += w.size();
    return n;
  }

 private:
  std::array<std::atomic<std::uint64_t>, handoff::metric_counter_count> counters_{};
  std::mutex mu_;
  std::array<std::vector<std::chrono::nanoseconds>, handoff::metric_wait_count> waits_;
};

}  // namespace handoff::test
