// The shard owner's in-process dispatcher (lib/redis/actor/shard_dispatch.hpp): entries
// run per key, one at a time in queue order, different keys side by side; the
// acknowledgement trims only the finished prefix and names the rest by id; a dropped
// shard's queued entries never start; the keys' actors are freed once idle. No Redis
// server needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <latch>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <handoff/executor.hpp>
#include <handoff/thread_pool.hpp>

#include "../../lib/redis/actor/shard_dispatch.hpp"
#include "../support/keyed_mutex_support.hpp"
#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::redis::detail::ack_window;
using handoff::redis::detail::entry_end;
using handoff::redis::detail::finished_entry;
using handoff::redis::detail::shard_ack;
using handoff::redis::detail::shard_dispatch;
using handoff::redis::detail::shard_entry;
using handoff::test::blocking_call;
using handoff::test::eventually;
using handoff::test::test_timeout;

// Every test here takes well under a second, ThreadSanitizer included: 20 s means a hang
// (past the 10 s that `eventually` waits for a condition before failing the test).
class ShardDispatch : public ::testing::Test {
 protected:
  test_timeout timeout_{20s};
};

shard_entry entry(std::uint64_t seq, std::string key) {
  return shard_entry{seq, std::move(key), "id" + std::to_string(seq), "body" + std::to_string(seq), 1};
}

// Entries with seq from `first` on, for these keys in turn.
std::vector<shard_entry> entries(std::uint64_t first, const std::vector<std::string>& keys) {
  std::vector<shard_entry> v;
  for (const std::string& k : keys) v.push_back(entry(first++, k));
  return v;
}

std::vector<std::string> ids(std::initializer_list<std::uint64_t> seqs) {
  std::vector<std::string> v;
  for (const std::uint64_t s : seqs) v.push_back("id" + std::to_string(s));
  return v;
}

// What a run function saw, per key: a second handler of a key starting while one runs,
// or a key's entries out of seq order, are counted as violations.
class key_checker {
 public:
  void start(const shard_entry& e) {
    const std::lock_guard l(mu_);
    record& r = keys_[e.key];
    if (r.running) ++violations_;
    if (r.last && *r.last >= e.seq) ++violations_;
    r.running = true;
    r.last = e.seq;
    ++runs_;
  }
  void end(const shard_entry& e) {
    const std::lock_guard l(mu_);
    keys_[e.key].running = false;
  }
  int violations() {
    const std::lock_guard l(mu_);
    return violations_;
  }
  int runs() {
    const std::lock_guard l(mu_);
    return runs_;
  }

 private:
  struct record {
    bool running = false;
    std::optional<std::uint64_t> last;
  };
  std::mutex mu_;
  std::map<std::string, record> keys_;
  int violations_ = 0;
  int runs_ = 0;
};

TEST_F(ShardDispatch, EntriesOfOneKeyRunOneAtATimeInQueueOrderAcrossBatchesAndShards) {
  handoff::thread_pool pool(4);
  key_checker checker;
  const std::thread::id owner = std::this_thread::get_id();
  std::atomic<int> on_owner{0};
  shard_dispatch d(pool, 4096, [&](const shard_entry& e, std::optional<std::string>&) {
    if (std::this_thread::get_id() == owner) ++on_owner;
    checker.start(e);
    for (int i = 0; i < 50; ++i) std::this_thread::yield();  // widen any overlap
    checker.end(e);
    return entry_end::handled;
  });
  const std::vector<std::string> keys0{"a", "b", "c", "a", "a", "d"};
  const std::vector<std::string> keys1{"x", "y", "x", "x"};
  for (std::uint64_t batch = 0; batch < 20; ++batch) {
    d.dispatch(0, entries(batch * keys0.size(), keys0));
    d.dispatch(1, entries(1000 + batch * keys1.size(), keys1));
  }
  d.wait_idle();
  EXPECT_EQ(checker.violations(), 0);
  EXPECT_EQ(checker.runs(), 20 * 10);
  EXPECT_EQ(on_owner.load(), 0);  // with an executor the owner thread never runs a handler
  EXPECT_EQ(d.take_ack(0).trim, 20 * keys0.size());
  EXPECT_EQ(d.take_ack(1).trim, 20 * keys1.size());
  EXPECT_EQ(d.room(), 4096U);
}

