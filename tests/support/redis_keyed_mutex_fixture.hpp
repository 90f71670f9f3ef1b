// Shared by the tests of handoff::redis::keyed_mutex against a real redis-server
// (tests/redis/redis_keyed_mutex_*_test.cpp, one binary): the fixture RedisKeyedMutex and
// the names the tests use; a test file says
// `using namespace handoff::test::redis_keyed_mutex_tests;`.
//
// Each test starts its own server (redis_server.hpp) on a free loopback port, so that
// ctest -j runs them side by side and a test may kill and restart its server.
// Cross-process tests drive tests/redis/redis_lock_helper.cpp with posix_spawn. Waiters are
// put in a known order by polling the key's queue on the server (LLEN) between requests.
// Time bounds are generous (seconds), for loaded machines and sanitizer builds.
#pragma once

#include <handoff/redis/keyed_mutex.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "redis_server.hpp"
#include "redis_test_support.hpp"
#include "test_support.hpp"
#include "test_timeout.hpp"

namespace handoff::test::redis_keyed_mutex_tests {

using namespace std::chrono_literals;
using handoff::lease;
using handoff::lock_expired;
using handoff::redis::keyed_mutex;
using handoff::redis::options;
using handoff::test::eventually;
using handoff::test::fire_and_forget;
using handoff::test::helper_process;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::since;
using handoff::test::test_timeout;
using steady = std::chrono::steady_clock;
using redis_error = handoff::redis::error;

// One test's server and its options: short intervals so that the suite stays fast, with
// margins that hold on a loaded machine.
class RedisKeyedMutex : public testing::Test {
 protected:
  options opts(std::chrono::milliseconds recheck = 200ms) const {
    options o;
    o.port = server_.port();
    o.connect_timeout = 1s;
    o.command_timeout = 2s;
    o.recheck_interval = recheck;
    o.watchdog_lease = 5s;
    return o;
  }
  std::string port() const { return std::to_string(server_.port()); }

  test_timeout timeout_{90s};
  redis_server server_;
  raw_redis raw_{server_.port()};
};

}  // namespace handoff::test::redis_keyed_mutex_tests
