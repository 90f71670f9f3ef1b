// Tests for handoff::detail::mpsc_queue, the intrusive Vyukov MPSC queue used as the
// per-actor mailbox: FIFO order, the stub re-insertion path, the consumer's push to the
// front, and multi-producer exactly-once delivery with per-producer order.
#include "handoff/detail/mpsc_queue.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <deque>
#include <latch>
#include <random>
#include <thread>
#include <vector>

namespace {

using handoff::detail::mailbox_node;
using handoff::detail::mpsc_queue;

struct num_node : mailbox_node {
  int producer = 0;
  int seq = 0;
};

num_node* pop_num(mpsc_queue& q) { return static_cast<num_node*>(q.pop()); }

// One array of nodes per producer (nodes hold an atomic: not copyable).
std::vector<std::vector<num_node>> make_nodes(int producers, int per_producer) {
  std::vector<std::vector<num_node>> nodes;
  for (int p = 0; p < producers; ++p) nodes.emplace_back(static_cast<std::size_t>(per_producer));
  return nodes;
}

// One thread per producer p: it waits on `start`, then pushes nodes[p] in order, each
// numbered (p, its index).
std::vector<std::jthread> start_producers(mpsc_queue& q, std::vector<std::vector<num_node>>& nodes, std::latch& start) {
  std::vector<std::jthread> threads;
  for (std::size_t p = 0; p < nodes.size(); ++p) {
    threads.emplace_back([&q, &mine = nodes[p], &start, p] {
      start.arrive_and_wait();
      for (std::size_t i = 0; i < mine.size(); ++i) {
        mine[i].producer = static_cast<int>(p);
        mine[i].seq = static_cast<int>(i);
        q.push(&mine[i]);
      }
    });
  }
  return threads;
}

TEST(MpscQueue, PopOnANewQueueReturnsNull) {
  mpsc_queue q;
  EXPECT_TRUE(q.looks_empty());
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_EQ(q.pop(), nullptr);  // and again: popping empty changes nothing
  EXPECT_TRUE(q.looks_empty());
}

TEST(MpscQueue, SingleThreadPopsInPushOrder) {
  mpsc_queue q;
  std::vector<num_node> nodes(100);
  for (int i = 0; i < 100; ++i) {
    nodes[static_cast<std::size_t>(i)].seq = i;
    q.push(&nodes[static_cast<std::size_t>(i)]);
  }
  for (int i = 0; i < 100; ++i) {
    num_node* n = pop_num(q);
    ASSERT_NE(n, nullptr) << "at " << i;
    EXPECT_EQ(n, &nodes[static_cast<std::size_t>(i)]);
    EXPECT_EQ(n->seq, i);
  }
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.looks_empty());
}

TEST(MpscQueue, PoppingTheLastNodeReinsertsTheStubAndTheQueueStaysUsable) {
  mpsc_queue q;
  num_node a, b, c, d;
  // One element: pop must re-insert the stub to hand `a` out.
  q.push(&a);
  EXPECT_FALSE(q.looks_empty());
  EXPECT_EQ(q.pop(), &a);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.looks_empty());

  // The same node can be pushed again once popped.
  q.push(&a);
  EXPECT_EQ(q.pop(), &a);
  EXPECT_EQ(q.pop(), nullptr);

  // Pop down to one element, push behind it, pop the rest in order.
  q.push(&b);
  q.push(&c);
  EXPECT_EQ(q.pop(), &b);  // c is now the last linked node
  q.push(&d);              // linked after c, before c is handed out
  EXPECT_EQ(q.pop(), &c);
  EXPECT_EQ(q.pop(), &d);
  EXPECT_EQ(q.pop(), nullptr);

  // Pop the last node (stub re-inserted after it), then push before popping again.
  q.push(&a);
  q.push(&b);
  EXPECT_EQ(q.pop(), &a);
  EXPECT_EQ(q.pop(), &b);  // stub goes in behind b
  q.push(&c);              // linked after the stub
  q.push(&d);
  EXPECT_FALSE(q.looks_empty());
  EXPECT_EQ(q.pop(), &c);
  EXPECT_EQ(q.pop(), &d);
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.looks_empty());
}

// Random single-thread interleavings of push and pop against a std::deque model; on a
// quiescent queue looks_empty() must agree with what pop() then returns.
TEST(MpscQueue, RandomPushPushFrontPopInterleavingsMatchADequeModelAndLooksEmptyAgreesWithPop) {
  mpsc_queue q;
  std::vector<num_node> nodes(64);
  std::vector<bool> queued(nodes.size(), false);
  std::deque<num_node*> model;
  std::mt19937 rng(12345);
  for (int step = 0; step < 20000; ++step) {
    ASSERT_EQ(q.looks_empty(), model.empty()) << "step " << step;
    const unsigned op = rng() % 100;
    if (op < 55) {  // push at the back, or (the consumer's own node) at the front
      const std::size_t i = rng() % nodes.size();
      if (queued[i]) continue;  // a node may be in the queue only once
      queued[i] = true;
      if (op < 10) {
        q.push_front(&nodes[i]);
        model.push_front(&nodes[i]);
      } else {
        q.push(&nodes[i]);
        model.push_back(&nodes[i]);
      }
    } else {
      num_node* got = pop_num(q);
      if (model.empty()) {
        ASSERT_EQ(got, nullptr) << "step " << step;
      } else {
        ASSERT_EQ(got, model.front()) << "step " << step;
        model.pop_front();
        queued[static_cast<std::size_t>(got - nodes.data())] = false;
      }
    }
  }
  while (!model.empty()) {
    ASSERT_FALSE(q.looks_empty());
    ASSERT_EQ(pop_num(q), model.front());
    model.pop_front();
  }
  EXPECT_TRUE(q.looks_empty());
  EXPECT_EQ(q.pop(), nullptr);
}

