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
//   timer_schedule_cancel_100k_targets  the same over 100,000 distinct target actors (a
//                          timer per session): each schedule for the next target in a
//                          prime stride, the 10,000 pending spread over them;
//                          allocs_per_op counts operator new calls in the timed loop.
//   timer_destroy_actor_1m_pending  runs once: an actor with 1 timer destroyed while 1M
//                          others are pending over 100,000 actors; destroy_us p50 / p99 of
//                          1,000 destructions (the destructor cancels its timer).
//   timer_burst_memory     runs once: 1M timers scheduled and cancelled while one periodic
//                          timer lives; bytes_beyond_wheel is what the service holds after,
//                          less its wheel's 8 KiB of slots.
//   timer_fire_latency     runs once: 300 timers over 300 ms on the service's own thread,
//                          lateness (handler run - deadline) p50 / p99 / max in us.
//   timer_fire_latency_busy  the same while two threads spin (both cores busy): the
//                          service's thread waits for the scheduler's time slice.
#include <benchmark/benchmark.h>

#include <handoff/actor.hpp>
#include <handoff/thread_pool.hpp>
#include <handoff/timer_service.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <new>
#include <random>
#include <thread>
#include <utility>  // before Asio: GCC 12 in C++20 mode needs std::exchange declared first
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

namespace {
thread_local long allocations = 0;  // operator new calls on this thread (below)
}  // namespace

