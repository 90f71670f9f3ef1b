// handoff::keyed_mutex<Key>, misuse (self-deadlock detection, moved guards, throwing keys), with_lock and lock_all: one
// test per point of the contract in keyed_mutex.hpp.
#include <handoff/keyed_mutex.hpp>

#include <gtest/gtest.h>

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

#include "../support/keyed_mutex_support.hpp"

namespace {

using namespace handoff::test;  // keyed_mutex_support.hpp: helpers, chrono literals, the names used

// --- misuse -----------------------------------------------------------------------------

TEST_F(KeyedMutex, RelockingAKeyThisThreadHoldsThroughABlockingCallThrowsResourceDeadlockWouldOccur) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  const std::uint64_t token = g.token();
  EXPECT_EQ(error_of([&] { (void)m.lock("k"); }), would_deadlock);
  EXPECT_EQ(error_of([&] { (void)m.lock("k", lease{1s}); }), would_deadlock);
  EXPECT_EQ(error_of([&] { (void)m.try_lock_for("k", 1s); }), would_deadlock);
  EXPECT_EQ(error_of([&] { (void)m.try_lock_until("k", std::chrono::system_clock::now() + 1s); }), would_deadlock);
  // Nothing changed: still held by g, and nothing left queued.
  EXPECT_TRUE(g.owns_lock());
  EXPECT_FALSE(free_elsewhere(m, std::string("k")));
  g.unlock();
  EXPECT_EQ(m.size(), 0u);
  key_guard again = m.lock("k");
  EXPECT_GT(again.token(), token);
}

TEST_F(KeyedMutex, TryLockOnAKeyThisThreadHoldsSimplyFails) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  key_guard second;
  EXPECT_NO_THROW(second = m.try_lock("k"));
  EXPECT_FALSE(second.owns_lock());
  EXPECT_TRUE(g.owns_lock());
}

TEST_F(KeyedMutex, AGuardMovedToAnotherThreadAndUnlockedThereLetsTheFirstThreadLockAgain) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  std::thread([g = std::move(g)]() mutable { g.unlock(); }).join();
  key_guard again;
  EXPECT_NO_THROW(again = m.try_lock_for("k", 5s));
  EXPECT_TRUE(again.owns_lock());
}

// Regression: the deadlock check used to compare the key's `holder_thread` (the thread
// that acquired it) with the caller, so a thread that had handed its guard to another
// thread, which still held it, was refused as if it held the key itself (found by this
// test; fixed by "moving a guard turns self-deadlock detection off").
TEST_F(KeyedMutex, AThreadThatHandedItsGuardToAnotherThreadWaitsForTheKeyInsteadOfThrowing) {
  keyed_mutex<> m;
  key_guard g = m.lock("k");
  std::latch handed(1);
  std::thread keeper([&, g = std::move(g)]() mutable {
    handed.count_down();
    std::this_thread::sleep_for(100ms);  // holds the key a while, then unlocks on this thread
    g.unlock();
  });
  handed.wait();
  key_guard again;
  EXPECT_EQ(error_of([&] { again = m.try_lock_for("k", 10s); }), std::error_code());
  EXPECT_TRUE(again.owns_lock());
  keeper.join();
}

// --- with_lock and lock_all -------------------------------------------------------------

TEST_F(KeyedMutex, WithLockReturnsTheResultOfFAndUnlocks) {
  keyed_mutex<> m;
  bool held_inside = false;
  const int r = m.with_lock("k", [&] {
    held_inside = !free_elsewhere(m, std::string("k"));
    return 42;
  });
  EXPECT_EQ(r, 42);
  EXPECT_TRUE(held_inside);
  EXPECT_EQ(m.size(), 0u);
  std::string s = m.with_lock("k", [] { return std::string("moved out"); });
  EXPECT_EQ(s, "moved out");
}

TEST_F(KeyedMutex, WithLockPropagatesTheExceptionOfFAndUnlocks) {
  keyed_mutex<> m;
  EXPECT_THROW(m.with_lock("k", []() -> int { throw std::runtime_error("inside"); }), std::runtime_error);
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.try_lock("k").owns_lock());
}

TEST_F(KeyedMutex, LockAllSortsAndDeduplicatesTheKeysAndHoldsThemAll) {
  keyed_mutex<> m;
  handoff::multi_guard all = m.lock_all({"b", "a", "b", "c", "a"});
  EXPECT_EQ(all.size(), 3u);
  EXPECT_TRUE(all.owns_lock());
  for (const char* k : {"a", "b", "c"}) EXPECT_FALSE(free_elsewhere(m, std::string(k))) << k;
  EXPECT_EQ(m.size(), 3u);
  all.unlock();
  EXPECT_FALSE(all.owns_lock());
  EXPECT_EQ(m.size(), 0u);
  all.unlock();  // twice: no-op
  std::vector<std::string> keys = {"y", "x", "y"};
  handoff::multi_guard from_range = m.lock_all(keys);
  EXPECT_EQ(from_range.size(), 2u);
  EXPECT_TRUE(from_range.owns_lock());
}

