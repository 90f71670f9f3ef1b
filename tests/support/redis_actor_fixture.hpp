// Shared by the tests of handoff::redis::actor_system against a real redis-server
// (tests/redis/redis_actor_*_test.cpp, one binary): options with short leases, the helper
// processes (redis_actor_helper, which post and handle as further processes), and a server
// with an actor_system whose handler records every run (redis_actor_check.hpp); a test
// file says `using namespace handoff::test::redis_actor_tests;`.
#pragma once

#include <handoff/lease.hpp>
#include <handoff/redis/actor_system.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "redis_actor_check.hpp"
#include "redis_server.hpp"
#include "redis_test_support.hpp"

#ifndef HANDOFF_REDIS_ACTOR_HELPER
#error "HANDOFF_REDIS_ACTOR_HELPER: the path of redis_actor_helper (tests/CMakeLists.txt)"
#endif

namespace handoff::test::redis_actor_tests {

using namespace std::chrono_literals;
namespace hr = handoff::redis;
using handoff::test::eventually;
using handoff::test::helper_process;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::since;
using handoff::test::steady;

// Short leases, so that crash recovery takes a fraction of a second.
inline constexpr auto test_lease = 300ms;

inline hr::options at(int port) {
  hr::options o;
  o.port = port;
  return o;
}

inline hr::actor_options quick() {
  hr::actor_options a;
  a.lease = handoff::lease{test_lease};
  a.sweep_interval = 20ms;
  return a;
}

inline std::unique_ptr<helper_process> helper(std::vector<std::string> args) {
  return std::make_unique<helper_process>(HANDOFF_REDIS_ACTOR_HELPER, std::move(args));
}

inline std::vector<std::string> log_of(raw_redis& raw, const std::string& key) {
  return raw.strings({"LRANGE", "t:log:" + key, "0", "-1"});
}

// Blocks handlers until open() (a handler that is "still running").
struct latch {
  std::promise<void> p;
  std::shared_future<void> f = p.get_future().share();
  void wait() const { f.wait(); }
  void open() { p.set_value(); }
};

// A server, the tests' plain view of it, and this process's actor_system, whose handler
// records every run (redis_actor_check.hpp) and whose sweeper takes over what others leave.
struct recorded {
  explicit recorded(std::vector<std::string> server_args = {}, const hr::actor_options& a = quick())
      : server(std::move(server_args)), port(server.port()), raw(port), actors(at(port), a) {
    actors.on("", [p = port](hr::delivery& d) { handoff::test::record_run(p, d); });
  }
  redis_server server;
  int port;
  raw_redis raw;
  hr::actor_system actors;
};

}  // namespace handoff::test::redis_actor_tests
