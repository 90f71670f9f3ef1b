// The lock's connections and commands (private to lib/redis): the servers (one, or a
// cluster, router.hpp), the request ids and the channels the scripts publish on, the
// lock's scripts (scripts.hpp) and the calls that send them (attempt, attempt with a
// blocking wait behind it, the wait alone, cancel, release, renew), with the parsing of
// their replies. What to send when is the
// protocol's business (acquire_step.hpp); a script the server forgot is loaded again by
// the connection (common/connection.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "../common/connection.hpp"
#include "../common/counters.hpp"
#include "../common/ids.hpp"
#include "../common/names.hpp"
#include "../common/router.hpp"
#include "hold.hpp"
#include "lease_clock.hpp"
#include "scripts.hpp"

namespace handoff::redis::detail {

// What an acquire script replied.
struct attempt_result {
  bool granted;
  std::int64_t value;  // the fencing token if granted, else the lock's PTTL in ms (< 0: none)
  // If granted: the lease left in ms, or -1 for the whole lease from now. If queued: the
  // server time (ms) of the heartbeat it recorded.
  std::int64_t extra;
};

// A grant a release made to a queued request, as it tells the request (scripts.hpp): the
// fencing token (0: none), the server time of the request's heartbeat before the grant
// (which names the attempt it answers), and the ms from that heartbeat to the grant.
struct grant_notice {
  std::uint64_t fence = 0;
  std::int64_t beat = 0;
  std::int64_t waited_ms = 0;
};

// What a blocking waiter's BLPOP on its grant list returned: a grant, a poke (the caller
// holds the key, or must look again sooner), or neither (nothing in time).
struct pushed_grant {
  grant_notice grant;
  bool poked = false;
};

class lock_commands {
 public:
  using lane = router::lane;

  // Connects to the server, or to a cluster (router.hpp). Throws error.
  lock_commands(const options& o, client_counters& counters, const lease_clock& clock);

  // Loads the scripts on every primary and, on one server, asks whether it honours CLIENT
  // REPLY SKIP. Once, before any other call.
  void load();

  // The servers: one, or a cluster's primaries.
  [[nodiscard]] router& servers() noexcept { return router_; }
  // Whether attempt_and_wait may skip the script's reply: fixed by load() (never on a
  // cluster, where a redirect must be read from the script's reply).
  [[nodiscard]] bool skip_replies() const noexcept { return skip_replies_; }

  // The names of `key`'s lock on these servers (names.hpp).
  [[nodiscard]] key_names names(std::string_view key) const { return {o_.prefix, key, router_.clustered()}; }
  // Thread-safe. A new request id (scripts.hpp): unique, with the lease and heartbeat a
  // release sets and reads when it grants the request, and whether it is told on the
  // client's channel (async) or through a list (blocking).
  [[nodiscard]] std::string request_id(std::int64_t lease_ns, bool blocking);
  // The prefix of the channels on which the scripts announce async grants of locks in
  // `slot` (scripts.hpp): "<prefix>notify:" on one server; on a cluster
  // "<prefix>notify:{<slot_tag(slot)>}", a sharded channel in that slot.
  [[nodiscard]] std::string channel_prefix(std::uint16_t slot) const;
  // The channel prefix of the lock named `n` (the slot is worked out on a cluster only).
  [[nodiscard]] std::string channel_prefix(const key_names& n) const;
  // This client's channel for the locks in `slot` (any slot on one server).
  [[nodiscard]] std::string channel(std::uint16_t slot) const { return channel_prefix(slot) + id_; }
  // The list on which a release pushes request `id`'s grant.
  [[nodiscard]] static std::string grant_list(const key_names& n, std::string_view id) {
    std::string list = n.prefix_and_key + "grant:";
    list += id;
    return list;
  }

  // Each call below runs on a connection of lane `l` (waits for the waits; router.hpp) to
  // the node serving the lock, and throws error when its round trip fails; `key` names the
  // lock in it.
  // One acquire script: `queue` false for a try, which never queues.
  attempt_result attempt(lane l, const key_names& n, std::string_view id, std::int64_t lease_ms, bool queue,
                         std::string_view key);
  // An attempt (queueing) with the BLPOP of `list` for at most `ms` behind it: one round
  // trip. With skip_reply, the script's reply is skipped (connection::eval_skipped_then)
  // and the BLPOP's reply says what it would have (scripts.hpp, ARGV[7]): the thread wakes
  // once, and a failing script shows only as the BLPOP timing out. A BLPOP the cluster
  // redirected (its list mid-migration) comes back as a poke: wait again with await_grant.
  std::pair<attempt_result, pushed_grant> attempt_and_wait(const key_names& n, std::string_view id,
                                                           std::int64_t lease_ms, const std::string& list,
                                                           std::int64_t ms, std::string_view key, bool skip_reply);
  // A blocking waiter's wait: BLPOP `list` for at most `ms`.
  pushed_grant await_grant(const std::string& list, std::int64_t ms, std::string_view key);
  // The cancel script; a failure is ignored (the server drops the entry when its heartbeat
  // runs out). Best effort: a grant it cannot pass on ends with its lease.
  void cancel(lane l, const key_names& n, std::string_view id, std::string_view key) noexcept;
  // The release script.
  void release(const hold& h);
  // Renews h's lease to `lease_ns` with the extend script (common/renewal.hpp) and records
  // the outcome in h (hold::renewed). Under h.mu (or before h is shared). Returns whether it
  // was renewed; throws error, h unchanged, when the round trip fails. With
  // options::min_replicas, WAIT goes behind the script in the same round trip, and a
  // renewal fewer replicas acknowledged within command_timeout throws error, h unchanged
  // (the server renewed it, the replicas may not have). `doing` names the call in errors.
  bool renew(lane l, hold& h, std::int64_t lease_ns, std::string_view doing = "extend");

 private:
  static attempt_result parse_attempt(const redisReply& r, std::string_view key);
  // The BLPOP's reply of a skip_reply attempt, as the attempt's result and the pushed grant.
  static std::pair<attempt_result, pushed_grant> parse_listed(const redisReply& r, std::string_view what);
  static pushed_grant parse_grant(const redisReply& r, std::string_view what);

  const options& o_;
  const lease_clock& clock_;
  router router_;
  // Loaded by load(), then only read.
  script acquire_script_{scripts::acquire_source(), {}};
  script release_script_{scripts::release_source(), {}};
  script extend_script_{scripts::extend, {}};
  script cancel_script_{scripts::cancel_source(), {}};
  bool skip_replies_ = false;  // set by load(), read-only after
  const std::string id_ = random_hex128();
  const std::string channel_prefix_;
  const std::string heartbeat_ttl_ms_;
  std::atomic<std::uint64_t> seq_{0};  // relaxed: only uniqueness matters (fetch_add never repeats)
};

}  // namespace handoff::redis::detail
