// Prototype of thin keyed locks (docs/notebook.md, "Thin keyed locks, prototyped"): an
// uncontended key has no state in any table. A fixed array of one-line stripes; a key
// always maps to one stripe. Measured beside the library's keyed_mutex in
// bench/keyed_mutex_bench.cpp and bench/instructions.cpp before the library moves to it.
//
// The stripe word:
//   0            free
//   R            thin-held: R is the holder's record (key, hash, token), 64-byte aligned
//   R | parked   thin-held, and threads may be parked on the stripe for the holder's key
//   inflated     the stripe's keys are served by its table (slow path, exact per key)
//
//   lock:    fill this thread's record R (key copy, hash, token 0); CAS 0 -> R (acq_rel:
//            acquires the previous owner's release, publishes R's key to an inflater).
//            Owning the word owns the stripe's token counter: token = ++counter, then
//            R.token = token (release; an inflater waits for it).
//   unlock:  CAS R -> 0 (release). Parked set: CAS R|parked -> 0, then wake one parked
//            thread. Inflated: the table, under its mutex.
//   contended (the word holds another record H): spin on the word a while; then, under
//            eventual fairness and when H's hash is this key's (a hint: H may be reused
//            meanwhile, it is only read through atomics), set parked and sleep on the
//            stripe's futex; a thread that parked takes the key with parked set, so that
//            its unlock wakes the next, or, going to the table instead, wakes one sleeper
//            first (tests/model/thin_lock.pml found that wake-up lost without it).
//            Otherwise inflate: CAS H(|parked) -> inflated
//            under the table's mutex. H's holder can no longer release without that mutex,
//            so H is stable: its key goes into the table as held, with its token (waited
//            for), and the parked threads are woken to queue in the table.
//   deflate: the table's last holder and waiter gone: word = 0 (release), under the mutex.
//
// Tokens: one counter per stripe, owned by whoever owns the word (a thin holder, or the
// table's mutex while inflated), so a key's tokens rise across inflation and deflation.
// Records are type-stable: never freed while the process runs, recycled through a
// per-thread cache, so a racing reader of a record's hash never reads freed memory.
//
// Prototype limits: the table is a mutex, a condition variable and a list (not the
// library's FIFO entries, leases and async waiters); parked threads do not move to FIFO
// after fair_after; records of exited threads are not returned; no deadlock detection
// beyond the record's thread (stored, as the library would).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace proto_thin {

inline std::size_t mix(std::size_t h) noexcept {
  h ^= h >> 32;
  h *= 0x9E3779B97F4A7C15ull;
  return h ^ (h >> 29);
}

inline void pause() noexcept { __builtin_ia32_pause(); }

constexpr std::size_t inline_key = 39;

struct alignas(64) record {
  std::atomic<std::uint64_t> hash{0};     // a hint for would-be parkers; exact compares read key
  std::atomic<std::uint64_t> token{0};    // 0 until the holder published it (release)
  std::atomic<std::uintptr_t> thread{0};  // the locking thread, for deadlock detection
  record* next = nullptr;                 // a free list's; touched by its owner only
  std::uint8_t len = 0;                   // written before the CAS that publishes R
  char key[inline_key - 8] = {};
};
static_assert(sizeof(record) == 64);
constexpr std::size_t max_thin_key = sizeof(record::key);

// Records: a per-thread cache in front of a global list; slabs are never freed.
struct record_cache {
  record* head = nullptr;
  unsigned count = 0;
};
inline thread_local record_cache local_records;

class record_pool {
 public:
  [[gnu::always_inline]] static record* pop() noexcept {
    cache& c = local_records;
    record* r = c.head;
    if (r == nullptr) [[unlikely]]
      return refill(c);
    c.head = r->next;
    --c.count;
    return r;
  }
  [[gnu::always_inline]] static void push(record* r) noexcept {
    cache& c = local_records;
    r->next = c.head;
    c.head = r;
    if (++c.count > 64) [[unlikely]]
      spill(c);
  }

 private:
  using cache = record_cache;
  static inline std::mutex m;
  static inline record* global = nullptr;

