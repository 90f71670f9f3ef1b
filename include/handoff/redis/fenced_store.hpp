// handoff::redis::fenced_store: the store side of fencing tokens, on the server of the
// locks. A record per key holds a value and the token of the write that stored it; a write
// is refused when its token is older than the record's, or than the key's latest grant by
// handoff::redis::keyed_mutex, so a holder whose lease ran out cannot overwrite what a
// later holder did (or is about to do) with the key.
//
//   handoff::redis::fenced_store orders(opts);          // same options (prefix) as the locks
//   auto g = locks.lock("order:9", handoff::lease{2s});
//   fenced_value v = orders.read("order:9");            // {value, token of its write}
//   if (!orders.write("order:9", next(v.value), g.token())) { /* stale: the key moved on */ }
//
// Per key K (names under options::prefix, hash tag {K}, escaped as for the locks): the
// hash {K}:fenced with fields "token" and "value". The write is one Lua script: it compares
// the token with the record's and with the lock's fence counter {K}:fence, and stores the
// value and the token, or nothing.
//
// Guarantees (one Redis server, no failover): a write whose token is below the last token
// stored for the key, or below the token of the key's latest grant, is refused and changes
// nothing; writes are linearizable (each is one script). Tokens are compared exactly over
// the whole uint64_t range.
// Not promised: records never expire and are never deleted by the library (DEL the name
// above to remove one); a record stored with keys of another options::prefix than the
// locks' is fenced by its own last token only (the lock's counter is not found).
//
// On a Redis Cluster (found at construction: any node's host and port will do): each call
// goes to the primary of its key's hash slot and follows MOVED, ASK, TRYAGAIN and
// CLUSTERDOWN while slots move, and a primary that is down until its replica takes over,
// within command_timeout; one pool of pool_size connections per primary. A write the old
// primary took but had not replicated is lost in a failover. docs/redis.md, "Redis
// Cluster".
//
// Errors: as handoff::redis::keyed_mutex: every Redis failure throws handoff::redis::error
// (a record name holding another Redis type included), within command_timeout per command
// (plus connect_timeout when a connection must be opened, and up to one command_timeout
// waiting for a pooled connection when all pool_size are busy).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "handoff/redis/options.hpp"

namespace handoff::redis {

namespace detail {
struct store_core;
}  // namespace detail

// A record as read: the value and the token of the write that stored it.
struct fenced_value {
  std::string value;        // "" when token is 0
  std::uint64_t token = 0;  // 0: never written
};

// Thread-safe. Owns a pool of options::pool_size command connections; no thread.
class fenced_store {
 public:
  // Connects once to check the options and the server (as keyed_mutex's constructor:
  // error if Redis cannot be reached or may evict keys under eviction_check::refuse,
  // std::invalid_argument for nonsensical options).
  explicit fenced_store(options o = {});
  ~fenced_store();
  fenced_store(const fenced_store&) = delete;
  fenced_store& operator=(const fenced_store&) = delete;

  // Thread-safe. One round trip. Stores `value` with `token` if the token is at least the
  // last one stored for `key` and at least the token of the key's latest grant (a holder
  // may write any number of times); returns false, and changes nothing, otherwise.
  // Keys and values are any bytes. Throws std::invalid_argument for token 0 (an empty
  // guard's), error on Redis failure (the write may then have happened or not).
  [[nodiscard]] bool write(std::string_view key, std::string_view value, std::uint64_t token);

  // Thread-safe. One round trip. The record of `key`: {"", 0} if never written. Throws
  // error.
  [[nodiscard]] fenced_value read(std::string_view key);

  [[nodiscard]] const options& config() const noexcept;

 private:
  std::unique_ptr<detail::store_core> core_;
};

}  // namespace handoff::redis
