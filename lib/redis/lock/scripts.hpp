// The Lua scripts of handoff::redis::keyed_mutex: every change to a key's lock state is
// one of them, so that it is atomic on the server. Layout of a key's state: see
// include/handoff/redis/keyed_mutex.hpp.
//
// A request id is "<client id>:<n>:<lease ms>:<heartbeat ms>" ("w<lease ms>" for a lease-less
// request, whose lease is the watchdog's; ":l" appended for a blocking waiter): unique, and
// it carries what a release needs to grant a queued waiter without hearing from it (the
// lease to set, how long its heartbeat deadline is, so that its last heartbeat = score -
// heartbeat ms, and how to tell it).
// The lock key holds "<request id> <fencing token>": the holder compares the whole value
// to release or extend; a waiter recognises a grant made for it by the prefix. A client
// listens on the channel "<prefix>notify:<client id>" (on a Redis Cluster, on the sharded
// channel "<prefix>notify:{<slot tag>}<client id>" of each slot it waits in, so that the
// announcement stays on the lock's node: router.hpp's slot_tag); a grant is announced
// there as "<request id> <fencing token> <heartbeat> <ms waited>", or, to a blocking
// waiter, pushed as "<fencing token> <heartbeat> <ms waited>" onto the list
// {K}:grant:<request id>, where it waits in BLPOP on a connection no command shares (woken
// by the reply, with no thread between, and never lost). The heartbeat is the server time
// (ms) of the waiter's last heartbeat, which names the attempt it answers (an announcement naming an
// older one is of a grant that has ended since: that attempt would have found it), and the
// ms from it to the grant on the server's clock, rounded down, so that the waiter starts
// its lease clock no later than the server did, without a round trip.
#pragma once

#include <string>

#include "../common/lua.hpp"

