// The actor's mailbox of ticketed slots in pooled chunks (lockfree_ownership in
// detail/ownership.hpp), driven by hand on one thread: every party's step in the order a
// test picks, including the ones inside an owner's release that a schedule of whole steps
// never splits (a sender counted while the owner detaches its chunk, a new owner that
// starts before the old one has let go of the head).
#include <handoff/detail/ownership.hpp>
#include <handoff/detail/slot_chunk.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace handoff::detail {

struct ownership_access {
  using detach = lockfree_ownership::detach;
  static bool close_head(lockfree_ownership& o, std::uint64_t consumed, detach& d) { return o.close_head(consumed, d); }
  static bool release_closed(lockfree_ownership& o, std::uint64_t consumed, detach& d) {
    return o.release_closed(consumed, d);
  }
  static void finish_detach(lockfree_ownership& o, const detach& d) { o.finish_detach(d); }
};

}  // namespace handoff::detail

namespace {

using handoff::detail::chunks_in_use;
using handoff::detail::lockfree_ownership;
using handoff::detail::mailbox_node;
using handoff::detail::ownership_access;
using admission = lockfree_ownership::admission;

class SlotMailbox : public testing::Test {
 protected:
  // Uncontended sends (acquire, release) until the next ticket is `t`.
  void advance_to(std::uint32_t t) {
    for (std::uint32_t i = 0; i < t; ++i) {
      ASSERT_EQ(o.try_acquire(), admission::owner);
      ASSERT_TRUE(o.try_release(1));
    }
  }
  admission count() { return o.try_acquire(); }
  // The owner's next message: must be `expected`.
  void expect_pop(const mailbox_node* expected) { EXPECT_EQ(o.pop(), expected); }
  void TearDown() override {
    EXPECT_EQ(o.pending(), 0u);
    EXPECT_EQ(chunks_in_use(), chunks_before) << "the idle mailbox holds a chunk";
  }

