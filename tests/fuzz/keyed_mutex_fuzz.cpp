// libFuzzer target: decodes the input into a sequence of keyed_mutex operations on four
// keys, on one thread and a manual clock, and checks every step against a reference model
// (a holder and a FIFO queue per key, leases and wait deadlines as timed events).
//
// Operations: try_lock, lock and try_lock_for (with and without a lease), async_lock
// (plain, leased, with a wait time), lock_async, unlock, guard moves, extend, check,
// and advancing the clock. After each step: every guard's owns_lock/expired/token, the
// fencing order per key, and size() must match the model. At the end everything is
// released and size() must be 0.
//
// Run: build the `clang` preset (the target needs clang's -fsanitize=fuzzer), then
//   ctest --preset clang -L fuzz   (HANDOFF_FUZZ_SECONDS, default 60), or by hand:
//   build/clang/tests/fuzz/keyed_mutex_fuzz -max_total_time=600 build/clang/tests/fuzz/corpus
#include <array>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <new>
#include <string>
#include <system_error>
#include <vector>

#include "../support/core_access.hpp"
#include "handoff/keyed_mutex.hpp"

namespace {

using handoff::key_guard;
using handoff::keyed_mutex;
using handoff::detail::lock_table_access;

#define FUZZ_CHECK(cond)                                                                \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "model mismatch at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (0)

// An eager coroutine that nobody awaits; its frame frees itself at the end.
struct detached {
  struct promise_type {
    detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

constexpr int key_count = 4;
constexpr int slot_count = 8;
constexpr std::int64_t start_time = 1'000'000;
const std::array<std::string, key_count> keys{"a:1", "a:2", "b:1", "b:2"};

// All four keys land in one shard, whatever the shard count: "a:*" share one hash and
// "b:*" another whose home slot is the next one. Probing past other keys, backward-shift
// deletion and the reuse of a removed entry for a different hash are all exercised.
struct colliding_hash {
  static std::size_t for_b() noexcept {
    using handoff::detail::mix_hash;
    const std::size_t a = mix_hash(0);
    for (std::size_t v = 1;; ++v) {
      const std::size_t b = mix_hash(v);
      if ((b >> 56) == (a >> 56) && (b & 255) == ((a + 1) & 255)) return v;
    }
  }
  std::size_t operator()(const std::string& k) const noexcept {
    static const std::size_t b = for_b();
    return k[0] == 'a' ? 0 : b;
  }
};

// A guard that can be built in place from a prvalue (no move: a moved guard no longer
// takes part in self-deadlock detection, which the harness wants to exercise).
class guard_slot {
 public:
  guard_slot() { ::new (buf_) key_guard(); }
  ~guard_slot() { get().~key_guard(); }
  guard_slot(const guard_slot&) = delete;
  guard_slot& operator=(const guard_slot&) = delete;
  key_guard& get() { return *std::launder(reinterpret_cast<key_guard*>(buf_)); }
  key_guard* operator->() { return &get(); }
  guard_slot& operator=(key_guard&& g) {
    get() = std::move(g);
    return *this;
  }
  // Destroys the current guard (unlocking it), then builds f()'s result in place.
  template <class F>
  void emplace(F&& f) {
    get().~key_guard();
    try {
      ::new (buf_) key_guard(f());
    } catch (...) {
      ::new (buf_) key_guard();
      throw;
    }
  }

 private:
  alignas(key_guard) unsigned char buf_[sizeof(key_guard)];
};

// The model of one guard slot.
struct slot_model {
  enum class state { empty, pending, guard } st = state::empty;
  int key = -1;
  std::uint64_t token = 0;  // 0: the guard never acquired
  bool holds_ref = false;   // refers to the key's state (holder, or expired and not released)
  bool expired = false;
  bool blocking = false;      // acquired through the blocking API (deadlock detection)
  std::int64_t lease = 0;     // ns; 0: none
  std::int64_t deadline = 0;  // lease deadline while holding
  std::uint64_t seq = 0;
};

struct request {
  int slot;
  std::int64_t lease;
  std::int64_t deadline;  // 0: waits forever
  std::uint64_t seq;
};

struct key_model {
  int holder = -1;  // slot
  std::deque<request> queue;
  std::uint64_t max_token = 0;
};

class harness {
 public:
  harness() { lock_table_access::table(m_).use_manual_clock(start_time); }

