// The Lua that the scripts of handoff::redis share (private to lib/redis), and the one way
// a script's source is put together: the snippets it needs, then its own text, joined by
// source(). Each script is loaded once (connection::load) and run by its SHA.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace handoff::redis::detail::lua {

// TIME makes a script non-deterministic: Redis < 5 must be told to replicate its effects
// rather than the script. Comes first, before any write.
inline constexpr std::string_view replicate_effects = R"lua(
if redis.replicate_commands then redis.replicate_commands() end
)lua";

// now_ms(): the server clock in ms.
inline constexpr std::string_view now_ms = R"lua(
local function now_ms() local t = redis.call('TIME') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) end
)lua";

// A script's source: the parts in order.
inline std::string source(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (const std::string_view p : parts) s += p;
  return s;
}

}  // namespace handoff::redis::detail::lua