  [[gnu::noinline]] static record* refill(cache& c) {
    std::lock_guard g(m);
    for (int i = 0; i < 32; ++i) {
      record* r = global;
      if (r == nullptr) {
        r = new record[16];  // type-stable: never deleted
        for (int j = 1; j < 16; ++j) {
          r[j].next = global;
          global = &r[j];
        }
      } else {
        global = r->next;
      }
      r->next = c.head;
      c.head = r;
      ++c.count;
    }
    record* r = c.head;
    c.head = r->next;
    --c.count;
    return r;
  }
  [[gnu::noinline]] static void spill(cache& c) {
    std::lock_guard g(m);
    while (c.count > 32) {
      record* r = c.head;
      c.head = r->next;
      --c.count;
      r->next = global;
      global = r;
    }
  }
};

inline std::uintptr_t this_thread_id() noexcept {
  static thread_local char anchor;
  return reinterpret_cast<std::uintptr_t>(&anchor);
}

class thin_lock {
  static constexpr std::uintptr_t parked = 1, inflated = 2, flags = 63;

  struct held_key {
    std::string key;
    std::uint64_t token;
    std::size_t hash;
  };
  struct table {
    std::mutex m;
    std::condition_variable cv;
    std::vector<std::unique_ptr<held_key>> held;  // keys held while the stripe is inflated
    unsigned waiting = 0;
  };
  struct alignas(64) stripe {
    std::atomic<std::uintptr_t> word{0};
    std::uint64_t counter = 0;          // the last token; owned by the word's owner
    std::atomic<std::uint32_t> seq{0};  // futex word of the threads parked here
    std::atomic<table*> tab{nullptr};   // made at the first inflation, kept
  };

 public:
  // A holder: its record (thin) or its table entry (tagged with bit 0), and its token.
  class guard {
   public:
    guard() = default;
    guard(thin_lock* l, record* r, std::uint64_t t) noexcept : l_(l), p_(reinterpret_cast<std::uintptr_t>(r)), t_(t) {}
    guard(thin_lock* l, held_key* k, std::uint64_t t) noexcept
        : l_(l), p_(reinterpret_cast<std::uintptr_t>(k) | 1), t_(t) {}
    guard(guard&& o) noexcept : l_(o.l_), p_(std::exchange(o.p_, 0)), t_(o.t_) {}
    guard& operator=(guard&&) = delete;
    [[gnu::always_inline]] ~guard() {
      if (p_ == 0) return;
      if ((p_ & 1) == 0) [[likely]] {
        l_->unlock_thin(reinterpret_cast<record*>(p_));
      } else {
        l_->unlock_table(reinterpret_cast<held_key*>(p_ & ~std::uintptr_t{1}));
      }
    }
    [[nodiscard]] bool owns_lock() const noexcept { return p_ != 0; }
    [[nodiscard]] std::uint64_t token() const noexcept { return t_; }

   private:
    thin_lock* l_ = nullptr;
    std::uintptr_t p_ = 0;
    std::uint64_t t_ = 0;
  };

  explicit thin_lock(bool eventual = true, unsigned spins = 128) : eventual_(eventual), spins_(spins) {}
  thin_lock(const thin_lock&) = delete;
  thin_lock& operator=(const thin_lock&) = delete;
  ~thin_lock() {
    for (std::size_t i = 0; i < 256; ++i) delete stripes_[i].tab.load(std::memory_order_relaxed);
  }

  [[gnu::always_inline]] guard lock(const std::string& key) {
    const std::size_t h = mix(std::hash<std::string>{}(key));
    stripe& s = stripes_[h >> 56];
    if (key.size() > max_thin_key) [[unlikely]]
      return lock_table(s, key, h);
    record* r = record_pool::pop();
    r->hash.store(h, std::memory_order_relaxed);
    r->token.store(0, std::memory_order_relaxed);
    r->thread.store(this_thread_id(), std::memory_order_relaxed);
    r->len = static_cast<std::uint8_t>(key.size());
    copy_small(r->key, key.data(), key.size());
    std::uintptr_t w = 0;
    // Failure: acquire too, since the slow path reads the holder's record.
    if (s.word.compare_exchange_strong(w, reinterpret_cast<std::uintptr_t>(r), std::memory_order_acq_rel,
                                       std::memory_order_acquire)) [[likely]]
      return {this, r, take_token(s, r)};
    return lock_slow(s, r, key, h, w);
  }

