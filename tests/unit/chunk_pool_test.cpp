// The chunk pool (detail/slot_chunk.hpp): the per-thread caches in front of the shared
// stack. With a sender and an owner on different threads, the process-wide lines (the
// stack's top and the arena's carving) are touched at most once per 256 messages, whether
// each thread both takes and frees chunks (request and response) or one only takes and the
// other only frees (a sender behind a busy owner); a thread that exits hands its cache back.
#include <handoff/actor.hpp>
#include <handoff/detail/ownership.hpp>
#include <handoff/detail/slot_chunk.hpp>

#include <gtest/gtest.h>

#include "test_timeout.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using handoff::detail::chunk_batch_size;
using handoff::detail::chunk_pool_stats;
using handoff::detail::lockfree_ownership;
using handoff::detail::mailbox_node;
using handoff::detail::slots_per_chunk;
using handoff::test::test_timeout;
using admission = lockfree_ownership::admission;

// Operations on process-wide lines so far: the shared stack's pops and pushes, carvings.
std::uint64_t shared_operations() {
  const auto s = chunk_pool_stats();
  return s.stack_pops + s.stack_pushes + s.carves;
}

// Two threads that take turns, each waiting for the other's step (a baton).
class baton {
 public:
  void wait_for(int turn) const {
    while (turn_.load(std::memory_order_acquire) != turn) std::this_thread::yield();
  }
  void pass_to(int turn) { turn_.store(turn, std::memory_order_release); }

 private:
  std::atomic<int> turn_{0};
};

TEST(ChunkPool, RequestsAndResponsesQueuedBehindOwnersOnTwoThreadsTouchNoSharedLineInTheSteadyState) {
  const test_timeout limit{60s};
  // The server's mailbox, owned by the server thread while a request arrives, and the
  // client's, owned by the client thread while the response arrives: each message is the
  // only one queued in its owner's turn, so it takes a chunk on its sender's thread and
  // the owner frees (detaches) it on the other one.
  lockfree_ownership server, client;
  mailbox_node request, response;
  constexpr int warm_up = 4 * static_cast<int>(chunk_batch_size);
  constexpr int exchanges = 4096;
  std::uint64_t before = 0;
  baton b;
  std::thread server_thread([&] {
    for (int i = 0; i < warm_up + exchanges; ++i) {
      b.wait_for(1);
      ASSERT_EQ(server.pop(), &request);
      ASSERT_TRUE(server.try_release(2));        // detaches the request's chunk: freed here
      const admission a = client.try_acquire();  // the client is busy: queued
      ASSERT_EQ(a, admission::queued);
      client.enqueue(a, &response);  // a chunk from this thread's cache
      b.pass_to(2);
    }
  });
  for (int i = 0; i < warm_up + exchanges; ++i) {
    if (i == warm_up) before = shared_operations();
    ASSERT_EQ(server.try_acquire(), admission::owner);  // the server thread's turn, done here for it
    ASSERT_EQ(client.try_acquire(), admission::owner);  // the client is busy
    const admission a = server.try_acquire();           // the request: queued behind the server
    ASSERT_EQ(a, admission::queued);
    server.enqueue(a, &request);  // a chunk from this thread's cache
    b.pass_to(1);
    b.wait_for(2);
    ASSERT_EQ(client.pop(), &response);
    ASSERT_TRUE(client.try_release(2));  // frees the response's chunk here
  }
  server_thread.join();
  const std::uint64_t used = shared_operations() - before;
  EXPECT_LE(used * 256, std::uint64_t{2} * exchanges)
      << used << " operations on the shared stack for " << 2 * exchanges << " messages";
}

TEST(ChunkPool, MessagesFromOneThreadDrainedByABusyOwnerOnAnotherTouchTheSharedStackOncePer256AtMost) {
  const test_timeout limit{60s};
  handoff::actor<long> a;
  constexpr int rounds = 10;
  constexpr int per_round = 4 * static_cast<int>(chunk_batch_size * slots_per_chunk);
  std::atomic<int> round{-1};
  std::atomic<bool> busy{false}, sent{false};
  std::thread owner([&] {
    for (int r = 0; r < rounds; ++r) {
      while (round.load() != r) std::this_thread::yield();
      // Owns the idle actor, stays busy until the sender is done, then drains its messages
      // and frees their chunks on this thread.
      a.post([&](long&) {
        busy = true;
        while (!sent.load()) std::this_thread::yield();
      });
      busy = false;
    }
  });
  std::uint64_t before = 0;
  for (int r = 0; r < rounds; ++r) {
    if (r == 2) before = shared_operations();  // the first rounds fill the caches
    sent = false;
    round = r;
    while (!busy.load()) std::this_thread::yield();
    for (int i = 0; i < per_round; ++i) a.post([](long& n) { ++n; });
    sent = true;
    while (busy.load()) std::this_thread::yield();
  }
  owner.join();
  const std::uint64_t messages = std::uint64_t{rounds - 2} * per_round;
  const std::uint64_t used = shared_operations() - before;
  EXPECT_LE(used * 256, messages) << used << " operations on the shared stack for " << messages << " messages";
  EXPECT_EQ(a.ask([](long& n) { return n; }).get(), long{rounds} * per_round);
}

TEST(ChunkPool, AThreadThatExitsHandsTheChunksItCachedToTheSharedStack) {
  const test_timeout limit{60s};
  const std::uint64_t in_use_before = chunk_pool_stats().in_use;
  std::uint64_t pushes_before_exit = 0;
  std::thread t([&] {
    // Takes three batches' worth and frees them: its cache then holds a full spare batch
    // and a non-empty loaded one.
    std::vector<std::uint32_t> chunks;
    for (std::uint32_t i = 0; i < 3 * chunk_batch_size; ++i) chunks.push_back(handoff::detail::allocate_chunk(0, 0));
    for (const std::uint32_t c : chunks) handoff::detail::free_chunk(c);
    pushes_before_exit = chunk_pool_stats().stack_pushes;
  });
  t.join();
  const auto after = chunk_pool_stats();
  EXPECT_EQ(after.in_use, in_use_before);
  EXPECT_EQ(after.stack_pushes - pushes_before_exit, 2u) << "the exited thread kept chunks";
}

}  // namespace