TEST_F(KeyedMutex, LockAllTakesTheKeysInSortedOrder) {
  keyed_mutex<> m;
  key_guard a = m.lock("a");
  std::atomic<bool> got_all{false};
  blocking_call all([&] {
    handoff::multi_guard g = m.lock_all({"c", "b", "a"});
    got_all.store(g.owns_lock());
  });
  ASSERT_TRUE(all.wait_until_blocked());
  // Blocked on "a", the smallest: "b" and "c" must not have been taken before it.
  EXPECT_TRUE(free_elsewhere(m, std::string("b")));
  EXPECT_TRUE(free_elsewhere(m, std::string("c")));
  a.unlock();
  all.join();
  EXPECT_TRUE(got_all.load());
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LockAllReleasesTheKeysAlreadyTakenWhenALaterLockThrows) {
  keyed_mutex<> m;
  key_guard b = m.lock("b");
  EXPECT_EQ(error_of([&] { (void)m.lock_all({"a", "b", "c"}); }), would_deadlock);
  EXPECT_TRUE(free_elsewhere(m, std::string("a")));
  EXPECT_TRUE(free_elsewhere(m, std::string("c")));
  b.unlock();
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, LockAllInOppositeOrdersOnOverlappingKeysNeverDeadlocks) {
  keyed_mutex<> m;
  std::atomic<int> overlaps{0};
  std::atomic<int> inside{0};
  std::latch start(2);
  run_threads(2, [&](int t) {
    start.arrive_and_wait();
    for (int i = 0; i < 3000; ++i) {
      handoff::multi_guard g = t == 0 ? m.lock_all({"x", "y", "z"}) : m.lock_all({"z", "y", "w", "x"});
      if (inside.fetch_add(1) != 0) overlaps.fetch_add(1);
      handoff::test::burn(100);
      if (i % 16 == 0) std::this_thread::yield();
      inside.fetch_sub(1);
    }
  });
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, MultiGuardMoveAssignmentReleasesTheKeysItHeld) {
  keyed_mutex<> m;
  handoff::multi_guard first = m.lock_all({"a", "b"});
  handoff::multi_guard second = m.lock_all({"c"});
  first = std::move(second);
  EXPECT_TRUE(free_elsewhere(m, std::string("a")));
  EXPECT_TRUE(free_elsewhere(m, std::string("b")));
  EXPECT_FALSE(free_elsewhere(m, std::string("c")));
  EXPECT_TRUE(first.owns_lock());
  handoff::multi_guard empty;
  EXPECT_FALSE(empty.owns_lock());
  EXPECT_EQ(empty.size(), 0u);
}

// --- moving multi-key guards ------------------------------------------------------------

// Regression: moving a multi_guard moved its vector, not each guard, so the keys stayed
// recorded as held by the thread that locked them, which then got a false
// resource_deadlock_would_occur from its next lock() of one of them.
TEST_F(KeyedMutex, AMultiGuardMovedToAnotherThreadLetsTheFirstThreadWaitForItsKeys) {
  keyed_mutex<> m;
  handoff::multi_guard handed;
  std::atomic<bool> moved{false};
  std::error_code error;
  bool got = false;
  blocking_call first([&] {
    handoff::multi_guard all = m.lock_all({"b", "a"});
    handed = std::move(all);  // to the main thread, which unlocks it there
    moved.store(true, std::memory_order_release);
    error = error_of([&] { got = m.lock("a").owns_lock(); });  // must wait, not throw
  });
  ASSERT_TRUE(eventually([&] { return moved.load(std::memory_order_acquire); }));
  ASSERT_TRUE(first.wait_until_blocked());
  EXPECT_TRUE(handed.owns_lock());
  handed.unlock();
  first.join();
  EXPECT_EQ(error, std::error_code());
  EXPECT_TRUE(got);
  EXPECT_EQ(m.size(), 0u);
}

TEST_F(KeyedMutex, AMultiGuardThatWasNotMovedStillDetectsSelfDeadlock) {
  keyed_mutex<> m;
  handoff::multi_guard all = m.lock_all({"a", "b"});
  EXPECT_EQ(error_of([&] { (void)m.lock("a"); }), would_deadlock);
  EXPECT_EQ(error_of([&] { (void)m.try_lock_for("b", 1s); }), would_deadlock);
  EXPECT_TRUE(all.owns_lock());
  all.unlock();
  EXPECT_TRUE(m.lock("a").owns_lock());
}

// --- keys whose hash, equality or copy throws --------------------------------------------

