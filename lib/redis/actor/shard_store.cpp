#include "shard_store.hpp"

#include <charconv>
#include <map>

#include "../common/lua.hpp"
#include "../common/names.hpp"
#include "handoff/detail/report.hpp"
#include "handoff/redis/options.hpp"
#include "layout.hpp"

namespace handoff::redis::detail {

namespace {

// KEYS: lease, meta, queue, done. ARGV: owner id, lease ms. The held lease's ms left, or
// the takeover: {token, trimmed, marks, the done set's ids...}. A queue left by an owner that did not release it
// cleanly (meta's `owned` still set) gets a mark at its end.
constexpr std::string_view take_lua = R"lua(
local left = redis.call('PTTL', KEYS[1])
if left ~= -2 then return left end
local token = redis.call('HINCRBY', KEYS[2], 'epoch', 1) .. ' ' .. ARGV[1]
local m = redis.call('HMGET', KEYS[2], 'trimmed', 'marks', 'owned')
local trimmed, marks = m[1] or '0', m[2] or ''
if m[3] then
  local n = redis.call('LLEN', KEYS[3])
  if n > 0 then
    marks = (marks == '' and '' or marks .. ' ') .. (tonumber(trimmed) + n)
    redis.call('HSET', KEYS[2], 'marks', marks)
  end
end
redis.call('HSET', KEYS[2], 'owned', '1')
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
local out = {token, trimmed, marks}
for _, id in ipairs(redis.call('SMEMBERS', KEYS[4])) do out[#out + 1] = id end
return out
)lua";

// KEYS: lease. ARGV: token, lease ms. 1: renewed; 0: the lease is not the token.
constexpr std::string_view renew_lua = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua";

// KEYS: lease, meta. ARGV: token, clean (1: the owner acknowledged what it ran). 1:
// released; 0: the lease is not the token.
constexpr std::string_view release_lua = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if ARGV[2] == '1' then redis.call('HDEL', KEYS[2], 'owned') end
return 1
)lua";

// KEYS: lease, queue, done, meta, then the keys' state and dead-letter names the writes use.
// ARGV: token, trim, the counts of done ids to add and to remove, of states and of dead
// letters, release (1: release the lease, cleanly, if the queue is then empty); then the
// ids to add, the ids to remove, each state as (its KEYS index, id, value), each dead
// letter as (its KEYS index, element). 1: written; 2: written and released; 0: the lease
// is not the token, nothing written. Ids go to SADD/SREM in slices, within Lua's stack. A
// trim counts into trimmed and drops the marks it passed.
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
local at = 8
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
if trim > 0 then
  redis.call('LTRIM', KEYS[2], trim, -1)
  local trimmed = redis.call('HINCRBY', KEYS[4], 'trimmed', trim)
  local marks = redis.call('HGET', KEYS[4], 'marks')
  if marks then
    local kept = {}
    for p in string.gmatch(marks, '%d+') do
      if tonumber(p) > trimmed then kept[#kept + 1] = p end
    end
    if #kept == 0 then redis.call('HDEL', KEYS[4], 'marks') else redis.call('HSET', KEYS[4], 'marks', table.concat(kept, ' ')) end
  end
end
if ARGV[7] == '1' and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  redis.call('HDEL', KEYS[4], 'owned')
  return 2
end
return 1
)lua";

// The prefix's shard count, after options::prefix.
constexpr std::string_view shard_count_key = "actors:shards";

bool integer_one(const reply& r, std::string_view what) {
  if (r->type != REDIS_REPLY_INTEGER) unexpected(what);
  return r->integer == 1;
}

// The slot group of shard `index`: consecutive shards 97 groups apart (97 is odd, so the
// map is a permutation of the groups), so that even a few shards spread over the
// primaries of a cluster, whose slots each primary holds as one range.
constexpr std::size_t shard_group(std::uint32_t index) noexcept { return (std::size_t{index} * 97) % actor_groups; }

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
    : slot_prefix(group_prefix(prefix, group_slot(shard_group(index)))) {
  const std::string base = slot_prefix + "shard:" + escape_key(family) + ':' + std::to_string(index) + ':';
  queue = base + "queue";
  lease = base + "lease";
  meta = base + "meta";
  done = base + "done";
}

std::string shard_names::dead(std::string_view key) const { return slot_prefix + escape_key(key) + ":actor:dead"; }
std::string shard_names::state(std::string_view key) const { return slot_prefix + escape_key(key) + ":actor:state"; }

std::string entry_text(std::string_view id, std::string_view key, std::string_view body) {
  std::string out;
  const std::string k = std::to_string(key.size());
  out.reserve(id.size() + k.size() + key.size() + body.size() + 2);
  out.append(id).append(1, ' ').append(k).append(1, ' ').append(key).append(body);
  return out;
}

std::optional<entry_parts> parse_entry(std::string_view element) noexcept {
  const std::size_t space = element.find(' ');
  if (space == std::string_view::npos || space == 0) return std::nullopt;
  std::size_t k = 0;
  const char* first = element.data() + space + 1;
  const char* last = element.data() + element.size();
  const auto [end, ec] = std::from_chars(first, last, k);
  if (ec != std::errc{} || end == first || end == last || *end != ' ') return std::nullopt;
  const std::size_t key_at = static_cast<std::size_t>(end - element.data()) + 1;
  if (k > element.size() - key_at) return std::nullopt;
  return entry_parts{element.substr(0, space), element.substr(key_at, k), element.substr(key_at + k)};
}

std::uint32_t shard_takeover::delivery(std::uint64_t position) const noexcept {
  std::uint32_t n = 1;
  for (const std::uint64_t m : marks) n += m > position ? 1 : 0;
  return n;
}

shard_store::shard_store(router& servers)
    : servers_(servers), take_{lua::source({take_lua}), {}}, renew_{lua::source({renew_lua}), {}},
      release_{lua::source({release_lua}), {}}, ack_{lua::source({ack_lua}), {}} {
  servers_.each_primary([this](connection& c) {
    for (script* s : {&take_, &renew_, &release_, &ack_}) c.load(*s);
  });
}

std::uint64_t shard_store::post(const shard_names& s, const std::string& element, std::uint64_t capacity) {
  constexpr std::string_view what = "post to a shard";
  // Not retried on a broken connection (run's read_only false): an append must not repeat.
  const reply r = checked(servers_.run(s.queue, what, false, router::lane::commands,
                                       [&](connection& c, bool asking) {
                                         return c.call({"RPUSH", s.queue, element}, what, asking);
                                       }),
                          what);
  if (r->type != REDIS_REPLY_INTEGER) unexpected(what);
  const auto n = static_cast<std::uint64_t>(r->integer);
  if (capacity == 0 || n <= capacity) return n;
  // Over the bound: take this element back (ids are unique, so it is ours; a repeat removes
  // nothing more), from the tail, where it most likely still is.
  servers_.command(s.queue, {"LREM", s.queue, "-1", element}, what);
  return 0;
}

std::optional<shard_takeover> shard_store::take(const shard_names& s, std::string_view owner, std::int64_t lease_ms,
                                                std::int64_t& left_ms) {
  constexpr std::string_view what = "take a shard";
  const std::string ms = std::to_string(lease_ms);
  const reply r = servers_.eval(take_, {s.lease, s.meta, s.queue, s.done}, {owner, ms}, what);
  if (r->type == REDIS_REPLY_INTEGER) {
    left_ms = r->integer;
    return std::nullopt;
  }
  if (r->type != REDIS_REPLY_ARRAY || r->elements < 3) unexpected(what);
  for (std::size_t i = 0; i < r->elements; ++i) {
    if (r->element[i]->type != REDIS_REPLY_STRING) unexpected(what);
  }
  shard_takeover t;
  t.token = std::string(text(*r->element[0]));
  const std::string_view trimmed = text(*r->element[1]);
  if (std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), t.trimmed).ec != std::errc{}) unexpected(what);
  const std::string_view marks = text(*r->element[2]);
  for (std::size_t at = 0; at < marks.size();) {
    std::uint64_t m = 0;
    const auto [end, ec] = std::from_chars(marks.data() + at, marks.data() + marks.size(), m);
    if (ec != std::errc{}) unexpected(what);
    t.marks.push_back(m);
    at = static_cast<std::size_t>(end - marks.data()) + 1;  // past the space
  }
  for (std::size_t i = 3; i < r->elements; ++i) t.done.emplace_back(text(*r->element[i]));
  return t;
}

