// The server side of a shard's ownership (private to lib/redis): the shard a key maps to,
// the names of a shard's keys, and the scripts that take, renew and release a shard's lease
// and acknowledge what its owner handled, each refused to an owner whose epoch has passed.
//
// Per shard (a family's index i of n; every name in one Cluster slot, the slot group of i):
//   <P>{<G>}:shard:<F>:<i>:queue   list of entries, oldest first
//   <P>{<G>}:shard:<F>:<i>:lease   the owner's token "<epoch> <owner id>", with a PX lease;
//                                  absent: nobody owns the shard
//   <P>{<G>}:shard:<F>:<i>:epoch   the shard's takeovers so far (INCR): kept, so that a
//                                  token is never issued twice for a shard
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
// state, dead letters) runs in a script that first compares the lease with its token. A
// token compares whole: the epoch makes it unique per takeover, the owner id per process.
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
  std::string queue, lease, epoch, done;
  // A key's dead letters and state, in the shard's slot.
  [[nodiscard]] std::string dead(std::string_view key) const;
  [[nodiscard]] std::string state(std::string_view key) const;
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
};

// The lease scripts of the shards under one prefix, on the router's servers. Thread-safe.
class shard_leases {
 public:
  // Loads the scripts on every primary. Throws error.
  explicit shard_leases(router& servers);

  // Takes the shard if nobody holds its lease: its new token (the next epoch), the lease
  // lasting lease_ms. Else std::nullopt, with `left_ms` the current lease's time left.
  // Throws error.
  std::optional<std::string> take(const shard_names& s, std::string_view owner, std::int64_t lease_ms,
                                  std::int64_t& left_ms);
  // Renews each (shard, token) for lease_ms in one round trip per server; per shard, false
  // when its lease is no longer the token (it ran out, or another owner holds it: the
  // shard is lost). Throws error when a round trip failed (which leases were renewed is
  // then unknown).
  std::vector<bool> renew(const std::vector<std::pair<const shard_names*, std::string>>& held, std::int64_t lease_ms);
  // Releases the shard if its lease is still the token: true. Throws error.
  bool release(const shard_names& s, std::string_view token);
  // Writes `w` if the shard's lease is still the token: true; false, writing nothing,
  // when it is not. Throws error.
  bool ack(const shard_names& s, std::string_view token, const shard_ack_write& w);

  // Records n as the prefix's shard count if none is recorded; throws error if another
  // is (processes with different counts would map a key to different shards).
  static void claim_count(router& servers, std::string_view prefix, std::uint32_t n);

 private:
  router& servers_;
  script take_, renew_, release_, ack_;
};

}  // namespace handoff::redis::detail
