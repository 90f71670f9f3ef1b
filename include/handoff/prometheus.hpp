// handoff::prometheus (optional target handoff::prometheus, built when Debian's
// prometheus-cpp-dev is installed): handoff's metrics (handoff/metrics.hpp) in Prometheus
// form, served over HTTP by prometheus-cpp's exposer.
//
//   handoff::prometheus::exporter metrics("127.0.0.1:9464");      // GET /metrics
//   handoff::set_metrics_sink(&metrics.sink());                   // everything, unlabelled
//   handoff::prometheus::sink rooms(metrics.registry(), {{"mutex", "rooms"}});
//   handoff::keyed_mutex<> room_locks({.metrics = &rooms});       // one mutex, labelled
//   metrics.watch(room_locks, {{"mutex", "rooms"}});              // its keys and waiters
//
// Series (one per label set; counters end in _total, waits are in seconds):
//   handoff_keyed_lock_wait_seconds            histogram  granted waits of keyed locks
//   handoff_keyed_lock_timeouts_total          counter    timed keyed requests that gave up
//   handoff_keyed_lease_expiries_total         counter    keyed leases that ran out
//   handoff_keyed_keys, handoff_keyed_waiters  gauges     read at each scrape (watch())
//   handoff_actor_mailbox_full_total           counter    posts that found a mailbox full
//   handoff_redis_round_trips_total, handoff_redis_reconnects_total,
//   handoff_redis_notifications_lost_total, handoff_redis_rechecks_total   counters
//   handoff_redis_lock_wait_seconds            histogram  granted waits of blocking Redis locks
//   handoff_timer_lateness_seconds             histogram  how late timer services sent due messages
//
// Cost: a counter is one atomic add, a wait one histogram observation (a bucket search and
// atomic adds) in prometheus-cpp; both on handoff's slow paths only (see metrics.hpp).
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/exposer.h>
#include <prometheus/histogram.h>
#include <prometheus/labels.h>
#include <prometheus/registry.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "handoff/metrics.hpp"

namespace handoff::prometheus {

// Wait buckets in seconds: 5 us (a hand-off between running threads) to 5 s (a stuck
// holder), about x4 apart, so that a histogram_quantile() stays within a bucket's factor.
std::vector<double> default_wait_buckets();

// A metrics_sink that records into a prometheus-cpp registry, with `labels` on each of its
// series. Several sinks may share a registry (one per label set: per mutex, per Redis
// client). Thread-safe, as metrics_sink requires. Construction throws what prometheus-cpp
// throws for invalid labels.
class sink final : public handoff::metrics_sink {
 public:
  explicit sink(::prometheus::Registry& registry, const ::prometheus::Labels& labels = {},
                const std::vector<double>& wait_buckets = default_wait_buckets());
  void add(metric_counter c, std::uint64_t n) noexcept override;
  void observe_wait(metric_wait w, std::chrono::nanoseconds waited) noexcept override;

 private:
  std::array<::prometheus::Counter*, metric_counter_count> counters_{};  // owned by the registry
  std::array<::prometheus::Histogram*, metric_wait_count> waits_{};      // owned by the registry
};

// The exporter's HTTP server (civetweb, inside prometheus-cpp). Each server thread serves
// one connection at a time, from its first byte to its last: a client that connects and
// sends nothing, or half a request, holds a thread until request_timeout. A scrape waits
// only if every thread is held that way; with more slow clients than threads at once, a
// scrape may wait up to request_timeout per wave of them.
struct exporter_options {
  // 32: a scraper or two plus 30 silent or slow connections (port scanners, health
  // checks that never finish, a stuck proxy) before a scrape has to queue. An idle thread
  // is a blocked thread and its stack.
  std::size_t threads = 32;
  // How long a thread waits for a connection's request before it closes the connection
  // (civetweb's request_timeout_ms; its own default is 30 s): 5 s, half of Prometheus'
  // default 10 s scrape timeout, so that a scrape queued behind one wave of slow clients
  // is still answered in time.
  std::chrono::milliseconds request_timeout{5000};
};

// A registry served at http://<bind_address>/metrics by prometheus-cpp's exposer (its own
// threads), with one unlabelled sink and gauges read at each scrape.
class exporter {
 public:
  // "127.0.0.1:9464"; port 0 picks a free one (port() says which). Bind to loopback or to
  // the scraper's network only: the metrics show load and, through gauges, what a process
  // holds. Throws std::invalid_argument if options.threads is 0 or
  // options.request_timeout is not positive, and what prometheus-cpp throws when it cannot
  // listen (std::runtime_error). Starts options.threads server threads.
  explicit exporter(const std::string& bind_address, const exporter_options& options = {});
  ~exporter();
  exporter(const exporter&) = delete;
  exporter& operator=(const exporter&) = delete;

  [[nodiscard]] ::prometheus::Registry& registry() noexcept { return *registry_; }
  // The unlabelled sink on registry(): for set_metrics_sink or an object's options.
  [[nodiscard]] handoff::metrics_sink& sink() noexcept { return sink_; }
  // The port the exposer listens on.
  [[nodiscard]] int port() const;

  // Thread-safe. Adds a gauge `name{labels}` whose value read() returns at each scrape, on
  // one of the exposer's threads, one call at a time (keep it cheap; it must not throw).
  // Keep what read() refers to alive as long as this exporter.
  void gauge(const std::string& name, const std::string& help, const ::prometheus::Labels& labels,
             std::function<double()> read);
  // Gauges handoff_keyed_keys and handoff_keyed_waiters of a keyed mutex (its size() and
  // waiting(), each shard's lock taken in turn at a scrape).
  template <class KeyedMutex>
  void watch(const KeyedMutex& m, const ::prometheus::Labels& labels = {}) {
    gauge("handoff_keyed_keys", "Keys with live lock state (held, waited for, or with an expired guard)", labels,
          [&m] { return static_cast<double>(m.size()); });
    gauge("handoff_keyed_waiters", "Lock requests queued behind a holder (approximate)", labels,
          [&m] { return static_cast<double>(m.waiting()); });
  }

 private:
  class scrape_gauges;
  std::shared_ptr<::prometheus::Registry> registry_;
  std::shared_ptr<scrape_gauges> gauges_;
  handoff::prometheus::sink sink_;
  std::unique_ptr<::prometheus::Exposer> exposer_;  // last: serves the members above
};

}  // namespace handoff::prometheus
