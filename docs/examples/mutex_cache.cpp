// Replacing a std::mutex-guarded cache with an actor, checked.
//
// Before: a session cache whose every member function takes a std::mutex. A caller that
// finds the mutex taken sleeps until it is free.
// After: the same cache as handoff::actor<cache_state>. The critical sections become
// messages: writes are posted (fire and forget: the caller never waits, even while
// another thread is inside the cache), reads are asked and answered through a future
// (or `co_await cache.async_ask(...)` in a coroutine).
//
// What carries over unchanged: each critical section is one handler, so a
// read-modify-write (get_or_load) stays atomic, and a thread reads its own writes (the
// actor runs one sender's messages in the order sent). What changes: a write returns
// before it has run, and an exception thrown inside the cache reaches the caller through
// the future.
//
// The check: four threads run the same operations against both caches; every answer,
// the statistics and the final contents must be the same.
#include <handoff/actor.hpp>

#include <cstdint>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "expect.hpp"

using example::expect;

namespace {

// Loads a user's record on a miss (stands for a database query). Throws for unknown users.
std::string load_user(const std::string& session) {
  if (session.starts_with("bad")) throw std::runtime_error("no such session: " + session);
  return "user-of-" + session;
}

struct cache_stats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  bool operator==(const cache_stats&) const = default;
};

// --- before: a mutex around a map ----------------------------------------------------------

class locked_cache {
 public:
  // [snippet:before_put]
  void put(const std::string& key, std::string value) {
    std::lock_guard lock(mutex_);
    map_[key] = std::move(value);
  }
  // [/snippet]

  std::optional<std::string> get(const std::string& key) {
    std::lock_guard lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) {
      ++stats_.misses;
      return std::nullopt;
    }
    ++stats_.hits;
    return it->second;
  }

  // Read-modify-write in one critical section: two callers never both load one key.
  template <class Loader>
  std::string get_or_load(const std::string& key, Loader load) {
    std::lock_guard lock(mutex_);
    if (auto it = map_.find(key); it != map_.end()) {
      ++stats_.hits;
      return it->second;
    }
    ++stats_.misses;
    return map_[key] = load(key);  // if load throws, nothing is inserted
  }

  void erase(const std::string& key) {
    std::lock_guard lock(mutex_);
    map_.erase(key);
  }

  cache_stats stats() {
    std::lock_guard lock(mutex_);
    return stats_;
  }
  std::map<std::string, std::string> contents() {
    std::lock_guard lock(mutex_);
    return {map_.begin(), map_.end()};
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::string, std::string> map_;
  cache_stats stats_;
};

// --- after: the same state in an actor -----------------------------------------------------

// [snippet:cache_state]
struct cache_state {
  std::unordered_map<std::string, std::string> map;
  cache_stats stats;
};
// [/snippet]

class actor_cache {
 public:
  // [snippet:after_put]
  void put(std::string key, std::string value) {  // returns at once; runs in order with this thread's other calls
    state_.post([key = std::move(key), value = std::move(value)](cache_state& s) mutable {
      s.map[std::move(key)] = std::move(value);
    });
  }
  // [/snippet]

  // [snippet:after_get]
  std::future<std::optional<std::string>> get(std::string key) {
    return state_.ask([key = std::move(key)](cache_state& s) -> std::optional<std::string> {
      auto it = s.map.find(key);
      if (it == s.map.end()) {
        ++s.stats.misses;
        return std::nullopt;
      }
      ++s.stats.hits;
      return it->second;
    });
  }
  // [/snippet]

  // The whole read-modify-write is one handler: as atomic as under the mutex. An
  // exception from load travels to the future.
  template <class Loader>
  std::future<std::string> get_or_load(std::string key, Loader load) {
    return state_.ask([key = std::move(key), load](cache_state& s) -> std::string {
      if (auto it = s.map.find(key); it != s.map.end()) {
        ++s.stats.hits;
        return it->second;
      }
      ++s.stats.misses;
      return s.map[key] = load(key);
    });
  }

  void erase(std::string key) {
    state_.post([key = std::move(key)](cache_state& s) { s.map.erase(key); });
  }

