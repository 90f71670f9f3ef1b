// The Lua scripts of handoff::redis::actor_system's delayed messages (private to lib/redis):
// storing one, cancelling one, and the sweep's script that moves the due ones to their
// mailboxes and reads the pending set. The data layout is in scripts.hpp.
#pragma once

#include <string>
#include <string_view>

#include "../common/lua.hpp"
#include "scripts.hpp"

namespace handoff::redis::detail::actor_scripts {

// The parts of a delayed message's record (actors:delayed:body): its mailbox's name, its
// actor key and its element.
inline constexpr const char* delayed_parts = R"lua(
local function delayed_parts(v)
  local a = string.find(v, ' ', 1, true)
  local b = string.find(v, ' ', a + 1, true)
  local m = b + tonumber(string.sub(v, 1, a - 1))
  local k = m + tonumber(string.sub(v, a + 1, b - 1))
  return string.sub(v, b + 1, m), string.sub(v, m + 1, k), string.sub(v, k + 1)
end
)lua";

// KEYS: pending, delayed, delayed bodies. ARGV: how many actors at most, how many delayed
// messages at most, the mailbox bound ('': none), the retry delay in ms, what the caller
// does with an actor a moved message takes from empty to one message when its key starts
// with one of the caller's families ('o': own it, to drain later; 'd': own it, its
// message delivered by this reply; 's': as 'd', with the state; other actors are
// announced, as a post from a process without their handler announces them), lease ms,
// then the families. First moves the delayed messages due (score <= now) to the tails of
// their mailboxes (a post each; the token of an owner made so is the message's id, as for
// a post). A message whose mailbox is full is held: its id goes to the actor's held list
// (actor:held), and the list gets an entry in the delayed set ("!" + that id, its record
// the message's), due after the retry delay. While the held list exists, every message of
// that mailbox that comes due joins its tail, so that none passes an earlier one; when
// the entry comes due, the list moves in order while the mailbox has room (what does not
// fit waits another retry delay). Then replies {the delayed messages it read, the actors
// it made the caller own, then per such actor its key, its message's element and the
// state's id and value (empty unless 's'), then the actor keys due for a sweep (score <=
// now)}. The other names of an actor are its mailbox's with another kind at the end
// (layout.hpp).
inline constexpr const char* due = R"lua(
local now = now_ms()
local bound = ARGV[3] ~= '' and tonumber(ARGV[3])
local retry = now + tonumber(ARGV[4])
local function ours(actor)
  for i = 7, #ARGV do
    if string.sub(actor, 1, #ARGV[i]) == ARGV[i] then return true end
  end
  return false
end
local owned = {}
-- Posts message `id` to the tail of its mailbox; false (nothing changed) if it is full.
local function move(id, mailbox, actor, element)
  local len = redis.call('RPUSH', mailbox, element)
  if bound and len > bound then
    redis.call('RPOP', mailbox)
    return false
  end
  if len == 1 then
    local base = string.sub(mailbox, 1, -8)  -- without "mailbox"
    -- NX: a stale owner (its mailbox emptied by hand) keeps the actor until its lease ends.
    if ours(actor) and redis.call('SET', base .. 'owner', id, 'NX', 'PX', ARGV[6]) then
      redis.call('ZADD', KEYS[1], now + tonumber(ARGV[6]), actor)
      local s = {false, false}
      if ARGV[5] ~= 'o' then
        redis.call('HSET', base .. 'delivered', id, '1')
        if ARGV[5] == 's' then s = redis.call('HMGET', base .. 'state', 'id', 'value') end
      end
      for _, x in ipairs({actor, element, s[1] or '', s[2] or ''}) do owned[#owned + 1] = x end
    else
      redis.call('ZADD', KEYS[1], '0', actor)
    end
  end
  return true
end
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[2]))
if #ids > 0 then
  local records = redis.call('HMGET', KEYS[3], unpack(ids))
  redis.call('ZREM', KEYS[2], unpack(ids))
  for i, v in ipairs(records) do
    if v then
      local mailbox, actor, element = delayed_parts(v)
      local held = string.sub(mailbox, 1, -8) .. 'held'
      if string.sub(ids[i], 1, 1) == '!' then
        -- A held list's turn: its messages in order, while the mailbox has room.
        while true do
          local id = redis.call('LINDEX', held, 0)
          if not id then
            redis.call('HDEL', KEYS[3], ids[i])
            break
          end
          local r = redis.call('HGET', KEYS[3], id)
          if r then
            local _, _, e = delayed_parts(r)
            if not move(id, mailbox, actor, e) then
              redis.call('ZADD', KEYS[2], retry, ids[i])
              break
            end
            redis.call('HDEL', KEYS[3], id)
          end
          redis.call('LPOP', held)
        end
      elseif redis.call('EXISTS', held) == 1 then
        redis.call('RPUSH', held, ids[i])
      elseif move(ids[i], mailbox, actor, element) then
        redis.call('HDEL', KEYS[3], ids[i])
      else
        redis.call('RPUSH', held, ids[i])
        redis.call('ZADD', KEYS[2], retry, '!' .. ids[i])
        redis.call('HSET', KEYS[3], '!' .. ids[i], v)
      end
    end
  end
end
local out = {#ids, #owned / 4}
for _, x in ipairs(owned) do out[#out + 1] = x end
for _, k in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))) do
  out[#out + 1] = k
end
return out
)lua";

// KEYS: delayed, delayed bodies. ARGV: id, delay ms, record. The message is due once the
// server's clock reads more than now + delay (the + 1: now_ms drops the microseconds, so
// that a sweep in the same millisecond as the post plus the delay would be early).
inline constexpr const char* delay = R"lua(
redis.call('ZADD', KEYS[1], now_ms() + tonumber(ARGV[2]) + 1, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
return 1
)lua";

// KEYS: delayed, delayed bodies. ARGV: id, actor key. 1 if the message was still delayed
// (it is gone now, from its held list too), else 0: unknown id, another actor's, a held
// list's entry ("!"), cancelled, or already moved to its mailbox.
inline constexpr const char* cancel_delayed = R"lua(
if string.sub(ARGV[1], 1, 1) == '!' then return 0 end
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return 0 end
local mailbox, actor = delayed_parts(v)
if actor ~= ARGV[2] then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
redis.call('LREM', string.sub(mailbox, 1, -8) .. 'held', 0, ARGV[1])
return 1
)lua";

// The source of a delayed-message script as loaded: the shared snippets, the record's
// parser, then `body` (one of the above).
inline std::string delayed_source(std::string_view body) {
  return lua::source({lua::now_ms, prelude, delayed_parts, body});
}

}  // namespace handoff::redis::detail::actor_scripts
