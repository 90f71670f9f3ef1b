// handoff::detail::allocate_node / free_node: the slab pool behind message and waiter
// nodes. Nodes never overlap, nodes freed on other threads (or after their carving thread
// exited) come back, a live node is never handed out again while its slab is reused around
// it, and a drained burst's memory goes back to the allocator.
#include "handoff/detail/node_pool.hpp"

#include <handoff/actor.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using handoff::detail::allocate_node;
using handoff::detail::free_node;
using handoff::test::heap_in_use;

struct block {
  unsigned char* p;
  std::size_t size;
};

TEST(NodePool, LiveNodesNeverOverlapAndKeepTheirContents) {
  // Every class and an oversized node, interleaved, with some freed in between so that
  // slabs are retired and reused while others are still out.
  const std::size_t sizes[] = {8, 24, 32, 40, 64, 100, 128, 200, 256, 300, 512, 513, 2000};
  std::vector<block> live;
  for (int round = 0; round < 20000; ++round) {
    const std::size_t size = sizes[static_cast<std::size_t>(round) % std::size(sizes)];
    auto* p = static_cast<unsigned char*>(allocate_node(size));
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t), 0U);
    std::memset(p, round & 0xff, size);
    live.push_back({p, size});
    if (round % 3 == 0) {  // free an older one: its slab keeps counting the rest
      const std::size_t victim = static_cast<std::size_t>(round) / 2 % live.size();
      free_node(live[victim].p, live[victim].size);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(victim));
    }
  }
  std::vector<block> sorted = live;
  std::sort(sorted.begin(), sorted.end(), [](const block& a, const block& b) { return a.p < b.p; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    ASSERT_GE(sorted[i].p, sorted[i - 1].p + sorted[i - 1].size) << "two live nodes overlap";
  }
  for (const block& b : live) {
    for (std::size_t i = 0; i < b.size; ++i) ASSERT_EQ(b.p[i], b.p[0]) << "a live node was overwritten";
    free_node(b.p, b.size);
  }
}

TEST(NodePool, NodesFreedByAnotherThreadOrAfterTheirThreadExitedComeBack) {
  // A sender thread carves nodes and exits with them still out; this thread frees them,
  // then another thread frees this thread's nodes. Under TSan this checks that the slab
  // counts order each free before the slab's reuse.
  for (int round = 0; round < 50; ++round) {
    std::vector<void*> nodes(3000);
    std::thread sender([&] {
      for (void*& n : nodes) {
        n = allocate_node(24);
        std::memset(n, 0xab, 24);
      }
    });
    sender.join();
    for (void* n : nodes) free_node(n, 24);
    for (void*& n : nodes) {
      n = allocate_node(48);
      std::memset(n, 0xcd, 48);
    }
    std::thread drainer([&] {
      for (void* n : nodes) free_node(n, 48);
    });
    drainer.join();
  }
}

TEST(NodePool, ThreadExitHooksThatAllocateAfterThePoolsOwnHookStillGetNodes) {
  // A thread_local constructed before the thread's first node is destroyed after the pool
  // returned that thread's slabs: its destructor's nodes come from the shared orphan
  // lanes and can be freed anywhere.
  static std::vector<void*> from_exiting_thread;
  struct late_user {
    late_user() = default;
    late_user(const late_user&) = delete;
    late_user& operator=(const late_user&) = delete;
    ~late_user() {
      for (int i = 0; i < 1000; ++i) {
        void* n = allocate_node(64);
        std::memset(n, 0x5a, 64);
        from_exiting_thread.push_back(n);
      }
      void* own = allocate_node(32);
      free_node(own, 32);
    }
  };
  std::thread t([] {
    static thread_local late_user user;  // constructed first: destroyed last
    (void)&user;
    free_node(allocate_node(32), 32);  // the thread's first node: arms the pool's exit hook
  });
  t.join();
  ASSERT_EQ(from_exiting_thread.size(), 1000U);
  for (void* n : from_exiting_thread) free_node(n, 64);
  from_exiting_thread.clear();
}

TEST(NodePool, ADrainedBurstGivesItsMemoryBack) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "the node pool is bypassed under AddressSanitizer";
#endif
  // A million queued 24-byte messages (a mailbox that a fast producer filled), freed in
  // order by another thread: the pool may keep a few MiB of free slabs, not the burst.
  constexpr std::size_t burst = 1'000'000;
  std::vector<void*> nodes(burst);
  const std::size_t before = heap_in_use();
  for (void*& n : nodes) n = allocate_node(24);
  const std::size_t peak = heap_in_use();
  if (peak < before + burst * 24) GTEST_SKIP() << "mallinfo2 does not see this allocator (sanitizer build)";
  std::thread drainer([&] {
    for (void* n : nodes) free_node(n, 24);
  });
  drainer.join();
  const std::size_t after = heap_in_use();
  // Slab memory per message: 32 bytes and its share of a 64-byte slab header.
  EXPECT_LT(peak - before, burst * 34);
  EXPECT_LT(after, before + (std::size_t{8} << 20)) << "peak " << (peak - before) << " B over the start";
}

