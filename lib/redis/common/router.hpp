// Which server runs a command: the one server of options::host/port, or, on a Redis Cluster,
// the primary that serves the command's hash slot. A router finds out which at
// construction (INFO cluster on the configured server, or on the first of
// options::cluster_seeds that answers) and keeps a connection pool per node
// (options::pool_size each).
//
// On a cluster it keeps the slot map (CLUSTER SLOTS) and follows the cluster's answers:
//   MOVED slot addr      the slot lives elsewhere now: the map is read again, and the
//                        command goes to the new node;
//   ASK slot addr        the slot is migrating and this key has moved: ASKING, then the
//                        command, once, on that node (the map does not change);
//   TRYAGAIN, CLUSTERDOWN  a multi-key command mid-migration, or a cluster without a
//                        majority: tried again every 20 ms until options::command_timeout;
//   no connection        the node is down: the map is read again and the command tried
//                        again every 20 ms, until a replica took over or command_timeout.
//                        A connection that breaks once the command is sent is handled the
//                        same for command() (reads, and writes that repeat to the same
//                        effect), and reported for eval() (a script may have run).
//   no primary in the map  mid-failover, CLUSTER SLOTS may leave out a dead primary's
//                        slots until a replica is promoted: read again every 20 ms, until
//                        command_timeout.
// Every key one command touches must be in one slot (the key names' hash tags see to it).
// Each node has three pools (router::lane), so that a lock's blocking waiters and its
// background thread never wait for a command connection.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "connection.hpp"

namespace handoff::redis::detail {

inline constexpr std::size_t cluster_slots = 16384;

// Redis Cluster's hash slot of a key: CRC16 (XMODEM) of its hash tag (the bytes between
// its first '{' and the first '}' after it, when that is not empty) or of the whole key.
[[nodiscard]] std::uint16_t hash_slot(std::string_view key) noexcept;

// A short string of letters and digits whose hash slot is `slot`, the same in every process:
// the hash tag of a name that belongs to a slot rather than to a key (a lock's sharded grant
// channel, which must be in the slot of the lock it announces).
[[nodiscard]] std::string_view slot_tag(std::uint16_t slot);

class router {
 public:
  // Connects to options::host/port (or unix_socket), which may be a cluster node, or to the
  // first of options::cluster_seeds that answers, which must be one. Throws error. Counts
  // round trips into `counters` when given.
  explicit router(const options& o, client_counters* counters = nullptr);
  ~router() = default;
  router(const router&) = delete;
  router& operator=(const router&) = delete;
  router(router&&) = delete;
  router& operator=(router&&) = delete;

  // Thread-safe. Whether the server is a Redis Cluster.
  [[nodiscard]] bool clustered() const noexcept { return clustered_; }

  // Which of a node's pools a call takes its connection from: `commands` (at most
  // options::pool_size), `waits` (a blocking waiter's BLPOP: as many as there are waiters,
  // so that no waiter keeps a command connection) or `background` (one: a client's
  // background thread, the only one to take it, so it never waits behind callers).
  enum class lane : std::uint8_t { commands, waits, background };
  // One request: returns its reply, error replies included (`asking`: ASKING first).
  using request = std::function<reply(connection&, bool asking)>;

  // Thread-safe. Runs r on a connection of lane `l` to the node serving `key`, following
  // the cluster's answers (above) and returning any other reply as it is. `read_only`: r
  // may run twice (a read, or a write that repeats to the same effect), so a connection
  // that breaks under it is retried like one that cannot be opened. Throws error.
  reply run(std::string_view key, std::string_view what, bool read_only, lane l, const request& r);

  // Thread-safe. The command, on the node serving `key` (any key name it touches); it must
  // be one that may run twice (a read, SET NX). Throws error for an error reply, I/O
  // failure or timeout, prefixed by `what`.
  reply command(std::string_view key, std::initializer_list<std::string_view> args, std::string_view what);
  // Thread-safe. EVALSHA of s, as connection::eval, on the node serving keys[0].
  reply eval(const script& s, std::initializer_list<std::string_view> keys,
             std::initializer_list<std::string_view> args, std::string_view what, lane l = lane::commands);

  // One call's outcome in eval_each: its reply (error replies included), or, when the
  // round trip that carried it failed, that error (the script may have run).
  struct outcome {
    reply r;
    std::exception_ptr failed;
  };
  // Thread-safe. EVALSHA of s once per call (the number of keys, the keys, then the
  // arguments, as connection::eval_each), each on the node serving its first key: one write
  // per node. A call the cluster redirects (MOVED, ASK, TRYAGAIN, CLUSTERDOWN: it did not
  // run) is sent again alone, followed as run() follows one. Outcomes in the order of
  // `calls`.
  std::vector<outcome> eval_each(const script& s, const std::vector<std::vector<std::string>>& calls,
                                 std::string_view what, lane l = lane::commands);

  // Thread-safe. connection::eval_then of s and `then` on a connection of lane `l` to the
  // node serving keys[0]: the script's reply is followed as run() follows one, then
  // checked (error for an error reply); `then`'s reply comes back as it is (one sent after
  // an ASKING script may itself be a redirect).
  std::pair<reply, reply> eval_then(lane l, const script& s, std::initializer_list<std::string_view> keys,
                                    std::initializer_list<std::string_view> args,
                                    std::initializer_list<std::string_view> then, std::string_view what,
                                    std::chrono::milliseconds timeout);

  // Thread-safe. f on a connection to every primary (the one server when not clustered).
  // A primary that cannot be reached is waited for as run() waits (a failover), until
  // command_timeout. Throws error, or what f throws.
  void each_primary(const std::function<void(connection&)>& f);

  // Thread-safe. The address ("host:port"; empty for the one server) and the options of
  // the primary serving `slot` (options that live as long as the router). Reads the map
  // again when no node serves it; throws error when none does then.
  std::pair<std::string, const options*> primary_of(std::uint16_t slot);
  // Thread-safe. Reads the slot map again from any known node (after a MOVED seen outside
  // run()). Throws error when none answers.
  void refresh(std::string_view what);

 private:
  struct node {
    node(options base, std::string host, int port, client_counters* counters);
    pool& of(lane l) noexcept { return l == lane::commands ? connections : l == lane::waits ? waits : background; }
    options o;  // base options with this node's address
    pool connections;
    pool waits;
    pool background;
  };

  // The primary serving `slot` in the map (nullptr: none). Takes mu_ shared.
  node* mapped(std::uint16_t slot) {
    const std::shared_lock lock(mu_);
    return slots_[slot];
  }
  // The node at "host:port", created on first use. Takes mu_ exclusively.
  node& node_at(std::string_view address);
  // Reads CLUSTER SLOTS on c; `asked` is c's host, for a node that does not know its own.
  void read_map(connection& c, const std::string& asked, std::string_view what);
  // Throws std::invalid_argument for a prefix that would break the key names' hash tags.
  static void refuse_tagged_prefix(const options& o);

  const options& o_;
  client_counters* const counters_;
  bool clustered_ = false;
  std::shared_mutex mu_;
  std::map<std::string, std::unique_ptr<node>, std::less<>> nodes_;  // guarded by mu_; never shrinks
  std::array<node*, cluster_slots> slots_{};                         // guarded by mu_; nullptr: unserved
  node* single_ = nullptr;                                           // not clustered: the one server (set once)
};

}  // namespace handoff::redis::detail
