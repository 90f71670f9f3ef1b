// Stress: several threads, many actors, random posts, nested forwards (single and in
// ordered pairs), batches (post_all) and asks, for HANDOFF_STRESS_SECONDS seconds per test
// (default 2).
// Asserts no loss, no duplication, no overlap, per-sender order.
#include <handoff/actor.hpp>
#include <handoff/thread_pool.hpp>

#include <gtest/gtest.h>

#include "../support/stress_seconds.hpp"
#include "../support/test_support.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <memory>
#include <random>
#include <thread>
#include <tuple>
#include <unordered_set>
#include <vector>

namespace {

using handoff::test::stress_seconds;

constexpr int max_senders = 8;  // sender ids: threads, plus forwards from handlers

struct cell {
  std::atomic<int> inside{0};
  int overlaps = 0;
  int order_violations = 0;
  long received = 0;
  long seq_seen[max_senders];
  cell() {
    for (long& s : seq_seen) s = -1;
  }
  void accept_unordered() {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0) ++overlaps;
    ++received;
    inside.fetch_sub(1, std::memory_order_relaxed);
  }
  // The two messages of a pair, sent by one handler in this order (the first may travel
  // in the sending thread's carry slot, the second behind it in the mailbox).
  std::unordered_set<long> firsts;
  void accept_first(long pair) {
    accept_unordered();
    firsts.insert(pair);
  }
  void accept_second(long pair) {
    accept_unordered();
    if (firsts.erase(pair) != 1) ++order_violations;
  }
  void accept(int sender, long seq) {
    if (inside.fetch_add(1, std::memory_order_relaxed) != 0) ++overlaps;
    if (seq_seen[sender] >= seq) ++order_violations;  // duplicate or reordered
    seq_seen[sender] = seq;
    ++received;
    inside.fetch_sub(1, std::memory_order_relaxed);
  }
};

struct totals {
  long received = 0;
  int overlaps = 0;
  int order_violations = 0;
};

totals sum(std::vector<std::unique_ptr<handoff::actor<cell>>>& actors) {
  totals t;
  for (auto& a : actors) {
    auto [r, o, v] = a->ask([](cell& c) { return std::tuple(c.received, c.overlaps, c.order_violations); }).get();
    t.received += r;
    t.overlaps += o;
    t.order_violations += v;
  }
  return t;
}

void hammer(std::vector<std::unique_ptr<handoff::actor<cell>>>& actors, int threads, bool skewed) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(stress_seconds());
  std::atomic<long> sent{0};
  std::vector<std::jthread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<unsigned>(t) * 7919u + 1);
      std::vector<long> seq(actors.size(), 0);  // per (sender, actor) sequence
      long mine = 0;
      while (std::chrono::steady_clock::now() < deadline) {
        for (int burst = 0; burst < 256; ++burst) {
          std::size_t i = rng() % actors.size();
          if (skewed && rng() % 4 != 0) i = rng() % 4;  // 3/4 of traffic on 4 hot actors
          const long s = seq[i]++;
          switch (rng() % 8) {
            case 0: {  // a handler that forwards to another actor (nested send)
              auto* target = actors[(i + 1) % actors.size()].get();
              actors[i]->post([t, s, target](cell& c) {
                c.accept(t, s);
                // Forwards come from whichever thread drains the source: no sender order.
                target->post([](cell& d) { d.accept_unordered(); });
              });
              mine += 2;
              break;
            }
            case 2: {  // a handler that sends two messages to another actor, in order
              auto* target = actors[(i + 1) % actors.size()].get();
              const long pair = (static_cast<long>(t) << 40) | s;
              actors[i]->post([t, s, pair, target](cell& c) {
                c.accept(t, s);
                target->post([pair](cell& d) { d.accept_first(pair); });
                target->post([pair](cell& d) { d.accept_second(pair); });
              });
              mine += 3;
              break;
            }
            case 3: {  // a batch of 5 (one mailbox node, cut wherever a budget ends a turn)
              const auto message = [t](long q) { return [t, q](cell& c) { c.accept(t, q); }; };
              const std::array<decltype(message(0)), 5> batch{message(s), message(s + 1), message(s + 2),
                                                              message(s + 3), message(s + 4)};
              seq[i] += 4;
              actors[i]->post_all(batch);
              mine += 5;
              break;
            }
            case 1:  // an ask, waited on
              actors[i]->ask([t, s](cell& c) { c.accept(t, s); }).get();
              ++mine;
              break;
            default:
              actors[i]->post([t, s](cell& c) { c.accept(t, s); });
              ++mine;
          }
        }
      }
      sent.fetch_add(mine);
    });
  }
  workers.clear();  // join
  totals t = sum(actors);
  EXPECT_EQ(t.received, sent.load()) << "messages lost or duplicated";
  EXPECT_EQ(t.overlaps, 0) << "two handlers of one actor overlapped";
  EXPECT_EQ(t.order_violations, 0) << "a sender's messages (or a handler's pair) ran out of order (or twice)";
  std::printf("stress: %ld messages over %zu actors, %d threads\n", sent.load(), actors.size(), threads);
}