// P producers push numbered nodes while one consumer pops: every node arrives exactly
// once and each producer's nodes arrive in the order it pushed them. pop() may return
// nullptr while a push is in flight (not linearizable), so the consumer just retries.
TEST(MpscQueue, ManyProducersOneConsumerLoseNothingDuplicateNothingAndKeepPerProducerOrder) {
  constexpr int producers = 4;
  constexpr int per_producer = 20000;
  mpsc_queue q;
  auto nodes = make_nodes(producers, per_producer);
  std::latch start(producers + 1);
  std::vector<std::jthread> threads = start_producers(q, nodes, start);
  std::vector<int> next_seq(producers, 0);
  int received = 0;
  int out_of_order = 0;
  start.arrive_and_wait();
  while (received < producers * per_producer) {
    num_node* n = pop_num(q);
    if (n == nullptr) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_GE(n->producer, 0);
    ASSERT_LT(n->producer, producers);
    // The node must be the one this producer pushed next: same address and sequence.
    auto& expected = next_seq[static_cast<std::size_t>(n->producer)];
    if (n->seq != expected || n != &nodes[static_cast<std::size_t>(n->producer)][static_cast<std::size_t>(expected)]) {
      ++out_of_order;
    }
    expected = n->seq + 1;
    ++received;
  }
  threads.clear();  // join
  EXPECT_EQ(out_of_order, 0);
  for (int p = 0; p < producers; ++p)
    EXPECT_EQ(next_seq[static_cast<std::size_t>(p)], per_producer) << "producer " << p;
  // Quiescent now: nothing left, and looks_empty() says so.
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.looks_empty());
}

// The consumer may empty the queue (re-inserting the stub) while producers are still
// pushing; the stub must never be handed out and no node may be stranded behind it.
TEST(MpscQueue, ConsumerThatKeepsEmptyingTheQueueNeverReturnsTheStubOrStrandsANode) {
  constexpr int producers = 2;
  constexpr int per_producer = 20000;
  mpsc_queue q;
  auto nodes = make_nodes(producers, per_producer);
  std::vector<std::jthread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      auto& mine = nodes[static_cast<std::size_t>(p)];
      for (int i = 0; i < per_producer; ++i) {
        mine[static_cast<std::size_t>(i)].producer = p;
        mine[static_cast<std::size_t>(i)].seq = i;
        q.push(&mine[static_cast<std::size_t>(i)]);
        if (i % 64 == 0) std::this_thread::yield();  // let the consumer catch up and empty the queue
      }
    });
  }
  std::vector<int> next_seq(producers, 0);
  int received = 0;
  while (received < producers * per_producer) {
    num_node* n = pop_num(q);
    if (n == nullptr) continue;
    // Identify the node by address before reading it: the stub is not a num_node.
    int owner = -1;
    for (int p = 0; p < producers; ++p) {
      const auto& mine = nodes[static_cast<std::size_t>(p)];
      if (n >= mine.data() && n < mine.data() + mine.size()) owner = p;
    }
    ASSERT_NE(owner, -1) << "pop() returned a node nobody pushed (the stub?)";
    ASSERT_EQ(n->producer, owner);
    ASSERT_EQ(n->seq, next_seq[static_cast<std::size_t>(n->producer)]);
    ++next_seq[static_cast<std::size_t>(n->producer)];
    ++received;
  }
  threads.clear();
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_TRUE(q.looks_empty());
}

// The consumer puts its own node in front while producers keep pushing at the back: the
// next pop returns it, whatever state the producers left the stub and the tail in, and
// no producer's node is lost, duplicated or reordered.
TEST(MpscQueue, PushFrontWhileProducersPushIsPoppedNextAndLosesNothing) {
  constexpr int producers = 2;
  constexpr int per_producer = 100000;
  mpsc_queue q;
  auto nodes = make_nodes(producers, per_producer);
  std::latch start(producers + 1);
  std::vector<std::jthread> threads = start_producers(q, nodes, start);
  start.arrive_and_wait();
  num_node own;
  own.producer = -1;
  std::vector<int> next(producers, 0);
  int received = 0;
  int fronts = 0;
  for (unsigned step = 0; received < producers * per_producer; ++step) {
    if (step % 7 == 0) {
      q.push_front(&own);
      ASSERT_EQ(pop_num(q), &own) << "the consumer's own node must come out next";
      ++fronts;
      continue;
    }
    num_node* n = pop_num(q);
    if (n == nullptr) continue;  // empty, or a push in flight
    ASSERT_NE(n, &own);
    ASSERT_EQ(n->seq, next[static_cast<std::size_t>(n->producer)]++) << "producer " << n->producer;
    ++received;
  }
  threads.clear();  // join
  EXPECT_EQ(q.pop(), nullptr);
  EXPECT_GT(fronts, 0);
}

}  // namespace