// Every operation of this key type can be made to throw. Its hash is constant, so every
// key collides and a lookup of one key compares it with the others.
struct fragile_key {
  static inline std::atomic<bool> throw_on_copy{false};
  static inline std::atomic<bool> throw_on_hash{false};
  static inline std::atomic<bool> throw_on_eq{false};
  int id;
  fragile_key(int i) : id(i) {}  // NOLINT(google-explicit-constructor): lock(1) reads well
  fragile_key(const fragile_key& o) : id(o.id) {
    if (throw_on_copy.load()) throw std::runtime_error("copy");
  }
  fragile_key& operator=(const fragile_key& o) {
    if (throw_on_copy.load()) throw std::runtime_error("copy");
    id = o.id;
    return *this;
  }
  ~fragile_key() = default;
  auto operator<=>(const fragile_key&) const = default;
};
struct fragile_hash {
  std::size_t operator()(const fragile_key&) const {
    if (fragile_key::throw_on_hash.load()) throw std::runtime_error("hash");
    return 42;
  }
};
struct fragile_eq {
  bool operator()(const fragile_key& a, const fragile_key& b) const {
    if (fragile_key::throw_on_eq.load()) throw std::runtime_error("eq");
    return a.id == b.id;
  }
};
using fragile_mutex = keyed_mutex<fragile_key, fragile_hash, fragile_eq>;

// Arms one way of throwing for the scope.
class throwing {
 public:
  explicit throwing(std::atomic<bool>& flag) : flag_(flag) { flag_.store(true); }
  throwing(const throwing&) = delete;
  throwing& operator=(const throwing&) = delete;
  ~throwing() { flag_.store(false); }

 private:
  std::atomic<bool>& flag_;
};

// co_awaits m.async_lock(*k) and records whether that threw std::runtime_error.
handoff::test::fire_and_forget async_lock_throws(fragile_mutex& m, const fragile_key* k, bool* threw) {
  try {
    key_guard g = co_await m.async_lock(*k);
  } catch (const std::runtime_error&) {
    *threw = true;
  }
}

// Every locking call, with key k: each must throw std::runtime_error and leave nothing.
void expect_every_call_throws(fragile_mutex& m, const fragile_key& k) {
  bool threw = false;
  async_lock_throws(m, &k, &threw);
  EXPECT_TRUE(threw);
  EXPECT_THROW((void)m.lock(k), std::runtime_error);
  EXPECT_THROW((void)m.lock(k, lease{1s}), std::runtime_error);
  EXPECT_THROW((void)m.try_lock(k), std::runtime_error);
  EXPECT_THROW((void)m.try_lock_for(k, 10ms), std::runtime_error);
  bool called = false;
  EXPECT_THROW(m.lock_async(k, [&](key_guard) { called = true; }), std::runtime_error);
  EXPECT_FALSE(called);
}

TEST_F(KeyedMutex, AThrowingHashPropagatesWithNothingHeldAndNoStateLeft) {
  fragile_mutex m;
  {
    throwing t(fragile_key::throw_on_hash);
    expect_every_call_throws(m, 1);
  }
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.lock(1).owns_lock());  // the shard is not left locked
  EXPECT_EQ(m.size(), 0u);
}

// Regression: the lookup that calls Eq was noexcept, so a throwing operator== terminated
// the program.
TEST_F(KeyedMutex, AThrowingEqualityPropagatesWithNothingHeldAndNoStateLeft) {
  fragile_mutex m;
  key_guard held = m.lock(1);
  {
    throwing t(fragile_key::throw_on_eq);
    expect_every_call_throws(m, 1);  // the held key
    expect_every_call_throws(m, 2);  // a new key that collides with it
  }
  EXPECT_EQ(m.size(), 1u);                         // only the held key
  EXPECT_TRUE(held.owns_lock());                   // still held, nothing queued behind it
  EXPECT_TRUE(free_elsewhere(m, fragile_key(2)));  // the shard is not left locked
  held.unlock();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(free_elsewhere(m, fragile_key(1)));
}

TEST_F(KeyedMutex, AThrowingKeyCopyPropagatesWithNothingHeldAndNoStateLeft) {
  fragile_mutex m;
  (void)m.lock(7);  // this thread now keeps an idle entry: the first copy below reuses it
  {
    throwing t(fragile_key::throw_on_copy);
    expect_every_call_throws(m, 1);  // into the cached entry (copy assignment)
  }
  EXPECT_EQ(m.size(), 0u);
  key_guard held = m.lock(2);  // takes the cached entry: the next copy is a new entry's
  {
    throwing t(fragile_key::throw_on_copy);
    expect_every_call_throws(m, 3);  // copy construction
  }
  EXPECT_EQ(m.size(), 1u);
  held.unlock();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_TRUE(m.lock(1).owns_lock());
}

}  // namespace
