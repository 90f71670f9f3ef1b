// The Redis key names of handoff::redis (private to lib/redis). A name is
// prefix + "{" + escaped key + "}:" + kind, the kind being "lock", "queue", "waiters" and
// "fence" for a lock, "fenced" for a fenced_store record, "versioned" for a
// versioned_store record. The escape keeps every (prefix, key, kind) apart: the escaped
// key holds no brace, so the last "{" of a name ends the prefix and the "}:" after it ends
// the key, and escaping is one-to-one ('{' -> "\x01(", '}' -> "\x01)", '\x01' ->
// "\x01\x01"; every other byte, spaces, newlines, glob characters and NUL included, as it
// is). Keys without braces or \x01 keep their plain names. The braces make the key Redis
// Cluster's hash tag, so that all names of one key share a slot. A tag must not be empty
// (Redis then hashes the whole name), so on a cluster the empty key escapes to "\x01",
// which no other key escapes to (a lone \x01 byte is "\x01\x01"); one server keeps "".
// And on a cluster the prefix holds no '{' (router.cpp refuses one), which would start
// the tag before the key. The actors' names on a cluster carry the tag of a slot group
// instead of the key's (actor/scripts.hpp).
#pragma once

#include <string>
#include <string_view>

namespace handoff::redis::detail {

inline std::string escape_key(std::string_view key) {
  std::string out;
  out.reserve(key.size());
  for (const char c : key) {
    switch (c) {
      case '{':
        out += "\x01(";
        break;
      case '}':
        out += "\x01)";
        break;
      case '\x01':
        out += "\x01\x01";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// prefix + "{" + escaped key + "}:" + kind; `cluster`: names for a Redis Cluster (above).
inline std::string key_name(std::string_view prefix, std::string_view key, std::string_view kind,
                            bool cluster = false) {
  std::string name(prefix);
  name += '{';
  name += cluster && key.empty() ? "\x01" : escape_key(key);
  name += "}:";
  name += kind;
  return name;
}

// The names of one lock (`cluster`: as key_name's).
struct key_names {
  key_names(std::string_view prefix, std::string_view key, bool cluster)
      : prefix_and_key(key_name(prefix, key, "", cluster)), lock(prefix_and_key + "lock"),
        queue(prefix_and_key + "queue"), waiters(prefix_and_key + "waiters"), fence(prefix_and_key + "fence") {}
  std::string prefix_and_key;  // prefix + "{" + escaped key + "}:"
  std::string lock, queue, waiters, fence;
};

}  // namespace handoff::redis::detail
