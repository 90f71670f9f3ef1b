// The shared stack of chunk batches (detail/chunk_depot.hpp), its pop driven step by step
// on one thread with another party's pops and pushes between the steps.
#include <handoff/detail/chunk_depot.hpp>
#include <handoff/detail/slot_chunk.hpp>

#include <gtest/gtest.h>

#include <cstdint>

namespace {

using handoff::detail::allocate_chunk;
using handoff::detail::chunk_at;
using handoff::detail::chunk_depot;
using handoff::detail::free_chunk;

class ChunkDepot : public testing::Test {
 protected:
  // A batch of one chunk, taken from this thread's cache.
  static std::uint32_t single_batch() {
    const std::uint32_t c = allocate_chunk(0, 0);
    chunk_at(c).base.store(1);
    chunk_at(c).next.store(0);
    return c;
  }
  void TearDown() override {
    for (std::uint32_t c : {a, b, c}) free_chunk(c);
  }

  chunk_depot depot;
  std::uint32_t a = single_batch(), b = single_batch(), c = single_batch();
};

TEST_F(ChunkDepot, PopsReturnTheBatchesLastPushedFirstAndThenNothing) {
  depot.push(c);
  depot.push(b);
  depot.push(a);
  EXPECT_EQ(depot.pop(), a);
  EXPECT_EQ(depot.pop(), b);
  EXPECT_EQ(depot.pop(), c);
  EXPECT_EQ(depot.pop(), 0u);
}

TEST_F(ChunkDepot, APopWhoseTopWasPoppedTwiceAndPushedBackMeanwhileFailsItsCas) {
  depot.push(c);
  depot.push(b);
  depot.push(a);  // a, b, c from the top
  // One thread's pop, up to its CAS: it read the top (a) and the batch below it (b).
  std::uint64_t top = depot.load_top();
  ASSERT_EQ(chunk_depot::index_of(top), a);
  const std::uint32_t below = chunk_depot::read_below(top);
  ASSERT_EQ(below, b);
  // Another thread pops a and b (b goes to use) and pushes a back: a, c from the top.
  ASSERT_EQ(depot.pop(), a);
  ASSERT_EQ(depot.pop(), b);
  depot.push(a);
  // The first thread's CAS sees a on top again; with the index alone it would succeed and
  // make b, a batch in use, the top.
  EXPECT_FALSE(depot.try_pop(top, below)) << "a pop with a stale link succeeded (ABA)";
  // Retried from the word it saw, it pops a; then c is left, and nothing after it.
  ASSERT_EQ(chunk_depot::index_of(top), a);
  EXPECT_TRUE(depot.try_pop(top, chunk_depot::read_below(top)));
  EXPECT_EQ(depot.pop(), c);
  EXPECT_EQ(depot.pop(), 0u);
}

}  // namespace
