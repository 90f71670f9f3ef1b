#include "router.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace handoff::redis::detail {
namespace {

// CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), Redis Cluster's key hash.
constexpr std::array<std::uint16_t, 256> crc16_table = [] {
  std::array<std::uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    unsigned crc = i << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1;
    t[i] = static_cast<std::uint16_t>(crc);
  }
  return t;
}();

std::uint16_t crc16(std::string_view bytes) noexcept {
  unsigned crc = 0;
  for (const char c : bytes) {
    crc = ((crc << 8) ^ crc16_table[((crc >> 8) ^ static_cast<unsigned char>(c)) & 0xff]) & 0xffff;
  }
  return static_cast<std::uint16_t>(crc);
}

// "host:port" of a MOVED or ASK reply ("MOVED 3999 127.0.0.1:6381"): its third word.
std::string_view redirect_address(std::string_view error) {
  const std::size_t first = error.find(' ');
  const std::size_t second = first == std::string_view::npos ? first : error.find(' ', first + 1);
  return second == std::string_view::npos ? std::string_view{} : error.substr(second + 1);
}

[[noreturn]] void error_reply(std::string_view what, const redisReply& r) {
  throw error("handoff::redis: " + std::string(what) + ": " + std::string(text(r)));
}

// An answer of the cluster rather than of the command: the command did not run.
bool redirected(const redisReply& r) {
  if (r.type != REDIS_REPLY_ERROR) return false;
  const std::string_view e = text(r);
  return e.starts_with("MOVED ") || e.starts_with("ASK ") || e.starts_with("TRYAGAIN") || e.starts_with("CLUSTERDOWN");
}

// MOVED this many times for one command (each after reading the map again): a map that
// does not settle, given up on rather than followed for ever.
constexpr int max_moves = 16;
// TRYAGAIN and CLUSTERDOWN: a migration's multi-key step or an election takes about this long.
constexpr auto retry_pause = std::chrono::milliseconds(20);

}  // namespace