  // Keys thin-held or held through a table (a snapshot).
  std::size_t size() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < 256; ++i) {
      const stripe& s = stripes_[i];
      const std::uintptr_t w = s.word.load(std::memory_order_acquire);
      if (w != 0 && w != parked && w != inflated) ++n;
      if (table* t = s.tab.load(std::memory_order_acquire)) {
        std::lock_guard g(t->m);
        n += t->held.size();
      }
    }
    return n;
  }

  // Statistics of the slow paths, for the benchmark's counters.
  std::atomic<std::uint64_t> stat_inflations{0}, stat_parks{0}, stat_wakes{0};

 private:
  // n <= max_thin_key bytes, as a few fixed-size moves (no call).
  [[gnu::always_inline]] static void copy_small(char* d, const char* s, std::size_t n) noexcept {
    if (n >= 16) {
      std::memcpy(d, s, 16);
      std::memcpy(d + n - 16, s + n - 16, 16);
    } else if (n >= 8) {
      std::memcpy(d, s, 8);
      std::memcpy(d + n - 8, s + n - 8, 8);
    } else if (n >= 4) {
      std::memcpy(d, s, 4);
      std::memcpy(d + n - 4, s + n - 4, 4);
    } else {
      for (std::size_t i = 0; i < n; ++i) d[i] = s[i];
    }
  }
  stripe& stripe_of(const record* r) noexcept { return stripes_[r->hash.load(std::memory_order_relaxed) >> 56]; }

  static std::uint64_t take_token(stripe& s, record* r) noexcept {
    const std::uint64_t t = ++s.counter;
    r->token.store(t, std::memory_order_release);  // pairs with the inflater's acquire
    return t;
  }
  static record* record_of(std::uintptr_t w) noexcept { return reinterpret_cast<record*>(w & ~flags); }
  static void futex_wait(std::atomic<std::uint32_t>& a, std::uint32_t v) noexcept {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&a), FUTEX_WAIT_PRIVATE, v, nullptr, nullptr, 0);
  }
  static void futex_wake(std::atomic<std::uint32_t>& a, int n) noexcept {
    syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&a), FUTEX_WAKE_PRIVATE, n, nullptr, nullptr, 0);
  }
  void wake(stripe& s, int n) noexcept {
    s.seq.fetch_add(1, std::memory_order_release);
    futex_wake(s.seq, n);
    stat_wakes.fetch_add(1, std::memory_order_relaxed);
  }

  [[gnu::noinline]] guard lock_slow(stripe& s, record* r, const std::string& key, std::size_t h, std::uintptr_t w) {
    const std::uintptr_t mine = reinterpret_cast<std::uintptr_t>(r);
    std::uintptr_t take_flags = 0;  // parked, once this thread has parked: its unlock wakes the next
    unsigned spins = 0;
    // To the table. A thread that parked may have used the wake-up that the unlock which
    // cleared `parked` gave to one sleeper, in place of others still asleep: it passes
    // one on, for it will not take the key with `parked` set.
    const auto to_table = [&] {
      record_pool::push(r);
      if (take_flags != 0) wake(s, 1);
      return lock_table(s, key, h);
    };
    for (;;) {
      if ((w & ~flags) == 0 && w != inflated) {  // free (0 or parked): take it, keeping parked
        if (s.word.compare_exchange_weak(w, mine | (w & parked) | take_flags, std::memory_order_acq_rel,
                                         std::memory_order_acquire))
          return {this, r, take_token(s, r)};
        continue;
      }
      if (w == inflated) {
        return to_table();
      }
      record* holder = record_of(w);
      if (holder->thread.load(std::memory_order_relaxed) == this_thread_id()) {
        // This thread holds the stripe (its own record: stable): the same key would be a
        // self-deadlock (the library throws); another key of the stripe takes the table.
        return to_table();
      }
      if (spins < spins_) {
        ++spins;
        pause();
        w = s.word.load(std::memory_order_acquire);  // a new holder's record is read next
        continue;
      }
      if (!eventual_ || holder->hash.load(std::memory_order_relaxed) != h) {
        return to_table();
      }
      // Park until the holder's unlock (it wakes one parked thread).
      if ((w & parked) == 0 &&
          !s.word.compare_exchange_weak(w, w | parked, std::memory_order_acquire, std::memory_order_acquire))
        continue;
      take_flags = parked;
      const std::uint32_t seq = s.seq.load(std::memory_order_acquire);
      w = s.word.load(std::memory_order_acquire);
      if ((w & parked) != 0 && record_of(w) != nullptr) {
        stat_parks.fetch_add(1, std::memory_order_relaxed);
        futex_wait(s.seq, seq);
      }
      spins = 0;
      w = s.word.load(std::memory_order_acquire);
    }
  }

  [[gnu::always_inline]] void unlock_thin(record* r) noexcept {
    stripe& s = stripe_of(r);
    std::uintptr_t w = reinterpret_cast<std::uintptr_t>(r);
    if (s.word.compare_exchange_strong(w, 0, std::memory_order_release, std::memory_order_relaxed)) [[likely]] {
      record_pool::push(r);
      return;
    }
    unlock_thin_slow(s, r, w);
  }
  [[gnu::noinline]] void unlock_thin_slow(stripe& s, record* r, std::uintptr_t w) noexcept {
    const std::uintptr_t mine = reinterpret_cast<std::uintptr_t>(r);
    while (w == (mine | parked)) {
      if (s.word.compare_exchange_weak(w, 0, std::memory_order_release, std::memory_order_relaxed)) {
        wake(s, 1);
        record_pool::push(r);
        return;
      }
    }
    // Inflated: this key is in the table, as held, since the inflation.
    table& t = *s.tab.load(std::memory_order_acquire);
    {
      std::lock_guard g(t.m);
      for (auto it = t.held.begin(); it != t.held.end(); ++it) {
        if ((*it)->token == r->token.load(std::memory_order_relaxed) &&
            (*it)->key == std::string_view(r->key, r->len)) {
          t.held.erase(it);
          break;
        }
      }
      release_locked(s, t);
    }
    record_pool::push(r);
  }

  [[gnu::noinline]] void unlock_table(held_key* k) noexcept {
    stripe& s = stripes_[k->hash >> 56];
    table& t = *s.tab.load(std::memory_order_acquire);
    std::lock_guard g(t.m);
    for (auto it = t.held.begin(); it != t.held.end(); ++it) {
      if (it->get() == k) {
        t.held.erase(it);
        break;
      }
    }
    release_locked(s, t);
  }
  // With t.m held, after a key left t.held: waiters retry; nobody left: deflate.
  static void release_locked(stripe& s, table& t) noexcept {
    if (t.waiting != 0) {
      t.cv.notify_all();
    } else if (t.held.empty()) {
      s.word.store(0, std::memory_order_release);  // pairs with the next owner's acquire CAS
    }
  }

  table& table_of(stripe& s) {
    table* t = s.tab.load(std::memory_order_acquire);
    if (t != nullptr) return *t;
    auto fresh = std::make_unique<table>();
    if (s.tab.compare_exchange_strong(t, fresh.get(), std::memory_order_acq_rel, std::memory_order_acquire))
      return *fresh.release();
    return *t;
  }

  [[gnu::noinline]] guard lock_table(stripe& s, const std::string& key, std::size_t h) {
    table& t = table_of(s);
    std::unique_lock g(t.m);
    for (;;) {
      std::uintptr_t w = s.word.load(std::memory_order_acquire);
      if (w != inflated) {
        // Free: inflate it empty. Thin-held: inflate it around its holder.
        if (!s.word.compare_exchange_strong(w, inflated, std::memory_order_acq_rel, std::memory_order_relaxed))
          continue;
        stat_inflations.fetch_add(1, std::memory_order_relaxed);
        if (record* holder = record_of(w)) {
          std::uint64_t token;
          // The holder publishes its token right after its CAS: a few instructions.
          while ((token = holder->token.load(std::memory_order_acquire)) == 0) pause();
          t.held.push_back(std::make_unique<held_key>(
              held_key{std::string(holder->key, holder->len), token, holder->hash.load(std::memory_order_relaxed)}));
          if ((w & parked) != 0) wake(s, INT_MAX);  // they queue here now
        }
      }
      bool busy = false;
      for (const auto& k : t.held) busy = busy || k->key == key;
      if (!busy) break;
      ++t.waiting;
      t.cv.wait(g);
      --t.waiting;
    }
    t.held.push_back(std::make_unique<held_key>(held_key{key, ++s.counter, h}));
    held_key* k = t.held.back().get();
    return {this, k, k->token};
  }

  bool eventual_;
  unsigned spins_;
  std::unique_ptr<stripe[]> stripes_{new stripe[256]};
};

}  // namespace proto_thin
