// The consumer program of tests/consumers: built by each way of consuming handoff
// (find_package, add_subdirectory, FetchContent, pkg-config; and under ThreadSanitizer
// against a handoff built with HANDOFF_SANITIZERS=thread) and run by run.cmake. Uses the public
// headers only, with no C++ standard flag of its own under CMake (handoff::handoff must
// carry C++20). Exit code 0 means every answer was right.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/testing.hpp>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int thread_count = 4;
constexpr int rounds = 500;

int failures = 0;

void expect(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "handoff consumer: FAILED: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  // An actor posted to from several threads: every message runs exactly once.
  handoff::actor<long> counter{0};
  {
    std::vector<std::jthread> senders;
    for (int t = 0; t < thread_count; ++t) {
      senders.emplace_back([&counter] {
        for (int i = 0; i < rounds; ++i) counter.post([](long& n) { ++n; });
      });
    }
  }
  expect(counter.ask([](long& n) { return n; }).get() == long{thread_count} * rounds, "actor counted every post");

  // A keyed mutex: a plain (non-atomic) counter per key, incremented under that key's lock
  // by several threads, loses no update; a held key refuses try_lock; tokens grow.
  handoff::keyed_mutex<> m;
  long per_key[2] = {0, 0};
  {
    std::vector<std::jthread> workers;
    for (int t = 0; t < thread_count; ++t) {
      workers.emplace_back([&m, &per_key] {
        for (int i = 0; i < rounds; ++i) {
          const int k = i % 2;
          auto g = m.lock("key:" + std::to_string(k));
          ++per_key[k];
        }
      });
    }
  }
  expect(per_key[0] + per_key[1] == long{thread_count} * rounds, "keyed_mutex lost no update");

  auto held = m.lock("key:0");
  expect(held.owns_lock(), "lock() owns the key");
  std::jthread([&m] { expect(!m.try_lock("key:0").owns_lock(), "try_lock() fails on a held key"); }).join();
  const auto first = held.token();
  held.unlock();
  const auto second = m.with_lock("key:0", [] { return 7; });
  expect(second == 7, "with_lock() returns the result of f");
  expect(m.lock("key:0").token() > first, "fencing tokens grow");
  expect(m.size() == 0, "no key state is left once every guard is gone");

  // The test scheduler ships with the library: a post under it waits for the test.
  {
    handoff::testing::scheduler s;
    handoff::actor<int> a{0};
    a.post([](int& x) { x = 1; });
    expect(s.pending().size() == 1, "under a test scheduler a post is an event, not run");
    expect(s.run_all() == 1 && a.ask([](int& x) { return x; }).get() == 1, "run_all() runs it");
  }

  if (failures != 0) return 1;
  std::puts("handoff consumer: ok");
  return 0;
}