  void run(const std::uint8_t* data, std::size_t size) {
    std::size_t i = 0;
    auto next = [&]() -> unsigned { return i < size ? data[i++] : 0; };
    while (i < size) {
      const unsigned op = next() % 11;
      const int k = static_cast<int>(next() % key_count);
      const int s = static_cast<int>(next() % slot_count);
      const unsigned arg = next();
      step(op, k, s, arg);
      verify();
    }
    finish();
  }

 private:
  // The model is always updated first: the real operation may complete async requests
  // inline, and completed() checks them against the model's expectations.
  static std::int64_t ms(unsigned v) { return static_cast<std::int64_t>(v % 16 + 1) * 1'000'000; }
  bool is(int s, slot_model::state st) const { return model_[s].st == st; }
  bool owns(int s) const { return is(s, slot_model::state::guard) && model_[s].holds_ref && !model_[s].expired; }

  void step(unsigned op, int k, int s, unsigned arg) {
    const bool with_lease = (arg & 0x80) != 0;
    switch (op) {
      case 0:
        return sync_acquire(k, s, arg, kind::try_lock, with_lease);
      case 1:
        return sync_acquire(k, s, arg, kind::lock, with_lease);
      case 2:
        return sync_acquire(k, s, arg, kind::try_lock_for, with_lease);
      case 3:
        return async_acquire(k, s, arg);
      case 4:
        return callback_acquire(k, s);
      case 5:  // unlock: keeps the token and the expired flag
        if (!is(s, slot_model::state::guard)) return;
        release_slot(s);
        guards_[s]->unlock();
        return;
      case 6:
        return move_guard(s, static_cast<int>(arg % slot_count));
      case 7:
        return extend(s, arg);
      case 8:
        return advance(now_ + static_cast<std::int64_t>(arg % 40) * 500'000);
      case 9: {
        if (!is(s, slot_model::state::guard)) return;
        bool threw = false;
        try {
          guards_[s]->check();
        } catch (const handoff::lock_expired&) {
          threw = true;
        }
        FUZZ_CHECK(threw == !owns(s));
        return;
      }
      default:  // destroy by assigning an empty guard
        return clear_slot(s);
    }
  }

  enum class kind { try_lock, lock, try_lock_for };

  void sync_acquire(int k, int s, unsigned arg, kind how, bool with_lease) {
    if (is(s, slot_model::state::pending)) return;
    clear_slot(s);  // the result goes into slot s (this may release k and grant it on)
    const key_model& km = keys_m_[k];
    const bool free = km.holder < 0;
    const bool mine = !free && model_[km.holder].blocking;
    // A blocking call on a key held without detection (async, or a moved guard) would
    // wait on a real clock that this single-threaded harness cannot advance: not generated.
    if (how != kind::try_lock && !free && !mine) return;
    const std::int64_t lease_ns = with_lease ? ms(arg) : 0;
    const handoff::lease l{std::chrono::nanoseconds(with_lease ? lease_ns : 1)};
    const auto wait = std::chrono::milliseconds(arg % 4);
    bool threw = false;
    try {
      guards_[s].emplace([&]() -> key_guard {
        switch (how) {
          case kind::try_lock:
            return with_lease ? m_.try_lock(keys[k], l) : m_.try_lock(keys[k]);
          case kind::lock:
            return with_lease ? m_.lock(keys[k], l) : m_.lock(keys[k]);
          case kind::try_lock_for:
            return with_lease ? m_.try_lock_for(keys[k], wait, l) : m_.try_lock_for(keys[k], wait);
        }
        return key_guard();
      });
    } catch (const std::system_error& e) {
      FUZZ_CHECK(e.code() == std::errc::resource_deadlock_would_occur);
      threw = true;
    }
    // On a held key, try_lock (and try_lock_for with no wait) fails; the waiting forms
    // throw, since this thread is the holder.
    const bool zero_wait = how == kind::try_lock_for && wait.count() == 0;
    FUZZ_CHECK(threw == (!free && how != kind::try_lock && !zero_wait));
    key_guard& g = guards_[s].get();
    FUZZ_CHECK(g.owns_lock() == free);
    if (!free) {
      FUZZ_CHECK(g.token() == 0);
      return;  // slot s holds an empty guard, as clear_slot() left it in the model
    }
    FUZZ_CHECK(g.lease_duration().count() == lease_ns);
    install_model(s, k, g.token(), lease_ns, /*blocking=*/true);
  }

  void async_acquire(int k, int s, unsigned arg) {
    if (is(s, slot_model::state::pending)) return;
    clear_slot(s);
    const unsigned variant = arg % 3;
    const std::int64_t lease_ns = variant == 1 ? ms(arg >> 2) : 0;
    const std::int64_t wait_ns = variant == 2 ? static_cast<std::int64_t>((arg >> 2) % 8) * 500'000 : -1;
    enqueue(k, s, lease_ns, wait_ns >= 0 ? now_ + wait_ns : 0);
    auto task = [](harness* h, int slot, int key, std::int64_t lease, std::int64_t wait) -> detached {
      key_guard g;
      if (lease != 0) {
        g = co_await h->m_.async_lock(keys[key], handoff::lease{std::chrono::nanoseconds(lease)});
      } else if (wait >= 0) {
        g = co_await h->m_.async_lock(keys[key], std::chrono::nanoseconds(wait));
      } else {
        g = co_await h->m_.async_lock(keys[key]);
      }
      h->completed(slot, std::move(g));
    };
    task(this, s, k, lease_ns, wait_ns);
    settle();
  }

  void callback_acquire(int k, int s) {
    if (is(s, slot_model::state::pending)) return;
    clear_slot(s);
    enqueue(k, s, 0, 0);
    m_.lock_async(keys[k], [this, s](key_guard g) { completed(s, std::move(g)); });
    settle();
  }

  // Model of an async request from slot s: granted now if the key is free, else queued.
  void enqueue(int k, int s, std::int64_t lease_ns, std::int64_t deadline) {
    model_[s] = slot_model{};
    model_[s].st = slot_model::state::pending;
    model_[s].key = k;
    model_[s].lease = lease_ns;
    if (keys_m_[k].holder < 0) {
      keys_m_[k].holder = pending_holder;
      expected_grants_.push_back(s);
      return;
    }
    keys_m_[k].queue.push_back({s, lease_ns, deadline, deadline != 0 ? ++seq_ : 0});
  }

  // An async request finished: the model must have granted it or timed it out.
  void completed(int s, key_guard g) {
    FUZZ_CHECK(is(s, slot_model::state::pending));
    if (take(expected_timeouts_, s)) {
      FUZZ_CHECK(!g.owns_lock() && g.token() == 0);
      guards_[s] = std::move(g);
      model_[s] = slot_model{};
      model_[s].st = slot_model::state::guard;
      return;
    }
    FUZZ_CHECK(take(expected_grants_, s));
    FUZZ_CHECK(g.owns_lock());
    FUZZ_CHECK(g.lease_duration().count() == model_[s].lease);
    install(s, std::move(g), model_[s].key, /*blocking=*/false);
  }

  static bool take(std::vector<int>& v, int s) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (*it == s) {
        v.erase(it);
        return true;
      }
    }
    return false;
  }

