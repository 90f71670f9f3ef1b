// Every public header in one translation unit, compiled with -Wall -Wextra -Wpedantic
// -Werror by the test build (GCC and clang presets) and read by the style_clang_tidy test,
// so that the headers no library source includes are checked too.
#include <handoff/actor.hpp>
#include <handoff/actor_options.hpp>
#include <handoff/ask_deadline.hpp>
#include <handoff/ask_timeout.hpp>
#include <handoff/basic_actor.hpp>
#include <handoff/executor.hpp>
#include <handoff/key_guard.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/keyed_mutex_options.hpp>
#include <handoff/lease.hpp>
#include <handoff/mailbox_full.hpp>
#include <handoff/metrics.hpp>
#include <handoff/multi_guard.hpp>
#include <handoff/redis/actor_system.hpp>
#include <handoff/redis/client_stats.hpp>
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/options.hpp>
#include <handoff/redis/versioned_store.hpp>
#include <handoff/run_deferred.hpp>
#include <handoff/task.hpp>
#include <handoff/testing.hpp>
#include <handoff/thread_pool.hpp>
#include <handoff/timer.hpp>
#include <handoff/timer_scope.hpp>
#include <handoff/timer_service.hpp>

#include <memory>

namespace {

struct counter {
  long n = 0;
  void operator()(int d) { n += d; }
};

handoff::task<int> answer(handoff::actor<int>& a) {
  co_return co_await a.async_ask([](int& x) { return x; });
}
handoff::task<int> answer_within(handoff::actor<int>& a, handoff::timer_service& timers) {
  co_return co_await handoff::async_ask_for(
      a, [](int& x) { return x; }, std::chrono::milliseconds(1), timers);
}

// Instantiates the templates so that their bodies are checked too; never called.
[[maybe_unused]] void instantiate() {
  handoff::actor<int> a;
  a.post([](int& x) { ++x; });
  a.post([](int& x, handoff::actor<int>& self) { self.post([&x](int&) { ++x; }); });
  a.defer([](int& x) { ++x; });
  (void)a.ask([](int& x) { return x; });
  (void)a.ask_for([](int& x) { return x; }, std::chrono::milliseconds(1));
  handoff::basic_actor<int, counter> b;
  b.send(1);
  b.defer(2);
  (void)handoff::run_deferred();
  handoff::thread_pool pool(1);
  pool.execute([p = std::make_unique<int>(1)] { (void)*p; });
  handoff::execute(pool, [] {});
  handoff::keyed_mutex<> m;
  auto g = m.try_lock("k");
  auto all = m.lock_all({"a", "b"});
  auto timed = m.try_lock_all_for({"a", "b"}, std::chrono::milliseconds(1));
  auto leased = m.lock_all({"a", "b"}, handoff::lease{std::chrono::seconds(1)});
  m.lock_async("k", [](handoff::key_guard) {});
  handoff::redis::actor_system ra;
  ra.on("room:", [](handoff::redis::delivery& d) { d.set_state(std::string(d.body())); });
  (void)ra.post("room:1", "x");
  handoff::redis::keyed_mutex r;
  auto rg = r.try_lock_for("k", std::chrono::milliseconds(1), handoff::lease{std::chrono::seconds(1)});
  auto rall = r.lock_all({"a", "b"});
  (void)r.with_lock("k", [] { return 1; });
  auto aw = r.async_lock("k", std::chrono::milliseconds(5));
  handoff::redis::versioned_store v;
  (void)handoff::sync_wait(answer(a));
  handoff::timer_service timers;
  (void)handoff::sync_wait(answer_within(a, timers));
  handoff::timer_scope scope(timers);
  a.post([](int&, handoff::actor<int>& self) {
    handoff::after(std::chrono::milliseconds(1), self, [](int& x) { ++x; }).detach();
  });
  (void)handoff::every(std::chrono::milliseconds(1), a, [](int&) {});
  (void)handoff::after(std::chrono::milliseconds(1), b, 1);
  (void)v.update("k", [](const handoff::redis::versioned_value& cur) { return cur.value + "x"; });
}

}  // namespace
