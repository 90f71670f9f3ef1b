// entry_cache: each thread's one recycled lock entry, saving an allocation per uncontended
// lock/unlock of a new key.
//
// Each thread keeps the last entry it removed, idle (count 0, empty mailbox, no lease, no
// holder, its key still constructed), for the next key it creates: creating and freeing
// an entry per uncontended lock/unlock is most of the table's cost otherwise. Per thread
// rather than per shard, so that the entry's cache line stays on the core that uses it.
//
// Bounded: at most one entry per thread, and only an entry whose key owns at most
// max_cached_key_bytes of heap (entry_keep_fn decides per key type), so that a huge key
// (a 64 MB string) goes back to the allocator at its unlock. The cached entry is freed
// when the thread exits or caches an entry of another key type; it may outlive its mutex
// (any mutex of the same key type reuses it).
#pragma once

#include <concepts>
#include <cstddef>
#include <type_traits>

#include "handoff/detail/lock_entry.hpp"
#include "handoff/detail/tls_model.hpp"

namespace handoff::detail {

// Frees an entry of one keyed_mutex instantiation (its key type); identifies the type.
using destroy_entry_fn = void (*)(lock_entry*) noexcept;
// True if an idle entry of that type may be kept as a thread's cached entry.
using entry_keep_fn = bool (*)(const lock_entry*) noexcept;

// The most heap a cached entry's key may own. Copying this much into a reused key costs
// about what the saved allocation does (tens of ns), so caching bigger keys saves nothing,
// and a thread's idle memory stays under a page.
inline constexpr std::size_t max_cached_key_bytes = 256;

// A key whose heap is capacity() elements that own nothing themselves (std::string,
// std::vector<int>): what keyed_mutex's keep function measures.
template <class K>
concept capacity_sized = requires(const K& k) {
  { k.capacity() } -> std::convertible_to<std::size_t>;
  typename K::value_type;
  requires std::is_trivially_destructible_v<typename K::value_type>;
};

// Owned by its thread; never touched by another.
struct entry_cache {
  lock_entry* entry;         // nullptr: none
  destroy_entry_fn destroy;  // entry's type: reused only by a mutex with the same function
  bool reaper_armed;         // the thread-exit hook is registered
  bool dead;                 // the thread is exiting: cache nothing more
};
HANDOFF_TLS_MODEL extern constinit thread_local entry_cache cached_entry;

}  // namespace handoff::detail