  std::uint64_t chunks_before = chunks_in_use();
  lockfree_ownership o;
  mailbox_node m1, m2, m3;
};

TEST_F(SlotMailbox, AnIdleMailboxHoldsNoChunkAfterMessagesSpanningThreeChunks) {
  ASSERT_EQ(count(), admission::owner);
  std::vector<mailbox_node> nodes(70);
  for (auto& n : nodes) {
    const admission a = count();
    ASSERT_EQ(a, admission::queued);
    o.enqueue(a, &n);
  }
  EXPECT_GE(chunks_in_use(), chunks_before + 3);
  for (auto& n : nodes) expect_pop(&n);
  EXPECT_EQ(o.pop(), nullptr);
  EXPECT_TRUE(o.try_release(71));
}

TEST_F(SlotMailbox, ASenderCountedWhileTheOwnerDetachesCancelsItAndTheOwnerKeepsTheChunk) {
  ASSERT_EQ(count(), admission::owner);
  const admission a1 = count();
  o.enqueue(a1, &m1);  // installs the chunk
  expect_pop(&m1);
  ownership_access::detach d{};
  ASSERT_TRUE(ownership_access::close_head(o, 2, d));
  const admission a2 = count();  // counted inside the window: its store finds the head closing
  o.enqueue(a2, &m2);
  EXPECT_FALSE(ownership_access::release_closed(o, 2, d)) << "released with a message counted";
  EXPECT_FALSE(o.try_release(2));  // what release_detaching() does next: subtract, still owned
  expect_pop(&m2);
  EXPECT_TRUE(o.try_release(1));  // now it detaches for real
}

TEST_F(SlotMailbox, ANewOwnerTakesBackAChunkItsReleasedPredecessorWasStillDetaching) {
  ASSERT_EQ(count(), admission::owner);
  const admission a1 = count();
  o.enqueue(a1, &m1);
  expect_pop(&m1);
  ownership_access::detach d{};
  ASSERT_TRUE(ownership_access::close_head(o, 2, d));
  ASSERT_TRUE(ownership_access::release_closed(o, 2, d));  // released; the head is still closing
  ASSERT_EQ(count(), admission::owner);                    // the next owner
  const admission a2 = count();
  o.enqueue(a2, &m2);                     // cancels the detach: its ticket is in that chunk
  ownership_access::finish_detach(o, d);  // the old owner's late CAS fails: it frees nothing
  EXPECT_EQ(chunks_in_use(), chunks_before + 1);
  expect_pop(&m2);
  EXPECT_TRUE(o.try_release(2));
}

TEST_F(SlotMailbox, ANewOwnerFreesTheChunkItsPredecessorDetachedAtItsEndOnceASenderTookItBack) {
  advance_to(29);
  ASSERT_EQ(count(), admission::owner);  // ticket 29
  const admission a1 = count();          // 30 and 31: the rest of the first chunk
  o.enqueue(a1, &m1);
  const admission a2 = count();
  o.enqueue(a2, &m2);
  expect_pop(&m1);
  expect_pop(&m2);
  ownership_access::detach d{};
  ASSERT_TRUE(ownership_access::close_head(o, 3, d));
  ASSERT_TRUE(ownership_access::release_closed(o, 3, d));
  ASSERT_EQ(count(), admission::owner);  // ticket 32: the next owner
  const admission a3 = count();          // 33: past the closing chunk, which it takes back, then appends to
  o.enqueue(a3, &m3);
  ownership_access::finish_detach(o, d);
  EXPECT_EQ(chunks_in_use(), chunks_before + 2);
  expect_pop(&m3);  // finds its chunk from the head and frees the one before it
  EXPECT_EQ(chunks_in_use(), chunks_before + 1);
  EXPECT_TRUE(o.try_release(2));
}

TEST_F(SlotMailbox, ASenderWhoseChunkComesBeforeTheFirstInstalledOnePutsItInFront) {
  advance_to(30);
  ASSERT_EQ(count(), admission::owner);  // ticket 30
  const admission early = count();       // 31, stored late
  const admission late = count();        // 32, stored first: installs the chunk of 32..63
  o.enqueue(late, &m2);
  o.enqueue(early, &m1);  // its chunk (0..31) goes in front of that one
  expect_pop(&m1);
  expect_pop(&m2);  // across the boundary: the first chunk is freed
  EXPECT_EQ(o.pop(), nullptr);
  EXPECT_TRUE(o.try_release(3));
}

TEST_F(SlotMailbox, TheDestructorWaitsForAReleasedOwnersLastTouchOfTheHead) {
  ASSERT_EQ(count(), admission::owner);
  const admission a1 = count();
  o.enqueue(a1, &m1);
  expect_pop(&m1);
  ownership_access::detach d{};
  ASSERT_TRUE(ownership_access::close_head(o, 2, d));
  ASSERT_TRUE(ownership_access::release_closed(o, 2, d));  // released, its last CAS still to come
  ASSERT_EQ(count(), admission::owner);                    // the destructor takes the idle actor
  std::atomic<bool> discarded{false};
  std::thread destructor([&] {
    o.discard();
    discarded = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(discarded.load()) << "the destructor went on while a released owner could still touch the actor";
  ownership_access::finish_detach(o, d);
  destructor.join();
  EXPECT_TRUE(discarded.load());
  EXPECT_TRUE(o.try_release(1));
}

TEST_F(SlotMailbox, AFullBoundedWordCountsNothingAndTakesNoTicket) {
  ASSERT_EQ(o.try_acquire_below(2), admission::owner);
  const admission a1 = o.try_acquire_below(2);
  ASSERT_EQ(a1, admission::queued);
  EXPECT_EQ(o.try_acquire_below(2), admission::full);
  EXPECT_EQ(o.pending(), 2u);
  o.enqueue(a1, &m1);
  EXPECT_FALSE(o.try_release(1));  // the owner's own message: room for one more
  const admission a2 = o.try_acquire_below(2);
  ASSERT_EQ(a2, admission::queued);
  EXPECT_EQ(a2.ticket(), a1.ticket() + 1) << "the refused send took a ticket: a hole the owner would wait on";
  o.enqueue(a2, &m2);
  expect_pop(&m1);
  expect_pop(&m2);
  EXPECT_TRUE(o.try_release(2));
}

}  // namespace
