// Uses the installed library through its public headers only: an actor answering post and
// ask, and the compiled thread pool as the executor of a budgeted actor. Exit code 0 means
// every answer was right.
#include <handoff/actor.hpp>
#include <handoff/thread_pool.hpp>

#include <cstdio>
#include <thread>
#include <vector>

int main() {
  handoff::actor<int> counter{0};
  {
    std::vector<std::jthread> senders;
    for (int t = 0; t < 2; ++t) {
      senders.emplace_back([&counter] {
        for (int i = 0; i < 1000; ++i) counter.post([](int& n) { ++n; });
      });
    }
  }
  const int total = counter.ask([](int& n) { return n; }).get();

  handoff::thread_pool pool(1);
  handoff::actor<int> budgeted{handoff::actor_options{.executor = pool, .max_messages = 1}, 40};
  budgeted.post([&budgeted](int& n) {
    for (int i = 0; i < 2; ++i) budgeted.post([](int& m) { ++m; });
    ++n;
  });
  const int answer = budgeted.ask([](int& n) { return n; }).get();

  if (total != 2000 || answer != 43) {
    std::fprintf(stderr, "handoff consumer: wrong answers %d, %d\n", total, answer);
    return 1;
  }
  std::puts("handoff consumer: ok");
  return 0;
}
