#include "shard_lease.hpp"

#include <map>

#include "../common/lua.hpp"
#include "../common/names.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/redis/options.hpp"
#include "layout.hpp"

namespace handoff::redis::detail {

namespace {

// KEYS: lease, epoch. ARGV: owner id, lease ms. The new token, or the held lease's ms left.
constexpr std::string_view take_lua = R"lua(
local left = redis.call('PTTL', KEYS[1])
if left ~= -2 then return left end
local token = redis.call('INCR', KEYS[2]) .. ' ' .. ARGV[1]
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return token
)lua";

// KEYS: lease. ARGV: token, lease ms. 1: renewed; 0: the lease is not the token.
constexpr std::string_view renew_lua = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua";

// KEYS: lease. ARGV: token. 1: released; 0: the lease is not the token.
constexpr std::string_view release_lua = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
)lua";

// KEYS: lease, queue, done, then the keys' state and dead-letter names the writes use.
// ARGV: token, trim, the counts of done ids to add and to remove, of states and of dead
// letters; then the ids to add, the ids to remove, each state as (its KEYS index, id,
// value), each dead letter as (its KEYS index, element). 1: written; 0: the lease is not
// the token, nothing written. Ids go to SADD/SREM in slices, within Lua's stack.
constexpr std::string_view ack_lua = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local trim, adds, removes, states, deads = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]),
  tonumber(ARGV[5]), tonumber(ARGV[6])
local function each_slice(cmd, from, n)
  local i = 0
  while i < n do
    local m = math.min(n - i, 1000)
    redis.call(cmd, KEYS[3], unpack(ARGV, from + i, from + i + m - 1))
    i = i + m
  end
end
local at = 7
each_slice('SADD', at, adds)
at = at + adds
each_slice('SREM', at, removes)
at = at + removes
for _ = 1, states do
  redis.call('HSET', KEYS[tonumber(ARGV[at])], 'id', ARGV[at + 1], 'value', ARGV[at + 2])
  at = at + 3
end
for _ = 1, deads do
  redis.call('RPUSH', KEYS[tonumber(ARGV[at])], ARGV[at + 1])
  at = at + 2
end
if trim > 0 then redis.call('LTRIM', KEYS[2], trim, -1) end
return 1
)lua";

// The prefix's shard count, after options::prefix.
constexpr std::string_view shard_count_key = "actors:shards";

bool integer_one(const reply& r, std::string_view what) {
  if (r->type != REDIS_REPLY_INTEGER) unexpected(what);
  return r->integer == 1;
}

}  // namespace

std::uint32_t shard_of(std::string_view key, std::uint32_t n) noexcept {
  std::uint64_t h = 14695981039346656037ULL;  // FNV-1a's offset basis and prime
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ULL;
  }
  return static_cast<std::uint32_t>(h % n);
}

shard_names::shard_names(std::string_view prefix, std::string_view family, std::uint32_t index)
    : slot_prefix(group_prefix(prefix, group_slot(index % actor_groups))) {
  const std::string base = slot_prefix + "shard:" + escape_key(family) + ':' + std::to_string(index) + ':';
  queue = base + "queue";
  lease = base + "lease";
  epoch = base + "epoch";
  done = base + "done";
}

std::string shard_names::dead(std::string_view key) const { return slot_prefix + escape_key(key) + ":actor:dead"; }
std::string shard_names::state(std::string_view key) const { return slot_prefix + escape_key(key) + ":actor:state"; }

shard_leases::shard_leases(router& servers)
    : servers_(servers), take_{lua::source({take_lua}), {}}, renew_{lua::source({renew_lua}), {}},
      release_{lua::source({release_lua}), {}}, ack_{lua::source({ack_lua}), {}} {
  servers_.each_primary([this](connection& c) {
    for (script* s : {&take_, &renew_, &release_, &ack_}) c.load(*s);
  });
}

std::optional<std::string> shard_leases::take(const shard_names& s, std::string_view owner, std::int64_t lease_ms,
                                              std::int64_t& left_ms) {
  constexpr std::string_view what = "take a shard";
  const std::string ms = std::to_string(lease_ms);
  const reply r = servers_.eval(take_, {s.lease, s.epoch}, {owner, ms}, what);
  if (r->type == REDIS_REPLY_STRING) return std::string(text(*r));
  if (r->type != REDIS_REPLY_INTEGER) unexpected(what);
  left_ms = r->integer;
  return std::nullopt;
}