std::vector<std::unique_ptr<handoff::actor<cell>>> make_actors(std::size_t n,
                                                               std::shared_ptr<const handoff::actor_options> o = {}) {
  std::vector<std::unique_ptr<handoff::actor<cell>>> v;
  for (std::size_t i = 0; i < n; ++i) v.push_back(std::make_unique<handoff::actor<cell>>(o));
  return v;
}

TEST(ActorStress, ManyThreadsPostingToManyActorsLoseDuplicateAndOverlapNothing) {
  auto actors = make_actors(64);
  hammer(actors, 4, false);
}

TEST(ActorStress, SkewedTrafficOnAFewHotActorsKeepsEveryGuarantee) {
  auto actors = make_actors(64);
  hammer(actors, 4, true);
}

TEST(ActorStress, BudgetedActorsHandedToAThreadPoolKeepEveryGuarantee) {
  handoff::thread_pool pool(2);
  handoff::actor_options o;
  o.executor = pool;
  o.max_messages = 16;
  auto shared = std::make_shared<const handoff::actor_options>(o);
  auto actors = make_actors(32, shared);
  hammer(actors, 3, true);
  actors.clear();  // destroyed while continuations may still be queued on the pool
}

// A budget without an executor: owners past it offer the drain and the next sender takes
// it over; a few actors keep the hand-overs frequent.
TEST(ActorStress, BudgetedActorsWithoutAnExecutorHandTheDrainOverAndKeepEveryGuarantee) {
  handoff::actor_options o;
  o.max_messages = 4;
  auto shared = std::make_shared<const handoff::actor_options>(o);
  auto actors = make_actors(4, shared);
  hammer(actors, 3, true);
}

// The same with claimants that withdraw as soon as they have spun: the withdrawal races
// the owner's hand-over on nearly every claim.
TEST(ActorStress, ClaimantsThatWithdrawAtOnceKeepEveryGuarantee) {
  const std::int64_t before = handoff::detail::successor_wait_ns.exchange(0);
  handoff::actor_options o;
  o.max_messages = 4;
  auto shared = std::make_shared<const handoff::actor_options>(o);
  auto actors = make_actors(4, shared);
  hammer(actors, 3, true);
  handoff::detail::successor_wait_ns.store(before);
}

// Actors on a pool forwarding to each other (nested sends, which the pool's idle workers
// take over), fed by threads with post and defer: every message runs once, one handler
// per actor at a time, and each sender's messages to one actor (an actor's handlers are a
// sender too) in the order sent.
struct mesh_cell {
  std::atomic<int> inside{0};
  int index = 0;
  std::mt19937_64 rng;
  std::vector<long> seen;     // last sequence number seen from each sender
  std::vector<long> out_seq;  // next sequence number to each target
  long received = 0;
  int overlaps = 0;
  int order_violations = 0;
};

struct mesh_message {
  int from;
  long seq;
  int hops;
};

using mesh_actor = handoff::actor<mesh_cell>;