std::uint16_t hash_slot(std::string_view key) noexcept {
  if (const std::size_t open = key.find('{'); open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<std::uint16_t>(crc16(key) % cluster_slots);
}

std::string_view slot_tag(std::uint16_t slot) {
  // The first string, in order of length then of the alphabet below, of each slot: three
  // characters find all but a few slots, four the rest. Built once per process, at its first
  // use (docs/design.md, "Redis connections: own sockets, TLS, and a cluster's slots").
  static const std::vector<std::string> tags = [] {
    constexpr std::string_view alphabet = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    std::vector<std::string> t(cluster_slots);
    std::size_t left = cluster_slots;
    std::string s;
    for (std::size_t len = 1; left > 0; ++len) {
      s.assign(len, alphabet[0]);
      for (;;) {
        std::string& tag = t[crc16(s) % cluster_slots];
        if (tag.empty()) {
          tag = s;
          if (--left == 0) break;
        }
        std::size_t i = len;  // the next string of this length, as an odometer
        while (i > 0 && s[i - 1] == alphabet.back()) s[--i] = alphabet[0];
        if (i == 0) break;
        s[i - 1] = alphabet[alphabet.find(s[i - 1]) + 1];
      }
    }
    return t;
  }();
  return tags[slot % cluster_slots];
}

router::node::node(options base, std::string host, int port, client_counters* counters)
    : o(std::move(base)), connections(o, o.pool_size, counters),
      waits(o, std::numeric_limits<std::size_t>::max(), counters), background(o, 1, counters) {
  o.host = std::move(host);
  o.port = port;
  o.unix_socket.clear();
}

router::router(const options& o, client_counters* counters) : o_(o), counters_(counters) {
  if (o.cluster_seeds.empty()) {
    connection first(o);  // fails fast on a wrong address or password
    if (!is_cluster_node(first)) {
      auto n = std::make_unique<node>(o, o.host, o.port, counters);
      n->o.unix_socket = o.unix_socket;
      single_ = n.get();
      nodes_.emplace(std::string(), std::move(n));
      return;
    }
    if (!o.unix_socket.empty()) {
      throw error("handoff::redis: " + o.unix_socket + " is a Redis Cluster node: give its host and port instead");
    }
    refuse_tagged_prefix(o);
    clustered_ = true;
    const std::unique_lock lock(mu_);
    read_map(first, o.host, "CLUSTER SLOTS");
    return;
  }
  std::string why;
  for (const std::string& seed : o.cluster_seeds) {  // validate() checked each is host:port
    const std::size_t colon = seed.rfind(':');
    options at = o;
    at.host = seed.substr(0, colon);
    at.port = std::stoi(seed.substr(colon + 1));
    at.unix_socket.clear();
    std::unique_ptr<connection> c;
    try {
      c = std::make_unique<connection>(at);
    } catch (const error& e) {
      why += why.empty() ? "" : "; ";
      why += e.what();
      continue;
    }
    if (!is_cluster_node(*c)) throw error("handoff::redis: the cluster seed " + seed + " is not a Redis Cluster node");
    refuse_tagged_prefix(o);
    clustered_ = true;
    const std::unique_lock lock(mu_);
    read_map(*c, at.host, "CLUSTER SLOTS");
    return;
  }
  throw error("handoff::redis: no cluster seed answered: " + why);
}

void router::refuse_tagged_prefix(const options& o) {
  if (o.prefix.find('{') != std::string::npos) {
    throw std::invalid_argument(
        "handoff::redis::options: on a Redis Cluster the prefix must not contain '{': it would "
        "start every name's hash tag before the key");
  }
}

void router::read_map(connection& c, const std::string& asked, std::string_view what) {
  const reply r = c.command({"CLUSTER", "SLOTS"}, what);
  if (r->type != REDIS_REPLY_ARRAY) error_reply(what, *r);
  slots_.fill(nullptr);
  // Each entry: [first slot, last slot, [host, port, id, ...] of the primary, replicas...].
  for (std::size_t i = 0; i < r->elements; ++i) {
    const redisReply& range = *r->element[i];
    if (range.type != REDIS_REPLY_ARRAY || range.elements < 3 || range.element[2]->type != REDIS_REPLY_ARRAY ||
        range.element[2]->elements < 2) {
      throw error("handoff::redis: " + std::string(what) + ": unexpected reply");
    }
    const redisReply& primary = *range.element[2];
    std::string host(text(*primary.element[0]));
    if (host.empty()) host = asked;  // a node that does not know its own address: the one asked
    const std::string address = host + ":" + std::to_string(primary.element[1]->integer);
    auto it = nodes_.find(address);
    if (it == nodes_.end()) {
      it = nodes_
               .emplace(address,
                        std::make_unique<node>(o_, host, static_cast<int>(primary.element[1]->integer), counters_))
               .first;
    }
    const auto first = static_cast<std::size_t>(range.element[0]->integer);
    const auto last = static_cast<std::size_t>(range.element[1]->integer);
    for (std::size_t s = first; s <= last && s < cluster_slots; ++s) slots_[s] = it->second.get();
  }
}

router::node& router::node_at(std::string_view address) {
  const std::unique_lock lock(mu_);
  auto it = nodes_.find(address);
  if (it != nodes_.end()) return *it->second;
  const std::size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) throw error("handoff::redis: bad node address " + std::string(address));
  const int port = std::stoi(std::string(address.substr(colon + 1)));
  return *nodes_
              .emplace(std::string(address),
                       std::make_unique<node>(o_, std::string(address.substr(0, colon)), port, counters_))
              .first->second;
}

void router::refresh(std::string_view what) {
  const std::unique_lock lock(mu_);
  std::string why = "no node known";
  for (auto& [address, n] : nodes_) {
    try {
      auto c = n->connections.take();
      read_map(*c, n->o.host, what);
      return;
    } catch (const error& e) {
      why = e.what();
    }
  }
  throw error("handoff::redis: " + std::string(what) + ": cannot read the slot map: " + why);
}