namespace handoff::redis::detail::scripts {

// Helpers of every script but extend, after lua::replicate_effects and lua::now_ms (see
// the sources at the end). KEYS of the helpers that take K: lock, queue, waiters, fence.
inline constexpr const char* prelude = R"lua(
local function str(n) return string.format('%.0f', n) end  -- a token or time, never as 1.7e+15
-- Waiters whose heartbeat deadline passed: their process stopped re-checking (died).
local function drop_dead(K, now)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', K[3], '-inf', now)) do
    redis.call('LREM', K[2], 0, id)
    redis.call('ZREM', K[3], id)
  end
end
-- The next fencing token. A counter starts at the server clock in µs and expires an hour
-- after it started: each grant takes far longer than 1 µs, so no token it gave is above
-- the clock when a new counter starts (after expiry or lost data): tokens keep increasing.
local function next_fence(K)
  local fence = redis.call('INCR', K[4])
  if fence == 1 then
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', K[4], str(fence), 'PX', 3600000)
  end
  return fence
end
-- The list a blocking waiter's grant is pushed onto: {K}:grant:<id>, beside the lock.
local function grant_list(K, id) return string.sub(K[1], 1, -5) .. 'grant:' .. id end
-- Makes the BLPOP that a blocking waiter sent behind this script (ms: its timeout) return
-- at once with `what`: the caller holds the key, or must look again sooner than that.
local function poke(K, id, ms, what)
  local list = grant_list(K, id)
  redis.call('RPUSH', list, what)
  redis.call('PEXPIRE', list, ms + 60000)
end
-- The caller holds the key (fencing token `fence`, `left` ms of its lease left, or -1 for
-- the whole lease from now): the script's reply, and a poke that ends the BLPOP behind it,
-- which carries the reply when the client skips it (`listed`).
local function won(K, id, blpop, listed, fence, left)
  if blpop > 0 then poke(K, id, blpop, listed and ('g ' .. str(fence) .. ' ' .. left) or '-') end
  return {1, fence, left}
end
-- True if the lock value v was granted to request id.
local function granted_to(v, id) return v and string.sub(v, 1, #id + 1) == id .. ' ' end
-- The key is free (or its holder let go): grant it to the first live waiter, set its lease,
-- and tell it on its client's channel; with no live waiter, the key is deleted.
local function grant_next(K, channel_prefix, now)
  drop_dead(K, now)
  while true do
    local head = redis.call('LPOP', K[2])
    if not head then
      redis.call('DEL', K[1])
      return
    end
    local deadline = redis.call('ZSCORE', K[3], head)
    redis.call('ZREM', K[3], head)
    local client, watchdog, lease, heartbeat, blocking = string.match(head, '^([^:]+):%d+:(w?)(%d+):(%d+)(:?l?)$')
    if client and deadline then
      -- A lease-less request gets the shorter of its watchdog lease and its heartbeat: if
      -- it died since its last heartbeat, the key is blocked no longer than by a dead
      -- waiter. Its watchdog renews the lease a third into it.
      if watchdog == 'w' and tonumber(heartbeat) < tonumber(lease) then lease = heartbeat end
      local fence = next_fence(K)
      redis.call('SET', K[1], head .. ' ' .. str(fence), 'PX', lease)
      local beat = tonumber(deadline) - tonumber(heartbeat)
      local waited = math.max(0, now - beat - 1)
      local grant = str(fence) .. ' ' .. str(beat) .. ' ' .. str(waited)
      if blocking == ':l' then
        local list = grant_list(K, head)
        redis.call('RPUSH', list, grant)
        redis.call('PEXPIRE', list, lease)
      else
        -- A cluster's channel prefix ends with the slot's hash tag: a sharded channel.
        local publish = string.sub(channel_prefix, -1) == '}' and 'SPUBLISH' or 'PUBLISH'
        redis.call(publish, channel_prefix .. client, head .. ' ' .. grant)
      end
      return
    end
  end
end
)lua";

// KEYS: lock, queue, waiters, fence. ARGV: request id, lease ms, '1' to queue ('0' for a
// try_lock, which never queues), heartbeat ms, channel prefix, and the timeout in ms of a
// BLPOP on the request's grant list sent behind this script in the same write ('0': none).
// A blocking waiter that expects to wait sends them together: queueing and waiting cost one
// round trip. The list then gets a '-' (poke) when the caller holds the key, or when the
// holder's lease ends before that BLPOP would time out (the caller waits again until then).
// ARGV[7] = '1' (optional): the client skips this script's reply (CLIENT REPLY SKIP), so
// that the server writes, and the waiting thread wakes for, one reply only: the poke then
// carries what the reply would say, "g <fencing token> <remaining lease ms>" when the
// caller holds the key and "- <the lock's PTTL>" when it must look again sooner.
// Returns {1, fencing token, remaining lease ms} when the caller holds the key: granted
// now (remaining -1: the whole lease, from now), or earlier by a release whose
// notification it has not seen. Otherwise {0, the lock's PTTL, heartbeat}, having queued
// the caller (or refreshed its heartbeat) at the server time `heartbeat` (ms; 0 for a
// try_lock). The uncontended path (no lock, no queue) is EXISTS, INCR
// and SET. A free key with live waiters in front of the caller (a lease ran out) is
// granted to the first of them.
// The uncontended path comes first, before the prelude's helpers are even defined (each
// definition is a closure made at every call, server time that is a noticeable share of
// an uncontended lock + unlock on loopback; figure in docs/redis.md, "How it works").
inline constexpr const char* acquire_head = R"lua(
if ARGV[6] == '0' and redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  local fence = redis.call('INCR', KEYS[4])
  if fence == 1 then
    local t = redis.call('TIME')
    fence = tonumber(t[1]) * 1000000 + tonumber(t[2])
    redis.call('SET', KEYS[4], string.format('%.0f', fence), 'PX', 3600000)
  end
  redis.call('SET', KEYS[1], ARGV[1] .. ' ' .. string.format('%.0f', fence), 'PX', ARGV[2])
  return {1, fence, -1}
end
)lua";
inline constexpr const char* acquire = R"lua(
local id, blpop, listed = ARGV[1], tonumber(ARGV[6]), ARGV[7] == '1'
if redis.call('EXISTS', KEYS[1], KEYS[2]) == 0 then
  local fence = next_fence(KEYS)
  redis.call('SET', KEYS[1], id .. ' ' .. str(fence), 'PX', ARGV[2])
  return won(KEYS, id, blpop, listed, fence, -1)
