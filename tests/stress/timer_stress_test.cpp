// Stress: three threads schedule, cancel, re-arm (into the past and the future), detach
// and destroy target actors on one timer service while its thread fires, and pass handles
// to each other (a timer of one thread's shard cancelled by another); each round ends
// by destroying the service while the threads go on cancelling and re-arming their
// handles and destroying actors. For HANDOFF_STRESS_SECONDS seconds (default 2). Asserts
// that a timer whose cancel() returned true never runs, that a one-shot runs at most once,
// and (under the sanitizers) that nothing touches an actor or an entry after it is gone.
#include <handoff/actor.hpp>
#include <handoff/timer_service.hpp>

#include <gtest/gtest.h>

#include "../support/stress_seconds.hpp"

#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;
using handoff::test::stress_seconds;

constexpr int threads = 3;
constexpr std::size_t actors_per_thread = 8;
constexpr std::size_t slots_per_thread = 64;

struct counts {
  std::atomic<std::uint64_t> ran{0};
  std::atomic<std::uint64_t> ran_after_cancel{0};
  std::atomic<std::uint64_t> ran_twice{0};
  std::atomic<std::uint64_t> cancelled{0};
};

// One handle's history. Each schedule takes a new epoch; a cancel() that returns true
// records the epoch it stopped (a detached timer of an earlier epoch may still run).
// Epochs with the low bit set are periodic.
struct record {
  std::uint64_t epoch = 0;                 // the owning thread's
  std::atomic<std::uint64_t> stopped{0};   // the last epoch a cancel stopped
  std::atomic<std::uint64_t> last_run{0};  // the last one-shot epoch that ran
};

struct tick {
  record* rec;
  std::uint64_t epoch;
  counts* c;
  void operator()(int& runs) const {
    ++runs;
    c->ran.fetch_add(1, std::memory_order_relaxed);
    if ((epoch & 1) != 0) return;  // a periodic tick may run while a cancel that returns true stops the next
    if (rec->stopped.load() == epoch) c->ran_after_cancel.fetch_add(1, std::memory_order_relaxed);
    if (rec->last_run.exchange(epoch) == epoch) c->ran_twice.fetch_add(1, std::memory_order_relaxed);
  }
};

struct slot {
  handoff::timer h;
  std::uint64_t epoch = 0;
};

// Handles passed between the threads: a timer scheduled in one thread's shard is
// cancelled or re-armed by another.
struct exchange {
  std::mutex m;
  std::vector<handoff::timer> handles;  // guarded by m
  record unchecked;                     // their ticks run with a periodic epoch: no checks
};

struct worker {
  std::vector<std::unique_ptr<handoff::actor<int>>> actors;
  std::vector<slot> slots{slots_per_thread};
  std::vector<record> records{slots_per_thread};
  std::mt19937_64 rng;
  counts* c;
  exchange* x;

  worker(std::uint64_t seed, counts* cs, exchange* ex) : rng(seed), c(cs), x(ex) {
    for (std::size_t i = 0; i < actors_per_thread; ++i) actors.push_back(std::make_unique<handoff::actor<int>>(0));
  }

  void cancel(std::size_t i) {
    if (slots[i].h.cancel()) {
      records[i].stopped.store(slots[i].epoch);
      c->cancelled.fetch_add(1, std::memory_order_relaxed);
    }
  }
  // Handle operations and actor destruction: also while the service is being destroyed.
  void handle_op(std::uint64_t r) {
    const std::size_t i = (r >> 8) % slots_per_thread;
    switch (r % 8) {
      case 0:
        (void)slots[i].h.rearm(-1ms);  // into the past: fires again while a delivery may wait
        break;
      case 1:
        (void)slots[i].h.rearm(std::chrono::microseconds((r >> 16) % 2000));
        break;
      case 2:
        slots[i].h.detach();
        break;
      case 3:
        actors[(r >> 16) % actors_per_thread] = std::make_unique<handoff::actor<int>>(0);
        break;
      case 4: {
        handoff::timer t;
        {
          std::lock_guard g(x->m);
          if (x->handles.empty()) break;
          t = std::move(x->handles.back());
          x->handles.pop_back();
        }
        if ((r >> 16) % 2 == 0) (void)t.rearm(-1ms);  // then cancelled here, leaving the scope
        break;
      }
      default:
        cancel(i);
        break;
    }
  }
  void schedule_op(handoff::timer_service& s, std::uint64_t r) {
    const std::size_t i = (r >> 8) % slots_per_thread;
    cancel(i);
    record& rec = records[i];
    handoff::actor<int>& a = *actors[(r >> 16) % actors_per_thread];
    const bool periodic = (r >> 24) % 8 == 0;
    rec.epoch += 2;
    const std::uint64_t epoch = rec.epoch | (periodic ? 1 : 0);
    slots[i].epoch = epoch;
    const auto d = std::chrono::microseconds((r >> 32) % 4000);
    if ((r >> 28) % 4 == 0) {
      handoff::timer t = s.after(d, a, tick{&x->unchecked, 1, c});
      std::lock_guard g(x->m);
      if (x->handles.size() < 256) x->handles.push_back(std::move(t));
    }
    slots[i].h = periodic ? s.every(1ms + d, a, tick{&rec, epoch, c}) : s.after(d, a, tick{&rec, epoch, c});
  }
};

TEST(TimerStress, CancelRearmFireAndDestructionFromThreeThreadsKeepEveryTimersPromise) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(stress_seconds());
  counts c;
  exchange x;
  std::vector<std::unique_ptr<worker>> workers;
  for (int t = 0; t < threads; ++t) workers.push_back(std::make_unique<worker>(1000 + t, &c, &x));
  std::optional<handoff::timer_service> service;
  std::atomic<bool> more{true};
  std::barrier sync(threads + 1);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      worker& w = *workers[static_cast<std::size_t>(t)];
      for (;;) {
        sync.arrive_and_wait();  // the service exists
        if (!more.load()) break;
        const auto round_end = std::chrono::steady_clock::now() + 10ms;  // a few wheel ticks
        while (std::chrono::steady_clock::now() < round_end) {
          const std::uint64_t r = w.rng();
          if (r % 3 == 0) {
            w.handle_op(r >> 2);
          } else {
            w.schedule_op(*service, r >> 2);
          }
        }
        sync.arrive_and_wait();  // the service is being destroyed meanwhile
        for (int n = 0; n < 200; ++n) w.handle_op(w.rng());
        sync.arrive_and_wait();
      }
      for (slot& s : w.slots) s.h.cancel();
      w.actors.clear();
    });
  }
  std::uint64_t rounds = 0;
  do {
    service.emplace();
    service->start();
    sync.arrive_and_wait();
    sync.arrive_and_wait();
    service.reset();  // pending timers dropped while the threads cancel and re-arm
    sync.arrive_and_wait();
    ++rounds;
  } while (std::chrono::steady_clock::now() < end);
  more.store(false);
  sync.arrive_and_wait();
  for (std::thread& th : pool) th.join();
  x.handles.clear();

  EXPECT_EQ(c.ran_after_cancel.load(), 0U);
  EXPECT_EQ(c.ran_twice.load(), 0U);
  EXPECT_GT(c.ran.load(), 0U);
  EXPECT_GT(c.cancelled.load(), 0U);
  std::printf("timer stress: %llu rounds, %llu ran, %llu cancelled\n", static_cast<unsigned long long>(rounds),
              static_cast<unsigned long long>(c.ran.load()), static_cast<unsigned long long>(c.cancelled.load()));
}

}  // namespace
