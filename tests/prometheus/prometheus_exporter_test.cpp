// handoff::prometheus against its own HTTP endpoint: an exporter on a free loopback port,
// keyed locking that waits, times out and lets a lease run out, then a scrape with curl
// (the way Prometheus reads it) whose lines must carry the right names, labels and values.
#include <handoff/keyed_mutex.hpp>
#include <handoff/metrics.hpp>
#include <handoff/prometheus.hpp>

#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "../unit/test_support.hpp"
#include "../unit/test_timeout.hpp"

#ifndef HANDOFF_CURL
#error "HANDOFF_CURL: the path of curl (tests/CMakeLists.txt)"
#endif

namespace {

using namespace std::chrono_literals;
using handoff::test::eventually;
using handoff::test::test_timeout;

// GET http://127.0.0.1:<port>/metrics with curl; the body, or "" if curl failed.
std::string scrape(int port) {
  const std::string cmd =
      std::string(HANDOFF_CURL) + " -sf --max-time 10 http://127.0.0.1:" + std::to_string(port) + "/metrics";
  std::unique_ptr<FILE, int (*)(FILE*)> p(popen(cmd.c_str(), "r"), &pclose);
  if (!p) return "";
  std::string out;
  std::array<char, 4096> buf{};
  while (std::size_t n = std::fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), n);
  return out;
}

// The value of the sample line `series` (name with its labels, as exposed), if present.
std::optional<double> sample(const std::string& body, const std::string& series) {
  std::istringstream in(body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  }
  return std::nullopt;
}

class PrometheusExporter : public testing::Test {
 protected:
  test_timeout timeout_{60s};
  handoff::prometheus::exporter exporter_{"127.0.0.1:0"};
};

TEST_F(PrometheusExporter, AScrapeShowsAKeyedMutexsWaitsTimeoutsLeaseExpiriesAndGauges) {
  handoff::prometheus::sink rooms_sink(exporter_.registry(), {{"mutex", "rooms"}});
  handoff::keyed_mutex<> rooms({.metrics = &rooms_sink});
  exporter_.watch(rooms, {{"mutex", "rooms"}});

  auto held = rooms.lock("room:1");
  std::thread waiter([&] { auto g = rooms.lock("room:1"); });  // a wait of ~50 ms
  ASSERT_TRUE(eventually([&] { return rooms.waiting() == 1; }, 10s));
  const std::string during = scrape(exporter_.port());
  std::this_thread::sleep_for(50ms);
  std::thread([&] { (void)rooms.try_lock_for("room:1", 5ms); }).join();  // a timeout
  held.unlock();
  waiter.join();
  auto leased = rooms.lock("room:2", handoff::lease{5ms});
  ASSERT_TRUE(eventually([&] { return leased.expired(); }, 10s));
  ASSERT_TRUE(eventually([&] { return rooms.stats().lease_expiries == 1; }, 10s));
  leased.unlock();  // the expired guard lets go of the key's state

  ASSERT_FALSE(during.empty()) << "curl could not scrape the endpoint";
  EXPECT_EQ(sample(during, R"(handoff_keyed_keys{mutex="rooms"})"), 1.0) << during;
  EXPECT_EQ(sample(during, R"(handoff_keyed_waiters{mutex="rooms"})"), 1.0) << during;

  const std::string after = scrape(exporter_.port());
  EXPECT_EQ(sample(after, R"(handoff_keyed_lock_timeouts_total{mutex="rooms"})"), 1.0) << after;
  EXPECT_EQ(sample(after, R"(handoff_keyed_lease_expiries_total{mutex="rooms"})"), 1.0) << after;
  EXPECT_EQ(sample(after, R"(handoff_keyed_lock_wait_seconds_count{mutex="rooms"})"), 1.0) << after;
  EXPECT_GE(sample(after, R"(handoff_keyed_lock_wait_seconds_sum{mutex="rooms"})").value_or(0), 0.04) << after;
  EXPECT_EQ(sample(after, R"(handoff_keyed_lock_wait_seconds_bucket{mutex="rooms",le="0.01"})"), 0.0) << after;
  EXPECT_EQ(sample(after, R"(handoff_keyed_lock_wait_seconds_bucket{mutex="rooms",le="0.25"})"), 1.0) << after;
  EXPECT_EQ(sample(after, R"(handoff_keyed_keys{mutex="rooms"})"), 0.0) << after;
  EXPECT_NE(after.find("# TYPE handoff_keyed_lock_wait_seconds histogram"), std::string::npos);
  EXPECT_NE(after.find("# TYPE handoff_keyed_keys gauge"), std::string::npos);
}

TEST_F(PrometheusExporter, TheUnlabelledSinkServesProcessWideEventsUnderTheirCounterNames) {
  handoff::set_metrics_sink(&exporter_.sink());
  handoff::detail::count_event(nullptr, handoff::metric_counter::mailbox_full, 3);
  {
    handoff::keyed_mutex<> plain;  // no sink of its own: reports to the process-wide one
    auto g = plain.lock("k");
    std::thread([&] { (void)plain.try_lock_for("k", 1ms); }).join();
  }
  handoff::set_metrics_sink(nullptr);
  const std::string body = scrape(exporter_.port());
  ASSERT_FALSE(body.empty()) << "curl could not scrape the endpoint";
  EXPECT_EQ(sample(body, "handoff_actor_mailbox_full_total"), 3.0) << body;
  EXPECT_EQ(sample(body, "handoff_keyed_lock_timeouts_total"), 1.0) << body;
  EXPECT_EQ(sample(body, "handoff_redis_round_trips_total"), 0.0) << body;
}

}  // namespace
