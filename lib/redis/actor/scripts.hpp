// The Lua scripts of handoff::redis::actor_system (private to lib/redis): each protocol step
// is one script, so that what it reads and what it writes are atomic on the server.
//
// Per actor key K (on one server, common/names.hpp: prefix + "{" + escaped K + "}:" + kind):
//   actor:count    the message count: messages posted and not yet released by an owner
//                  (mailbox length + messages its owner removed in this round)
//   actor:mailbox  list of messages, oldest first; one element is "<id> <body bytes>"
//   actor:owner    the owner's token, with a PX lease; absent: nobody owns the actor
//   actor:delivered  hash id -> n: how often each message handed to an owner and not yet
//                  dequeued was delivered (a batch counts each message it peeked, so
//                  after a crash mid-batch every message the dead owner peeked is flagged)
//   actor:dead     list of dead letters, in the mailbox's element format
//   actor:state    hash {id, value}: the last message whose handling was committed with
//                  its dequeue, and the state committed with it (remember_handled only)
// One key per prefix, prefix + "actors:pending": a sorted set of the actor keys (raw bytes)
// that have messages, scored by the server time in ms after which a sweeper looks at them
// (the owner's lease end; "now" for an actor handed on by announcement).
// On a Redis Cluster every script must touch one hash slot, so the actors are split into
// 256 slot groups (actor_core.hpp): K's names are prefix + "{" + G + "}:" + escaped K +
// ":actor:" + kind, and its group's pending set is prefix + "{" + G + "}:actors:pending",
// where G is the slot tag of the group of the slot K's escaped key hashes to.
//
// The hand-off, as in the in-process actor: post increments the count and appends the
// message; the post whose increment finds no live owner becomes the owner (count 0 -> 1,
// or a takeover of an actor whose owner's lease ran out or that was announced). The owner
// steps: dequeue the messages it handled (the head of the mailbox, in order), then peek
// the next batch (each message's delivery count + 1) or, with the mailbox empty, release
// by subtracting the messages removed this round, which must leave 0. A budget step
// subtracts them too and keeps the actor owned (for the process's executor) or announces
// it. Because increment and append are one script, the in-process drainer's window
// (counted, not yet enqueued) does not exist here.
#pragma once

#include <string>
#include <string_view>

#include "../common/lua.hpp"

namespace handoff::redis::detail::actor_scripts {

// Helpers of every actor script, after lua::now_ms (see source()), which only the steps
// that need the server clock call (a post queued behind an owner reads no clock): the id
// of an element ("<id> <body>"); due(), which makes the actor due for a sweep in the
// pending set when a lease of `lease` ms from now ends; and own(), the one place that gives
// an owner its lease: the owner key holds `token` for `lease` ms, and due() (the post's
// SET NX is own() in one call with the check that nobody owns the actor).
inline constexpr const char* prelude = R"lua(
local function id_of(m) return string.sub(m, 1, string.find(m, ' ', 1, true) - 1) end
local function due(pending, actor, lease)
  redis.call('ZADD', pending, now_ms() + tonumber(lease), actor)
end
local function own(owner, pending, actor, token, lease)
  redis.call('SET', owner, token, 'PX', lease)
  due(pending, actor, lease)
end
)lua";

// KEYS: count, mailbox, owner, pending, delivered, state. ARGV: element, mailbox bound ('': none), token
// (the message's id), lease ms, '1' if this process may own the actor ('0': announce it
// instead), the actor key, '1' if the caller drains at once (then a message that finds the
// mailbox empty is delivered by this reply: no peek), '1' to read the state
// (remember_handled; else the reply's state is empty).
// -1: the mailbox is full (nothing changed); 0: queued behind an owner (or announced);
// 1: queued, and the caller owns the actor now; {2, state id, state value}: the caller
// owns the actor and its message is the head, delivered for the first time.
// Every redis.call costs the server about as much as a plain command, so the common
// paths make as few as they can: an idle actor's post makes six (INCR, RPUSH, SET NX,
// TIME, ZADD, HSET).
inline constexpr const char* post = R"lua(
local n = redis.call('INCR', KEYS[1])
local len = redis.call('RPUSH', KEYS[2], ARGV[1]) - 1
if ARGV[2] ~= '' and len >= tonumber(ARGV[2]) then
  -- Full: take both back (cheaper than reading the length first on every post).
  redis.call('RPOP', KEYS[2])
  if n == 1 then redis.call('DEL', KEYS[1]) else redis.call('DECR', KEYS[1]) end
  return -1