reply router::run(std::string_view key, std::string_view what, bool read_only, lane l, const request& r) {
  if (!clustered_) {
    auto c = single_->of(l).take();
    return r(*c, false);
  }
  const std::uint16_t slot = hash_slot(key);
  const auto give_up = std::chrono::steady_clock::now() + o_.command_timeout;
  node* asked = nullptr;  // an ASK redirect's node, for the next try only
  int moves = 0;
  for (;;) {
    node* target = asked != nullptr ? asked : mapped(slot);
    if (target == nullptr) {
      // No primary in the map (mid-failover: see router.hpp): read again until command_timeout.
      const bool late = std::chrono::steady_clock::now() + retry_pause > give_up;
      try {
        refresh(what);
      } catch (const error&) {
        if (late) throw;
      }
      if ((target = mapped(slot)) == nullptr) {
        if (late) throw error("handoff::redis: " + std::string(what) + ": no node serves its slot");
        std::this_thread::sleep_for(retry_pause);
        continue;
      }
    }
    bool connected = false;
    reply out;
    try {
      auto c = target->of(l).take();
      connected = true;
      out = r(*c, asked != nullptr);
    } catch (const error&) {
      // No connection to the node (it died, or is failing over), or a connection that broke
      // under a read: read the map again and retry, until a replica has taken over or
      // command_timeout is spent. A write that broke once sent may have run: reported.
      if ((connected && !read_only) || std::chrono::steady_clock::now() + retry_pause > give_up) throw;
      std::this_thread::sleep_for(retry_pause);
      asked = nullptr;
      try {
        refresh(what);
      } catch (const error&) {  // NOLINT(bugprone-empty-catch): no node answered; the next try reports
      }
      continue;
    }
    asked = nullptr;
    if (out->type != REDIS_REPLY_ERROR) return out;
    const std::string_view e = text(*out);
    const bool moved = e.starts_with("MOVED ");
    if (moved && ++moves > max_moves) {
      throw error("handoff::redis: " + std::string(what) + ": moved " + std::to_string(max_moves) +
                  " times, last: " + std::string(e));
    }
    if (moved) {
      refresh(what);
    } else if (e.starts_with("ASK ")) {  // the target answers, or says TRYAGAIN: never ASK again
      asked = &node_at(redirect_address(e));
    } else if (e.starts_with("TRYAGAIN") || e.starts_with("CLUSTERDOWN")) {
      if (std::chrono::steady_clock::now() + retry_pause > give_up) error_reply(what, *out);
      std::this_thread::sleep_for(retry_pause);
    } else {
      return out;  // the command's own error: the caller's to report
    }
  }
}

reply router::command(std::string_view key, std::initializer_list<std::string_view> args, std::string_view what) {
  const std::vector<std::string_view> argv(args);
  return checked(
      run(key, what, true, lane::commands, [&](connection& c, bool asking) { return c.call(argv, what, asking); }),
      what);
}

reply router::eval(const script& s, std::initializer_list<std::string_view> keys,
                   std::initializer_list<std::string_view> args, std::string_view what, lane l) {
  return checked(run(*keys.begin(), what, false, l,
                     [&](connection& c, bool asking) { return c.eval_call(s, keys, args, what, asking); }),
                 what);
}

