// handoff::prometheus against its own HTTP endpoint: an exporter on a free loopback port,
// keyed locking that waits, times out and lets a lease run out, then a scrape with curl
// (the way Prometheus reads it) whose lines must carry the right names, labels and values;
// and slow clients (connected and silent, or half a request sent) that must not keep a
// scrape from being answered.
#include <handoff/actor.hpp>
#include <handoff/keyed_mutex.hpp>
#include <handoff/metrics.hpp>
#include <handoff/prometheus.hpp>
#include <handoff/timer_service.hpp>

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "../support/test_support.hpp"
#include "../support/test_timeout.hpp"

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

// A TCP connection to 127.0.0.1:<port>, closed when destroyed; reads and writes give up
// after `io_timeout`, so a server that does not answer fails the test instead of hanging it.
class client_socket {
 public:
  client_socket(int port, std::chrono::milliseconds io_timeout) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) return;
    const timeval tv{static_cast<time_t>(io_timeout.count() / 1000),
                     static_cast<suseconds_t>((io_timeout.count() % 1000) * 1000)};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
  }
  ~client_socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  client_socket(const client_socket&) = delete;
  client_socket& operator=(const client_socket&) = delete;

  [[nodiscard]] bool connected() const { return fd_ >= 0; }
  [[nodiscard]] bool send(std::string_view data) const {
    return fd_ >= 0 && ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(data.size());
  }
  // The response's status line ("HTTP/1.1 200 OK"), or "" if none came within the timeout.
  [[nodiscard]] std::string status_line() const {
    std::string in;
    std::array<char, 512> buf{};
    while (in.find("\r\n") == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf.data(), buf.size(), 0);
      if (n <= 0) return "";
      in.append(buf.data(), static_cast<std::size_t>(n));
    }
    return in.substr(0, in.find("\r\n"));
  }

 private:
  int fd_;
};

// GET /metrics on a fresh connection that waits at most `limit`: the status line and how
// long it took to come.
std::pair<std::string, std::chrono::milliseconds> timed_scrape(int port, std::chrono::milliseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  const client_socket scraper(port, limit);
  std::string status;
  if (scraper.send("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")) {
    status = scraper.status_line();
  }
  return {status, std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start)};
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
  // The wait is ~50 ms plus a scrape: under a sanitizer on a loaded machine that can pass
  // 0.25 s, so the check is the 5 s bucket (cumulative: it holds every wait up to 5 s).
  EXPECT_EQ(sample(after, R"(handoff_keyed_lock_wait_seconds_bucket{mutex="rooms",le="5"})"), 1.0) << after;
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

TEST_F(PrometheusExporter, ATimerServicesLateSendsAreAHistogramInSeconds) {
  handoff::prometheus::sink ticks(exporter_.registry(), {{"timers", "rooms"}});
  handoff::timer_service timers({.metrics = &ticks});
  handoff::actor<int> room{0};
  const auto due = timers.now() + 1s;
  timers.at(due, room, [](int& n) { ++n; }).detach();
  ASSERT_EQ(timers.run_due(due + 30ms), 1U);  // sent 30 ms late
  const std::string body = scrape(exporter_.port());
  ASSERT_FALSE(body.empty()) << "curl could not scrape the endpoint";
  EXPECT_EQ(sample(body, R"(handoff_timer_lateness_seconds_count{timers="rooms"})"), 1.0) << body;
  EXPECT_DOUBLE_EQ(sample(body, R"(handoff_timer_lateness_seconds_sum{timers="rooms"})").value_or(0), 0.03) << body;
  EXPECT_EQ(sample(body, R"(handoff_timer_lateness_seconds_bucket{timers="rooms",le="0.01"})"), 0.0) << body;
  EXPECT_EQ(sample(body, R"(handoff_timer_lateness_seconds_bucket{timers="rooms",le="0.05"})"), 1.0) << body;
}

TEST_F(PrometheusExporter, EightSilentAndEightHalfSentClientsDoNotDelayAScrapePastTwoSeconds) {
  std::vector<std::unique_ptr<client_socket>> slow;
  for (int i = 0; i < 16; ++i) {
    slow.push_back(std::make_unique<client_socket>(exporter_.port(), 2s));
    ASSERT_TRUE(slow.back()->connected());
    // Every other one sends half a request line and waits; the rest send nothing.
    if (i % 2 == 1) {
      ASSERT_TRUE(slow.back()->send("GET /metr"));
    }
  }
  const auto [status, took] = timed_scrape(exporter_.port(), 2s);
  EXPECT_EQ(status.substr(0, 13), "HTTP/1.1 200 ") << "no answer within 2 s (took " << took.count() << " ms)";
  EXPECT_LT(took, 2s);
}

TEST(PrometheusExporterOptions, ASilentClientHoldsTheOnlyServerThreadForTheRequestTimeoutOnly) {
  const test_timeout timeout{60s};
  handoff::prometheus::exporter exporter("127.0.0.1:0", {.threads = 1, .request_timeout = 300ms});
  const client_socket silent(exporter.port(), 2s);
  ASSERT_TRUE(silent.connected());
  const auto [status, took] = timed_scrape(exporter.port(), 2s);
  EXPECT_EQ(status.substr(0, 13), "HTTP/1.1 200 ") << "no answer within 2 s (took " << took.count() << " ms)";
  EXPECT_GE(took, 200ms) << "the scrape did not wait for the silent client: more than one server thread?";
}

TEST(PrometheusExporterOptions, NoServerThreadsOrANonPositiveRequestTimeoutIsRefused) {
  EXPECT_THROW(handoff::prometheus::exporter("127.0.0.1:0", {.threads = 0}), std::invalid_argument);
  EXPECT_THROW(handoff::prometheus::exporter("127.0.0.1:0", {.request_timeout = 0ms}), std::invalid_argument);
}

}  // namespace
