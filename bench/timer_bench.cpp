// Timer benchmarks: handoff::timer_service against Boost.Asio's steady_timer on an
// io_context, the timer an Asio program would use for the same timeout.
//
//   timer_schedule_cancel  one-shot with a 16-byte message, scheduled and cancelled on the
//                          scheduling thread, 10,000 timers already pending (deadlines
//                          1-60 s). asio_steady_timer: one steady_timer per timeout,
//                          async_wait, cancel, and the aborted handler run (poll_one).
//   timer_rearm            one pending timer's deadline pushed out (the silent-player case),
//                          10,000 others pending. Asio: expires_after + async_wait, the
//                          aborted handler run.
//   timer_1m_pending       runs once: 1M one-shots pending; bytes per timer in the service
//                          (handles apart: handle_bytes each, held by the caller), then what
//                          the service holds after they were cancelled and after 1M fired.
//   timer_fire_latency     runs once: 300 timers over 300 ms on the service's own thread,
//                          lateness (handler run - deadline) p50 / p99 / max in us.
//   timer_fire_latency_busy  the same while two threads spin (both cores busy): the
//                          service's thread waits for the scheduler's time slice.
#include <benchmark/benchmark.h>

#include <handoff/actor.hpp>
#include <handoff/timer_service.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <random>
#include <thread>
#include <utility>  // before Asio: GCC 12 in C++20 mode needs std::exchange declared first
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace {

using namespace std::chrono_literals;
constexpr int pending_count = 10'000;

struct msg16 {  // the 16-byte message
  std::int64_t a;
  std::int64_t b;
};

std::vector<std::chrono::milliseconds> spread(int n) {
  std::mt19937 rng(42);
  std::vector<std::chrono::milliseconds> v;
  for (int i = 0; i < n; ++i) v.emplace_back(1000 + rng() % 59'000);
  return v;
}

void handoff_schedule_cancel(benchmark::State& state) {
  handoff::timer_service timers;
  handoff::actor<std::int64_t> a{0};
  std::vector<handoff::timer> pending;
  for (auto d : spread(pending_count)) pending.push_back(timers.after(d, a, [](std::int64_t&) {}));
  std::int64_t i = 0;
  for (auto _ : state) {
    msg16 m{++i, 7};
    auto t = timers.after(5s, a, [m](std::int64_t& s) { s += m.a + m.b; });
    benchmark::DoNotOptimize(t);
    t.cancel();
  }
  state.counters["pending"] = static_cast<double>(timers.stats().pending);
}

// The Asio baseline's pending timers: one steady_timer per timeout, each waited on.
std::vector<std::unique_ptr<boost::asio::steady_timer>> asio_pending(boost::asio::io_context& io) {
  std::vector<std::unique_ptr<boost::asio::steady_timer>> pending;
  for (auto d : spread(pending_count)) {
    pending.push_back(std::make_unique<boost::asio::steady_timer>(io, d));
    pending.back()->async_wait([](boost::system::error_code) {});
  }
  return pending;
}

void asio_schedule_cancel(benchmark::State& state) {
  boost::asio::io_context io;
  const auto pending = asio_pending(io);
  std::int64_t sum = 0;
  std::int64_t i = 0;
  for (auto _ : state) {
    msg16 m{++i, 7};
    boost::asio::steady_timer t(io, 5s);
    t.async_wait([m, &sum](boost::system::error_code ec) {
      if (!ec) sum += m.a + m.b;
    });
    t.cancel();
    io.poll_one();  // the aborted handler
  }
  benchmark::DoNotOptimize(sum);
}

void handoff_rearm(benchmark::State& state) {
  handoff::timer_service timers;
  handoff::actor<std::int64_t> a{0};
  std::vector<handoff::timer> pending;
  for (auto d : spread(pending_count)) pending.push_back(timers.after(d, a, [](std::int64_t&) {}));
  auto idle = timers.after(30s, a, [m = msg16{1, 2}](std::int64_t& s) { s += m.a; });
  for (auto _ : state) benchmark::DoNotOptimize(idle.rearm(30s));
}

void asio_rearm(benchmark::State& state) {
  boost::asio::io_context io;
  const auto pending = asio_pending(io);
  boost::asio::steady_timer idle(io, 30s);
  idle.async_wait([](boost::system::error_code) {});
  for (auto _ : state) {
    idle.expires_after(30s);  // cancels the pending wait
    idle.async_wait([m = msg16{1, 2}](boost::system::error_code) { benchmark::DoNotOptimize(m); });
    io.poll_one();  // the aborted handler
  }
}

void handoff_1m_pending(benchmark::State& state) {
  constexpr std::size_t n = 1'000'000;
  for (auto _ : state) {
    handoff::timer_service timers;
    handoff::actor<std::int64_t> a{0};
    const double base = static_cast<double>(timers.stats().bytes);
    std::vector<handoff::timer> handles;
    handles.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      handles.push_back(timers.after(1s + 1ms * static_cast<int>(i % 50'000), a,
                                     [m = msg16{static_cast<std::int64_t>(i), 1}](std::int64_t& s) { s += m.a; }));
    }
    state.counters["bytes_per_timer"] = (static_cast<double>(timers.stats().bytes) - base) / n;
    for (auto& h : handles) h.cancel();
    state.counters["bytes_after_cancel"] = static_cast<double>(timers.stats().bytes);
    handles.clear();
    for (std::size_t i = 0; i < n; ++i) {
      timers.after(1ms, a, [m = msg16{static_cast<std::int64_t>(i), 1}](std::int64_t& s) { s += m.a; }).detach();
    }
    (void)timers.run_due(timers.now() + 1s);
    state.counters["bytes_after_fire"] = static_cast<double>(timers.stats().bytes);
    state.counters["sent"] = static_cast<double>(timers.stats().sent);
  }
  state.counters["handle_bytes"] = sizeof(handoff::timer);
}

void handoff_fire_latency(benchmark::State& state, int spinners) {
  constexpr int n = 300;
  for (auto _ : state) {
    std::atomic<bool> stop{false};
    std::vector<std::thread> busy;
    for (int i = 0; i < spinners; ++i) {
      busy.emplace_back([&stop] {
        while (!stop.load(std::memory_order_relaxed)) {
        }
      });
    }
    handoff::timer_service timers;
    timers.start();
    handoff::actor<std::vector<std::int64_t>> a;
    std::vector<std::int64_t> deadline(n);
    std::vector<handoff::timer> handles;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      const auto at = start + 1ms * (i + 1) + std::chrono::microseconds(137 * i % 1000);
      deadline[i] = std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
      handles.push_back(timers.at(at, a, [&deadline, i](std::vector<std::int64_t>& late) {
        const auto now = std::chrono::steady_clock::now().time_since_epoch();
        late.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count() - deadline[i]);
      }));
    }
    std::this_thread::sleep_for(n * 1ms + 20ms);
    auto late = a.ask([](std::vector<std::int64_t>& v) { return v; }).get();
    timers.stop();
    stop = true;
    for (std::thread& t : busy) t.join();
    if (late.size() != n) {
      state.SkipWithError("not every timer fired");
      return;
    }
    std::sort(late.begin(), late.end());
    state.counters["early"] = late.front() < 0 ? 1 : 0;
    state.counters["p50_us"] = static_cast<double>(late[n / 2]) / 1e3;
    state.counters["p99_us"] = static_cast<double>(late[n * 99 / 100]) / 1e3;
    state.counters["max_us"] = static_cast<double>(late.back()) / 1e3;
  }
}

}  // namespace

BENCHMARK(handoff_schedule_cancel)->Name("timer_schedule_cancel/handoff")->UseRealTime();
BENCHMARK(asio_schedule_cancel)->Name("timer_schedule_cancel/asio_steady_timer")->UseRealTime();
BENCHMARK(handoff_rearm)->Name("timer_rearm/handoff")->UseRealTime();
BENCHMARK(asio_rearm)->Name("timer_rearm/asio_steady_timer")->UseRealTime();
BENCHMARK(handoff_1m_pending)->Name("timer_1m_pending/handoff")->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(handoff_fire_latency, idle, 0)->Name("timer_fire_latency/handoff")->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(handoff_fire_latency, busy, 2)->Name("timer_fire_latency_busy/handoff")->Iterations(1)->UseRealTime();

BENCHMARK_MAIN();