end
local held = redis.call('GET', KEYS[1])
if granted_to(held, id) then
  redis.call('DEL', grant_list(KEYS, id))  -- the pushed grant, if any: found here instead
  return won(KEYS, id, blpop, listed, tonumber(string.sub(held, #id + 2)), redis.call('PTTL', KEYS[1]))
end
local now = now_ms()
drop_dead(KEYS, now)
if not held then
  local head = redis.call('LINDEX', KEYS[2], 0)
  if (not head) or head == id then
    if head then
      redis.call('LPOP', KEYS[2])
      redis.call('ZREM', KEYS[3], id)
    end
    local fence = next_fence(KEYS)
    redis.call('SET', KEYS[1], id .. ' ' .. str(fence), 'PX', ARGV[2])
    return won(KEYS, id, blpop, listed, fence, -1)
  end
  grant_next(KEYS, ARGV[5], now)
end
local beat = 0
if ARGV[3] == '1' then
  beat = now
  local ttl = tonumber(ARGV[4])
  if redis.call('ZADD', KEYS[3], now + ttl, id) == 1 then redis.call('RPUSH', KEYS[2], id) end  -- 1: new
  -- The queue lives as long as its latest heartbeat deadline. Clients may use different
  -- heartbeats: an expiry is only ever pushed later, never shortened. Queue and waiter set
  -- are emptied, so deleted, together: the queue's expiry stands for both.
  if redis.call('PTTL', KEYS[2]) < ttl then
    redis.call('PEXPIRE', KEYS[2], ttl)
    redis.call('PEXPIRE', KEYS[3], ttl)
  end
end
local pttl = redis.call('PTTL', KEYS[1])
if blpop > 0 then
  redis.call('DEL', grant_list(KEYS, id))  -- a grant left there has ended: not ours now
  if pttl >= 0 and pttl + 1 < blpop then poke(KEYS, id, blpop, listed and ('- ' .. pttl) or '-') end
end
return {0, pttl, beat}
)lua";

// KEYS: lock, queue, waiters, fence. ARGV: lock value, channel prefix.
// Only if the caller still holds the key: hands it to the first live waiter (granted and
// told in this script: it needs no round trip of its own), or deletes it. 1 or 0.
inline constexpr const char* release_head = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1])
  return 1
end
)lua";
inline constexpr const char* release = R"lua(
grant_next(KEYS, ARGV[2], now_ms())
return 1
)lua";

// KEYS: lock. ARGV: lock value, lease ms. Renews only if the caller still holds the lock.
inline constexpr const char* extend = R"lua(
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
)lua";

// KEYS: lock, queue, waiters, fence. ARGV: request id, channel prefix.
// A waiter gives up: it leaves the queue; if a release granted it the key meanwhile, or
// the key is free, the key goes to the next live waiter. 1 if it had been granted, else 0.
inline constexpr const char* cancel = R"lua(
redis.call('LREM', KEYS[2], 0, ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('DEL', grant_list(KEYS, ARGV[1]))
local held = redis.call('GET', KEYS[1])
local was_granted = granted_to(held, ARGV[1])
if was_granted or not held then
  if was_granted or redis.call('EXISTS', KEYS[2]) == 1 then grant_next(KEYS, ARGV[2], now_ms()) end
end
return was_granted and 1 or 0
)lua";

// The sources as loaded: acquire and release start with their uncontended path.
inline std::string acquire_source() {
  return lua::source({lua::replicate_effects, acquire_head, lua::now_ms, prelude, acquire});
}
inline std::string release_source() {
  return lua::source({lua::replicate_effects, release_head, lua::now_ms, prelude, release});
}
inline std::string cancel_source() { return lua::source({lua::replicate_effects, lua::now_ms, prelude, cancel}); }

}  // namespace handoff::redis::detail::scripts
