// handoff::redis::versioned_store: optimistic concurrency without a lock. A record per key
// holds a value and a version that every write increments; a write names the version it
// was computed from and is refused if another write came first, and the writer retries
// from the newer record.
//
//   handoff::redis::versioned_store carts(opts);
//   versioned_value v = carts.read("cart:7");              // {value, version}; version 0: none
//   bool won = carts.compare_and_set("cart:7", v.version, add_item(v.value));
//   auto done = carts.update("cart:7", [](const versioned_value& cur) { return add_item(cur.value); });
//
// Per key K (names under options::prefix, hash tag {K}, escaped as for the locks): the
// hash {K}:versioned with fields "version" and "value". compare_and_set is one Lua script
// (compare the version, increment it, store the value).
//
// Guarantees (one Redis server, no failover): compare_and_set(key, v, x) stores x only if
// the record's version is still v, and then its version becomes v + 1; operations are
// linearizable, so of the writers that read version v exactly one wins. Versions start
// at 1 and only grow (the library never deletes a record, so a version is never reused).
// Not promised: progress for one writer (update gives up after max_attempts conflicts;
// every conflict means another writer's update went in); records never expire.
//
// On a Redis Cluster (found at construction: any node's host and port will do): each call
// goes to the primary of its key's hash slot and follows MOVED, ASK, TRYAGAIN and
// CLUSTERDOWN while slots move, and a primary that is down until its replica takes over,
// within command_timeout; one pool of pool_size connections per primary. A write the old
// primary took but had not replicated is lost in a failover. docs/redis.md, "Redis
// Cluster".
//
// Errors: as fenced_store.hpp: handoff::redis::error for every Redis failure, within
// command_timeout per command.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "handoff/redis/options.hpp"

namespace handoff::redis {

namespace detail {
struct store_core;
}  // namespace detail

// A record as read: its value and version.
struct versioned_value {
  std::string value;          // "" when version is 0
  std::uint64_t version = 0;  // 0: no record; the first write makes it 1
};

// Thread-safe. Owns a pool of options::pool_size command connections; no thread.
class versioned_store {
 public:
  // Connects once to check the options and the server (as fenced_store's constructor).
  explicit versioned_store(options o = {});
  ~versioned_store();
  versioned_store(const versioned_store&) = delete;
  versioned_store& operator=(const versioned_store&) = delete;

  // Thread-safe. One round trip. The record of `key`: {"", 0} if none. Throws error.
  [[nodiscard]] versioned_value read(std::string_view key);

  // Thread-safe. One round trip. Stores `value` if the record's version is `version` (0:
  // only if there is no record), making it version + 1; returns whether it did. Keys and
  // values are any bytes. Throws error on Redis failure (the write may then have happened
  // or not).
  [[nodiscard]] bool compare_and_set(std::string_view key, std::uint64_t version, std::string_view value);

  // Thread-safe. Read, compute, compare-and-set, and on a conflict compute again from the
  // newer record, at most `max_attempts` times: f(const versioned_value& current) returns
  // the new value (something convertible to std::string). Returns the record written
  // ({value, its version}), or std::nullopt if every attempt lost to another writer.
  // 1 + max_attempts round trips at most (a conflict returns the newer record). f runs on
  // the caller's thread, once per attempt, and must not assume it runs only once; an
  // exception from f propagates and nothing more is written. Throws std::invalid_argument
  // for max_attempts < 1, error on Redis failure.
  template <class F>
    requires std::invocable<F&, const versioned_value&> &&
        std::convertible_to<std::invoke_result_t<F&, const versioned_value&>, std::string>
            std::optional<versioned_value> update(std::string_view key, F&& f, int max_attempts = 16) {
      if (max_attempts < 1) throw std::invalid_argument("handoff::redis::versioned_store::update: max_attempts < 1");
      versioned_value current = read(key);
      for (int attempt = 1;; ++attempt) {
        std::string next = std::invoke(f, std::as_const(current));
        if (try_set(key, std::move(next), current)) return current;
        if (attempt == max_attempts) return std::nullopt;
      }
    }

  [[nodiscard]] const options& config() const noexcept;

 private:
  // compare_and_set(key, current.version, value): on success current becomes the record
  // written, on a conflict the newer record.
  bool try_set(std::string_view key, std::string value, versioned_value& current);

  std::unique_ptr<detail::store_core> core_;
};

}  // namespace handoff::redis
