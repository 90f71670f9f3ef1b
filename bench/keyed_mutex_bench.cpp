// Keyed-mutex benchmarks: handoff::keyed_mutex<> against the keyed locks people write by
// hand and tbb::concurrent_hash_map accessors, all in this one binary (so that every
// implementation runs on the same machine, build and run, and their ratios compare like
// with like).
//
// Every benchmark is registered as "<workload>/<impl>"; impls starting with "handoff" are
// ours, every other impl of the same workload (and thread count) is a baseline, and
// tools/bench_table.py prints ratio = baseline time / handoff time (> 1: handoff faster).
// Keys are std::string ("player:123", "k:42"), hashed with std::hash<std::string> by every
// implementation.
//
// Implementations (std::string keys):
//   handoff             handoff::keyed_mutex<>: lock() returns the guard, its destructor
//                       unlocks.
//   map_mutex_cleanup   the hand-rolled "map of mutexes": std::unordered_map<std::string,
//                       {std::mutex, users}> under one global std::mutex; lock counts itself
//                       in under the global mutex, then locks the entry's mutex; unlock
//                       unlocks it, and under the global mutex erases the entry when the last
//                       user leaves (erase by key). An exact keyed lock, no memory kept.
//   striped256          256 std::mutex (each on its own cache line), key -> hash % 256. Not
//                       an exact keyed lock (keys of one stripe exclude each other), but the
//                       usual fast baseline.
//   tbb_accessor_erase  tbb::concurrent_hash_map<std::string, int> (oneTBB): the write
//   tbb_accessor_keep   accessor of `map.insert(a, key)`, held, is the lock. _erase unlocks
//                       with map.erase(a) (exact keyed lock, no memory kept); _keep only
//                       releases the accessor (entries accumulate: one per key ever locked).
//                       Built only when CMake finds TBB (HANDOFF_BENCH_TBB).
//   proto_*             prototypes of designs measured before (or instead of) moving the
//                       library, kept as the record (docs/notebook.md): proto_word_* the hot
//                       key on a parking word (km_hotkey), proto_compact a one-line entry
//                       and shard (km_uncontended), proto_thin_* thin keyed locks
//                       (bench/thin_keyed.hpp: no per-key state for an uncontended key;
//                       km_uncontended, km_hotkey under eventual and fifo). Listed as
//                       baselines by the table.
//
// Workloads (time: wall-clock per lock/unlock, all threads together):
//   km_uncontended      threads:1 and threads:2; 1024 keys "player:<random>", each thread
//                       walks its own random sequence of them (pre-generated), so two threads
//                       rarely want the same key at once (when they do, they wait: that is
//                       part of the workload). Under the lock: ++count[key], checked at the
//                       end (sum == lock/unlocks) for every implementation.
//   km_design           The two designs for the per-key state, without any table: 1024
//                       preallocated objects indexed by int, same index walk and check.
//                         handoff_count_b  (b) the ownership protocol alone: an atomic count,
//                                          fetch_add takes the key if it was 0, CAS 1 -> 0
//                                          releases; a request that finds it taken queues a
//                                          node in an intrusive MPSC queue (handoff's
//                                          mailbox) and the releaser hands the key over.
//                         actor_msgs_a     (a) a handoff::actor<lock_state> per key; lock and
//                                          unlock are two posted messages; the lock handler
//                                          grants at once when free (the post runs inline on
//                                          the caller), else queues the caller, which spins
//                                          until the unlock handler hands it the key.
//                         mutex            a std::mutex per key, for scale.
//   km_hotkey           threads:1 and threads:2: every thread locks the same key, increments
//                       a counter, unlocks (count checked). handoff, handoff_eventual (the
//                       same under fairness::eventual, default fair_after: an unlock frees
//                       the key, so a thread relocking it at once may take it ahead of the
//                       waiter), map_mutex_cleanup, striped256, tbb_accessor_erase,
//                       tbb_accessor_keep.
//                       handoff also runs a FIFO check on every call, before the timed loop
//                       (thread 0): the main thread holds "fifo:check", then starts 4 threads,
//                       each 20 ms after the previous one is running, each calling lock() and
//                       recording its number once granted; after the holder unlocks, the
//                       recorded order must be the start order, and size() 0 once all are
//                       done. Counter fifo_ok = 1; anything else is a SkipWithError. Under
//                       eventual the check holds too: only requests that have not queued
//                       can pass a waiter, never another waiter.
//   km_1m_keys          one thread locks and releases "k:0" .. "k:999999" once each (keys
//                       pre-generated). Time per lock/unlock. Counters: rss_growth_kb
//                       (/proc/self/statm resident set after - before, the mutex alive),
//                       size_after (keys with state after the loop: handoff size(), the
//                       map sizes; not 0 is a SkipWithError, except for tbb_accessor_keep).
//                       One repetition: see "Memory" below.
//   km_mem_live_100k    100000 distinct keys held at once (guards in a vector reserved
//                       beforehand): bytes_per_live_key = RSS delta / 100000 and
//                       heap_bytes_per_live_key (glibc heap in use, mallinfo2); then all are
//                       released: size_after must be 0; retained_kb is the RSS still above
//                       the start, heap_retained_kb the heap still allocated (handoff's node
//                       pool keeps freed entries for reuse). handoff and map_mutex_cleanup.
//
// Memory: allocators keep freed memory for reuse (glibc, tbbmalloc, and handoff's node pool,
// which keeps up to 64K free nodes per size class), so a memory delta is meaningful only the
// first time a process reaches that much memory. km_1m_keys and km_mem_live_100k therefore
// run once per process (->Repetitions(1), overriding --benchmark_repetitions), after the
// throughput workloads, whose steady states hold a few thousand entries at most, and
// km_1m_keys/handoff before every other memory workload. Their time is one sample, not a
// median. tbbmalloc's memory does not show in mallinfo2: RSS is the comparable measure.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#if HANDOFF_BENCH_TBB
#include <oneapi/tbb/concurrent_hash_map.h>
#include <oneapi/tbb/version.h>
#endif