std::vector<router::outcome> router::eval_each(const script& s, const std::vector<std::vector<std::string>>& calls,
                                               std::string_view what, lane l) {
  std::vector<outcome> out(calls.size());
  if (!clustered_) {
    try {
      auto c = single_->of(l).take();
      std::vector<reply> replies = c->eval_each(s, calls, what);
      for (std::size_t i = 0; i < calls.size(); ++i) out[i].r = std::move(replies[i]);
    } catch (const error&) {
      for (outcome& o : out) o.failed = std::current_exception();
    }
    return out;
  }
  // The calls by node (nullptr: a slot no node serves in the map, sent alone below).
  std::map<node*, std::vector<std::size_t>> by_node;
  {
    const std::shared_lock lock(mu_);
    for (std::size_t i = 0; i < calls.size(); ++i) by_node[slots_[hash_slot(calls[i].at(1))]].push_back(i);
  }
  std::vector<std::vector<std::string>> subset;
  for (const auto& [n, indices] : by_node) {
    if (n == nullptr) continue;
    subset.clear();
    for (const std::size_t i : indices) subset.push_back(calls[i]);
    try {
      auto c = n->of(l).take();
      std::vector<reply> replies = c->eval_each(s, subset, what);
      for (std::size_t k = 0; k < indices.size(); ++k) out[indices[k]].r = std::move(replies[k]);
    } catch (const error&) {
      for (const std::size_t i : indices) out[i].failed = std::current_exception();
    }
  }
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (out[i].failed != nullptr || (out[i].r != nullptr && !redirected(*out[i].r))) continue;
    try {
      out[i].r = run(calls[i][1], what, false, l, [&](connection& c, bool asking) {
        return std::move(c.eval_each(s, {calls[i]}, what, asking).front());
      });
    } catch (const error&) {
      out[i].failed = std::current_exception();
    }
  }
  return out;
}

std::pair<reply, reply> router::eval_then(lane l, const script& s, std::initializer_list<std::string_view> keys,
                                          std::initializer_list<std::string_view> args,
                                          std::initializer_list<std::string_view> then, std::string_view what,
                                          std::chrono::milliseconds timeout) {
  reply second;
  reply first = run(*keys.begin(), what, false, l, [&](connection& c, bool asking) {
    auto [script_reply, then_reply] = c.eval_then(s, keys, args, then, what, timeout, asking);
    second = std::move(then_reply);
    return std::move(script_reply);
  });
  return {checked(std::move(first), what), std::move(second)};
}

std::pair<std::string, const options*> router::primary_of(std::uint16_t slot) {
  if (!clustered_) return {std::string(), &single_->o};
  for (int pass = 0;; ++pass) {
    if (node* n = mapped(slot % cluster_slots)) return {n->o.host + ":" + std::to_string(n->o.port), &n->o};
    if (pass == 1) throw error("handoff::redis: no node serves slot " + std::to_string(slot));
    refresh("CLUSTER SLOTS");
  }
}

void router::each_primary(const std::function<void(connection&)>& f) {
  const auto give_up = std::chrono::steady_clock::now() + o_.command_timeout;
  std::vector<node*> done;
  for (;;) {
    std::vector<node*> primaries;
    {
      const std::shared_lock lock(mu_);
      if (!clustered_) {
        primaries.push_back(single_);
      } else {
        for (node* n : slots_) {
          if (n != nullptr) primaries.push_back(n);
        }
      }
    }
    std::sort(primaries.begin(), primaries.end());
    primaries.erase(std::unique(primaries.begin(), primaries.end()), primaries.end());
    bool unreachable = false;
    for (node* n : primaries) {
      if (std::find(done.begin(), done.end(), n) != done.end()) continue;
      bool connected = false;
      try {
        auto c = n->connections.take();
        connected = true;
        f(*c);
        done.push_back(n);
      } catch (const error&) {
        // A primary that cannot be reached may be failing over: as run() does, read the map
        // again and go on with the primaries it names, until command_timeout.
        if (connected || !clustered_ || std::chrono::steady_clock::now() + retry_pause > give_up) throw;
        unreachable = true;
      }
    }
    if (!unreachable) return;
    std::this_thread::sleep_for(retry_pause);
    try {
      refresh("CLUSTER SLOTS");
    } catch (const error&) {  // NOLINT(bugprone-empty-catch): no node answered; the next pass reports
    }
  }
}

}  // namespace handoff::redis::detail
