// handoff::keyed_mutex<Key>, size(), memory kept per key and per thread, custom and colliding keys, destruction: one
// test per point of the contract in keyed_mutex.hpp.
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>

#include <functional>
#include <latch>
#include <memory>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../support/core_access.hpp"
#include "../support/keyed_mutex_support.hpp"

namespace {

using namespace handoff::test;  // keyed_mutex_support.hpp: helpers, chrono literals, the names used

// --- size() and memory ------------------------------------------------------------------

TEST_F(KeyedMutex, SizeCountsKeysThatAreHeldOrWaitedFor) {
  keyed_mutex<> m;
  EXPECT_EQ(m.size(), 0u);
  key_guard a = m.lock("a");
  key_guard b = m.lock("b");
  EXPECT_EQ(m.size(), 2u);
  EXPECT_FALSE(m.try_lock("a").owns_lock());  // a failed try_lock leaves nothing behind
  EXPECT_TRUE(m.try_lock("c").owns_lock());   // a temporary guard: released at once
  EXPECT_EQ(m.size(), 2u);
  async_outcome out;
  await_lock([&m] { return m.async_lock("a"); }, &out, false);
  EXPECT_EQ(m.size(), 2u);  // a waiter on a held key adds no key
  a.unlock();               // grants the coroutine, which unlocks at once
  EXPECT_TRUE(out.done());
  EXPECT_EQ(m.size(), 1u);
  b.unlock();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LocksAndReleasesAHundredThousandDistinctKeysAndSizeCountsOnlyTheHeldOnes) {
  keyed_mutex<> m;
  constexpr int n = 100000;
  for (int i = 0; i < n; ++i) {
    key_guard g = m.lock("key:" + std::to_string(i));
    ASSERT_TRUE(g.owns_lock());
  }
  EXPECT_EQ(m.size(), 0u);
  std::vector<key_guard> all;
  all.reserve(n);
  for (int i = 0; i < n; ++i) all.push_back(m.try_lock("key:" + std::to_string(i)));
  EXPECT_EQ(m.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; i += 1000) EXPECT_FALSE(free_elsewhere(m, "key:" + std::to_string(i)));
  for (std::size_t i = 0; i < all.size(); i += 2) all[i].unlock();  // holes in every probe run
  EXPECT_EQ(m.size(), static_cast<std::size_t>(n / 2));
  for (int i = 1; i < n; i += 1000) EXPECT_FALSE(free_elsewhere(m, "key:" + std::to_string(i)));
  all.clear();
  EXPECT_EQ(m.size(), 0u);
}

// A key too long to be thin (more than 23 bytes): it takes the table's entries.
std::string long_key(const char* prefix, int i) {
  return std::string(prefix) + std::to_string(i) + std::string(24, '.');
}

// An unlocked (long) key's entry stays in its table, idle, and the next lock of the key
// finds it instead of creating one; size() counts only keys with a holder or a waiter.
TEST_F(KeyedMutex, AnUnlockedKeysEntryStaysIdleAndItsNextLockFindsIt) {
  keyed_mutex<> m;
  const auto& table = handoff::detail::lock_table_access::table(m);
  const std::string key = long_key("player:", 1);
  const std::uint64_t first = m.lock(key).token();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(table.entries(), 1u);
  EXPECT_EQ(m.lock(key).token(), first + 1);
  EXPECT_EQ(table.entries(), 1u);  // found, not created again
  key_guard g = m.lock(key);
  EXPECT_EQ(m.size(), 1u);
}

// What idle keys keep is capped per shard, whether the keys come one by one or are all
// held at once and then released.
TEST_F(KeyedMutex, IdleEntriesStayUnderTheirCapPerShard) {
  keyed_mutex<> m;
  const auto& table = handoff::detail::lock_table_access::table(m);
  const std::size_t cap = handoff::detail::lock_table::shard_count() * handoff::detail::lock_shard::kept_idle;
  constexpr int n = 20000;  // about five times the cap
  for (int i = 0; i < n; ++i) EXPECT_TRUE(m.lock(long_key("one:", i)).owns_lock());
  EXPECT_EQ(m.size(), 0u);
  EXPECT_LE(table.entries(), cap);
  {
    std::vector<key_guard> all;
    all.reserve(n);
    for (int i = 0; i < n; ++i) all.push_back(m.lock(long_key("all:", i)));
    EXPECT_EQ(m.size(), static_cast<std::size_t>(n));
    EXPECT_GT(table.entries(), cap);
  }
  EXPECT_EQ(m.size(), 0u);
  EXPECT_LE(table.entries(), cap);
}

// An idle entry taken over by a new key (the shard was full) leaves its token in the
// shard's floor: the key's next entry starts above it.
TEST_F(KeyedMutex, TokensKeepRisingAcrossTheReclaimOfAnIdleEntry) {
  keyed_mutex<> m;
  const auto& table = handoff::detail::lock_table_access::table(m);
  std::uint64_t last = 0;
  const std::string key = long_key("player:", 1);
  for (int i = 0; i < 5; ++i) last = m.lock(key).token();
  for (int i = 0; i < 50000; ++i) EXPECT_TRUE(m.lock(long_key("churn:", i)).owns_lock());
  EXPECT_LE(table.entries(), handoff::detail::lock_table::shard_count() * handoff::detail::lock_shard::kept_idle);
  EXPECT_GT(m.lock(key).token(), last);
}

// A thread keeps the last entry it removed (one that could not stay idle in its table) for
// its next new key (detail::cached_entry). Under ASan this also checks that an entry is
// reused only by its own key type, outlives the mutex it came from safely, and is freed
// when its thread exits.
TEST_F(KeyedMutex, ARecycledEntryServesAnyMutexOfItsKeyTypeWithTheRightKeyAndToken) {
  keyed_mutex<> b;
  keyed_mutex<int> ints;
  std::uint64_t first = 0;
  {
    keyed_mutex<> a;
    std::vector<key_guard> full;  // every shard over its cap: a new key's entry cannot stay idle
    for (int k = 0; k < 20000; ++k) full.push_back(a.lock("fill:" + std::to_string(k)));
    first = a.lock("player:1").token();  // unlocked: its entry is now this thread's
    full.clear();
    key_guard g = b.lock("player:2");  // a's old entry, now b's "player:2"
    EXPECT_EQ(a.size(), 0u);
    EXPECT_EQ(b.size(), 1u);
    EXPECT_FALSE(free_elsewhere(b, std::string("player:2")));
    EXPECT_TRUE(free_elsewhere(b, std::string("player:1")));
  }  // a is gone; b's entry (and this thread's cache) must not refer to it
  EXPECT_GT(b.lock("player:1").token(), 0u);
  key_guard i = ints.lock(7);  // another key type: a fresh entry, never the cached string one
  EXPECT_FALSE(free_elsewhere(ints, 7));
  i.unlock();                                 // the int entry replaces the string one in the cache
  EXPECT_GT(b.lock("player:2").token(), 0u);  // a string entry again: allocated
  key_guard again = b.lock("player:2");
  const std::uint64_t t = again.token();
  again.unlock();
  EXPECT_GT(b.lock("player:2").token(), t);  // tokens still rise across recycled entries
  EXPECT_GT(first, 0u);
  std::thread([&] {
    for (int k = 0; k < 3; ++k) EXPECT_TRUE(b.lock("t:" + std::to_string(k)).owns_lock());
  }).join();  // the thread's cached entry is freed at its exit (LeakSanitizer checks)
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(ints.size(), 0u);
}

TEST_F(KeyedMutex, IntKeysWithACollidingHashAreStillIndependentLocks) {
  struct one_hash {
    std::size_t operator()(int) const noexcept { return 7; }  // every key collides
  };
  keyed_mutex<int, one_hash> m;
  constexpr int n = 1000;
  std::vector<key_guard> held;
  for (int i = 0; i < n; ++i) held.push_back(m.lock(i));
  EXPECT_EQ(m.size(), static_cast<std::size_t>(n));
  for (int i = 0; i < n; i += 3) held[static_cast<std::size_t>(i)].unlock();  // erase inside the probe run
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(free_elsewhere(m, i), i % 3 == 0) << "key " << i;  // still found (or free) after the erasures
  }
  EXPECT_TRUE(free_elsewhere(m, n + 1));
  held.clear();
  EXPECT_EQ(m.size(), 0u);
  handoff::multi_guard all = m.lock_all({3, 1, 2, 1});
  EXPECT_EQ(all.size(), 3u);
}