// Nodes of mixed lifetimes: every 50th is kept (a message queued for long), the others are
// freed a round later by another thread. The slabs holding kept nodes are carved again
// around them, so a new node must never land on a kept one.
TEST(NodePool, ANodeStillLiveIsNeverHandedOutAgainWhenItsSlabIsCarvedAgain) {
  const handoff::test::test_timeout limit{std::chrono::seconds(60)};
  std::unordered_set<void*> kept;
  std::vector<std::pair<unsigned char*, unsigned char>> kept_list;
  std::vector<void*> last_round;
  for (int round = 0; round < 300; ++round) {
    std::vector<void*> shorts;
    for (int i = 0; i < 1000; ++i) {
      auto* p = static_cast<unsigned char*>(allocate_node(32));
      ASSERT_FALSE(kept.contains(p)) << "round " << round << ": a live node was handed out again";
      const auto tag = static_cast<unsigned char>(i * 7 + round);
      std::memset(p, tag, 32);
      if (i % 50 == 0) {
        kept.insert(p);
        kept_list.emplace_back(p, tag);
      } else {
        shorts.push_back(p);
      }
    }
    std::thread drainer([nodes = std::move(last_round)] {
      for (void* n : nodes) free_node(n, 32);
    });
    drainer.join();
    last_round = std::move(shorts);
  }
  for (void* n : last_round) free_node(n, 32);
  for (const auto& [p, tag] : kept_list) {
    for (int i = 0; i < 32; ++i) ASSERT_EQ(p[i], tag) << "a live node was overwritten";
    free_node(p, 32);
  }
}