  std::future<cache_stats> stats() {
    return state_.ask([](cache_state& s) { return s.stats; });
  }
  std::future<std::map<std::string, std::string>> contents() {
    return state_.ask([](cache_state& s) { return std::map<std::string, std::string>(s.map.begin(), s.map.end()); });
  }

 private:
  // [snippet:state_member]
  handoff::actor<cache_state> state_;
  // [/snippet]
};

// --- the same workload against both ----------------------------------------------------------

// "prefix<n>", built by appending (GCC 12 warns, falsely, about `"literal" + std::string`:
// -Wrestrict, GCC bug 105651).
std::string name(const char* prefix, int n) {
  std::string s = prefix;
  s += std::to_string(n);
  return s;
}

// Thread t works on its own sessions "t<t>:<i>" (so each answer is determined) and on
// shared sessions "shared:<i>" through get_or_load only (whoever loads first, the value
// is the same, and exactly one load per shared key misses). Returns every answer in order.
template <class Cache, class Get, class Load>
std::vector<std::string> workload(Cache& cache, int t, Get get, Load load) {
  std::vector<std::string> answers;
  for (int i = 0; i < 400; ++i) {
    // One own key per round of 5 steps: put, get, shared load, failed load, erase-or-not + get.
    const std::string own = name("t", t) + name(":", (i / 5) % 20);
    switch (i % 5) {
      case 0:
        cache.put(own, name("v", i));
        break;
      case 1:
        answers.push_back(get(cache, own).value_or("<miss>"));
        break;
      case 2:
        answers.push_back(load(cache, name("shared:", i % 7)));
        break;
      case 3:  // load_user throws: the answer is "error: ..."
        answers.push_back(load(cache, name("bad:", t)));
        break;
      case 4:
        if (i % 3 == 0) cache.erase(own);
        answers.push_back(get(cache, own).value_or("<miss>"));
        break;
    }
  }
  return answers;
}

// Calls f(); a load error becomes the answer "error: <message>".
template <class F>
std::string or_error(F f) {
  try {
    return f();
  } catch (const std::runtime_error& e) {
    return std::string("error: ") + e.what();
  }
}

template <class Cache, class Get, class Load>
std::vector<std::vector<std::string>> run_threads(Cache& cache, Get get, Load load) {
  std::vector<std::vector<std::string>> answers(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { answers[t] = workload(cache, t, get, load); });
  for (auto& th : threads) th.join();
  return answers;
}

}  // namespace

int main() {
  locked_cache before;
  const auto before_answers = run_threads(
      before, [](locked_cache& c, const std::string& k) { return c.get(k); },
      [](locked_cache& c, const std::string& k) { return or_error([&] { return c.get_or_load(k, load_user); }); });

  actor_cache after;
  const auto after_answers = run_threads(
      after, [](actor_cache& c, const std::string& k) { return c.get(k).get(); },
      [](actor_cache& c, const std::string& k) {
        // The exception was thrown on the thread that ran the handler. A shared_future
        // keeps it alive until its message is copied (future::get() lets go of it first);
        // otherwise ThreadSanitizer reports a false race, because libstdc++'s exception
        // reference counts are not instrumented.
        // [snippet:shared_future]
        std::shared_future<std::string> answer = c.get_or_load(k, load_user).share();
        return or_error([&] { return answer.get(); });
        // [/snippet]
      });

  expect(before_answers == after_answers, "every call answered the same before and after");
  expect(before.stats() == after.stats().get(), "the same hits and misses");
  expect(before.contents() == after.contents().get(), "the same final contents");
  expect(before.contents().count("shared:3") == 1 && before.contents().count("bad:0") == 0,
         "loaded keys are cached, failed loads are not");

  // Reading one's own writes: put() returned before it ran, yet this thread's next call
  // runs after it.
  // [snippet:reads_own_write]
  after.put("me", "written");
  expect(after.get("me").get() == std::optional<std::string>("written"), "a thread reads its own write");
  // [/snippet]

  const cache_stats s = before.stats();
  std::printf("mutex_cache: %zu answers identical; %llu hits, %llu misses\n",
              before_answers.size() * before_answers[0].size(), static_cast<unsigned long long>(s.hits),
              static_cast<unsigned long long>(s.misses));
  return 0;
}
