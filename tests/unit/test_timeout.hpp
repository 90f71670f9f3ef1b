// test_timeout: a watchdog for one gtest test. Aborts the process, naming the test, if the
// test is still running after `limit`: a lost wake-up or a hang fails here, with a
// message, instead of blocking a direct run of the binary (ctest has its own TIMEOUT too).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>

namespace handoff::test {

class test_timeout {
 public:
  explicit test_timeout(std::chrono::seconds limit)
      : name_(current_test_name()), thread_([this, limit](std::stop_token stop) {
          std::mutex mu;
          std::condition_variable_any cv;
          std::unique_lock lock(mu);
          cv.wait_for(lock, stop, limit, [] { return false; });
          if (stop.stop_requested()) return;
          std::fprintf(stderr, "\n%s: still running after %llds: hung (lost wake-up?), aborting\n", name_.c_str(),
                       static_cast<long long>(limit.count()));
          std::fflush(stderr);
          std::abort();
        }) {}

 private:
  static std::string current_test_name() {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    return info != nullptr ? std::string(info->test_suite_name()) + "." + info->name() : "test";
  }
  std::string name_;
  std::jthread thread_;  // last: started once name_ exists
};

}  // namespace handoff::test