std::vector<bool> shard_store::renew(const std::vector<std::pair<const shard_names*, std::string>>& held,
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
    renewed.push_back(integer_one(checked(std::move(o.r), what), what));
  }
  return renewed;
}

bool shard_store::release(const shard_names& s, std::string_view token, bool clean) {
  constexpr std::string_view what = "release a shard";
  return integer_one(servers_.eval(release_, {s.lease, s.meta}, {token, clean ? "1" : "0"}, what), what);
}

shard_store::acked shard_store::ack(const shard_names& s, std::string_view token, const shard_ack_write& w) {
  constexpr std::string_view what = "acknowledge a shard's entries";
  std::vector<std::string> keys{s.lease, s.queue, s.done, s.meta};
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
                                std::to_string(w.dead.size()),
                                w.release_if_empty ? "1" : "0"};
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
  const reply r = checked(std::move(o.r), what);
  if (r->type != REDIS_REPLY_INTEGER || r->integer < 0 || r->integer > 2) unexpected(what);
  return r->integer == 0 ? acked::refused : r->integer == 1 ? acked::written : acked::released;
}

std::vector<std::string> shard_store::read(const shard_names& s, std::uint64_t from, std::uint64_t n) {
  constexpr std::string_view what = "read a shard's queue";
  std::vector<std::string> out;
  if (n == 0) return out;
  const reply r =
      servers_.command(s.queue, {"LRANGE", s.queue, std::to_string(from), std::to_string(from + n - 1)}, what);
  if (r->type != REDIS_REPLY_ARRAY) unexpected(what);
  out.reserve(r->elements);
  for (std::size_t i = 0; i < r->elements; ++i) out.emplace_back(text(*r->element[i]));
  return out;
}

void shard_store::claim_count(router& servers, std::string_view prefix, std::uint32_t n) {
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