  // Puts an async grant into slot s (pending until now).
  void install(int s, key_guard g, int k, bool blocking) {
    const std::uint64_t token = g.token();
    const std::int64_t lease_ns = g.lease_duration().count();
    guards_[s] = std::move(g);
    install_model(s, k, token, lease_ns, blocking);
  }

  // Model: slot s now holds key k with this token.
  void install_model(int s, int k, std::uint64_t token, std::int64_t lease_ns, bool blocking) {
    key_model& km = keys_m_[k];
    FUZZ_CHECK(km.holder < 0 || km.holder == pending_holder || km.holder == s);
    FUZZ_CHECK(token > km.max_token);  // fencing: strictly increasing per key
    km.max_token = token;
    slot_model& sm = model_[s];
    sm = slot_model{};
    sm.st = slot_model::state::guard;
    sm.key = k;
    sm.token = token;
    sm.holds_ref = true;
    sm.blocking = blocking;
    sm.lease = lease_ns;
    if (lease_ns != 0) {
      sm.deadline = now_ + lease_ns;
      sm.seq = ++seq_;
    }
    km.holder = s;
  }

  // Model: slot s's guard is being unlocked or destroyed.
  void release_slot(int s) {
    slot_model& sm = model_[s];
    if (owns(s)) hand_off(sm.key);
    sm.holds_ref = false;
    sm.blocking = false;
  }