struct player_key {
  std::string name;  // compared case-insensitively
  int realm;
};
struct player_hash {
  std::size_t operator()(const player_key& k) const noexcept {
    std::string lower = k.name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return std::hash<std::string>()(lower) * 31 + static_cast<std::size_t>(k.realm);
  }
};
struct player_eq {
  bool operator()(const player_key& a, const player_key& b) const noexcept {
    if (a.realm != b.realm || a.name.size() != b.name.size()) return false;
    for (std::size_t i = 0; i < a.name.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(a.name[i])) != std::tolower(static_cast<unsigned char>(b.name[i])))
        return false;
    }
    return true;
  }
};

TEST_F(KeyedMutex, StructKeysUseTheGivenHashAndEquality) {
  keyed_mutex<player_key, player_hash, player_eq> m;
  key_guard g = m.lock({"Alice", 1});
  EXPECT_FALSE(free_elsewhere(m, player_key{"ALICE", 1}));  // equal under player_eq
  EXPECT_TRUE(free_elsewhere(m, player_key{"Alice", 2}));
  EXPECT_TRUE(free_elsewhere(m, player_key{"Bob", 1}));
  EXPECT_EQ(m.size(), 1u);
  async_outcome out;
  await_lock([&m] { return m.async_lock(player_key{"alice", 1}); }, &out, false);
  EXPECT_FALSE(out.done());  // the same key: waits
  g.unlock();
  EXPECT_TRUE(out.done());
  EXPECT_TRUE(out.owned);
  EXPECT_EQ(m.size(), 0u);
}