end
if ARGV[5] ~= '1' then
  if redis.call('EXISTS', KEYS[3]) == 0 then redis.call('ZADD', KEYS[4], now_ms(), ARGV[6]) end
  return 0
end
if not redis.call('SET', KEYS[3], ARGV[3], 'NX', 'PX', ARGV[4]) then return 0 end
-- The caller owns the actor now. n == 1: the 0 -> 1 hand-off. n > 1 with no owner: the
-- last owner's lease ran out (its unreleased messages are still counted) or it announced
-- the actor: a takeover, which counts what the mailbox holds.
if n ~= len + 1 then redis.call('SET', KEYS[1], len + 1) end
due(KEYS[4], ARGV[6], ARGV[4])
if ARGV[7] ~= '1' or len ~= 0 then return 1 end
redis.call('HSET', KEYS[5], ARGV[3], 1)
if ARGV[8] ~= '1' then return {2, '', ''} end
local s = redis.call('HMGET', KEYS[6], 'id', 'value')
return {2, s[1] or '', s[2] or ''}
)lua";

// KEYS: count, mailbox, owner, delivered, pending, dead, state. ARGV: token, lease ms,
// handled (k: the messages at the head whose handlers returned, to dequeue), the first and
// the last of their ids, removed so far this round (x), mode ('next', 'keep' or
// 'announce'), max attempts, '1' to record the last handled id in state, '1' to store
// ARGV[11] as the state value, the state value, the actor key, the batch size (the most
// messages to peek), then where the peeked messages that never ran start after the
// dequeue and how many there are (their delivery is taken back: the budget ran out, or
// a handler before them threw).
// Replies {status, x, dead letters made}: -1 the token is not the owner's (nothing
// changed); 0 released; 2 handed on (x subtracted; 'keep': still owned, lease renewed;
// 'announce': owner deleted, sweepers see it now); 1 messages to handle, followed by the
// state's id and value, then each message's element and delivery count, in order.
// The step that dequeues an idle actor's one message and releases it makes six
// redis.calls (GET, LPOP, LINDEX, DECRBY, DEL, ZREM): the release's DEL drops the
// dequeued messages' delivery counts with the hash, so HDEL runs only when it does not.
inline constexpr const char* step = R"lua(
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {-1, 0, 0} end
local x = tonumber(ARGV[6])
local k = tonumber(ARGV[3])
local unrun = tonumber(ARGV[15])
local ids = nil  -- the dequeued messages' ids, whose delivery counts are still in the hash
if k > 0 then
  local handled = nil
  if k == 1 then
    local m = redis.call('LPOP', KEYS[2])
    if m and id_of(m) == ARGV[4] then
      handled = {m}
    elseif m then
      redis.call('LPUSH', KEYS[2], m)
    end
  else
    local got = redis.call('LRANGE', KEYS[2], 0, k - 1)
    if #got == k and id_of(got[1]) == ARGV[4] and id_of(got[k]) == ARGV[5] then
      redis.call('LTRIM', KEYS[2], k, -1)
      handled = got
    end
  end
  if handled then
    ids = {}
    for i, m in ipairs(handled) do ids[i] = id_of(m) end
    x = x + k
    if ARGV[9] == '1' then
      redis.call('HSET', KEYS[7], 'id', ARGV[5])
      if ARGV[10] == '1' then redis.call('HSET', KEYS[7], 'value', ARGV[11]) end
    end
  else
    unrun = 0  -- not the messages this owner peeked: leave every count as it is
  end
end
if unrun > 0 then
  local from = tonumber(ARGV[14])
  for _, m in ipairs(redis.call('LRANGE', KEYS[2], from, from + unrun - 1)) do
    local id = id_of(m)
    if redis.call('HINCRBY', KEYS[4], id, -1) <= 0 then redis.call('HDEL', KEYS[4], id) end
  end
