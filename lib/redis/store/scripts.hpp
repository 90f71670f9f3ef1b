// lib/redis/store/: handoff::redis::fenced_store and versioned_store (stores.cpp) and their
// Lua (here). Built on common/ only: a fenced write reads the lock's fence counter by its
// name (common/names.hpp), never through the lock client.
//
// The Lua scripts of handoff::redis::fenced_store and versioned_store: each write is one
// script, so that its check and its write are atomic on the server. A record is a hash
// (common/names.hpp): "token" or "version", and "value".
#pragma once

namespace handoff::redis::detail::scripts {

// KEYS: the record, the fence counter of the lock of the same key and prefix. ARGV: the
// token (decimal, no leading zero), the value.
// Stores when the token is at least the record's last token and at least the lock's
// latest grant (a holder whose lease ran out is refused once the key was granted again,
// before its successor writes). 1 if stored, else 0. Tokens go up to 2^64 - 1, past a Lua
// number's 2^53: they are compared as decimal strings, by length, then in two exact
// halves of at most 10 digits.
inline constexpr const char* fenced_write = R"lua(
local function below(a, b)
  if #a ~= #b then return #a < #b end
  local high_a, high_b = tonumber(string.sub(a, 1, -11)) or 0, tonumber(string.sub(b, 1, -11)) or 0
  if high_a ~= high_b then return high_a < high_b end
  return tonumber(string.sub(a, -10)) < tonumber(string.sub(b, -10))
end
local function check(t, what)
  if t and not string.match(t, '^%d+$') then
    return redis.error_reply('not a fencing token in ' .. what .. ': ' .. string.sub(t, 1, 32))
  end
end
local last = redis.call('HGET', KEYS[1], 'token')
local granted = redis.call('GET', KEYS[2])
local bad = check(last, 'the record') or check(granted, 'the fence counter')
if bad then return bad end
if (last and below(ARGV[1], last)) or (granted and below(ARGV[1], granted)) then return 0 end
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
return 1
)lua";

// KEYS: the record. ARGV: the expected version ('0': the record does not exist), the value.
// Writes only if the record's version is the expected one, and increments the version:
// {1, new version}. Otherwise {0, current version, current value} (version 0 and '' for no
// record), so that a retry needs no read of its own.
inline constexpr const char* compare_and_set = R"lua(
local current = redis.call('HMGET', KEYS[1], 'version', 'value')
local version = current[1] or '0'
if version ~= ARGV[1] then return {0, tonumber(version), current[2] or ''} end
local next_version = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'value', ARGV[2])
return {1, next_version}
)lua";

}  // namespace handoff::redis::detail::scripts
