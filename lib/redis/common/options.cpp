// Checks of the options and of the server, shared by keyed_mutex, the stores and the actors.
#include <algorithm>
#include <charconv>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>

#include "connection.hpp"
#include "format.hpp"
#include "handoff/detail/report.hpp"
#include "renewal.hpp"
#include "router.hpp"

namespace handoff::redis::detail {

void validate(const options& o) {
  if (o.unix_socket.empty() && (o.port <= 0 || o.port > 65535)) {
    throw std::invalid_argument("handoff::redis::options: port out of range");
  }
  if (o.pool_size == 0) throw std::invalid_argument("handoff::redis::options: pool_size must be at least 1");
  // watchdog_lease: at least renew_fraction ms, so that renewals come at least 1 ms apart.
  if (o.connect_timeout.count() <= 0 || o.command_timeout.count() <= 0 || o.watchdog_lease.count() < renew_fraction ||
      o.recheck_interval.count() <= 0) {
    throw std::invalid_argument(
        "handoff::redis::options: timeouts and recheck_interval must be positive, watchdog_lease at least " +
        std::to_string(renew_fraction) + " ms");
  }
  if (o.database < 0) throw std::invalid_argument("handoff::redis::options: database must be >= 0");
  if (o.min_replicas < 0) throw std::invalid_argument("handoff::redis::options: min_replicas must be >= 0");
  if (o.tls.enabled && !o.unix_socket.empty()) {
    throw std::invalid_argument("handoff::redis::options: tls needs host and port (Redis serves TLS on TCP only)");
  }
  if (o.tls.cert_file.empty() != o.tls.key_file.empty()) {
    throw std::invalid_argument("handoff::redis::options: tls.cert_file and tls.key_file go together");
  }
  for (const std::string& seed : o.cluster_seeds) {
    const std::size_t colon = seed.rfind(':');
    int port = 0;
    const char* end = seed.data() + seed.size();
    if (colon == std::string::npos || colon == 0 || std::from_chars(seed.data() + colon + 1, end, port).ptr != end ||
        port <= 0 || port > 65535) {
      throw std::invalid_argument("handoff::redis::options: cluster seed '" + seed + "' is not host:port");
    }
  }
}

options validated(options o) {
  validate(o);
  return o;
}

namespace {
// The value of `field` in an INFO reply ("field:value\r\n" lines), or "" if absent.
std::string info_field(std::string_view info, std::string_view field) {
  for (std::size_t at = 0; at < info.size();) {
    const std::size_t end = std::min(info.find('\n', at), info.size());
    std::string_view line = info.substr(at, end - at);
    if (line.ends_with('\r')) line.remove_suffix(1);
    if (line.size() > field.size() && line.starts_with(field) && line[field.size()] == ':') {
      return std::string(line.substr(field.size() + 1));
    }
    at = end + 1;
  }
  return {};
}

void check_eviction(connection& c, const options& o, std::string_view what) {
  if (o.if_server_evicts == eviction_check::allow) return;
  std::string problem;
  try {
    const reply r = c.command({"INFO", "memory"}, "INFO memory");
    const std::string_view info(r->str != nullptr ? r->str : "", r->str != nullptr ? r->len : 0);
    const std::string limit = info_field(info, "maxmemory");
    const std::string policy = info_field(info, "maxmemory_policy");
    if (limit.empty() || policy.empty()) {
      problem = "cannot read maxmemory and maxmemory_policy from INFO memory";
    } else if (limit != "0" && policy != "noeviction") {
      problem = "the server may evict keys (maxmemory " + limit + ", maxmemory-policy " + policy +
                "): " + std::string(what) + "; use maxmemory-policy noeviction";
    }
  } catch (const error& e) {
    problem = std::string("cannot check the eviction policy: ") + e.what();
  }
  if (problem.empty()) return;
  if (o.if_server_evicts == eviction_check::refuse) {
    throw error("handoff::redis: " + problem + " (options::if_server_evicts decides)");
  }
  std::fprintf(stderr, "handoff::redis: warning: %s\n", problem.c_str());
}

// Claims o.prefix for data_format: sets the marker if absent, refuses another format.
void claim_format(router& servers, const options& o) {
  const std::string marker = o.prefix + std::string(format_marker);
  const std::string what = "data format of the prefix " + handoff::detail::key_excerpt(o.prefix);
  const auto refuse = [&](std::string_view found) {
    throw error("handoff::redis: the prefix " + handoff::detail::key_excerpt(o.prefix) + " holds data of format " +
                std::string(found) + " and this client reads and writes format " + std::string(data_format) +
                ": clients of different formats must not share a prefix (CHANGELOG.md); stop the other "
                "version's processes and let their actors drain, or give this version another prefix");
  };
  for (;;) {
    const reply r = servers.command(marker, {"GET", marker}, what);
    if (r->type == REDIS_REPLY_STRING) {
      if (std::string_view(r->str, r->len) != data_format) refuse(std::string_view(r->str, r->len));
      return;
    }
    // No marker. Actors of format 1, written before the marker existed, keep their pending
    // set while any of them has messages.
    const std::string pending = o.prefix + std::string(actor_pending_set);
    const reply old = servers.command(pending, {"EXISTS", pending}, what);
    if (old->type == REDIS_REPLY_INTEGER && old->integer != 0) refuse("1 (before format markers)");
    const reply set = servers.command(marker, {"SET", marker, data_format, "NX"}, what);
    if (set->type == REDIS_REPLY_STATUS) return;  // ours; else another client set it first: read it
  }
}

}  // namespace

bool is_cluster_node(connection& c) {
  const reply info = c.command({"INFO", "cluster"}, "INFO cluster");
  return info_field(std::string_view(info->str != nullptr ? info->str : "", info->len), "cluster_enabled") == "1";
}

void check_server(router& r, const options& o, std::string_view what) {
  r.each_primary([&](connection& c) { check_eviction(c, o, what); });
  claim_format(r, o);
}

}  // namespace handoff::redis::detail