TEST_F(ShardDispatch, ASlowKeyHoldsOnlyItselfNotTheOtherKeysOfItsShard) {
  handoff::thread_pool pool(2);
  std::latch release(1);
  std::atomic<int> finished{0};
  std::atomic<bool> second_slow_ran{false};
  shard_dispatch d(
      pool, 64,
      [&](const shard_entry& e, std::optional<std::string>&) {
        if (e.key == "slow" && e.seq == 0) release.wait();
        if (e.key == "slow" && e.seq == 4) second_slow_ran = true;
        return entry_end::handled;
      },
      [&] { ++finished; });
  d.dispatch(0, entries(0, {"slow", "a", "b", "c", "slow", "d"}));
  EXPECT_TRUE(eventually([&] { return finished.load() == 4; }));  // a, b, c, d: both pool threads free for them
  EXPECT_FALSE(second_slow_ran.load());                           // behind its key's first entry
  EXPECT_EQ(d.room(), 62U);
  release.count_down();
  d.wait_idle();
  EXPECT_EQ(finished.load(), 6);
  EXPECT_TRUE(second_slow_ran.load());
}

TEST_F(ShardDispatch, AckTrimsOnlyTheFinishedPrefixAndNamesTheEntriesPastItById) {
  handoff::thread_pool pool(2);
  std::latch release(1);
  std::atomic<int> finished{0};
  shard_dispatch d(
      pool, 64,
      [&](const shard_entry& e, std::optional<std::string>& state) {
        if (e.key == "slow" && e.seq == 0) release.wait();
        state = "state of " + e.id;
        return e.key == "d" ? entry_end::dead : entry_end::handled;
      },
      [&] { ++finished; });
  d.dispatch(0, entries(0, {"slow", "a", "b", "c", "slow", "d"}));
  ASSERT_TRUE(eventually([&] { return finished.load() == 4; }));

  shard_ack a = d.take_ack(0);
  EXPECT_EQ(a.trim, 0U);  // the head is still running
  EXPECT_EQ(a.finished.size(), 4U);
  std::vector<std::string> added = a.done_add;
  std::sort(added.begin(), added.end());
  EXPECT_EQ(added, ids({1, 2, 3, 5}));
  EXPECT_TRUE(a.done_remove.empty());
  for (const finished_entry& f : a.finished) {
    EXPECT_EQ(f.state, "state of " + f.id);
    EXPECT_EQ(f.body, "body" + std::to_string(f.seq));
    EXPECT_EQ(f.end, f.key == "d" ? entry_end::dead : entry_end::handled);
  }
  EXPECT_TRUE(d.take_ack(0).empty());  // each reported once

  release.count_down();
  d.wait_idle();
  a = d.take_ack(0);
  EXPECT_EQ(a.trim, 6U);  // the whole queue now
  std::vector<std::string> removed = a.done_remove;
  std::sort(removed.begin(), removed.end());
  EXPECT_EQ(removed, ids({1, 2, 3, 5}));
  EXPECT_TRUE(a.done_add.empty());  // finished and trimmed in the same ack: never recorded
  ASSERT_EQ(a.finished.size(), 2U);
  EXPECT_EQ(a.finished[0].seq, 0U);  // one key's entries finish in queue order
  EXPECT_EQ(a.finished[1].seq, 4U);
  EXPECT_TRUE(d.take_ack(0).empty());
}

TEST_F(ShardDispatch, AckWindowReportsEachIdOnceAndRemovesItWhenTheTrimCoversIt) {
  ack_window w;
  for (std::uint64_t s = 10; s < 15; ++s) w.append(s);
  const auto finish = [&](std::uint64_t s) { w.finish(finished_entry{s, "k", "id" + std::to_string(s), "", {}, {}}); };
  finish(11);
  finish(13);
  shard_ack a = w.take();
  EXPECT_EQ(a.trim, 0U);
  EXPECT_EQ(a.done_add, ids({11, 13}));
  finish(14);
  a = w.take();
  EXPECT_EQ(a.done_add, ids({14}));  // 11 and 13 not again
  finish(10);
  a = w.take();
  EXPECT_EQ(a.trim, 2U);  // 10, 11
  EXPECT_EQ(a.done_remove, ids({11}));
  EXPECT_TRUE(a.done_add.empty());
  w.append(15);
  w.append(16);
  w.unappend(1);  // 16 never sent
  EXPECT_EQ(w.next_seq(), 16U);
  finish(12);
  finish(15);
  a = w.take();
  EXPECT_EQ(a.trim, 4U);  // 12 to 15
  EXPECT_EQ(a.done_remove, ids({13, 14}));
  EXPECT_TRUE(a.done_add.empty());
  EXPECT_EQ(w.size(), 0U);
}

TEST_F(ShardDispatch, WithoutAnExecutorEntriesRunInsideDispatchOnTheOwnerThread) {
  std::vector<std::thread::id> threads;
  shard_dispatch d(handoff::executor_ref{}, 16, [&](const shard_entry&, std::optional<std::string>&) {
    threads.push_back(std::this_thread::get_id());
    return entry_end::handled;
  });
  d.dispatch(3, entries(7, {"a", "b", "a"}));
  ASSERT_EQ(threads.size(), 3U);  // all of them, before dispatch returned
  for (const std::thread::id t : threads) EXPECT_EQ(t, std::this_thread::get_id());
  EXPECT_EQ(d.take_ack(3).trim, 3U);
  EXPECT_EQ(d.live_keys(), 0U);
}

