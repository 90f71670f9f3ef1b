// The code blocks of README.md, compiled and checked (the `example_readme_snippets` test
// compares the README's copies with the marked snippets here).
#include <handoff/actor.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/keyed_mutex.hpp>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include "expect.hpp"

using namespace std::chrono_literals;
using example::expect;

namespace {

void actor_example() {
  // [snippet:actor]
  struct account { long balance = 0; };
  handoff::actor<account> acc;                                   // state constructed in place
  acc.post([](account& a) { a.balance += 100; });                // fire and forget, from any thread
  std::future<long> f = acc.ask([](account& a) { return a.balance; });
  long b = f.get();                                              // 100
  // in a coroutine:  long b = co_await acc.async_ask([](account& a) { return a.balance; });
  // [/snippet]
  expect(b == 100, "ask sees the posted deposit");

  // [snippet:basic_actor]
  struct counter { long n = 0; void operator()(int d) { n += d; } };
  handoff::basic_actor<int, counter> c;
  c.send(5);
  // [/snippet]
  // (compiled and run; basic_actor's behaviour is checked by tests/unit/basic_actor_test.cpp)
}

void keyed_mutex_example() {
  // [snippet:keyed_mutex]
  handoff::keyed_mutex<> locks;                                  // one lock per key, made on first use
  {
    auto g = locks.lock("player:42");                            // FIFO per key; RAII guard
    auto other = locks.try_lock_for("player:7", 50ms);           // another key: not blocked
    auto room = locks.lock("room:3", handoff::lease{2s});        // released by its timer after 2 s (never early)
    std::uint64_t fence = room.token();                          // send it with writes: stale holders lose
    (void)fence;
  }                                                              // guards unlock here
  bool free = locks.size() == 0;                                 // true: no key held or waited for
  // [/snippet]
  expect(free, "size() is 0 once the guards are gone");
}

}  // namespace

int main() {
  actor_example();
  keyed_mutex_example();
}
