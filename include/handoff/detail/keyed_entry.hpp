// keyed_entry<Key>: a lock entry with its key, how one is found or created in a shard
// (reusing this thread's cached entry), and which idle entries a thread may keep.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <type_traits>

#include "handoff/detail/entry_cache.hpp"
#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/lock_shard.hpp"
#include "handoff/detail/report.hpp"

namespace handoff::detail {

template <class Key>
struct keyed_entry final : lock_entry {
  keyed_entry(std::size_t h, const Key& k) : lock_entry(h), key(k) {}  // NOLINT(modernize-pass-by-value): copied once
  Key key;

  // Entries use the global allocator, not the node pool: the pool keeps freed blocks for
  // reuse, and a key's memory must go back when the key goes idle (the thread's cached
  // entry already saves the allocation on the uncontended path). The function's address
  // identifies the key type (entry_cache::destroy).
  static void destroy(lock_entry* e) noexcept { delete static_cast<keyed_entry*>(e); }

  // The key as a test scheduler's trace shows it: quoted text, a number, or "(key)".
  static std::string describe(const lock_entry* e) {
    const Key& k = static_cast<const keyed_entry*>(e)->key;
    if constexpr (std::is_convertible_v<const Key&, std::string_view>) {
      return '"' + key_excerpt(std::string_view(k)) + '"';
    } else if constexpr (std::is_arithmetic_v<Key>) {
      return std::to_string(k);
    } else {
      return "(key)";
    }
  }

  // Whether an idle entry may stay cached for its thread (detail/entry_cache.hpp): only if
  // reusing it is possible (Key copy-assignable) and its key is small: at most
  // max_cached_key_bytes in place, and of heap at most that much for a capacity-sized key,
  // none for any other (it is trivially destructible).
  static bool keep(const lock_entry* e) noexcept {
    if constexpr (!std::is_copy_assignable_v<Key> || sizeof(Key) > max_cached_key_bytes) {
      // Not reusable, or a key that is large in place (std::array<char, 1 << 26>): the
      // cache would keep that much for the thread.
      return false;
    } else if constexpr (capacity_sized<Key>) {
      const Key& k = static_cast<const keyed_entry*>(e)->key;
      return k.capacity() <= max_cached_key_bytes / sizeof(typename Key::value_type);
    } else {
      return std::is_trivially_destructible_v<Key>;
    }
  }

  // With s locked: the entry of `key` (hash h) in s, or a new one inserted there: this
  // thread's cached entry of this key type if it has one, else allocated. Propagates what
  // eq, Key's copy or the allocation throws, with s unchanged (a cached entry whose key
  // assignment threw stays cached).
  template <class Eq>
  static lock_entry* find_or_create(lock_shard& s, std::size_t h, const Key& key, Eq& eq) {
    lock_entry* e = s.find(h, [&](lock_entry* x) { return eq(static_cast<keyed_entry*>(x)->key, key); });
    if (e != nullptr) return e;
    keyed_entry* fresh;
    entry_cache& c = cached_entry;
    if (std::is_copy_assignable_v<Key> && c.entry != nullptr && c.destroy == &destroy) {
      // Idle (count 0, empty mailbox, no lease, no holder): only the key, hash and token
      // floor change.
      fresh = static_cast<keyed_entry*>(c.entry);
      if constexpr (std::is_copy_assignable_v<Key>) fresh->key = key;
      fresh->hash = h;
      c.entry = nullptr;
    } else {
      fresh = new keyed_entry(h, key);
    }
    fresh->token = s.token_floor;
    try {
      s.insert(fresh);
    } catch (...) {
      delete fresh;
      throw;
    }
    return fresh;
  }
};

}  // namespace handoff::detail