TEST_F(ShardDispatch, TheActorsOfKeysWithNothingLeftToRunAreFreed) {
  handoff::thread_pool pool(3);
  std::atomic<int> runs{0};
  shard_dispatch d(pool, 500, [&](const shard_entry&, std::optional<std::string>&) {
    ++runs;
    return entry_end::handled;
  });
  constexpr int key_count = 10'000;
  std::uint64_t seq[4] = {};
  for (int next = 0; next < key_count;) {
    if (d.room() < 100) d.wait_idle();
    std::vector<shard_entry> batch;
    const auto shard = static_cast<std::uint32_t>(next % 4);
    for (int i = 0; i < 100; ++i, ++next) batch.push_back(entry(seq[shard]++, "key" + std::to_string(next)));
    d.dispatch(shard, std::move(batch));
    // Counted keys (at most 400 before this batch, with room for 100), its 100, and none
    // idle from before: dispatch freed them first.
    EXPECT_LE(d.live_keys(), 500U);
  }
  d.wait_idle();
  EXPECT_EQ(runs.load(), key_count);
  EXPECT_EQ(d.live_keys(), 0U);
}

TEST_F(ShardDispatch, RoomCountsUnfinishedEntriesOverAllShardsAndDispatchBeyondItThrows) {
  handoff::thread_pool pool(3);
  std::latch release(1);
  std::atomic<int> started{0};
  shard_dispatch d(pool, 4, [&](const shard_entry&, std::optional<std::string>&) {
    ++started;
    release.wait();
    return entry_end::handled;
  });
  d.dispatch(0, entries(0, {"a", "b"}));
  d.dispatch(1, entries(0, {"c"}));
  EXPECT_EQ(d.room(), 1U);
  EXPECT_THROW(d.dispatch(2, entries(0, {"d", "e"})), std::logic_error);
  EXPECT_EQ(d.room(), 1U);  // nothing of it counted
  EXPECT_EQ(d.live_keys(), 3U);
  EXPECT_TRUE(eventually([&] { return started.load() == 3; }));
  release.count_down();
  d.wait_idle();
  EXPECT_EQ(d.room(), 4U);
  EXPECT_EQ(started.load(), 3);
  EXPECT_TRUE(d.take_ack(2).empty());
}

TEST_F(ShardDispatch, EntriesOutOfSeqOrderAreRejectedAndCountNothing) {
  int runs = 0;
  shard_dispatch d(handoff::executor_ref{}, 16, [&](const shard_entry&, std::optional<std::string>&) {
    ++runs;
    return entry_end::handled;
  });
  d.dispatch(0, entries(5, {"a", "b"}));                                               // a shard starts anywhere
  EXPECT_THROW(d.dispatch(0, entries(8, {"a"})), std::invalid_argument);               // 7 missing
  EXPECT_THROW(d.dispatch(0, {entry(7, "a"), entry(9, "b")}), std::invalid_argument);  // a gap inside
  EXPECT_EQ(d.room(), 16U);
  d.dispatch(0, entries(7, {"a"}));
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(d.take_ack(0).trim, 3U);
}

TEST_F(ShardDispatch, DropNeverStartsTheShardsQueuedEntriesAndWaitsForTheRunningOne) {
  handoff::thread_pool pool(3);
  std::latch release(1);
  std::atomic<bool> first_started{false};
  std::atomic<bool> first_done{false};
  std::atomic<int> runs_k{0};
  std::atomic<int> finished_other{0};
  shard_dispatch d(pool, 64, [&](const shard_entry& e, std::optional<std::string>&) {
    if (e.key == "k") {
      ++runs_k;
      if (e.seq == 0) {
        first_started = true;
        release.wait();
        first_done = true;
      }
    } else {
      ++finished_other;
    }
    return entry_end::handled;
  });
  d.dispatch(1, entries(0, {"k", "k", "k"}));
  d.dispatch(2, entries(0, {"j", "j", "i"}));
  ASSERT_TRUE(eventually([&] { return first_started.load() && finished_other.load() == 3; }));

  bool done_when_dropped = false;
  {
    const blocking_call drop([&] {
      d.drop(1);
      done_when_dropped = first_done.load();
    });
    const bool blocked = drop.wait_until_blocked();  // waits for the running handler
    release.count_down();
    EXPECT_TRUE(blocked);
  }
  EXPECT_TRUE(done_when_dropped);
  d.dispatch(2, entries(3, {"j", "k"}));  // the other shard goes on (k is its key now)
  d.wait_idle();
  EXPECT_EQ(runs_k.load(), 2);  // k's first entry of shard 1, and the one of shard 2
  EXPECT_EQ(finished_other.load(), 4);
  EXPECT_TRUE(d.take_ack(1).empty());  // nothing of a dropped shard is acknowledged
  EXPECT_EQ(d.take_ack(2).trim, 5U);
  EXPECT_EQ(d.room(), 64U);
  d.dispatch(1, entries(100, {"k"}));  // taken again: a fresh count
  d.wait_idle();
  EXPECT_EQ(d.take_ack(1).trim, 1U);
  EXPECT_TRUE(eventually([&] {
    (void)d.take_ack(1);  // frees the keys whose dropped entries have passed
    return d.live_keys() == 0;
  }));
}

