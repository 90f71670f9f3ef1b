// Which keys take the thin path (detail/thin_record.hpp), and how a key goes into a
// record and back out of it: a std::string of at most max_thin_key bytes, or a trivially
// copyable key of at most that size (an integer, an enum, a small struct). The others
// (longer strings, keys that own memory or cannot be copied as bytes) always take the
// table's entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "handoff/detail/thin_record.hpp"

namespace handoff::detail {

// Whether some keys of the type may take the thin path.
template <class Key>
inline constexpr bool thin_capable = std::is_same_v<Key, std::string> ||
                                     (std::is_trivially_copyable_v<Key> && std::is_default_constructible_v<Key> &&
                                      sizeof(Key) <= max_thin_key);

// Whether this key takes the thin path.
template <class Key>
[[nodiscard, gnu::always_inline]] inline bool thin_fits(const Key& key) noexcept {
  if constexpr (std::is_same_v<Key, std::string>) {
    return key.size() <= max_thin_key;
  } else {
    (void)key;
    return thin_capable<Key>;
  }
}

// n <= max_thin_key bytes, as a few fixed-size moves (no call of memcpy).
[[gnu::always_inline]] inline void copy_thin_bytes(char* d, const char* s, std::size_t n) noexcept {
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

// Fills r for a thin lock of key (hash h, the word of its stripe, this thread), before
// the CAS that publishes it. Precondition: thin_fits(key).
template <class Key>
[[gnu::always_inline]] inline void fill_thin_record(thin_record* r, const Key& key, std::size_t h,
                                                    std::atomic<std::uintptr_t>* word, std::uintptr_t thread) noexcept {
  // Relaxed: the CAS that publishes r releases them.
  r->hash.store(h, std::memory_order_relaxed);
  r->token.store(0, std::memory_order_relaxed);
  r->thread.store(thread, std::memory_order_relaxed);
  r->word = word;  // NOLINT(cppcoreguidelines-pro-type-union-access): held, `word` is live
  if constexpr (std::is_same_v<Key, std::string>) {
    r->len = static_cast<std::uint8_t>(key.size());
    copy_thin_bytes(r->key, key.data(), key.size());
  } else {  // len unused: sizeof(Key)
    std::memcpy(r->key, &key, sizeof(Key));
  }
}

// The key of a thin record (stable: its stripe is being inflated under its lock).
// Propagates what the key's construction throws (std::bad_alloc).
template <class Key>
[[nodiscard]] Key thin_key_of(const thin_record& r) {
  if constexpr (std::is_same_v<Key, std::string>) {
    return std::string(r.key, r.len);
  } else {
    static_assert(std::is_trivially_copyable_v<Key> && std::is_default_constructible_v<Key>,
                  "a thin key is rebuilt from its bytes");
    Key k;
    std::memcpy(&k, r.key, sizeof(Key));
    return k;
  }
}

}  // namespace handoff::detail