#include "bench_support.hpp"
#include "handoff/actor.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/lock_shard.hpp"
#include "handoff/detail/lock_table.hpp"
#include "handoff/detail/mpsc_queue.hpp"
#include "handoff/detail/spin_lock.hpp"
#include "handoff/keyed_mutex.hpp"
#include "thin_keyed.hpp"

namespace {

using handoff::bench::check_total;
using handoff::bench::heap_in_use;

constexpr double min_time_s = 0.3;            // per throughput instance and repetition
constexpr std::size_t key_count = 1024;       // km_uncontended, km_design
constexpr std::size_t walk_length = 1 << 16;  // per-thread index walk (power of two)
constexpr int max_threads = 2;
constexpr std::size_t million = 1000000;   // km_1m_keys
constexpr std::size_t live_keys = 100000;  // km_mem_live_100k
constexpr int fifo_waiters = 4;
constexpr auto fifo_gap = std::chrono::milliseconds(20);

// ---------------------------------------------------------------------------------------
// Measuring.

std::size_t rss_bytes() {
  std::ifstream in("/proc/self/statm");
  std::size_t size = 0, resident = 0;
  in >> size >> resident;
  return resident * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

double kb(std::size_t after, std::size_t before) {
  return (static_cast<double>(after) - static_cast<double>(before)) / 1024.0;
}

// ---------------------------------------------------------------------------------------
// The implementations. Each has guard lock(const std::string&) (the guard unlocks when
// destroyed; the key must outlive it) and size() (keys with state; 0 when it keeps none).

class handoff_impl {
 public:
  explicit handoff_impl(handoff::keyed_mutex_options o = {}) : m_(o) {}
  handoff::key_guard lock(const std::string& key) { return m_.lock(key); }
  std::size_t size() const { return m_.size(); }
  handoff::keyed_mutex<>& mutex() { return m_; }

 private:
  handoff::keyed_mutex<> m_;
};

class map_mutex_cleanup {
  struct entry {
    std::mutex m;
    int users = 0;  // global_
  };

 public:
  class guard {
   public:
    guard(map_mutex_cleanup& owner, const std::string& key) : owner_(owner), key_(key) {
      {
        std::lock_guard lock(owner_.global_);
        e_ = &owner_.map_[key];  // references to elements survive rehashing
        ++e_->users;
      }
      e_->m.lock();
    }
    ~guard() {
      e_->m.unlock();
      std::lock_guard lock(owner_.global_);
      if (--e_->users == 0) owner_.map_.erase(key_);
    }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;

   private:
    map_mutex_cleanup& owner_;
    const std::string& key_;
    entry* e_;
  };

  guard lock(const std::string& key) { return guard(*this, key); }
  std::size_t size() {
    std::lock_guard lock(global_);
    return map_.size();
  }

 private:
  std::mutex global_;
  std::unordered_map<std::string, entry> map_;
};

class striped256 {
  struct alignas(64) stripe {
    std::mutex m;
  };

 public:
  std::unique_lock<std::mutex> lock(const std::string& key) {
    return std::unique_lock<std::mutex>(stripes_[std::hash<std::string>{}(key) % 256].m);
  }
  std::size_t size() const { return 0; }

 private:
  std::unique_ptr<stripe[]> stripes_{new stripe[256]};
};

// ---------------------------------------------------------------------------------------
// km_hotkey prototype: the entry's word as a held bit, a woken flag and a waiter count
// (docs/notebook.md, "Keyed mutex: the hot key on a parking word, prototyped"), on the
// library's own shards and mix_hash, so that only the word's protocol differs from
// handoff's. Entries are never removed (the hot-key workload has one key); the library
// would pin them instead.
//
//   word = held (bit 0) | woken (bit 1) | 4 * queued waiters (front included)
//   lock:    under the shard lock: not held (eventual: whatever waits; fifo: word == 0):
//            CAS to held. Else (eventual) pin the entry, spin on the word outside the shard
//            lock and CAS it when free; the budget spent, join: count, push, park.
//   unlock:  held alone: CAS to 0. Woken set (a woken waiter is awake and competing):
//            clear held, wake nobody. Else pop the oldest waiter (front first): waited
//            fair_after (or fifo): hand over (count - 4, held stays); else make it front,
//            set woken and clear held in one CAS, and wake it.
//   woken:   spin on the word; free: take it (held, leave the count and woken) in one
//            CAS. Budget spent: back to waiting, clear woken (only while held), park.
// Invariant: free with waiters counted implies woken, so a free key always has a taker
// awake and an unlock wakes a thread only when none is.
class proto_word_lock {
  static constexpr std::uint64_t held = 1, woken = 2, one_waiter = 4;
  enum : std::uint32_t { waiting = 0, granted = 1, woken_state = 2 };
  struct waiter : handoff::detail::mailbox_node {
    std::atomic<std::uint32_t> state{waiting};
    std::int64_t queued_at = 0;
  };
  struct entry : handoff::detail::lock_entry {
    entry(std::size_t h, std::string k) : lock_entry(h), key(std::move(k)) {}
    std::string key;
    std::atomic<std::uint64_t> word{0};
    std::atomic<std::uint32_t> pins{0};  // spinners outside the shard lock (would keep it from reclaim)
    waiter* front = nullptr;             // the holder's
    handoff::detail::mpsc_queue queue;   // consumer: the holder
  };

 public:
  class guard {
   public:
    guard(proto_word_lock* p, entry* e) noexcept : p_(p), e_(e) {}
    guard(guard&& o) noexcept : p_(o.p_), e_(std::exchange(o.e_, nullptr)) {}
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    guard& operator=(guard&&) = delete;
    ~guard() {
      if (e_ != nullptr) p_->unlock(e_);
    }

   private:
    proto_word_lock* p_;
    entry* e_;
  };

  explicit proto_word_lock(bool eventual, unsigned spin_budget = 72) : eventual_(eventual), spin_budget_(spin_budget) {}
  proto_word_lock(const proto_word_lock&) = delete;
  proto_word_lock& operator=(const proto_word_lock&) = delete;
  ~proto_word_lock() {
    for (std::size_t i = 0; i < 256; ++i)
      shards_[i].for_each([](handoff::detail::lock_entry* e) { delete static_cast<entry*>(e); });
  }

  guard lock(const std::string& key) {
    const std::size_t h = handoff::detail::mix_hash(std::hash<std::string>{}(key));
    handoff::detail::lock_shard& s = shards_[h >> 56];
    s.lock.lock();
    auto* e = static_cast<entry*>(
        s.find(h, [&](handoff::detail::lock_entry* x) { return static_cast<entry*>(x)->key == key; }));
    if (e == nullptr) {
      e = new entry(h, key);
      s.insert(e);
    }
    std::uint64_t v = e->word.load(std::memory_order_relaxed);
    // acquire; pairs with the release of the previous holder's unlock.
    if ((eventual_ ? (v & held) == 0 : v == 0) &&
        e->word.compare_exchange_strong(v, v | held, std::memory_order_acquire, std::memory_order_relaxed)) {
      s.lock.unlock();
      return {this, e};
    }
    lock_slow(s, e);
    return {this, e};
  }
  std::size_t size() const { return 0; }

 private:
  static std::int64_t now() { return handoff::detail::now_ns(); }
  bool free_now(std::uint64_t v) const { return eventual_ ? (v & held) == 0 : v == 0; }

  // Takes the word if it is free (as the lock's fast path); false if it stayed held.
  bool try_take(entry* e) {
    std::uint64_t v = e->word.load(std::memory_order_relaxed);
    while (free_now(v)) {
      if (e->word.compare_exchange_weak(v, v | held, std::memory_order_acquire, std::memory_order_relaxed)) return true;
    }
    return false;
  }

  [[gnu::noinline]] void lock_slow(handoff::detail::lock_shard& s, entry* e) {
    stat_lock_slow.fetch_add(1, std::memory_order_relaxed);
    const std::int64_t since = now();
    if (eventual_) {
      e->pins.fetch_add(1, std::memory_order_relaxed);  // under the shard lock
      s.lock.unlock();
      for (unsigned i = 0; i < spin_budget_; ++i) {
        handoff::detail::backoff(i);
        if (try_take(e)) {
          e->pins.fetch_sub(1, std::memory_order_release);  // after the take: a reclaimer sees it held
          return;
        }
      }
      s.lock.lock();
      e->pins.fetch_sub(1, std::memory_order_relaxed);
    }
    thread_local waiter w;  // one request at a time per thread; a late notify is harmless
    w.state.store(waiting, std::memory_order_relaxed);
    w.queued_at = since;
    std::uint64_t v = e->word.load(std::memory_order_relaxed);
    for (;;) {
      if (free_now(v)) {
        if (e->word.compare_exchange_weak(v, v | held, std::memory_order_acquire, std::memory_order_relaxed)) {
          s.lock.unlock();
          return;
        }
      } else if (e->word.compare_exchange_weak(v, v + one_waiter, std::memory_order_relaxed)) {
        break;
      }
    }
    e->queue.push(&w);  // under the shard lock: a holder that finds it counted waits briefly
    s.lock.unlock();
    for (;;) {
      std::uint32_t st;
      for (unsigned i = 0; (st = w.state.load(std::memory_order_acquire)) == waiting && i < 64; ++i) {
        handoff::detail::backoff(i);
      }
      if (st == waiting) stat_parks.fetch_add(1, std::memory_order_relaxed);
      while ((st = w.state.load(std::memory_order_acquire)) == waiting)
        w.state.wait(waiting, std::memory_order_acquire);
      if (st == granted || compete(e, &w)) return;
    }
  }

  // The woken waiter: true when it took the key.
  bool compete(entry* e, waiter* w) {
    const auto take = [&](std::uint64_t& v) {
      // Leave the count and clear woken (ours), take the key: one CAS.
      if (!e->word.compare_exchange_weak(v, v - one_waiter - woken + held, std::memory_order_acquire,
                                         std::memory_order_relaxed)) {
        return false;
      }
      e->front = nullptr;  // the holder's now
      return true;
    };
    for (unsigned i = 0; i < spin_budget_; ++i) {
      std::uint64_t v = e->word.load(std::memory_order_relaxed);
      while ((v & held) == 0) {
        if (take(v)) return true;
      }
      handoff::detail::backoff(i);
    }
    // Park: waiting first, then clear woken (release: a holder that sees it cleared sees
    // us waiting), unless the key is free, which we take instead.
    w->state.store(waiting, std::memory_order_relaxed);
    std::uint64_t v = e->word.load(std::memory_order_relaxed);
    for (;;) {
      if ((v & held) == 0) {
        if (take(v)) return true;
      } else if (e->word.compare_exchange_weak(v, v - woken, std::memory_order_release, std::memory_order_relaxed)) {
        return false;
      }
    }
  }

  void unlock(entry* e) {
    std::uint64_t v = held;
    // release; pairs with the next taker's acquire.
    if (e->word.compare_exchange_strong(v, 0, std::memory_order_release, std::memory_order_relaxed)) return;
    stat_unlock_slow.fetch_add(1, std::memory_order_relaxed);
    unlock_slow(e, v);
  }

  [[gnu::noinline]] void unlock_slow(entry* e, std::uint64_t v) {
    for (unsigned spins = 0;;) {
      if (v == held) {
        if (e->word.compare_exchange_weak(v, 0, std::memory_order_release, std::memory_order_relaxed)) return;
        continue;
      }
      if ((v & woken) != 0) {  // a taker is awake: free the key, wake nobody
        if (e->word.compare_exchange_weak(v, v - held, std::memory_order_release, std::memory_order_relaxed)) return;
        continue;
      }
      waiter* w = e->front;
      if (w == nullptr) {
        w = static_cast<waiter*>(e->queue.pop());
        if (w == nullptr) {  // counted, not linked yet
          handoff::detail::backoff(spins++);
          v = e->word.load(std::memory_order_relaxed);
          continue;
        }
      }
      if (eventual_ && now() - w->queued_at < fair_after_ns) {
        e->front = w;
        // Woken set and held cleared together: a free key with waiters always has one awake.
        while (
            !e->word.compare_exchange_weak(v, v + woken - held, std::memory_order_release, std::memory_order_relaxed)) {
        }
        w->state.store(woken_state, std::memory_order_release);
        stat_wakes.fetch_add(1, std::memory_order_relaxed);
        w->state.notify_one();
        return;
      }
      e->front = nullptr;
      e->word.fetch_sub(one_waiter, std::memory_order_relaxed);  // held stays: w's now
      w->state.store(granted, std::memory_order_release);        // pairs with the waiter's acquire
      w->state.notify_one();
      return;
    }
  }

  static constexpr std::int64_t fair_after_ns = 500000;

 public:
  // Per operation in the km_hotkey rows: slow locks and unlocks, wake-ups, parks.
  std::atomic<std::uint64_t> stat_lock_slow{0}, stat_unlock_slow{0}, stat_wakes{0}, stat_parks{0};

 private:
  bool eventual_;
  unsigned spin_budget_;
  std::unique_ptr<handoff::detail::lock_shard[]> shards_{new handoff::detail::lock_shard[256]};
};

// km_uncontended prototype: the memory an uncontended lock touches. handoff's lock reads
// the shard's line, its heap slot table (past two entries), the entry's word line and, 128
// bytes further, its key: four lines per lock from 1,024 entries of 160 bytes. Here a shard
// is one line with seven tagged-pointer slots (16 bits of hash above the 48-bit address) and
// an entry is one line holding the word, the token, the holder and the key, so a found key
// costs two lines. Word as handoff's (count, CAS 0 -> 1 under the shard lock, CAS 1 -> 0);
// a held key is waited for by spinning (the workload rarely meets one). Entries are never
// removed; a shard's eighth key goes to a side list.
class proto_compact_lock {
  struct alignas(64) entry {
    std::atomic<std::uint64_t> word{0};
    std::uint64_t token = 0;
    std::atomic<std::uintptr_t> holder{0};
    std::string key;
  };
  static_assert(sizeof(entry) == 64);
  static constexpr int slot_count = 7;
  struct alignas(64) shard {
    handoff::detail::spin_lock lock;
    std::uintptr_t slots[slot_count] = {};  // tag << 48 | address; 0: empty
  };
  static_assert(sizeof(shard) == 64);
  static constexpr std::uintptr_t address_mask = (std::uintptr_t{1} << 48) - 1;

 public:
  class guard {
   public:
    explicit guard(entry* e) noexcept : e_(e) {}
    guard(guard&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;
    guard& operator=(guard&&) = delete;
    ~guard() {
      if (e_ == nullptr) return;
      std::uint64_t one = 1;
      // release; pairs with the taker's acquire.
      (void)e_->word.compare_exchange_strong(one, 0, std::memory_order_release, std::memory_order_relaxed);
    }

   private:
    entry* e_;
  };

  proto_compact_lock() = default;
  proto_compact_lock(const proto_compact_lock&) = delete;
  proto_compact_lock& operator=(const proto_compact_lock&) = delete;
  ~proto_compact_lock() {
    for (std::size_t i = 0; i < 256; ++i) {
      for (std::uintptr_t x : shards_[i].slots) delete reinterpret_cast<entry*>(x & address_mask);
      for (entry* e : overflow_[i]) delete e;
    }
  }

  guard lock(const std::string& key) {
    const std::size_t h = handoff::detail::mix_hash(std::hash<std::string>{}(key));
    const std::size_t si = h >> 56;
    shard& s = shards_[si];
    const std::uintptr_t tag = (h >> 32 & 0xffff) << 48;
    for (unsigned spins = 0;; handoff::detail::backoff(spins++)) {
      s.lock.lock();
      entry* e = find(s, si, h, tag, key);
      std::uint64_t free = 0;
      // acquire; pairs with the release CAS of the previous holder.
      if (e->word.compare_exchange_strong(free, 1, std::memory_order_acquire, std::memory_order_relaxed)) {
        ++e->token;
        e->holder.store(handoff::detail::lock_table::this_thread_id(), std::memory_order_relaxed);
        s.lock.unlock();
        return guard(e);
      }
      s.lock.unlock();
    }
  }
  std::size_t size() const { return 0; }

 private:
  entry* find(shard& s, std::size_t si, std::size_t h, std::uintptr_t tag, const std::string& key) {
    const unsigned home = static_cast<std::uint32_t>(h) % slot_count;
    for (unsigned n = 0, i = home; n < slot_count; ++n, i = i + 1 == slot_count ? 0 : i + 1) {
      const std::uintptr_t x = s.slots[i];
      if (x == 0) {
        auto* e = new entry;
        e->key = key;
        s.slots[i] = tag | reinterpret_cast<std::uintptr_t>(e);
        return e;
      }
      if ((x & ~address_mask) == tag) {
        auto* e = reinterpret_cast<entry*>(x & address_mask);
        if (e->key == key) return e;
      }
    }
    for (entry* e : overflow_[si]) {
      if (e->key == key) return e;
    }
    auto* e = new entry;
    e->key = key;
    overflow_[si].push_back(e);
    return e;
  }

  std::unique_ptr<shard[]> shards_{new shard[256]};
  std::unique_ptr<std::vector<entry*>[]> overflow_ { new std::vector<entry*>[ 256 ] };
};

// Implementations that keep an entry per key ever locked (size() grows by design).
template <class Impl>
constexpr bool keeps_entries = false;

#if HANDOFF_BENCH_TBB
template <bool Erase>
class tbb_accessor {
  using map_type = tbb::concurrent_hash_map<std::string, int>;

 public:
  class guard {
   public:
    guard(map_type& map, const std::string& key) : map_(map) { map_.insert(a_, key); }
    ~guard() {
      if constexpr (Erase) map_.erase(a_);  // else the accessor's destructor releases it
    }
    guard(const guard&) = delete;
    guard& operator=(const guard&) = delete;

   private:
    map_type& map_;
    map_type::accessor a_;
  };

  guard lock(const std::string& key) { return guard(map_, key); }
  std::size_t size() const { return map_.size(); }

 private:
  map_type map_;
};
using tbb_accessor_erase = tbb_accessor<true>;
using tbb_accessor_keep = tbb_accessor<false>;
template <>
constexpr bool keeps_entries<tbb_accessor_keep> = true;
#endif

// ---------------------------------------------------------------------------------------
// km_design: per-key objects indexed by int, no table.

// (b) The ownership protocol alone. count: requests accepted and not finished (the holder
// plus queued waiters).
class count_lock {
  struct waiter : handoff::detail::mailbox_node {
    std::atomic<bool> granted{false};
  };

 public:
  void lock() noexcept {
    // acquire; pairs with the release CAS in unlock() of the previous holder.
    if (count_.fetch_add(1, std::memory_order_acquire) == 0) return;
    waiter w;
    waiters_.push(&w);
    // acquire; pairs with the release store of the hand-off in unlock().
    for (unsigned spins = 0; !w.granted.load(std::memory_order_acquire);) handoff::detail::backoff(spins++);
  }
  void unlock() noexcept {
    std::uint32_t one = 1;
    // release; pairs with the acquire fetch_add of the next locker.
    if (count_.compare_exchange_strong(one, 0, std::memory_order_release, std::memory_order_relaxed)) return;
    handoff::detail::mailbox_node* n;
    // Counted, maybe not yet pushed: wait for the push.
    for (unsigned spins = 0; (n = waiters_.pop()) == nullptr;) handoff::detail::backoff(spins++);
    count_.fetch_sub(1, std::memory_order_relaxed);  // our own request; the waiter's stays counted
    // release; pairs with the waiter's acquire load. The waiter may return at once: n is
    // not touched after this store.
    static_cast<waiter*>(n)->granted.store(true, std::memory_order_release);
  }

 private:
  std::atomic<std::uint32_t> count_{0};
  handoff::detail::mpsc_queue waiters_;  // consumer: the holder
};

// (a) A per-key actor; lock and unlock are messages.
struct actor_waiter {
  std::atomic<bool> granted{false};
  actor_waiter* next = nullptr;  // the actor's queue (handler-only)
};
struct lock_state {
  bool held = false;
  actor_waiter* head = nullptr;  // FIFO of waiting requests
  actor_waiter* tail = nullptr;
};
class actor_lock {
 public:
  void lock() {
    actor_waiter w;
    actor_.post([&w](lock_state& s) noexcept {
      if (!s.held) {
        s.held = true;
        w.granted.store(true, std::memory_order_release);  // pairs with the acquire below
        return;
      }
      (s.tail != nullptr ? s.tail->next : s.head) = &w;
      s.tail = &w;
    });
    // Uncontended, the post ran the handler inline: granted already.
    for (unsigned spins = 0; !w.granted.load(std::memory_order_acquire);) handoff::detail::backoff(spins++);
  }
  void unlock() {
    actor_.post([](lock_state& s) noexcept {
      actor_waiter* w = s.head;
      if (w == nullptr) {
        s.held = false;
        return;
      }
      s.head = w->next;
      if (s.head == nullptr) s.tail = nullptr;
      w->granted.store(true, std::memory_order_release);  // w may be gone after this
    });
  }

 private:
  handoff::actor<lock_state> actor_;
};

struct mutex_lock {
  std::mutex m;
  void lock() { m.lock(); }
  void unlock() { m.unlock(); }
};

// ---------------------------------------------------------------------------------------
// Shared inputs; built in main, read-only during the runs (except the checked counters,
// which are written under the lock being measured).

struct inputs {
  std::vector<std::string> keys;                                            // key_count "player:<n>", distinct
  std::vector<std::vector<std::uint16_t>> walk;                             // per thread: indexes into keys
  std::vector<std::string> many;                                            // "k:0" .. "k:999999"
  std::unique_ptr<std::uint64_t[]> counts{new std::uint64_t[key_count]()};  // per key
  std::string hot_key = "player:42";
  alignas(64) std::uint64_t hot_count = 0;

  inputs() {
    std::mt19937 rng(20240601);
    std::uniform_int_distribution<std::uint32_t> id(0, 999999);
    std::unordered_set<std::string> seen;
    while (keys.size() < key_count) {
      std::string k = "player:" + std::to_string(id(rng));
      if (seen.insert(k).second) keys.push_back(std::move(k));
    }
    std::uniform_int_distribution<std::uint16_t> pick(0, key_count - 1);
    walk.resize(max_threads);
    for (auto& w : walk) {
      w.resize(walk_length);
      for (auto& i : w) i = pick(rng);
    }
    many.reserve(million);
    for (std::size_t i = 0; i < million; ++i) many.push_back("k:" + std::to_string(i));
  }
  std::uint64_t total() const {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < key_count; ++i) sum += counts[i];
    return sum;
  }
};

// ---------------------------------------------------------------------------------------
// Benchmarks. Google Benchmark's start and stop barriers (inside the loop machinery) order
// thread 0's reads before and after the loop with every thread's loop.

template <class Impl>
void bm_uncontended(benchmark::State& state, Impl& impl, inputs& in) {
  const std::uint64_t before = state.thread_index() == 0 ? in.total() : 0;
  const std::uint16_t* walk = in.walk[static_cast<std::size_t>(state.thread_index())].data();
  const std::string* keys = in.keys.data();
  std::uint64_t* counts = in.counts.get();
  std::size_t i = 0;
  for (auto _ : state) {
    const std::uint16_t k = walk[i++ & (walk_length - 1)];
    auto g = impl.lock(keys[k]);
    ++counts[k];
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) check_total(state, before, in.total());
}

template <class Lock>
void bm_design(benchmark::State& state, Lock* locks, inputs& in) {
  const std::uint64_t before = state.thread_index() == 0 ? in.total() : 0;
  const std::uint16_t* walk = in.walk[static_cast<std::size_t>(state.thread_index())].data();
  std::uint64_t* counts = in.counts.get();
  std::size_t i = 0;
  for (auto _ : state) {
    const std::uint16_t k = walk[i++ & (walk_length - 1)];
    locks[k].lock();
    ++counts[k];
    locks[k].unlock();
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) check_total(state, before, in.total());
}

// The FIFO check (see the overview). Returns an empty string when the grants came in
// start order, else a description of the order seen.
std::string fifo_check(handoff::keyed_mutex<>& m) {
  const std::string key = "fifo:check";
  std::vector<int> order;        // written under the key
  std::atomic<int> calling{-1};  // the last waiter that is about to call lock()
  auto holder = m.lock(key);
  std::vector<std::thread> threads;
  for (int i = 0; i < fifo_waiters; ++i) {
    threads.emplace_back([&m, &key, &order, &calling, i] {
      calling.store(i, std::memory_order_release);
      auto g = m.lock(key);
      order.push_back(i);
    });
    // A thread can take long to start on a loaded machine: wait until it runs, then give
    // it fifo_gap to reach the queue (and fall asleep) before the next one starts.
    while (calling.load(std::memory_order_acquire) != i) std::this_thread::yield();
    std::this_thread::sleep_for(fifo_gap);
  }
  holder.unlock();
  for (auto& t : threads) t.join();
  bool ok = order.size() == static_cast<std::size_t>(fifo_waiters);
  for (int i = 0; ok && i < fifo_waiters; ++i) ok = order[static_cast<std::size_t>(i)] == i;
  if (ok && m.size() == 0) return {};
  std::string seen = "FIFO violated: grant order";
  for (int i : order) {
    seen += ' ';
    seen += std::to_string(i);
  }
  seen += " (expected 0.." + std::to_string(fifo_waiters - 1) + "), size() after = " + std::to_string(m.size());
  return seen;
}

template <class Impl>
void bm_hotkey(benchmark::State& state, Impl& impl, inputs& in) {
  std::uint64_t before = 0;
  if (state.thread_index() == 0) {
    if constexpr (std::is_same_v<Impl, handoff_impl>) {
      if (const std::string error = fifo_check(impl.mutex()); !error.empty()) {
        state.SkipWithError(error.c_str());
      } else {
        state.counters["fifo_ok"] = 1;
      }
    }
    before = in.hot_count;
  }
  const std::string& key = in.hot_key;
  if constexpr (std::is_same_v<Impl, proto_word_lock>) {
    if (state.thread_index() == 0) impl.stat_lock_slow = impl.stat_unlock_slow = impl.stat_wakes = impl.stat_parks = 0;
  }
  for (auto _ : state) {
    auto g = impl.lock(key);
    ++in.hot_count;
  }
  state.SetItemsProcessed(state.iterations());
  if constexpr (std::is_same_v<Impl, proto_word_lock>) {
    if (state.thread_index() == 0) {
      const auto per = [&](const std::atomic<std::uint64_t>& c) {
        return benchmark::Counter(static_cast<double>(c.load()) / static_cast<double>(state.iterations()) /
                                  state.threads());
      };
      state.counters["lock_slow"] = per(impl.stat_lock_slow);
      state.counters["unlock_slow"] = per(impl.stat_unlock_slow);
      state.counters["wakes"] = per(impl.stat_wakes);
      state.counters["parks"] = per(impl.stat_parks);
    }
  }
  if (state.thread_index() == 0) check_total(state, before, in.hot_count);
}

template <class Impl>
void bm_million_keys(benchmark::State& state, inputs& in) {
  auto impl = std::make_unique<Impl>();  // fresh, before the first measurement
  const std::size_t rss0 = rss_bytes();
  const std::string* keys = in.many.data();
  std::size_t i = 0;
  for (auto _ : state) {
    auto g = impl->lock(keys[i]);
    i = i + 1 == million ? 0 : i + 1;
  }
  const std::size_t size_after = impl->size();
  state.counters["rss_growth_kb"] = kb(rss_bytes(), rss0);
  state.counters["size_after"] = static_cast<double>(size_after);
  state.SetItemsProcessed(state.iterations());
  if (size_after != 0 && !keeps_entries<Impl>) state.SkipWithError("size() != 0 after every key was released");
}

template <class Impl>
void bm_live_keys(benchmark::State& state, inputs& in) {
  using guard = decltype(std::declval<Impl&>().lock(std::declval<const std::string&>()));
  double per_key = 0, heap_per_key = 0, retained = 0, heap_retained = 0, size_held = 0, size_after = 0;
  for (auto _ : state) {
    auto impl = std::make_unique<Impl>();
    std::vector<std::unique_ptr<guard>> guards;  // unique_ptr: not every guard is movable
    guards.reserve(live_keys);
    // The guards' own memory (one small allocation each for the unique_ptr) is not the
    // keyed lock's: allocate them all first and construct in place.
    std::vector<void*> slots(live_keys);
    for (auto& p : slots) p = ::operator new(sizeof(guard));
    const std::size_t rss0 = rss_bytes();
    const std::size_t heap0 = heap_in_use();
    for (std::size_t k = 0; k < live_keys; ++k) {
      guards.emplace_back(::new (slots[k]) guard(impl->lock(in.many[k])));
    }
    const std::size_t rss1 = rss_bytes();
    const std::size_t heap1 = heap_in_use();
    size_held = static_cast<double>(impl->size());
    guards.clear();
    size_after = static_cast<double>(impl->size());
    retained = kb(rss_bytes(), rss0);
    heap_retained = kb(heap_in_use(), heap0);
    per_key = (static_cast<double>(rss1) - static_cast<double>(rss0)) / live_keys;
    heap_per_key = (static_cast<double>(heap1) - static_cast<double>(heap0)) / live_keys;
  }
  state.counters["bytes_per_live_key"] = per_key;
  state.counters["heap_bytes_per_live_key"] = heap_per_key;
  state.counters["size_held"] = size_held;
  state.counters["size_after"] = size_after;
  state.counters["retained_kb"] = retained;
  state.counters["heap_retained_kb"] = heap_retained;
  if (size_after != 0) state.SkipWithError("size() != 0 after every guard was released");
}

// A throughput benchmark: real time, min_time_s per instance.
template <class F>
benchmark::internal::Benchmark* add(const std::string& name, F&& fn) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))->UseRealTime()->MinTime(min_time_s);
}

