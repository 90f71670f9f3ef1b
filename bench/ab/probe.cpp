// The uncontended paths of one version of the library, built into a shared object of its
// own (tools/ab.sh), so that side_by_side.cpp can time two versions in one process.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>

#include <chrono>
#include <string>
#include <vector>

#define HANDOFF_AB_EXPORT extern "C" __attribute__((visibility("default")))

// ns per post of an increment to an idle actor (it runs inline and releases).
HANDOFF_AB_EXPORT double ab_posts_ns(long n) {
  handoff::actor<long> a{0};
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) a.post([](long& x) { ++x; });
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

// ns per lock and unlock of one of 64 keys, nobody else holding any.
HANDOFF_AB_EXPORT double ab_locks_ns(long n) {
  static handoff::keyed_mutex<> m;
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (int i = 0; i < 64; ++i) k.push_back("player:" + std::to_string(i * 7919));
    return k;
  }();
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) {
    auto g = m.lock(keys[i & 63]);
  }
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}
