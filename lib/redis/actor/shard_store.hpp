// The server side of a shard (private to lib/redis): the shard a key maps to, the names of
// a shard's keys, the entry format, and the commands and scripts of a shard's owner (take,
// renew and release its lease; read its queue; acknowledge what it handled), every write
// of an owner refused once its epoch has passed.
//
// Per shard (a family's index i of n; every name in one Cluster slot, that of slot group
// 97 i mod 256, so that consecutive shards land on different primaries):
//   <P>{<G>}:shard:<F>:<i>:queue   list of entries, oldest first: "<id> <k> <key><body>",
//                                  k the key's length in bytes. A post appends one
//   <P>{<G>}:shard:<F>:<i>:lease   the owner's token "<epoch> <owner id>", with a PX lease;
//                                  absent: nobody owns the shard
//   <P>{<G>}:shard:<F>:<i>:meta    hash: epoch (takeovers so far: a token is never issued
//                                  twice), trimmed (entries removed from the queue's head
//                                  so far: an entry's position is trimmed + its index),
//                                  marks (positions, ascending: at each takeover that
//                                  followed a crash, the queue's end), owned (set while
//                                  an owner may have run entries it did not acknowledge:
//                                  from a takeover to a clean release)
//   <P>{<G>}:shard:<F>:<i>:done    set of ids of entries handled past the first unhandled
//                                  one (a slow key holds the queue's head): a new owner
//                                  skips them; empty, and so absent, while none is
// and per key K of the shard, in the same slot:
//   <P>{<G>}:<escaped K>:actor:dead    list of dead letters, "<id> <body>"
//   <P>{<G>}:<escaped K>:actor:state   hash {id, value} (remember_handled)
// where P is the prefix, G the slot tag of the group (layout.hpp), F the escaped family.
//
// The epoch fences a stale owner: a lease that ran out and was taken by another process
// carries another token, and every write an owner makes to the shard (acknowledgement,
// state, dead letters) runs in a script that first compares the lease with its token.
//
// Deliveries: an entry queued when a shard was taken over from a crashed owner may have
// run there (handled and not acknowledged, or started). The takeover records the queue's
// end as a mark; an entry's delivery is 1 + the marks above its position. So every entry
// that was queued at a crash counts one delivery more, whether that owner had read it or
// not: a message can go to the dead letters after max_attempts crashes of owners that
// never ran it. A graceful release acknowledges what it ran first and leaves no mark.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../common/connection.hpp"
#include "../common/router.hpp"

namespace handoff::redis::detail {

// The shard of `key` among n >= 1: FNV-1a (64 bits) of its bytes, modulo n. Fixed: the
// same key maps to the same shard in every process and every build of this data format.
[[nodiscard]] std::uint32_t shard_of(std::string_view key, std::uint32_t n) noexcept;

// The names of one shard's keys (above).
struct shard_names {
  shard_names(std::string_view prefix, std::string_view family, std::uint32_t index);
  std::string slot_prefix;  // <P>{<G>}: what every name of the shard starts with
  std::string queue, lease, meta, done;
  // A key's dead letters and state, in the shard's slot.
  [[nodiscard]] std::string dead(std::string_view key) const;
  [[nodiscard]] std::string state(std::string_view key) const;
};

// A queue entry's text, and its parts (views into `element`); std::nullopt for text that
// is not an entry.
[[nodiscard]] std::string entry_text(std::string_view id, std::string_view key, std::string_view body);
struct entry_parts {
  std::string_view id, key, body;
};
[[nodiscard]] std::optional<entry_parts> parse_entry(std::string_view element) noexcept;

// What a takeover finds: the owner's token, the entries trimmed so far, the marks
// (above: the delivery of the entry at position p is 1 + the marks greater than p) and
// the done set's ids (entries an earlier owner finished past a slow key: skipped).
struct shard_takeover {
  std::string token;
  std::uint64_t trimmed = 0;
  std::vector<std::uint64_t> marks;
  std::vector<std::string> done;
  [[nodiscard]] std::uint32_t delivery(std::uint64_t position) const noexcept;
};

// What an owner acknowledges for one shard in one script (ack()). Keys named in states
// and dead letters must be keys of the shard.
struct shard_ack_write {
  std::uint64_t trim = 0;                // entries to remove from the queue's head
  std::vector<std::string> done_add;     // ids handled past the first unhandled entry
  std::vector<std::string> done_remove;  // ids of done that the trim removes
  struct state {
    std::string key, id, value;
  };
  std::vector<state> states;  // per key, the last handled message's id and state
  struct dead_letter {
    std::string key, element;  // "<id> <body>"
  };
  std::vector<dead_letter> dead;
  // Then release the lease, cleanly, if the queue is empty (a drain's last step: a post
  // that came after the owner's last read keeps the shard, and the owner reads on).
  bool release_if_empty = false;
};

// The shard commands and scripts of one prefix, on the router's servers. Thread-safe.
class shard_store {
 public:
  // Loads the scripts on every primary. Throws error.
  explicit shard_store(router& servers);

  // Appends entry_text(...) to the shard's queue: the queue's length after it. With
  // capacity > 0 and the queue already holding `capacity` entries, takes it back and
  // returns 0 (a second round trip, only then). Throws error.
  std::uint64_t post(const shard_names& s, const std::string& element, std::uint64_t capacity);

  // Takes the shard if nobody holds its lease, the lease lasting lease_ms: what the new
  // owner needs (its token carries the next epoch). Else std::nullopt, with `left_ms` the
  // current lease's time left. Throws error.
  std::optional<shard_takeover> take(const shard_names& s, std::string_view owner, std::int64_t lease_ms,
                                     std::int64_t& left_ms);
  // Renews each (shard, token) for lease_ms in one round trip per server; per shard, false
  // when its lease is no longer the token (it ran out, or another owner holds it: the
  // shard is lost). Throws error when a round trip failed (which leases were renewed is
  // then unknown).
  std::vector<bool> renew(const std::vector<std::pair<const shard_names*, std::string>>& held, std::int64_t lease_ms);
  // Releases the shard if its lease is still the token: true. `clean`: every entry the
  // owner ran is acknowledged, so the next owner counts no delivery for the rest (no
  // mark). A drain releases through ack() instead, only while the queue is empty. Throws
  // error.
  bool release(const shard_names& s, std::string_view token, bool clean);
  // Writes `w` if the shard's lease is still the token: written, or released (with
  // w.release_if_empty, the queue then empty); refused, writing nothing, when it is not.
  // Throws error.
  enum class acked : std::uint8_t { refused, written, released };
  acked ack(const shard_names& s, std::string_view token, const shard_ack_write& w);

  // Up to n entries from index `from` of the queue (0: its head). Throws error.
  std::vector<std::string> read(const shard_names& s, std::uint64_t from, std::uint64_t n);

  // Records n as the prefix's shard count if none is recorded; throws error if another
  // is (processes with different counts would map a key to different shards).
  static void claim_count(router& servers, std::string_view prefix, std::uint32_t n);

 private:
  router& servers_;
  script take_, renew_, release_, ack_;
};

}  // namespace handoff::redis::detail