  void clear_slot(int s) {
    if (!is(s, slot_model::state::guard)) return;
    release_slot(s);
    guards_[s] = key_guard();
    model_[s] = slot_model{};
    model_[s].st = slot_model::state::guard;
    settle();
  }

  void move_guard(int s, int d) {
    if (d == s || is(s, slot_model::state::pending) || is(d, slot_model::state::pending)) return;
    if (is(d, slot_model::state::guard)) release_slot(d);
    guards_[d] = std::move(guards_[s].get());
    settle();
    model_[d] = model_[s];
    model_[d].blocking = false;  // a moved guard leaves self-deadlock detection
    if (owns(d)) keys_m_[model_[d].key].holder = d;
    if (is(s, slot_model::state::guard)) {
      model_[s] = slot_model{};
      model_[s].st = slot_model::state::guard;  // moved-from: an empty guard
    }
  }

  void extend(int s, unsigned arg) {
    if (!is(s, slot_model::state::guard)) return;
    slot_model& g = model_[s];
    const auto d = std::chrono::nanoseconds(ms(arg));
    if (g.lease == 0) {
      bool threw = false;
      try {
        (void)guards_[s]->extend(d);
      } catch (const std::logic_error&) {
        threw = true;
      }
      FUZZ_CHECK(threw);
      return;
    }
    const bool live = owns(s);
    FUZZ_CHECK(guards_[s]->extend(d) == live);
    if (live) {
      g.deadline = now_ + d.count();
      g.seq = ++seq_;
    }
  }

  // The key's holder is gone: grant the first queued request, or free the key.
  void hand_off(int k) {
    key_model& km = keys_m_[k];
    km.holder = -1;
    if (km.queue.empty()) return;
    const request r = km.queue.front();
    km.queue.pop_front();
    km.holder = pending_holder;
    expected_grants_.push_back(r.slot);
  }

  void advance(std::int64_t to) {
    // Fire model events in (deadline, seq) order, mirroring the timer heap; the real clock
    // then steps to the same deadline, firing the same events.
    for (;;) {
      std::int64_t at = 0;
      bool found = false;
      for (int s = 0; s < slot_count; ++s) {
        if (owns(s) && model_[s].lease != 0 && model_[s].deadline <= to && (!found || model_[s].deadline < at)) {
          at = model_[s].deadline;
          found = true;
        }
      }
      for (const key_model& km : keys_m_) {
        for (const request& r : km.queue) {
          if (r.deadline != 0 && r.deadline <= to && (!found || r.deadline < at)) {
            at = r.deadline;
            found = true;
          }
        }
      }
      if (!found) break;
      now_ = std::max(now_, at);
      fire_model_events(at);
      lock_table_access::table(m_).advance_manual_clock(at);
      settle();
      verify();
    }
    now_ = std::max(now_, to);
    lock_table_access::table(m_).advance_manual_clock(to);
    settle();
  }

