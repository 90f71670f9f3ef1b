// The handoff::prometheus consumer of tests/consumers (pkg-config way): compiled and linked
// with the flags of `pkg-config --cflags --libs handoff-prometheus` only, then run by
// run.cmake. An exporter on a free loopback port, and a keyed mutex whose timed-out wait is
// counted in the exporter's registry. Exit code 0 means every answer was right.
#include <handoff/keyed_mutex.hpp>
#include <handoff/prometheus.hpp>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

int main() {
  handoff::prometheus::exporter metrics("127.0.0.1:0");
  handoff::keyed_mutex<> m({.metrics = &metrics.sink()});
  auto held = m.lock("k");
  std::thread([&m] { (void)m.try_lock_for("k", std::chrono::milliseconds(1)); }).join();  // times out
  double timeouts = -1;
  for (const auto& family : metrics.registry().Collect()) {
    if (family.name == "handoff_keyed_lock_timeouts_total" && !family.metric.empty()) {
      timeouts = family.metric[0].counter.value;
    }
  }
  if (metrics.port() <= 0 || timeouts != 1) {
    std::fprintf(stderr, "handoff prometheus consumer: FAILED: port %d, %g timeouts counted\n", metrics.port(),
                 timeouts);
    return 1;
  }
  std::puts("handoff prometheus consumer: ok");
  return 0;
}
