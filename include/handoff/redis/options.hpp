// handoff::redis's shared vocabulary: the error every Redis failure is reported as, and the
// options of a connection to the server (address or cluster seeds, credentials, TLS,
// timeouts, key prefix), shared by keyed_mutex, fenced_store, versioned_store and
// actor_system.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "handoff/metrics.hpp"

namespace handoff::redis {

// A Redis failure: the message says what was being done and what Redis, the socket or TLS
// said.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What the constructor does with a server that may evict keys under memory pressure
// (maxmemory set, with a maxmemory-policy other than noeviction): lock keys are ordinary
// keys with an expiry, so an evicted lock lets a second holder in, and an evicted fenced or
// versioned record forgets the token or version that refuses stale writers.
enum class eviction_check : std::uint8_t {
  refuse,  // throw error (also when the policy cannot be read)
  warn,    // print a warning to stderr and go on
  allow,   // do not check
};

// TLS to the server (a Redis started with --tls-port). The server's certificate is always
// verified: against ca_file, and its name against server_name.
struct tls_options {
  bool enabled = false;
  std::string ca_file{};      // PEM file of the CAs to trust; empty: the system's default CAs
  std::string cert_file{};    // client certificate (PEM, chain), for a server that asks for
                              // one (tls-auth-clients); needs key_file
  std::string key_file{};     // the client certificate's private key (PEM, not encrypted)
  std::string server_name{};  // the DNS name or IP address the certificate must name (and the
                              // name sent by SNI); empty: options::host
};

struct options {
  std::string host = "127.0.0.1";
  int port = 6379;
  std::string unix_socket{};  // when set, used instead of host:port
  std::string username{};     // ACL user (Redis 6+); empty: AUTH with the password alone
  std::string password{};     // AUTH when non-empty
  int database = 0;           // SELECT
  std::chrono::milliseconds connect_timeout{1000};
  std::chrono::milliseconds command_timeout{1000};  // every command, also the watchdog's
  std::size_t pool_size = 4;                        // command connections shared by callers
  std::string prefix = "handoff:";                  // of every Redis key and channel
  // keyed_mutex only (the stores ignore them):
  // lock() without a lease: the key's lease on the server, renewed by the watchdog every
  // third of it while the guard holds (a crashed process's locks free after this long).
  std::chrono::milliseconds watchdog_lease{30000};
  // A waiter's fallback re-check and heartbeat period (see keyed_mutex.hpp).
  std::chrono::milliseconds recheck_interval{1000};
  // A server that may evict keys (checked once, with INFO memory, at construction).
  eviction_check if_server_evicts = eviction_check::refuse;
  // keyed_mutex only: where its events go (handoff/metrics.hpp: round trips, reconnects,
  // lost notifications, re-checks, lock waits); nullptr: the process-wide sink. Not owned:
  // it must outlive the mutex.
  metrics_sink* metrics = nullptr;
  // TLS: off by default. Not with unix_socket (Redis serves TLS on TCP only).
  tls_options tls{};
  // Nodes of a Redis Cluster to start from, "host:port" each, tried in order until one
  // answers; each must be a cluster node. Empty: host and port, which may be the one server
  // or any node of a cluster (found out at construction). keyed_mutex, fenced_store and
  // versioned_store run on a cluster; actor_system does not yet.
  std::vector<std::string> cluster_seeds{};
  // keyed_mutex only: how many replicas must hold a grant, or a renewed lease, before the
  // client counts on it. 0: none (replication is asynchronous: a failover may lose a grant).
  // n > 0: a granted caller renews its lease with WAIT n command_timeout behind it (one more
  // round trip), so that the grant, its token and everything written before them are on n
  // replicas; fewer in time: the key is given up and the call throws error. extend() and the
  // watchdog wait so too (fewer: extend throws error, the watchdog retries, the old lease
  // stands). docs/redis.md, "Failover".
  int min_replicas = 0;
};

}  // namespace handoff::redis
