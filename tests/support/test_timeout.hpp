// test_timeout: a watchdog for one gtest test. Aborts the process, naming the test, if the
// test is still running after `limit`: a lost wake-up or a hang fails here, with a
// message, instead of blocking a direct run of the binary (ctest has its own TIMEOUT too).
// timeout_each_test: the same watchdog around every test of a binary, as a gtest listener
// (register_timeout_each_test()).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
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

class timeout_each_test : public ::testing::EmptyTestEventListener {
 public:
  explicit timeout_each_test(std::chrono::seconds limit) : limit_(limit) {}
  void OnTestStart(const ::testing::TestInfo&) override { timeout_ = std::make_unique<test_timeout>(limit_); }
  void OnTestEnd(const ::testing::TestInfo&) override { timeout_.reset(); }

 private:
  std::chrono::seconds limit_;
  std::unique_ptr<test_timeout> timeout_;
};

// Puts every test of the binary under a test_timeout of `limit`. Call it before the tests
// run (from a static initializer, in a binary linked with gtest_main).
inline bool register_timeout_each_test(std::chrono::seconds limit) {
  ::testing::UnitTest::GetInstance()->listeners().Append(new timeout_each_test(limit));
  return true;
}

}  // namespace handoff::test