TEST_F(ShardDispatch, ARunThatThrowsIsReportedAndItsEntryCountsAsDead) {
  std::vector<std::string> errors;
  shard_dispatch d(
      handoff::executor_ref{}, 8,
      [&](const shard_entry& e, std::optional<std::string>& state) {
        state = "staged";
        if (e.key == "bad") throw std::runtime_error("boom");
        return entry_end::handled;
      },
      {},
      [&](std::exception_ptr ep) {
        try {
          std::rethrow_exception(ep);
        } catch (const std::runtime_error& x) {
          errors.emplace_back(x.what());
        }
      });
  d.dispatch(0, entries(0, {"bad", "good"}));
  EXPECT_EQ(errors, std::vector<std::string>{"boom"});
  const shard_ack a = d.take_ack(0);
  EXPECT_EQ(a.trim, 2U);
  ASSERT_EQ(a.finished.size(), 2U);
  EXPECT_EQ(a.finished[0].end, entry_end::dead);
  EXPECT_FALSE(a.finished[0].state.has_value());  // what it staged before throwing is dropped
  EXPECT_EQ(a.finished[1].end, entry_end::handled);
}

// An executor that refuses every `period`-th job it is given (every one for period 1),
// and hands the others to `next`.
struct refusing_executor {
  handoff::thread_pool* next = nullptr;
  int period = 1;
  std::atomic<int> calls{0};
  void execute(handoff::work w) {
    if (++calls % period == 0 || next == nullptr) throw std::runtime_error("refused");
    next->execute(w);
  }
};

TEST_F(ShardDispatch, AnExecutorThatRefusesWorkMakesTheOwnerRunThoseKeysInsteadOfStallingThem) {
  refusing_executor ex;
  std::vector<std::thread::id> threads;
  shard_dispatch d(ex, 16, [&](const shard_entry&, std::optional<std::string>&) {
    threads.push_back(std::this_thread::get_id());
    return entry_end::handled;
  });
  d.dispatch(0, entries(0, {"a", "b", "a", "c"}));
  EXPECT_GT(ex.calls.load(), 0);  // it was asked, and refused
  ASSERT_EQ(threads.size(), 4U);  // all ran inside dispatch()
  for (const std::thread::id t : threads) EXPECT_EQ(t, std::this_thread::get_id());
  d.wait_idle();
  EXPECT_EQ(d.take_ack(0).trim, 4U);
}

TEST_F(ShardDispatch, AnExecutorThatRefusesSomeWorkStillRunsEveryEntryOnceInOrder) {
  handoff::thread_pool pool(2);
  refusing_executor ex;
  ex.next = &pool;
  ex.period = 3;
  key_checker checker;
  shard_dispatch d(ex, 256, [&](const shard_entry& e, std::optional<std::string>&) {
    checker.start(e);
    checker.end(e);
    return entry_end::handled;
  });
  for (std::uint64_t batch = 0; batch < 20; ++batch) d.dispatch(0, entries(batch * 5, {"a", "b", "c", "a", "d"}));
  d.wait_idle();
  EXPECT_EQ(checker.runs(), 100);
  EXPECT_EQ(checker.violations(), 0);
  EXPECT_EQ(d.take_ack(0).trim, 100U);
}

TEST_F(ShardDispatch, DestroyingWaitsForTheRunningEntryAndNeverStartsTheQueuedOnes) {
  handoff::thread_pool pool(2);
  std::latch release(1);
  std::atomic<bool> first_started{false};
  std::atomic<int> runs{0};
  auto d = std::make_unique<shard_dispatch>(pool, 16, [&](const shard_entry& e, std::optional<std::string>&) {
    ++runs;
    if (e.seq == 0) {
      first_started = true;
      release.wait();
    }
    return entry_end::handled;
  });
  d->dispatch(0, entries(0, {"k", "k", "k"}));
  ASSERT_TRUE(eventually([&] { return first_started.load(); }));
  {
    const blocking_call destroy([&] { d.reset(); });
    const bool blocked = destroy.wait_until_blocked();
    release.count_down();
    EXPECT_TRUE(blocked);
  }
  EXPECT_EQ(runs.load(), 1);
}

}  // namespace