// The same while the frees run on another thread at the same time as the carving: a
// queued node must keep its contents until it is freed, and a kept one until the end.
TEST(NodePool, NodesFreedOnAnotherThreadWhileTheirSlabsAreCarvedAgainAreNeverHandedOutLive) {
  const handoff::test::test_timeout limit{std::chrono::seconds(60)};
  std::mutex mu;
  std::deque<unsigned char*> queued;  // guarded by mu
  bool done = false;                  // guarded by mu
  std::atomic<bool> overwritten{false};
  std::thread freer([&] {
    for (;;) {
      unsigned char* p = nullptr;
      {
        const std::lock_guard lock(mu);
        if (!queued.empty()) {
          p = queued.front();
          queued.pop_front();
        } else if (done) {
          return;
        }
      }
      if (p == nullptr) {
        std::this_thread::yield();
        continue;
      }
      if (std::memcmp(p, p + 16, 16) != 0 || p[0] != p[31]) overwritten = true;
      free_node(p, 32);
    }
  });
  std::unordered_set<void*> kept;
  std::vector<std::pair<unsigned char*, unsigned char>> kept_list;
  bool reissued = false;
  for (int i = 0; i < 200000 && !reissued; ++i) {
    auto* p = static_cast<unsigned char*>(allocate_node(32));
    reissued = kept.contains(p);
    const auto tag = static_cast<unsigned char>(i);
    std::memset(p, tag, 32);
    if (i % 50 == 0) {
      kept.insert(p);
      kept_list.emplace_back(p, tag);
    } else {
      std::unique_lock lock(mu);
      queued.push_back(p);
      while (queued.size() > 2000) {  // keep the freer close, so that its slabs come back here
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
    }
  }
  {
    const std::lock_guard lock(mu);
    done = true;
  }
  freer.join();
  EXPECT_FALSE(reissued) << "a kept node was handed out again";
  EXPECT_FALSE(overwritten.load()) << "a queued node was overwritten before its free";
  for (const auto& [p, tag] : kept_list) {
    EXPECT_TRUE(p[0] == tag && p[31] == tag) << "a kept node was overwritten";
    free_node(p, 32);
  }
}

TEST(NodePool, ALongQueuedNodeKeepsAtMostOneMoreNodesWorthOfMemoryAlive) {
  if (!handoff::detail::node_pool_stats().pooled) GTEST_SKIP() << "the pool is bypassed in this build";
  const handoff::test::test_timeout limit{std::chrono::seconds(60)};
  // 5,000 long-queued nodes among 2.5 million short-lived ones: one in each slab's worth.
  // A slab reused only once all its nodes came back would keep 16 KiB for each.
  constexpr std::size_t longs = 5000;
  constexpr std::size_t per_long = 500;
  std::vector<void*> kept;
  kept.reserve(longs);
  std::vector<void*> shorts(per_long);
  const std::size_t before = heap_in_use();
  {
    const auto probe = std::make_unique<char[]>(std::size_t{1} << 20);
    if (heap_in_use() < before + (std::size_t{1} << 20)) GTEST_SKIP() << "mallinfo2 does not see this allocator";
  }
  for (std::size_t r = 0; r < longs; ++r) {
    for (void*& n : shorts) n = allocate_node(32);
    kept.push_back(allocate_node(32));
    for (void* n : shorts) free_node(n, 32);
  }
  const std::size_t after = heap_in_use();
  // Each kept node: its 32 bytes and at most as much again, plus the pool's free slabs
  // (4 MiB shared, a few per thread).
  const std::size_t growth = after > before ? after - before : 0;  // free slabs may go back meanwhile
  EXPECT_LE(growth, longs * 64 + (std::size_t{4} << 20) + (std::size_t{256} << 10))
      << growth / longs << " bytes per long-queued node";
  for (void* n : kept) free_node(n, 32);
}

// The pool's one process-wide line is its list of free slabs. With senders and owners on
// different threads it is reached at most once per 256 messages in the steady state
// (node_pool_stats() counts the list's operations).
std::uint64_t list_operations() { return handoff::detail::node_pool_stats().list_operations; }

TEST(NodePoolSharedLine, MessagesFromOneThreadDrainedByABusyOwnerOnAnotherReachTheSharedListOncePer256AtMost) {
  if (!handoff::detail::node_pool_stats().pooled) GTEST_SKIP() << "the pool is bypassed in this build";
  const handoff::test::test_timeout limit{std::chrono::seconds(60)};
  handoff::actor<long> a;
  constexpr int rounds = 12;
  constexpr int per_round = 8192;  // 16 slabs of small nodes
  std::atomic<int> round{-1};
  std::atomic<bool> busy{false}, sent{false};
  std::thread owner([&] {
    for (int r = 0; r < rounds; ++r) {
      while (round.load() != r) std::this_thread::yield();
      // Owns the idle actor and stays busy until the sender is done, then drains the
      // messages here: nodes carved on the sender's thread, freed on this one.
      a.post([&](long&) {
        busy = true;
        while (!sent.load()) std::this_thread::yield();
      });
      busy = false;
    }
  });
  std::uint64_t before = 0;
  for (int r = 0; r < rounds; ++r) {
    if (r == 2) before = list_operations();  // the first rounds fill the threads' spares
    sent = false;
    round = r;
    while (!busy.load()) std::this_thread::yield();
    for (int i = 0; i < per_round; ++i) a.post([](long& n) { ++n; });
    sent = true;
    while (busy.load()) std::this_thread::yield();
  }
  owner.join();
  const std::uint64_t messages = std::uint64_t{rounds - 2} * per_round;
  const std::uint64_t used = list_operations() - before;
  // One per 256 is the bound; the batches make it one per about 1,000 (4 slabs of ~510 per
  // lock on each side), so the test holds it to one per 512: slabs moved one at a time
  // (one per 255) fail it.
  EXPECT_LE(used * 512, messages) << used << " operations on the shared list for " << messages << " messages";
  EXPECT_EQ(a.ask([](long& n) { return n; }).get(), long{rounds} * per_round);
}

TEST(NodePoolSharedLine, RequestsAndResponsesBetweenTwoThreadsReachTheSharedListOncePer256AtMost) {
  if (!handoff::detail::node_pool_stats().pooled) GTEST_SKIP() << "the pool is bypassed in this build";
  const handoff::test::test_timeout limit{std::chrono::seconds(60)};
  // Each side carves its messages and frees the other side's, as a request queued behind
  // a server's owner and its response queued behind the client's do.
  constexpr int warm_up = 8192;
  constexpr int exchanges = 65536;
  std::atomic<int> turn{0};
  std::atomic<void*> request{nullptr}, response{nullptr};
  std::uint64_t before = 0;
  std::thread server([&] {
    for (int i = 0; i < warm_up + exchanges; ++i) {
      while (turn.load(std::memory_order_acquire) != 1) std::this_thread::yield();
      free_node(request.load(), 32);
      response = allocate_node(32);
      turn.store(2, std::memory_order_release);
    }
  });
  for (int i = 0; i < warm_up + exchanges; ++i) {
    if (i == warm_up) before = list_operations();
    request = allocate_node(32);
    turn.store(1, std::memory_order_release);
    while (turn.load(std::memory_order_acquire) != 2) std::this_thread::yield();
    free_node(response.load(), 32);
  }
  server.join();
  const std::uint64_t used = list_operations() - before;
  EXPECT_LE(used * 256, std::uint64_t{2} * exchanges)
      << used << " operations on the shared list for " << 2 * exchanges << " messages";
}

}  // namespace
