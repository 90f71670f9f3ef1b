// handoff::prometheus (handoff/prometheus.hpp): the sink's families and the exporter.
#include "handoff/prometheus.hpp"

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>
#include <prometheus/metric_type.h>

#include <algorithm>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

namespace handoff::prometheus {

namespace {

struct counter_family {
  const char* name;
  const char* help;
};
// Indexed by metric_counter.
constexpr std::array<counter_family, metric_counter_count> counter_families{{
    {"handoff_keyed_lock_timeouts_total", "Timed keyed lock requests that ended without the key"},
    {"handoff_keyed_lease_expiries_total", "Keyed leases that ran out (the key was taken from its holder)"},
    {"handoff_actor_mailbox_full_total", "Posts that found an actor's bounded mailbox full"},
    {"handoff_redis_round_trips_total", "Commands (or pipelined pairs) sent to Redis"},
    {"handoff_redis_reconnects_total", "Redis connections opened to replace one that broke or was closed"},
    {"handoff_redis_notifications_lost_total", "Drops of the Redis subscriber connection (grants announced meanwhile)"},
    {"handoff_redis_rechecks_total", "Redis waiter attempts repeated because no notification answered in time"},
}};
// Indexed by metric_wait.
constexpr std::array<counter_family, metric_wait_count> wait_families{{
    {"handoff_keyed_lock_wait_seconds", "Time granted keyed lock requests waited in their key's queue"},
    {"handoff_redis_lock_wait_seconds", "Time granted blocking Redis lock requests waited"},
    {"handoff_timer_lateness_seconds", "How late timer services sent due messages (after their deadline)"},
}};

}  // namespace

std::vector<double> default_wait_buckets() { return {5e-6, 2e-5, 1e-4, 5e-4, 2e-3, 1e-2, 5e-2, 0.25, 1, 5}; }

sink::sink(::prometheus::Registry& registry, const ::prometheus::Labels& labels,
           const std::vector<double>& wait_buckets) {
  for (std::size_t i = 0; i < metric_counter_count; ++i) {
    auto& family =
        ::prometheus::BuildCounter().Name(counter_families[i].name).Help(counter_families[i].help).Register(registry);
    counters_[i] = &family.Add(labels);
  }
  for (std::size_t i = 0; i < metric_wait_count; ++i) {
    auto& family =
        ::prometheus::BuildHistogram().Name(wait_families[i].name).Help(wait_families[i].help).Register(registry);
    waits_[i] = &family.Add(labels, wait_buckets);
  }
}

void sink::add(metric_counter c, std::uint64_t n) noexcept {
  counters_[static_cast<std::size_t>(c)]->Increment(static_cast<double>(n));
}

void sink::observe_wait(metric_wait w, std::chrono::nanoseconds waited) noexcept {
  waits_[static_cast<std::size_t>(w)]->Observe(std::chrono::duration<double>(waited).count());
}

// Gauges computed at each scrape, grouped into one family per name.
class exporter::scrape_gauges final : public ::prometheus::Collectable {
 public:
  void add(const std::string& name, const std::string& help, const ::prometheus::Labels& labels,
           std::function<double()> read) {
    const std::lock_guard lock(mu_);
    gauges_.push_back({name, help, labels, std::move(read)});
  }
  std::vector<::prometheus::MetricFamily> Collect() const override {
    const std::lock_guard lock(mu_);
    std::vector<::prometheus::MetricFamily> out;
    for (const entry& g : gauges_) {
      auto family = std::find_if(out.begin(), out.end(), [&](const auto& f) { return f.name == g.name; });
      if (family == out.end()) {
        out.push_back({g.name, g.help, ::prometheus::MetricType::Gauge, {}});
        family = out.end() - 1;
      }
      ::prometheus::ClientMetric m;
      for (const auto& [k, v] : g.labels) m.label.push_back({k, v});
      m.gauge.value = g.read();
      family->metric.push_back(std::move(m));
    }
    return out;
  }

 private:
  struct entry {
    std::string name;
    std::string help;
    ::prometheus::Labels labels;
    std::function<double()> read;
  };
  mutable std::mutex mu_;
  std::vector<entry> gauges_;  // guarded by mu_
};

namespace {

// civetweb's options for exporter_options (civetweb names, values as strings).
std::vector<std::string> server_options(const std::string& bind_address, const exporter_options& options) {
  if (options.threads == 0) throw std::invalid_argument("handoff::prometheus::exporter: threads must be at least 1");
  if (options.request_timeout <= std::chrono::milliseconds::zero()) {
    throw std::invalid_argument("handoff::prometheus::exporter: request_timeout must be positive");
  }
  return {"listening_ports",    bind_address,
          "num_threads",        std::to_string(options.threads),
          "request_timeout_ms", std::to_string(options.request_timeout.count())};
}

}  // namespace

exporter::exporter(const std::string& bind_address, const exporter_options& options)
    : registry_(std::make_shared<::prometheus::Registry>()), gauges_(std::make_shared<scrape_gauges>()),
      sink_(*registry_), exposer_(std::make_unique<::prometheus::Exposer>(server_options(bind_address, options))) {
  exposer_->RegisterCollectable(registry_);
  exposer_->RegisterCollectable(gauges_);
}

exporter::~exporter() = default;

int exporter::port() const { return exposer_->GetListeningPorts().at(0); }

void exporter::gauge(const std::string& name, const std::string& help, const ::prometheus::Labels& labels,
                     std::function<double()> read) {
  gauges_->add(name, help, labels, std::move(read));
}

}  // namespace handoff::prometheus
