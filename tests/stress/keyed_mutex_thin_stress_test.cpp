// Stress: handoff::keyed_mutex's thin keys. Short-lived threads locking keys leave no
// records behind; a million distinct keys leave no state and no memory; two threads
// hammering keys of one stripe (inflating and deflating it all the time) keep exclusion
// and rising tokens per key. Scaled by HANDOFF_STRESS_SECONDS (default 2).
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../support/core_access.hpp"
#include "../support/stress_seconds.hpp"
#include "../support/test_support.hpp"

namespace {

using handoff::key_guard;
using handoff::keyed_mutex;
using handoff::detail::lock_table;
using handoff::detail::lock_table_access;
using steady = std::chrono::steady_clock;

steady::time_point deadline() {
  return steady::now() + std::chrono::milliseconds(static_cast<long>(handoff::test::stress_seconds() * 1000));
}

TEST(KeyedMutexThinStress, AHundredThousandShortLivedThreadsLeaveRecordsFlat) {
  keyed_mutex<std::uint64_t> m;
  const auto until = deadline();
  for (int i = 0; i < 200; ++i) std::thread([&m, i] { key_guard g = m.lock(static_cast<std::uint64_t>(i)); }).join();
  const std::size_t before = handoff::detail::thin_records_allocated();
  for (int i = 0; i < 100000 && steady::now() < until; ++i) {
    std::thread([&m, i] { key_guard g = m.lock(static_cast<std::uint64_t>(i)); }).join();
  }
  EXPECT_LE(handoff::detail::thin_records_allocated(), before + 128);
  EXPECT_EQ(m.size(), 0u);
}

TEST(KeyedMutexThinStress, AMillionDistinctKeysLeaveNoStateAndNoMemory) {
  keyed_mutex<> m;
  for (int i = 0; i < 1000; ++i) (void)m.lock("warm:" + std::to_string(i));
  std::vector<std::string> keys;
  keys.reserve(1000000);
  for (int i = 0; i < 1000000; ++i) keys.push_back("k:" + std::to_string(i));
  const std::size_t heap_before = handoff::test::heap_in_use();
  for (const std::string& k : keys) {
    key_guard g = m.lock(k);
    ASSERT_TRUE(g.owns_lock());
  }
  const std::size_t heap_after = handoff::test::heap_in_use();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(lock_table_access::table(m).entries(), 0u);
  if (heap_before != 0) EXPECT_LE(heap_after, heap_before + 256 * 1024);  // 0: a sanitizer's allocator
}

TEST(KeyedMutexThinStress, TwoKeysOfOneStripeInflatingAndDeflatingKeepExclusionAndRisingTokens) {
  keyed_mutex<std::uint64_t> m;
  const auto stripe = [](std::uint64_t k) {
    return handoff::detail::mix_hash(std::hash<std::uint64_t>{}(k)) >> (64 - lock_table::shard_bits);
  };
  std::uint64_t b = 2;
  while (stripe(b) != stripe(1)) ++b;
  const std::uint64_t keys[2] = {1, b};
  long counts[2] = {0, 0};               // under the key only
  std::atomic<long> grants[2] = {0, 0};  // every grant, counted apart
  std::uint64_t last[2] = {0, 0};
  bool ordered = true;
  const auto until = deadline();
  handoff::test::run_threads(4, [&](int t) {
    for (long i = 0; steady::now() < until; ++i) {
      const int k = static_cast<int>((i + t) & 1);
      key_guard g = (i % 7 == 0) ? m.try_lock(keys[k]) : m.lock(keys[k]);
      if (!g.owns_lock()) continue;
      ++counts[k];  // exclusive per key: a lost update would show against grants
      grants[k].fetch_add(1, std::memory_order_relaxed);
      if (g.token() <= last[k]) ordered = false;
      last[k] = g.token();
      if (i % 5 == 0) {
        key_guard both = m.try_lock(keys[1 - k]);  // the other key of the stripe, held meanwhile
        if (both.owns_lock()) {
          ++counts[1 - k];
          grants[1 - k].fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
  });
  EXPECT_TRUE(ordered);
  EXPECT_EQ(m.size(), 0u);
  for (int i = 0; i < handoff::detail::lock_shard::deflate_after; ++i) (void)m.lock(keys[0]);  // calm: deflates
  EXPECT_EQ(lock_table_access::table(m).entries(), 0u);
  EXPECT_EQ(counts[0], grants[0].load());
  EXPECT_EQ(counts[1], grants[1].load());
}

}  // namespace
