// Random ids of handoff::redis (private to lib/redis): what names a lock client or an actor
// system on the server, so that two processes, or two clients of one process, never share
// one.
#pragma once

#include <cstdint>
#include <random>
#include <string>

namespace handoff::redis::detail {

// 128 random bits (std::random_device) as 32 lowercase hex digits.
inline std::string random_hex128() {
  std::random_device rd;
  static constexpr char digits[] = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 4; ++i) {
    std::uint32_t v = rd();
    for (int j = 0; j < 8; ++j, v >>= 4U) s += digits[v & 0xFU];
  }
  return s;
}

}  // namespace handoff::redis::detail
