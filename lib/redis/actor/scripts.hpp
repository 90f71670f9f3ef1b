// The Lua scripts of handoff::redis::actor_system (private to lib/redis): each protocol step
// is one script, so that what it reads and what it writes are atomic on the server.
//
// Per actor key K (common/names.hpp: prefix + "{" + escaped K + "}:" + kind):
//   actor:count    the message count: messages posted and not yet released by an owner
//                  (mailbox length + messages its owner removed in this round)
//   actor:mailbox  list of messages, oldest first; one element is "<id> <body bytes>"
//   actor:owner    the owner's token, with a PX lease; absent: nobody owns the actor
//   actor:head     hash {id, n}: the head message's id and how often it was delivered
//   actor:dead     list of dead letters, in the mailbox's element format
//   actor:state    hash {id, value}: the last message whose handling was committed with
//                  its dequeue, and the state committed with it (remember_handled only)
// One key per prefix, prefix + "actors:pending": a sorted set of the actor keys (raw bytes)
// that have messages, scored by the server time in ms after which a sweeper looks at them
// (the owner's lease end; "now" for an actor handed on by announcement).
//
// The hand-off, as in the in-process actor: post increments the count and appends the
// message; the post whose increment finds no live owner becomes the owner (count 0 -> 1,
// or a takeover of an actor whose owner's lease ran out or that was announced). The owner
// steps: dequeue the message it handled, then peek the next (its delivery count + 1) or,
// with the mailbox empty, release by subtracting the messages removed this round, which
// must leave 0. A budget step subtracts them too and keeps the actor owned (for the
// process's executor) or announces it. Because increment and append are one script, the
// in-process drainer's window (counted, not yet enqueued) does not exist here.
#pragma once

#include <string>
#include <string_view>

#include "../common/lua.hpp"

namespace handoff::redis::detail::actor_scripts {

// Helpers of every actor script, after lua::now_ms (see source()): `now`, the server clock
// in ms; the id of an element ("<id> <body>"); and own(), the one place that gives an
// owner its lease: the owner key holds `token` for `lease` ms, and the actor is due for a
// sweep in the pending set when that lease ends.
inline constexpr const char* prelude = R"lua(
local now = now_ms()
local function id_of(m) return string.sub(m, 1, string.find(m, ' ', 1, true) - 1) end
local function own(owner, pending, actor, token, lease)
  redis.call('SET', owner, token, 'PX', lease)
  redis.call('ZADD', pending, now + tonumber(lease), actor)
end
)lua";

// KEYS: count, mailbox, owner, pending, head, state. ARGV: element, mailbox bound ('': none), token
// (the message's id), lease ms, '1' if this process may own the actor ('0': announce it
// instead), the actor key, '1' if the caller drains at once (then a message that finds the
// mailbox empty is delivered by this reply: no peek).
// -1: the mailbox is full (nothing changed); 0: queued behind an owner (or announced);
// 1: queued, and the caller owns the actor now; {2, state id, state value}: the caller
// owns the actor and its message is the head, delivered for the first time.
inline constexpr const char* post = R"lua(
local len = redis.call('LLEN', KEYS[2])
if ARGV[2] ~= '' and len >= tonumber(ARGV[2]) then return -1 end
local n = redis.call('INCR', KEYS[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
if ARGV[5] ~= '1' then
  redis.call('ZADD', KEYS[4], now, ARGV[6])
  return 0
end
-- n == 1: the 0 -> 1 hand-off. n > 1 with no owner: the last owner's lease ran out (its
-- unreleased messages are still counted) or it announced the actor: take it over, and
-- count what the mailbox holds.
if n ~= len + 1 then redis.call('SET', KEYS[1], len + 1) end
own(KEYS[3], KEYS[4], ARGV[6], ARGV[3], ARGV[4])
if ARGV[7] ~= '1' or len ~= 0 then return 1 end
redis.call('HSET', KEYS[5], 'id', ARGV[3], 'n', 1)
local s = redis.call('HMGET', KEYS[6], 'id', 'value')
return {2, s[1] or '', s[2] or ''}
)lua";

// KEYS: count, mailbox, owner, head, pending, dead, state. ARGV: token, lease ms, id of
// the message handled ('' for none, or one whose handler failed), removed so far this round
// (x), mode ('next', 'keep' or 'announce'), max attempts, '1' to record the handled id in
// state, '1' to store ARGV[9] as the state value, the state value, the actor key.
// Replies {status, x, dead letters made}: -1 the token is not the owner's (nothing
// changed); 0 released; 2 handed on (x subtracted; 'keep': still owned, lease renewed;
// 'announce': owner deleted, sweepers see it now); 1 a message to handle, followed by the
// element, its delivery count, the state's id and value.
inline constexpr const char* step = R"lua(
if redis.call('GET', KEYS[3]) ~= ARGV[1] then return {-1, 0, 0} end
local x = tonumber(ARGV[4])
if ARGV[3] ~= '' then
  local h = redis.call('LINDEX', KEYS[2], 0)
  if h and id_of(h) == ARGV[3] then
    redis.call('LPOP', KEYS[2])
    redis.call('DEL', KEYS[4])
    x = x + 1
    if ARGV[7] == '1' then
      redis.call('HSET', KEYS[7], 'id', ARGV[3])
      if ARGV[8] == '1' then redis.call('HSET', KEYS[7], 'value', ARGV[9]) end
    end
  end
end
local dead = 0
while true do
  local h = redis.call('LINDEX', KEYS[2], 0)
  if not h then
    local c = redis.call('DECRBY', KEYS[1], x)
    if c ~= 0 then
      return redis.error_reply('handoff actor: count ' .. c .. ' left with an empty mailbox')
    end
    redis.call('DEL', KEYS[1], KEYS[3])
    redis.call('ZREM', KEYS[5], ARGV[10])
    return {0, 0, dead}
  end
  if ARGV[5] ~= 'next' then
    if redis.call('DECRBY', KEYS[1], x) <= 0 then
      return redis.error_reply('handoff actor: count below the mailbox length')
    end
    if ARGV[5] == 'announce' then
      redis.call('DEL', KEYS[3])
      redis.call('ZADD', KEYS[5], now, ARGV[10])
    else
      own(KEYS[3], KEYS[5], ARGV[10], ARGV[1], ARGV[2])
    end
    return {2, 0, dead}
  end
  local id = id_of(h)
  local n = 1
  if redis.call('HGET', KEYS[4], 'id') == id then
    n = redis.call('HINCRBY', KEYS[4], 'n', 1)
  else
    redis.call('HSET', KEYS[4], 'id', id, 'n', 1)
  end
  if n <= tonumber(ARGV[6]) then
    own(KEYS[3], KEYS[5], ARGV[10], ARGV[1], ARGV[2])
    local s = redis.call('HMGET', KEYS[7], 'id', 'value')
    return {1, x, dead, h, n, s[1] or '', s[2] or ''}
  end
  redis.call('LPOP', KEYS[2])
  redis.call('RPUSH', KEYS[6], h)
  redis.call('DEL', KEYS[4])
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
  redis.call('ZADD', KEYS[4], now + ttl, ARGV[3])
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
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
)lua";

// A script's source as loaded: the shared snippets, then `body` (one of the above).
inline std::string source(std::string_view body) { return lua::source({lua::now_ms, prelude, body}); }

}  // namespace handoff::redis::detail::actor_scripts