// Messages handled so far, over every mesh actor: lets the feeders bound the backlog.
std::atomic<long> mesh_handled{0};

void mesh_deliver(std::vector<std::unique_ptr<mesh_actor>>& mesh, std::atomic<long>& sent, std::size_t to,
                  mesh_message m, bool deferred);

void mesh_handle(std::vector<std::unique_ptr<mesh_actor>>& mesh, std::atomic<long>& sent, mesh_cell& c,
                 mesh_message m) {
  mesh_handled.fetch_add(1, std::memory_order_relaxed);
  if (c.inside.fetch_add(1, std::memory_order_relaxed) != 0) ++c.overlaps;
  if (c.seen[static_cast<std::size_t>(m.from)] >= m.seq) ++c.order_violations;
  c.seen[static_cast<std::size_t>(m.from)] = m.seq;
  ++c.received;
  c.inside.fetch_sub(1, std::memory_order_relaxed);
  if (m.hops == 0) return;
  for (int k = 0; k < 2; ++k) {  // fan out: two forwards per hop while hops last
    const std::size_t to = c.rng() % mesh.size();
    mesh_deliver(mesh, sent, to, mesh_message{c.index, c.out_seq[to]++, m.hops - 1}, c.rng() % 4 == 0);
  }
}

void mesh_deliver(std::vector<std::unique_ptr<mesh_actor>>& mesh, std::atomic<long>& sent, std::size_t to,
                  mesh_message m, bool deferred) {
  sent.fetch_add(1, std::memory_order_relaxed);
  auto handler = [&mesh, &sent, m](mesh_cell& c) { mesh_handle(mesh, sent, c, m); };
  if (deferred) {
    mesh[to]->defer(handler);
  } else {
    mesh[to]->post(handler);
  }
}

