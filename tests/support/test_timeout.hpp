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

// One watchdog thread for the whole binary (a thread per test would cost a thread start
// each): OnTestStart arms it with the test's name and deadline, OnTestEnd disarms it.
class timeout_each_test : public ::testing::EmptyTestEventListener {
 public:
  explicit timeout_each_test(std::chrono::seconds limit)
      : limit_(limit), thread_([this](std::stop_token stop) { watch(stop); }) {}

  void OnTestStart(const ::testing::TestInfo& info) override {
    {
      const std::lock_guard lock(mu_);
      name_ = std::string(info.test_suite_name()) + "." + info.name();
      deadline_ = std::chrono::steady_clock::now() + limit_;
      armed_ = true;
    }
    cv_.notify_one();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    const std::lock_guard lock(mu_);
    armed_ = false;
  }

 private:
  void watch(const std::stop_token& stop) {
    std::unique_lock lock(mu_);
    while (!stop.stop_requested()) {
      if (!armed_) {
        cv_.wait(lock, stop, [this] { return armed_; });
        continue;
      }
      const auto deadline = deadline_;
      // Wakes for a new test (a later deadline) or the end of this one.
      if (cv_.wait_until(lock, stop, deadline, [&] { return !armed_ || deadline_ != deadline; })) continue;
      if (stop.stop_requested()) return;
      std::fprintf(stderr, "\n%s: still running after %llds: hung (lost wake-up?), aborting\n", name_.c_str(),
                   static_cast<long long>(limit_.count()));
      std::fflush(stderr);
      std::abort();
    }
  }

  const std::chrono::seconds limit_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::string name_;                                // guarded by mu_: the running test
  std::chrono::steady_clock::time_point deadline_;  // guarded by mu_
  bool armed_ = false;                              // guarded by mu_: a test is running
  std::jthread thread_;                             // last: started once the rest exists
};

// Puts every test of the binary under a test_timeout of `limit`. Call it before the tests
// run (from a static initializer, in a binary linked with gtest_main).
inline bool register_timeout_each_test(std::chrono::seconds limit) {
  ::testing::UnitTest::GetInstance()->listeners().Append(new timeout_each_test(limit));
  return true;
}

}  // namespace handoff::test