// A memory benchmark: one run per process (see the overview).
template <class F>
benchmark::internal::Benchmark* add_once(const std::string& name, F&& fn, benchmark::IterationCount iterations) {
  return benchmark::RegisterBenchmark(name.c_str(), std::forward<F>(fn))
      ->UseRealTime()
      ->Iterations(iterations)
      ->Repetitions(1);
}

}  // namespace

int main(int argc, char** argv) {
  handoff::bench::parked_thread idle;  // see parked_thread: before anything is measured

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  handoff::bench::add_machine_context();
  benchmark::AddCustomContext("parked_thread", "yes (glibc multi-threaded lock paths)");
#if HANDOFF_BENCH_TBB
  benchmark::AddCustomContext("tbb", std::to_string(TBB_VERSION_MAJOR) + "." + std::to_string(TBB_VERSION_MINOR));
#else
  benchmark::AddCustomContext("tbb", "not found: tbb_accessor_* not built");
#endif
  benchmark::AddCustomContext("keyed_mutex_keys", std::to_string(key_count) +
                                                      " keys \"player:<random>\" for km_uncontended and km_design, "
                                                      "\"k:0\"..\"k:999999\" for km_1m_keys and km_mem_live_100k");
  benchmark::AddCustomContext("sizeof_lock_entry", std::to_string(sizeof(handoff::detail::lock_entry)));

  inputs in;

  // Implementations shared by the runs of a workload; they outlive every run.
  handoff_impl h_unc, h_hot;
  handoff_impl h_hot_eventual{{.fairness = handoff::fairness::eventual}};
  map_mutex_cleanup map_unc, map_hot;
  striped256 striped_unc, striped_hot;
#if HANDOFF_BENCH_TBB
  tbb_accessor_erase tbb_erase_unc, tbb_erase_hot;
  tbb_accessor_keep tbb_keep_unc, tbb_keep_hot;
#endif

  // 1. Uncontended lock/unlock over 1024 keys.
  const auto uncontended = [&](const std::string& impl, auto& target) {
    add("km_uncontended/" + impl, [&target, &in](benchmark::State& s) { bm_uncontended(s, target, in); })
        ->Threads(1)
        ->Threads(2);
  };
  uncontended("handoff", h_unc);
  uncontended("map_mutex_cleanup", map_unc);
  uncontended("striped256", striped_unc);
  proto_word_lock proto_unc(false);
  uncontended("proto_word_fifo", proto_unc);
  proto_compact_lock proto_compact_unc;
  uncontended("proto_compact", proto_compact_unc);
  proto_thin::thin_lock proto_thin_unc;
  uncontended("proto_thin", proto_thin_unc);
#if HANDOFF_BENCH_TBB
  uncontended("tbb_accessor_erase", tbb_erase_unc);
  uncontended("tbb_accessor_keep", tbb_keep_unc);
#endif

  // 2. The per-key state's design, without a table.
  std::unique_ptr<count_lock[]> design_b(new count_lock[key_count]);
  std::unique_ptr<actor_lock[]> design_a(new actor_lock[key_count]);
  std::unique_ptr<mutex_lock[]> design_mutex(new mutex_lock[key_count]);
  add("km_design/handoff_count_b", [&](benchmark::State& s) { bm_design(s, design_b.get(), in); })
      ->Threads(1)
      ->Threads(2);
  add("km_design/actor_msgs_a", [&](benchmark::State& s) { bm_design(s, design_a.get(), in); })->Threads(1)->Threads(2);
  add("km_design/mutex", [&](benchmark::State& s) { bm_design(s, design_mutex.get(), in); })->Threads(1)->Threads(2);

  // 3. One hot key (with the FIFO check for handoff).
  const auto hot = [&](const std::string& impl, auto& target) {
    add("km_hotkey/" + impl, [&target, &in](benchmark::State& s) { bm_hotkey(s, target, in); })->Threads(1)->Threads(2);
  };
  hot("handoff", h_hot);
  hot("handoff_eventual", h_hot_eventual);
  hot("map_mutex_cleanup", map_hot);
  hot("striped256", striped_hot);
  proto_word_lock proto_eventual(true), proto_fifo(false), proto_eventual_nospin(true, 0);
  hot("proto_word_eventual", proto_eventual);
  hot("proto_word_eventual_nospin", proto_eventual_nospin);
  hot("proto_word_fifo", proto_fifo);
  proto_thin::thin_lock proto_thin_eventual(true), proto_thin_fifo(false);
  hot("proto_thin_eventual", proto_thin_eventual);
  hot("proto_thin_fifo", proto_thin_fifo);
#if HANDOFF_BENCH_TBB
  hot("tbb_accessor_erase", tbb_erase_hot);
  hot("tbb_accessor_keep", tbb_keep_hot);
#endif

  // 4. A million distinct keys, each locked and released once: first, so that no earlier
  // workload has left freed memory for it to reuse. tbb_accessor_keep last of them: its
  // million entries stay in tbbmalloc, which the glibc heap of the next workload cannot use.
  const auto millions = [&](const std::string& impl, auto tag) {
    using impl_type = typename decltype(tag)::type;
    add_once(
        "km_1m_keys/" + impl, [&in](benchmark::State& s) { bm_million_keys<impl_type>(s, in); },
        static_cast<benchmark::IterationCount>(million));
  };
  millions("handoff", std::type_identity<handoff_impl>{});
  millions("map_mutex_cleanup", std::type_identity<map_mutex_cleanup>{});
  millions("proto_thin", std::type_identity<proto_thin::thin_lock>{});
#if HANDOFF_BENCH_TBB
  millions("tbb_accessor_erase", std::type_identity<tbb_accessor_erase>{});
  millions("tbb_accessor_keep", std::type_identity<tbb_accessor_keep>{});
#endif

  // 5. Bytes per live key. handoff first: its RSS delta is a cold measurement; the map's
  // RSS delta then reuses what handoff freed (its heap delta is the comparable number).
  add_once(
      "km_mem_live_100k/handoff", [&](benchmark::State& s) { bm_live_keys<handoff_impl>(s, in); }, 1);
  add_once(
      "km_mem_live_100k/map_mutex_cleanup", [&](benchmark::State& s) { bm_live_keys<map_mutex_cleanup>(s, in); }, 1);
  add_once(
      "km_mem_live_100k/proto_thin", [&](benchmark::State& s) { bm_live_keys<proto_thin::thin_lock>(s, in); }, 1);

  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