// --- destruction ------------------------------------------------------------------------

class KeyedMutexDeathTest : public KeyedMutex {};

TEST_F(KeyedMutexDeathTest, DestroyingTheMutexWhileAGuardIsAliveTerminatesWithAMessage) {
  // "threadsafe" re-executes the binary for the child instead of forking this
  // multi-threaded process (the test's timeout thread), which is what the sanitizers
  // support.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto m = std::make_unique<keyed_mutex<>>();
        key_guard g = m->lock("k");
        m.reset();      // must terminate (std::terminate: abort) here
        std::_Exit(0);  // not reached; a clean exit fails the test
      },
      testing::KilledBySignal(SIGABRT), "keyed_mutex destroyed while 1 key\\(s\\) still have a guard or a waiter");
}

// Regression: the thread's cached entry kept the capacity of the last key it held, so a
// 64 MB key stayed allocated after its unlock, and after its mutex was destroyed.
TEST_F(KeyedMutex, AHugeKeysMemoryGoesBackAtItsUnlockAndIsNotKeptForTheThread) {
  constexpr std::size_t huge = std::size_t{64} << 20;
  std::thread([&] {  // a fresh thread: its cache starts empty
    const std::size_t before = heap_in_use();
    {
      keyed_mutex<> m;
      {
        const std::string key(huge, 'k');
        if (heap_in_use() < before + huge) {
          GTEST_SKIP() << "mallinfo2 does not see this allocator (sanitizer build)";
        }
        EXPECT_TRUE(m.lock(key).owns_lock());  // unlocked at once
      }
      EXPECT_EQ(m.size(), 0u);
      EXPECT_LT(heap_in_use(), before + huge / 2) << "the unlocked key's memory was kept";
      EXPECT_TRUE(m.lock("small").owns_lock());  // a small key is still recycled
    }
    EXPECT_LT(heap_in_use(), before + huge / 2);
  })
      .join();
}

// A key that is large in place (no heap to measure) is not kept either, idle in the table
// or as the thread's cached entry: either would hold its whole size. A small one (too big
// to be thin: more than 23 bytes) is.
template <std::size_t N>
bool kept_after_one_lock() {
  using key = std::array<char, N>;
  struct hash {
    std::size_t operator()(const key& k) const noexcept { return static_cast<std::size_t>(k[0]); }
  };
  bool kept = false;
  std::thread([&] {  // a fresh thread: its cache starts empty
    auto m = std::make_unique<keyed_mutex<key, hash>>();
    key k{};
    k[0] = 'k';
    { key_guard g = m->lock(k); }
    kept =
        handoff::detail::cached_entry.entry != nullptr || handoff::detail::lock_table_access::table(*m).entries() != 0;
  })
      .join();
  return kept;
}

TEST_F(KeyedMutex, AKeyLargeInPlaceIsNotKeptAndASmallOneIs) {
  EXPECT_TRUE(kept_after_one_lock<32>());
  EXPECT_FALSE(kept_after_one_lock<4096>());
}

}  // namespace