  // Every model event due exactly at `at`, in seq order. Events they create are later.
  void fire_model_events(std::int64_t at) {
    for (;;) {
      int best = -1;
      int best_key = -1;
      std::uint64_t best_seq = 0;
      bool lease = false;
      for (int s = 0; s < slot_count; ++s) {
        if (owns(s) && model_[s].lease != 0 && model_[s].deadline == at && (best < 0 || model_[s].seq < best_seq)) {
          best = s, best_key = model_[s].key, best_seq = model_[s].seq, lease = true;
        }
      }
      for (int k = 0; k < key_count; ++k) {
        for (const request& r : keys_m_[k].queue) {
          if (r.deadline == at && (best < 0 || r.seq < best_seq))
            best = r.slot, best_key = k, best_seq = r.seq, lease = false;
        }
      }
      if (best < 0) return;
      if (lease) {
        model_[best].expired = true;  // keeps its reference until unlocked
        hand_off(best_key);
        continue;
      }
      auto& q = keys_m_[best_key].queue;
      for (auto it = q.begin(); it != q.end(); ++it) {
        if (it->slot == best) {
          q.erase(it);
          break;
        }
      }
      expected_timeouts_.push_back(best);
    }
  }

  // After a real operation: every completion the model expected has happened.
  void settle() {
    FUZZ_CHECK(expected_grants_.empty());
    FUZZ_CHECK(expected_timeouts_.empty());
  }

  void verify() {
    settle();
    std::size_t live = 0;
    for (int k = 0; k < key_count; ++k) {
      const key_model& km = keys_m_[k];
      FUZZ_CHECK(km.holder != pending_holder);
      if (!km.queue.empty()) FUZZ_CHECK(km.holder >= 0);
      bool has_state = km.holder >= 0;
      for (int s = 0; s < slot_count; ++s) {
        if (is(s, slot_model::state::guard) && model_[s].key == k && model_[s].holds_ref) has_state = true;
      }
      live += has_state ? 1 : 0;
    }
    FUZZ_CHECK(m_.size() == live);
    for (int s = 0; s < slot_count; ++s) {
      if (!is(s, slot_model::state::guard)) continue;
      const slot_model& sm = model_[s];
      FUZZ_CHECK(guards_[s]->owns_lock() == owns(s));
      FUZZ_CHECK(guards_[s]->expired() == sm.expired);
      FUZZ_CHECK(guards_[s]->token() == sm.token);
      if (owns(s)) FUZZ_CHECK(keys_m_[sm.key].holder == s);
    }
  }

  void finish() {
    for (int round = 0; round < 64; ++round) {
      bool pending = false;
      for (int s = 0; s < slot_count; ++s) {
        if (is(s, slot_model::state::guard)) {
          release_slot(s);
          guards_[s]->unlock();
          settle();
        }
      }
      for (int s = 0; s < slot_count; ++s) pending = pending || is(s, slot_model::state::pending);
      verify();
      if (!pending) break;
      advance(now_ + 100'000'000);
    }
    for (int s = 0; s < slot_count; ++s) {
      FUZZ_CHECK(!is(s, slot_model::state::pending));
      guards_[s] = key_guard();
    }
    FUZZ_CHECK(m_.size() == 0);
  }

  static constexpr int pending_holder = -2;  // granted by the model, not yet seen completed

  keyed_mutex<std::string, colliding_hash> m_;  // declared first: destroyed after the guards below
  std::array<guard_slot, slot_count> guards_;
  std::array<slot_model, slot_count> model_;
  std::array<key_model, key_count> keys_m_;
  std::int64_t now_ = start_time;
  std::uint64_t seq_ = 0;
  std::vector<int> expected_grants_;    // slots the model granted; completed() takes them
  std::vector<int> expected_timeouts_;  // slots whose wait the model timed out
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  harness h;
  h.run(data, size);
  return 0;
}
