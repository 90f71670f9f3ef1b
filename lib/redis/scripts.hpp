// The Lua scripts of handoff::redis::keyed_mutex: every change to a key's lock state is
// one of them, so that it is atomic on the server. Layout of a key's state: see
// include/handoff/redis/keyed_mutex.hpp. Waiter ids are "<client id>:<n>"; a client
// listens on the channel "<prefix>notify:<client id>".
#pragma once

namespace handoff::redis::detail::scripts {

// Helpers prepended to every script. TIME makes a script non-deterministic: Redis < 5
// must be told to replicate its effects rather than the script.
inline constexpr const char* prelude = R"lua(
if redis.replicate_commands then redis.replicate_commands() end
local function now_ms(t) return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
-- Waiters whose heartbeat deadline passed: their process stopped re-checking (died).
local function drop_dead(queue, waiters, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', waiters, '-inf', now)) do
    redis.call('LREM', queue, 0, id)
    redis.call('ZREM', waiters, id)
  end
end
-- Wakes the first waiter in line, on its client's channel.
local function notify_head(queue, channel_prefix)
  local head = redis.call('LINDEX', queue, 0)
  if head then redis.call('PUBLISH', channel_prefix .. string.match(head, '^([^:]+):'), head) end
end
)lua";

// KEYS: lock, queue, waiters, fence. ARGV: owner token, lease ms, waiter id ('' for a
// try_lock, which never queues), waiter heartbeat ttl ms.
// Grants when the key is free and the caller is first in line (or nobody waits): returns
// {1, fencing token}. Otherwise queues the waiter (or refreshes its heartbeat) and
// returns {0, the lock's PTTL}. The uncontended path (no queue) is SET NX and INCR.
// A fence counter starts at the server clock in µs and expires an hour after it started:
// each grant takes far longer than 1 µs, so no token it gave is above the clock when a
// new counter starts (after expiry or lost data), and tokens keep increasing.
inline constexpr const char* acquire = R"lua(
local function grant()
  local fence = redis.call('INCR', KEYS[4])
  if fence == 1 then
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[4], string.format('%.0f', fence), 'PX', 3600000)
  end
  return {1, fence}
end
local me = ARGV[3]
if redis.call('EXISTS', KEYS[2]) == 0 then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return grant() end
  if me == '' then return {0, redis.call('PTTL', KEYS[1])} end
end
local now = now_ms(redis.call('TIME'))
drop_dead(KEYS[2], KEYS[3], now)
if redis.call('EXISTS', KEYS[1]) == 0 then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if (not head) or head == me then
    if head then
      redis.call('LPOP', KEYS[2])
      redis.call('ZREM', KEYS[3], me)
    end
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return grant()
  end
end
if me ~= '' then
  if not redis.call('ZSCORE', KEYS[3], me) then redis.call('RPUSH', KEYS[2], me) end
  redis.call('ZADD', KEYS[3], now + tonumber(ARGV[4]), me)
  -- The queue lives as long as its latest heartbeat deadline. Clients may use different
  -- heartbeats: an expiry is only ever pushed later, never shortened.
  local ttl = tonumber(ARGV[4])
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
  if redis.call('PTTL', KEYS[3]) < ttl then redis.call('PEXPIRE', KEYS[3], ttl) end
end
return {0, redis.call('PTTL', KEYS[1])}
)lua";

// KEYS: lock, queue, waiters. ARGV: owner token, channel prefix.
// Deletes the lock only if the caller still owns it, then wakes the next waiter. 1 or 0.
inline constexpr const char* release = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
if redis.call('EXISTS', KEYS[2]) == 0 then return 1 end
drop_dead(KEYS[2], KEYS[3], now_ms(redis.call('TIME')))
notify_head(KEYS[2], ARGV[2])
return 1
)lua";

// KEYS: lock. ARGV: owner token, lease ms. Renews only if the caller still owns the lock.
inline constexpr const char* extend = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua";

// KEYS: lock, queue, waiters. ARGV: waiter id, channel prefix.
// A waiter gives up: it leaves the queue, and if the key is free it passes on the wake-up
// it may have been sent.
inline constexpr const char* cancel = R"lua(
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 0 then notify_head(KEYS[2], ARGV[2]) end
return 1
)lua";

}  // namespace handoff::redis::detail::scripts
