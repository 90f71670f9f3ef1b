// keyed_lookup<Key, Eq>: a keyed mutex's requests through its stripes' tables (the table
// path, detail/lock_table.hpp), for one key type: finding or creating a key's entry with
// the stripe locked and inflated, and running a request on it from the top. keyed_mutex
// makes one per call (a table and an Eq, by reference) for every request that does not
// take the thin path (detail/keyed_thin.hpp).
#pragma once

#include <cstddef>
#include <cstdint>

#include "handoff/detail/keyed_entry.hpp"
#include "handoff/detail/keyed_thin.hpp"
#include "handoff/detail/lock_table.hpp"

namespace handoff::detail {

template <class Key, class Eq>
class keyed_lookup {
 public:
  keyed_lookup(lock_table& t, Eq& eq) noexcept : table_(t), eq_(eq) {}

  // With s (the stripe of hash h) locked: key's entry, or nullptr; create_locked: a new
  // entry of key (keyed_entry::create). A throw from Eq, the key's copy or the allocation
  // propagates with s unlocked (deflated if it has no entry) and nothing created.
  lock_entry* find_locked(lock_shard& s, std::size_t h, const Key& key) {
    return under(s, [&] { return entry::find(s, h, key, eq_); });
  }
  lock_entry* create_locked(lock_shard& s, std::size_t h, const Key& key) {
    return under(s, [&] { return entry::create(s, h, key); });
  }

  // The lookup every async request starts with: locks s (inflated) and returns key's
  // entry, created if absent, with s still locked. Under a test scheduler the request is
  // first a scheduling point, as a blocking one is (acquire_locked), and the key is looked
  // up again after it. Throws as the two above, and as schedule_point (with s unlocked,
  // nothing held).
  lock_entry* lock_entry_of(lock_shard& s, std::size_t h, const Key& key) {
    lock_inflated<Key>(s);
    lock_entry* e = find_locked(s, h, key);
    if (e == nullptr) e = create_locked(s, h, key);
    if (!table_.driven()) [[likely]]
      return e;
    table_.schedule_point(s, e);
    lock_inflated<Key>(s);  // its entry may have gone meanwhile
    e = find_locked(s, h, key);
    return e != nullptr ? e : create_locked(s, h, key);
  }

  // A request without a lease on a key of hash h in s: one stripe lock around the lookup
  // and the entry's CAS (try_acquire_fast) when the key's entry is in place and free.
  [[gnu::always_inline]] grant acquire(const Key& key, const lock_request& r, std::size_t h, lock_shard& s) {
    lock_inflated<Key>(s);
    lock_entry* e = find_locked(s, h, key);
    grant g;
    if (e != nullptr && !table_.driven() && lock_table::try_acquire_fast(s, e, g)) [[likely]]
      return g;
    return acquire_locked(key, r, h, s, e);
  }

  // A thin lock that found its stripe's word held (w): lock_thin_contended, then the table
  // (a request that parked on the word first is counted there from its first park).
  [[gnu::noinline]] grant acquire_contended(const Key& key, const lock_request& r, std::size_t h, lock_shard& s,
                                            thin_record* rec, std::uintptr_t w) {
    std::int64_t since = 0;
    const grant g = lock_thin_contended<Key>(table_, s, h, rec, w, r.mode != wait_mode::none, r.may_park, since);
    if (g.record != nullptr) return g;
    lock_request queued = r;
    queued.since = since;  // 0 if it never parked: the table counts from now
    return acquire_locked(key, queued, h, s, find_locked(s, h, key));  // s locked, inflated
  }

  // With s locked (inflated) and e key's entry in it (nullptr: none yet): the request,
  // from the top.
  [[gnu::noinline]] grant acquire_locked(const Key& key, const lock_request& r, std::size_t h, lock_shard& s,
                                         lock_entry* e) {
    bool scheduled = !table_.driven();  // under a test scheduler: a scheduling point first
    for (;;) {
      if (e == nullptr) e = create_locked(s, h, key);
      if (!scheduled) {
        scheduled = true;
        table_.schedule_point(s, e);
      } else {
        grant g;
        if (r.lease == 0 && lock_table::try_acquire_fast(s, e, g)) return g;
        g = table_.acquire(s, e, r);
        if (!g.retry) return g;
      }
      lock_inflated<Key>(s);  // look the key up again: its entry may have gone meanwhile
      e = find_locked(s, h, key);
    }
  }

 private:
  using entry = keyed_entry<Key>;
  template <class F>
  static auto under(lock_shard& s, F f) -> decltype(f()) {
    try {
      return f();
    } catch (...) {
      lock_table::deflate_if_empty(s);
      s.lock.unlock();
      throw;
    }
  }

  lock_table& table_;
  Eq& eq_;
};

}  // namespace handoff::detail