end
local max = tonumber(ARGV[8])
local dead = 0
while true do
  local h = redis.call('LINDEX', KEYS[2], 0)
  if not h then
    local c = redis.call('DECRBY', KEYS[1], x)
    if c ~= 0 then
      return redis.error_reply('handoff actor: count ' .. c .. ' left with an empty mailbox')
    end
    redis.call('DEL', KEYS[1], KEYS[3], KEYS[4])
    redis.call('ZREM', KEYS[5], ARGV[12])
    return {0, 0, dead}
  end
  if ids then
    redis.call('HDEL', KEYS[4], unpack(ids))
    ids = nil
  end
  if ARGV[7] ~= 'next' then
    if redis.call('DECRBY', KEYS[1], x) <= 0 then
      return redis.error_reply('handoff actor: count below the mailbox length')
    end
    if ARGV[7] == 'announce' then
      redis.call('DEL', KEYS[3])
      redis.call('ZADD', KEYS[5], now_ms(), ARGV[12])
    else
      own(KEYS[3], KEYS[5], ARGV[12], ARGV[1], ARGV[2])
    end
    return {2, 0, dead}
  end
  local n = redis.call('HINCRBY', KEYS[4], id_of(h), 1)
  if n <= max then
    own(KEYS[3], KEYS[5], ARGV[12], ARGV[1], ARGV[2])
    local s = redis.call('HMGET', KEYS[7], 'id', 'value')
    local out = {1, x, dead, s[1] or '', s[2] or '', h, n}
    local size = tonumber(ARGV[13])
    if size > 1 then
      -- The rest of the batch stops before a message due for the dead letters: it goes
      -- there when it reaches the head.
      for _, m in ipairs(redis.call('LRANGE', KEYS[2], 1, size - 1)) do
        local id = id_of(m)
        local c = redis.call('HINCRBY', KEYS[4], id, 1)
        if c > max then
          redis.call('HINCRBY', KEYS[4], id, -1)
          break
        end
        out[#out + 1] = m
        out[#out + 1] = c
      end
    end
    return out
  end
  redis.call('LPOP', KEYS[2])
  redis.call('RPUSH', KEYS[6], h)
  redis.call('HDEL', KEYS[4], id_of(h))
  x = x + 1
  dead = dead + 1
end
)lua";

// KEYS: owner, pending. ARGV: token, lease ms, the actor key. 1 if renewed, 0 if the
// token is not the owner's.
inline constexpr const char* renew = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
own(KEYS[1], KEYS[2], ARGV[3], ARGV[1], ARGV[2])
return 1
)lua";

// KEYS: count, mailbox, owner, pending. ARGV: token, lease ms, the actor key. Takes over
// an actor with messages and no live owner (count := mailbox length): 1. Otherwise 0,
// after rescheduling the sweep to the live owner's lease end, or forgetting an actor with
// an empty mailbox.
inline constexpr const char* claim = R"lua(
if redis.call('EXISTS', KEYS[3]) == 1 then
  local ttl = redis.call('PTTL', KEYS[3])
  if ttl < 0 then ttl = tonumber(ARGV[2]) end
  redis.call('ZADD', KEYS[4], now_ms() + ttl, ARGV[3])
  return 0
end
local len = redis.call('LLEN', KEYS[2])
if len == 0 then
  redis.call('ZREM', KEYS[4], ARGV[3])
  redis.call('DEL', KEYS[1])
  return 0
end
redis.call('SET', KEYS[1], len)
own(KEYS[3], KEYS[4], ARGV[3], ARGV[1], ARGV[2])
return 1
)lua";

// KEYS: pending. ARGV: how many at most. The actor keys due for a sweep (score <= now).
inline constexpr const char* due = R"lua(
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now_ms(), 'LIMIT', 0, tonumber(ARGV[1]))
)lua";

// A script's source as loaded: the shared snippets, then `body` (one of the above).
inline std::string source(std::string_view body) { return lua::source({lua::now_ms, prelude, body}); }

}  // namespace handoff::redis::detail::actor_scripts