TEST(ActorStress, AMeshOfActorsOnAPoolSpreadingAndDeferringKeepsEveryGuarantee) {
  constexpr int actors = 48;
  constexpr int threads = 2;
  handoff::thread_pool pool(3);
  handoff::actor_options o;
  o.executor = pool;
  const auto options = std::make_shared<const handoff::actor_options>(o);
  std::vector<std::unique_ptr<mesh_actor>> mesh;
  for (int i = 0; i < actors; ++i) {
    mesh.push_back(std::make_unique<mesh_actor>(options));
    mesh.back()->post([i](mesh_cell& c) {
      c.index = i;
      c.rng.seed(static_cast<unsigned>(i) + 17);
      c.seen.assign(actors + threads, -1);
      c.out_seq.assign(actors, 0);
    });
  }
  std::atomic<long> sent{0};
  mesh_handled.store(0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(stress_seconds());
  {
    std::vector<std::jthread> feeders;
    for (int t = 0; t < threads; ++t) {
      feeders.emplace_back([&, t] {
        std::mt19937_64 rng(static_cast<unsigned>(t) + 1);
        std::vector<long> seq(actors, 0);
        while (std::chrono::steady_clock::now() < deadline) {
          // Each message fans out to up to 2^hops: keep the backlog bounded.
          while (sent.load(std::memory_order_relaxed) - mesh_handled.load(std::memory_order_relaxed) > 20'000 &&
                 std::chrono::steady_clock::now() < deadline) {
            std::this_thread::yield();
          }
          const std::size_t to = rng() % actors;
          mesh_deliver(mesh, sent, to, mesh_message{actors + t, seq[to]++, static_cast<int>(rng() % 6)},
                       rng() % 2 == 0);
        }
        handoff::run_deferred();  // this thread's deferred sends to actors it took over
      });
    }
  }
  long received = 0;
  const bool all_ran = handoff::test::eventually(
      [&] {
        received = 0;
        for (auto& a : mesh) received += a->ask([](mesh_cell& c) { return c.received; }).get();
        return received == sent.load();
      },
      std::chrono::seconds(60));
  EXPECT_TRUE(all_ran) << received << " of " << sent.load() << " messages ran";
  int overlaps = 0, order_violations = 0;
  for (auto& a : mesh) {
    auto [ov, vi] = a->ask([](mesh_cell& c) { return std::pair(c.overlaps, c.order_violations); }).get();
    overlaps += ov;
    order_violations += vi;
  }
  EXPECT_EQ(overlaps, 0) << "two handlers of one actor overlapped";
  EXPECT_EQ(order_violations, 0) << "a sender's messages ran out of order (or twice)";
  std::printf("stress: mesh of %d actors on a pool of 3: %ld messages\n", actors, sent.load());
  mesh.clear();
}

TEST(ActorStress, BoundedActorsUnderBlockingAndTryingSendersNeverExceedTheirCapacityNorLoseAMessage) {
  constexpr std::uint32_t capacity = 4;
  auto o = std::make_shared<handoff::actor_options>();
  o->capacity = capacity;  // full_policy::block
  auto actors = make_actors(8, o);
  std::atomic<std::uint64_t> max_pending{0};
  std::atomic<long> forwarded{0};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(stress_seconds());
  std::atomic<long> sent{0};
  std::atomic<long> refused{0};
  std::vector<std::jthread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<unsigned>(t) * 104729u + 3);
      std::vector<long> seq(actors.size(), 0);
      long mine = 0;
      long no_room = 0;
      while (std::chrono::steady_clock::now() < deadline) {
        for (int burst = 0; burst < 256; ++burst) {
          const std::size_t i = rng() % actors.size();
          handoff::actor<cell>* target = actors[(i + 1) % actors.size()].get();
          handoff::actor<cell>* self = actors[i].get();
          auto handler = [&, t, s = seq[i], self, target](cell& c) {
            c.accept(t, s);
            std::uint64_t p = self->pending(), m = max_pending.load(std::memory_order_relaxed);
            while (p > m && !max_pending.compare_exchange_weak(m, p, std::memory_order_relaxed)) {
            }
            // A handler never waits for room: it tries, and counts what got in.
            if (target->try_post([](cell& d) { d.accept_unordered(); }))
              forwarded.fetch_add(1, std::memory_order_relaxed);
          };
          if (rng() % 4 == 0) {
            if (!actors[i]->try_post(handler)) {
              ++no_room;
              continue;  // not sent: the sequence number is reused
            }
          } else {
            actors[i]->post(handler);  // waits for room
          }
          ++seq[i];
          ++mine;
        }
      }
      sent.fetch_add(mine);
      refused.fetch_add(no_room);
    });
  }
  workers.clear();
  totals t = sum(actors);
  EXPECT_EQ(t.received, sent.load() + forwarded.load()) << "messages lost or duplicated";
  EXPECT_EQ(t.overlaps, 0) << "two handlers of one actor overlapped";
  EXPECT_EQ(t.order_violations, 0) << "a sender's messages (or a handler's pair) ran out of order (or twice)";
  EXPECT_LE(max_pending.load(), capacity) << "a bounded actor held more than its capacity";
  std::printf("stress: bounded actors: %ld sent, %ld forwarded, %ld try_post refused\n", sent.load(), forwarded.load(),
              refused.load());
}

TEST(ActorStress, ActorsDestroyedWhileAnotherThreadDrainsThemRunEverythingSentBefore) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(stress_seconds());
  long rounds = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto a = std::make_unique<handoff::actor<int>>();
    std::atomic<int> ran{0};
    std::latch entered(1);
    std::jthread owner([&] {
      a->post([&](int&) {
        entered.count_down();
        handoff::test::burn(2000);
        ran.fetch_add(1, std::memory_order_relaxed);
      });
    });
    entered.wait();  // `owner` is draining
    for (int i = 0; i < 50; ++i) a->post([&](int&) { ran.fetch_add(1, std::memory_order_relaxed); });
    a.reset();  // waits for the drain to reach it; must not free the actor under `owner`
    ASSERT_EQ(ran.load(), 51) << "round " << rounds;
    ++rounds;
  }
  EXPECT_GT(rounds, 0);
  std::printf("stress: %ld destructions during a drain\n", rounds);
}

}  // namespace