// Counting replacements of the global operator new (one thread-local increment each).
// GCC cannot see that these replace the global operators as a matched pair.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(std::size_t n) {
  ++allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, std::align_val_t a) {
  ++allocations;
  const auto align = static_cast<std::size_t>(a);
  if (void* p = std::aligned_alloc(align, (n + align - 1) / align * align)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, std::align_val_t) noexcept { std::free(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { std::free(p); }

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
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1e-9,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
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

std::vector<std::unique_ptr<handoff::actor<std::int64_t>>> make_actors(std::size_t n) {
  std::vector<std::unique_ptr<handoff::actor<std::int64_t>>> v;
  v.reserve(n);
  for (std::size_t i = 0; i < n; ++i) v.push_back(std::make_unique<handoff::actor<std::int64_t>>(0));
  return v;
}

void handoff_schedule_cancel_100k_targets(benchmark::State& state) {
  constexpr std::size_t targets = 100'000;
  const auto actors = make_actors(targets);
  handoff::timer_service timers;
  std::vector<handoff::timer> ring;
  const auto spread_ms = spread(pending_count);
  std::size_t next = 0;
  for (auto d : spread_ms) {
    ring.push_back(timers.after(d, *actors[next], [](std::int64_t&) {}));
    next = (next + 7919) % targets;
  }
  std::int64_t i = 0;
  auto step = [&] {
    msg16 m{++i, 7};
    auto t = timers.after(5s, *actors[next], [m](std::int64_t& s) { s += m.a + m.b; });
    benchmark::DoNotOptimize(t);
    t.cancel();
    next = next + 7919 >= targets ? next + 7919 - targets : next + 7919;
  };
  for (std::size_t w = 0; w < targets; ++w) step();  // every target once: the steady state
  const long before = allocations;
  for (auto _ : state) step();
  state.counters["allocs_per_op"] = static_cast<double>(allocations - before) / static_cast<double>(state.iterations());
  state.counters["ns_per_op"] = benchmark::Counter(static_cast<double>(state.iterations()) * 1e-9,
                                                   benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["pending"] = static_cast<double>(timers.stats().pending);
}

void handoff_destroy_actor_1m_pending(benchmark::State& state) {
  constexpr std::size_t n = 1'000'000;
  constexpr int reps = 1000;
  for (auto _ : state) {
    const auto actors = make_actors(100'000);
    handoff::timer_service timers;
    std::vector<handoff::timer> pending;
    pending.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      pending.push_back(
          timers.after(1s + 1ms * static_cast<int>(i % 50'000), *actors[i % actors.size()], [](std::int64_t&) {}));
    }
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
      auto doomed = std::make_unique<handoff::actor<std::int64_t>>(0);
      auto t = timers.after(1s, *doomed, [](std::int64_t&) {});
      const auto t0 = std::chrono::steady_clock::now();
      doomed.reset();
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    state.counters["destroy_us"] = us[us.size() / 2];
    state.counters["destroy_p99_us"] = us[us.size() * 99 / 100];
    state.counters["pending"] = static_cast<double>(timers.stats().pending);
  }
}

void handoff_burst_memory(benchmark::State& state) {
  constexpr std::size_t n = 1'000'000;
  constexpr double wheel_slots = 4 * 256 * sizeof(void*);
  for (auto _ : state) {
    const auto actors = make_actors(1000);
    handoff::timer_service timers;
    auto tick = timers.every(1h, *actors[0], [](std::int64_t& s) { ++s; });
    std::vector<handoff::timer> handles;
    handles.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      handles.push_back(timers.after(1s + 1ms * static_cast<int>(i % 50'000), *actors[i % actors.size()],
                                     [m = msg16{static_cast<std::int64_t>(i), 1}](std::int64_t& s) { s += m.a; }));
    }
    state.counters["bytes_at_peak"] = static_cast<double>(timers.stats().bytes);
    for (auto& h : handles) h.cancel();
    state.counters["bytes_beyond_wheel"] = static_cast<double>(timers.stats().bytes) - wheel_slots;
    state.counters["periodic_active"] = tick.active() ? 1 : 0;
  }
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

// Schedule + cancel by 1 or 2 threads, each on its own targets with its own ring of
// pending timers: the same 200,000 pairs per iteration, split between the threads. The
// ratio of the two rows' times is the speed-up of a second thread. `separate`: each
// thread on a service and actors of its own, nothing of the library shared: what two
// threads of one process reach on this machine, the ceiling for the shared service.
void handoff_schedule_cancel_threads(benchmark::State& state, int threads, bool separate) {
  constexpr std::size_t targets = 100'000;
  constexpr long pairs = 200'000;
  const std::size_t copies = separate ? static_cast<std::size_t>(threads) : 1;
  std::vector<std::vector<std::unique_ptr<handoff::actor<std::int64_t>>>> actor_sets;
  std::vector<std::unique_ptr<handoff::timer_service>> services;
  for (std::size_t c = 0; c < copies; ++c) {
    actor_sets.push_back(make_actors(targets));
    services.push_back(std::make_unique<handoff::timer_service>());
  }
  const auto spread_ms = spread(pending_count);
  std::vector<std::vector<handoff::timer>> rings(static_cast<std::size_t>(threads));
  auto run = [&](int t, long n) {
    auto& ring = rings[static_cast<std::size_t>(t)];
    const std::size_t copy = separate ? static_cast<std::size_t>(t) : 0;
    const auto& actors = actor_sets[copy];
    handoff::timer_service& timers = *services[copy];
    const std::size_t base = targets / static_cast<std::size_t>(threads) * static_cast<std::size_t>(t);
    const std::size_t span = targets / static_cast<std::size_t>(threads);
    std::size_t next = 0;
    std::size_t slot = 0;
    for (long i = 0; i < n; ++i) {
      handoff::timer& h = ring[slot];
      h.cancel();  // the timer of ring.size() schedules ago
      h = timers.after(spread_ms[slot % spread_ms.size()], *actors[base + next],
                       [m = msg16{i, 7}](std::int64_t& s) { s += m.a + m.b; });
      next = next + 7919 >= span ? (next + 7919) % span : next + 7919;
      slot = slot + 1 == ring.size() ? 0 : slot + 1;
    }
  };
  auto in_threads = [&](long n) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(run, t, n);
    run(0, n);
    for (std::thread& th : pool) th.join();
  };
  for (auto& ring : rings) ring.resize(static_cast<std::size_t>(pending_count / threads));
  in_threads(static_cast<long>(targets));  // every ring full: the steady state
  for (auto _ : state) in_threads(pairs / threads);
  state.counters["ns_per_pair"] = benchmark::Counter(static_cast<double>(state.iterations()) * pairs * 1e-9,
                                                     benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  std::size_t pending = 0;
  for (const auto& timers : services) pending += timers->stats().pending;
  state.counters["pending"] = static_cast<double>(pending);
}

// cancel() of a timer aimed at an actor whose handler runs for 10 ms, the timer's own
// delivery queued behind that handler; meanwhile timers aimed at other actors come due
// every millisecond. The service sends its batches to a pool of 2 workers (start(pool)),
// and the actors run on it: the busy handler holds one worker. Lateness is measured in the
// same run without the busy handler first, then with it.
void handoff_cancel_busy_handler(benchmark::State& state) {
  constexpr int rounds = 60;
  for (auto _ : state) {
    handoff::thread_pool pool{2};
    handoff::timer_service timers;
    timers.start(pool);
    handoff::actor_options on_pool;
    on_pool.executor = pool;
    handoff::actor<int> busy(on_pool, 0);
    std::vector<std::unique_ptr<handoff::actor<std::vector<std::int64_t>>>> others;
    for (int i = 0; i < 4; ++i) others.push_back(std::make_unique<handoff::actor<std::vector<std::int64_t>>>(on_pool));
    // Timers every millisecond to the other actors for `ms`, each recording its lateness.
    auto stream = [&](int ms) {
      std::vector<handoff::timer> v;
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < ms; ++i) {
        const auto at = start + 1ms * (i + 1) + std::chrono::microseconds(137 * i % 1000);
        const std::int64_t d = std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count();
        v.push_back(
            timers.at(at, *others[static_cast<std::size_t>(i) % others.size()], [d](std::vector<std::int64_t>& late) {
              late.push_back(std::chrono::steady_clock::now().time_since_epoch().count() - d);
            }));
      }
      return v;
    };
    auto collect = [&] {
      std::vector<std::int64_t> all;
      for (auto& a : others) {
        auto v = a->ask([](std::vector<std::int64_t>& x) { return std::exchange(x, {}); }).get();
        all.insert(all.end(), v.begin(), v.end());
      }
      std::sort(all.begin(), all.end());
      return all;
    };
    const std::size_t n = rounds * 12;
    auto idle = stream(static_cast<int>(n));
    std::this_thread::sleep_for(1ms * static_cast<int>(n) + 20ms);
    const auto late_idle = collect();
    auto busy_stream = stream(static_cast<int>(n));
    std::vector<double> cancel_us;
    std::atomic<int> running{0};
    for (int r = 0; r < rounds; ++r) {
      auto spin = timers.after(0ms, busy, [&running](int&) {
        running.fetch_add(1);
        const auto until = std::chrono::steady_clock::now() + 10ms;
        while (std::chrono::steady_clock::now() < until) {
        }
      });
      while (running.load() != r + 1) std::this_thread::yield();
      auto queued = timers.after(0ms, busy, [](int& x) { ++x; });  // fires, waits behind the handler
      std::this_thread::sleep_for(3ms);
      const auto t0 = std::chrono::steady_clock::now();
      queued.cancel();
      cancel_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      std::this_thread::sleep_for(9ms);
    }
    std::this_thread::sleep_for(30ms);
    const auto late_busy = collect();
    timers.stop();
    if (late_idle.size() != n || late_busy.size() != n) {
      state.SkipWithError("not every timer fired");
      return;
    }
    std::sort(cancel_us.begin(), cancel_us.end());
    state.counters["cancel_p50_us"] = cancel_us[cancel_us.size() / 2];
    state.counters["cancel_p99_us"] = cancel_us[cancel_us.size() * 99 / 100];
    state.counters["late_idle_p99_us"] = static_cast<double>(late_idle[n * 99 / 100]) / 1e3;
    state.counters["late_busy_p99_us"] = static_cast<double>(late_busy[n * 99 / 100]) / 1e3;
    state.counters["late_p99_over_idle_us"] =
        static_cast<double>(late_busy[n * 99 / 100] - late_idle[n * 99 / 100]) / 1e3;
    state.counters["early"] = late_idle.front() < 0 || late_busy.front() < 0 ? 1 : 0;
  }
}

}  // namespace

BENCHMARK(handoff_schedule_cancel)->Name("timer_schedule_cancel/handoff")->UseRealTime();
BENCHMARK(asio_schedule_cancel)->Name("timer_schedule_cancel/asio_steady_timer")->UseRealTime();
BENCHMARK(handoff_rearm)->Name("timer_rearm/handoff")->UseRealTime();
BENCHMARK(asio_rearm)->Name("timer_rearm/asio_steady_timer")->UseRealTime();
BENCHMARK(handoff_schedule_cancel_100k_targets)->Name("timer_schedule_cancel_100k_targets/handoff")->UseRealTime();
BENCHMARK(asio_schedule_cancel)->Name("timer_schedule_cancel_100k_targets/asio_steady_timer")->UseRealTime();
BENCHMARK_CAPTURE(handoff_schedule_cancel_threads, one, 1, false)
    ->Name("timer_schedule_cancel_threads/handoff_1thread")
    ->UseRealTime();
BENCHMARK_CAPTURE(handoff_schedule_cancel_threads, two, 2, false)
    ->Name("timer_schedule_cancel_threads/handoff_2threads")
    ->UseRealTime();
BENCHMARK_CAPTURE(handoff_schedule_cancel_threads, two_separate, 2, true)
    ->Name("timer_schedule_cancel_threads/separate_services_2threads")
    ->UseRealTime();
BENCHMARK(handoff_cancel_busy_handler)->Name("timer_cancel_busy_handler/handoff")->Iterations(1)->UseRealTime();
BENCHMARK(handoff_destroy_actor_1m_pending)
    ->Name("timer_destroy_actor_1m_pending/handoff")
    ->Iterations(1)
    ->UseRealTime();
BENCHMARK(handoff_burst_memory)->Name("timer_burst_memory/handoff")->Iterations(1)->UseRealTime();
BENCHMARK(handoff_1m_pending)->Name("timer_1m_pending/handoff")->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(handoff_fire_latency, idle, 0)->Name("timer_fire_latency/handoff")->Iterations(1)->UseRealTime();
BENCHMARK_CAPTURE(handoff_fire_latency, busy, 2)->Name("timer_fire_latency_busy/handoff")->Iterations(1)->UseRealTime();

BENCHMARK_MAIN();