std::vector<bool> shard_leases::renew(const std::vector<std::pair<const shard_names*, std::string>>& held,
                                      std::int64_t lease_ms) {
  constexpr std::string_view what = "renew shard leases";
  const std::string ms = std::to_string(lease_ms);
  std::vector<std::vector<std::string>> calls;
  calls.reserve(held.size());
  for (const auto& [names, token] : held) calls.push_back({"1", names->lease, token, ms});
  std::vector<router::outcome> out = servers_.eval_each(renew_, calls, what);
  std::vector<bool> renewed;
  renewed.reserve(out.size());
  for (router::outcome& o : out) {
    if (o.failed) std::rethrow_exception(o.failed);
    if (o.r->type == REDIS_REPLY_ERROR)
      throw error("handoff::redis: " + std::string(what) + ": " + std::string(text(*o.r)));
    renewed.push_back(integer_one(o.r, what));
  }
  return renewed;
}

bool shard_leases::release(const shard_names& s, std::string_view token) {
  constexpr std::string_view what = "release a shard";
  return integer_one(servers_.eval(release_, {s.lease}, {token}, what), what);
}

bool shard_leases::ack(const shard_names& s, std::string_view token, const shard_ack_write& w) {
  constexpr std::string_view what = "acknowledge a shard's entries";
  std::vector<std::string> keys{s.lease, s.queue, s.done};
  std::map<std::string, std::size_t, std::less<>> index;  // name -> its KEYS index (1-based)
  const auto key_index = [&](std::string name) {
    const auto [it, added] = index.try_emplace(std::move(name), keys.size() + 1);
    if (added) keys.push_back(it->first);
    return std::to_string(it->second);
  };
  std::vector<std::string> args{std::string(token),
                                std::to_string(w.trim),
                                std::to_string(w.done_add.size()),
                                std::to_string(w.done_remove.size()),
                                std::to_string(w.states.size()),
                                std::to_string(w.dead.size())};
  args.insert(args.end(), w.done_add.begin(), w.done_add.end());
  args.insert(args.end(), w.done_remove.begin(), w.done_remove.end());
  for (const shard_ack_write::state& st : w.states) {
    args.push_back(key_index(s.state(st.key)));
    args.push_back(st.id);
    args.push_back(st.value);
  }
  for (const shard_ack_write::dead_letter& d : w.dead) {
    args.push_back(key_index(s.dead(d.key)));
    args.push_back(d.element);
  }
  // One call with its keys first, as eval_each takes it: the number of keys, the keys, the
  // arguments (the script's arity varies with the writes).
  std::vector<std::string> call{std::to_string(keys.size())};
  call.insert(call.end(), keys.begin(), keys.end());
  call.insert(call.end(), args.begin(), args.end());
  std::vector<router::outcome> out = servers_.eval_each(ack_, {call}, what);
  router::outcome& o = out.at(0);
  if (o.failed) std::rethrow_exception(o.failed);
  if (o.r->type == REDIS_REPLY_ERROR)
    throw error("handoff::redis: " + std::string(what) + ": " + std::string(text(*o.r)));
  return integer_one(o.r, what);
}

void shard_leases::claim_count(router& servers, std::string_view prefix, std::uint32_t n) {
  const std::string key = std::string(prefix) + std::string(shard_count_key);
  const std::string count = std::to_string(n);
  const std::string what = "shard count of the prefix " + handoff::detail::key_excerpt(prefix);
  servers.command(key, {"SET", key, count, "NX"}, what);
  const reply r = servers.command(key, {"GET", key}, what);
  if (r->type != REDIS_REPLY_STRING) unexpected(what);
  if (text(*r) != count) {
    throw error("handoff::redis: the prefix " + handoff::detail::key_excerpt(prefix) + " maps keys to " +
                std::string(text(*r)) + " shards and this client to " + count +
                ": processes sharing a prefix must agree on the count, or a key's messages would go to two queues");
  }
}

}  // namespace handoff::redis::detail
