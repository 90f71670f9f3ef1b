// The Redis key names of handoff::redis (private to lib/redis). A name is
// prefix + "{" + escaped key + "}:" + kind, the kind being "lock", "queue", "waiters" and
// "fence" for a lock, "fenced" for a fenced_store record, "versioned" for a
// versioned_store record. The escape keeps every (prefix, key, kind) apart: the escaped
// key holds no brace, so the last "{" of a name ends the prefix and the "}:" after it ends
// the key, and escaping is one-to-one ('{' -> "\x01(", '}' -> "\x01)", '\x01' ->
// "\x01\x01"; every other byte, spaces, newlines, glob characters and NUL included, as it
// is). Keys without braces or \x01 keep their plain names. The braces make the key Redis
// Cluster's hash tag: a lock's names and its records would share a slot.
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

// prefix + "{" + escaped key + "}:" + kind.
inline std::string key_name(std::string_view prefix, std::string_view key, std::string_view kind) {
  std::string name(prefix);
  name += '{';
  name += escape_key(key);
  name += "}:";
  name += kind;
  return name;
}

// The names of one lock.
struct key_names {
  key_names(std::string_view prefix, std::string_view key) {
    std::string base(prefix);
    base += '{';
    base += escape_key(key);
    base += "}:";
    prefix_and_key = base;
    lock = base + "lock";
    queue = base + "queue";
    waiters = base + "waiters";
    fence = base + "fence";
  }
  std::string prefix_and_key;  // prefix + "{" + escaped key + "}:"
  std::string lock, queue, waiters, fence;
};

}  // namespace handoff::redis::detail
