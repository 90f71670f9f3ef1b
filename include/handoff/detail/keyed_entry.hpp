// keyed_entry<Key>: a lock entry with its key, how one is found or created in a shard
// (reusing this thread's cached entry), and which idle entries a thread may keep.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <string_view>
#include <type_traits>

#include "handoff/detail/entry_cache.hpp"
#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/lock_shard.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/detail/thin_key.hpp"

namespace handoff::detail {

// Whether two keys are equal, as eq says. For std::string under std::equal_to, the
// comparison every lookup of the default keyed_mutex makes, short keys are compared inline
// in words instead of through a call of memcmp (a visible share of an uncontended
// lock/unlock's instructions; docs/design.md, "The protocol").
template <class Key, class Eq>
bool keys_equal(Eq& eq, const Key& a, const Key& b) {
  if constexpr (std::is_same_v<Key, std::string> &&
                (std::is_same_v<Eq, std::equal_to<std::string>> || std::is_same_v<Eq, std::equal_to<>>)) {
    const std::size_t n = a.size();
    if (n != b.size()) return false;
    const char* x = a.data();
    const char* y = b.data();
    auto word = [](const char* p) {
      std::uint64_t w;
      std::memcpy(&w, p, sizeof w);
      return w;
    };
    if (n >= 8 && n <= 16) return word(x) == word(y) && word(x + n - 8) == word(y + n - 8);  // may overlap
    return std::memcmp(x, y, n) == 0;
  } else {
    return eq(a, b);
  }
}

// A keyed_mutex's entry: its key, then the lock state, placed at a cache line's start (see
// make()), so that a short key and the members an uncontended lock/unlock touches share
// the entry's first line (see lock_entry). The key is a base of its own so that it comes
// first.
template <class Key>
struct entry_key {
  Key key;
};
template <class Key>
struct keyed_entry final : entry_key<Key>, lock_entry {
  keyed_entry(std::size_t h, const Key& k)
      : entry_key<Key>{k}, lock_entry(h) {}  // NOLINT(modernize-pass-by-value): copied once
  using entry_key<Key>::key;

  // A new entry at the start of a cache line, inside a plain allocation `slack_max` bytes
  // larger: glibc's aligned allocation carves a bigger chunk and leaves the pieces around
  // the block as holes (more resident memory per live key than this way; docs/design.md,
  // "Table and memory"). Entries use the global allocator, not the node pool: the pool
  // keeps freed blocks for reuse, and a key's memory must go back when the key goes idle
  // (the thread's cached entry already saves the allocation on the uncontended path).
  // Propagates what the allocation or Key's copy throws, having freed the block.
  static keyed_entry* make(std::size_t h, const Key& key) {
    void* block = ::operator new(sizeof(keyed_entry) + slack_max);
    const std::size_t slack = -reinterpret_cast<std::uintptr_t>(block) % cache_line_bytes;
    try {
      // NOLINTNEXTLINE(clang-analyzer-cplusplus.NewDeleteLeaks): destroy() frees the block, from e and its slack
      auto* e = ::new (static_cast<char*>(block) + slack) keyed_entry(h, key);
      e->slack = static_cast<std::uint8_t>(slack);
      return e;
    } catch (...) {
      ::operator delete(block);
      throw;
    }
  }
  // Frees an entry of make(). The function's address identifies the key type
  // (entry_cache::destroy).
  static void destroy(lock_entry* p) noexcept {
    auto* e = static_cast<keyed_entry*>(p);
    char* block = reinterpret_cast<char*>(e) - e->slack;
    e->~keyed_entry();
    ::operator delete(block);
  }
  // The most an allocation's start is from the next line: operator new aligns to
  // __STDCPP_DEFAULT_NEW_ALIGNMENT__ (16 with glibc).
  static constexpr std::size_t slack_max = cache_line_bytes - __STDCPP_DEFAULT_NEW_ALIGNMENT__;

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

  // With s locked: the entry of `key` (hash h) in s, or nullptr. Propagates what eq throws.
  template <class Eq>
  static lock_entry* find(const lock_shard& s, std::size_t h, const Key& key, Eq& eq) {
    return s.find(h, [&](lock_entry* x) { return keys_equal(eq, static_cast<keyed_entry*>(x)->key, key); });
  }

  // With s locked: a new entry of `key` inserted in s. It is, first choice, an idle one
  // that s gives up (when it holds lock_shard::kept_idle entries or more: the clock
  // hand's), then this thread's cached entry of this key type, else allocated. It may stay
  // once idle if s held fewer than kept_idle entries before it (kept_idle_thin for a key
  // that can be thin) and its key is small.
  // Propagates what Key's copy or the allocation throws, with s unchanged but for an idle
  // entry given up (a cached entry whose key assignment threw stays cached). Out of line:
  // the lock of a key in use never comes here.
  [[gnu::noinline]] static lock_entry* create(lock_shard& s, std::size_t h, const Key& key) {
    keyed_entry* fresh = nullptr;
    if (s.size() >= lock_shard::kept_idle) {
      if (lock_entry* victim = s.evict_idle()) {
        s.token_floor = std::max(s.token_floor, victim->token);
        fresh = static_cast<keyed_entry*>(victim);
        if (!fresh->may_idle || !reuse(fresh, h, key)) {
          destroy(fresh);
          fresh = nullptr;
        }
      }
    }
    if (fresh == nullptr) {
      entry_cache& c = cached_entry;
      if (std::is_copy_assignable_v<Key> && c.entry != nullptr && c.destroy == &destroy) {
        fresh = static_cast<keyed_entry*>(c.entry);
        if constexpr (std::is_copy_assignable_v<Key>) fresh->key = key;
        fresh->hash = h;
        c.entry = nullptr;
      } else {
        fresh = make(h, key);
      }
    }
    fresh->token = s.token_floor;
    // A thin key's too, fewer of them: its stripe stays inflated until calm
    // (lock_table::deflate_if_calm), its next lock needing no entry then.
    fresh->may_idle = s.size() < (thin_fits(key) ? lock_shard::kept_idle_thin : lock_shard::kept_idle) && keep(fresh);
    try {
      s.insert(fresh);
    } catch (...) {
      destroy(fresh);
      throw;
    }
    return fresh;
  }

 private:
  // An idle entry taken out of a table, made the entry of `key`: false if Key cannot be
  // assigned. Idle: only the key and hash change (count 0, empty queue, no lease or holder).
  static bool reuse(keyed_entry* e, std::size_t h, const Key& key) {
    if constexpr (std::is_copy_assignable_v<Key>) {
      try {
        e->key = key;
      } catch (...) {
        destroy(e);
        throw;
      }
      e->hash = h;
      return true;
    } else {
      return false;
    }
  }
};

}  // namespace handoff::detail
