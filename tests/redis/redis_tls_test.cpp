// handoff::redis over TLS, against redis-server --tls-port with certificates that
// make_test_certs.sh writes once per test binary (a CA, a server certificate, a client one,
// an expired one, and a second CA): locks, stores and actors work over TLS, and every
// certificate or protocol mismatch fails with a clear error within connect_timeout.
#include <handoff/redis/actor_system.hpp>
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <spawn.h>
#include <sys/wait.h>

#include "../../lib/redis/common/router.hpp"
#include "../support/redis_cluster.hpp"
#include "../support/redis_server.hpp"
#include "../support/redis_test_support.hpp"

#ifndef HANDOFF_MAKE_TEST_CERTS
#error "HANDOFF_MAKE_TEST_CERTS: the path of make_test_certs.sh (tests/CMakeLists.txt)"
#endif

namespace {

using namespace std::chrono_literals;
namespace hr = handoff::redis;
using handoff::test::redis_server;
using handoff::test::since;
using handoff::test::steady;

// The certificates, written once for the whole binary into a fresh directory.
class certificates : public testing::Environment {
 public:
  void SetUp() override {
    std::string templ = (std::filesystem::temp_directory_path() / "handoff-certs-XXXXXX").string();
    if (::mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = templ;
    std::vector<std::string> args{"bash", HANDOFF_MAKE_TEST_CERTS, dir_};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawnp(&pid, "bash", nullptr, nullptr, argv.data(), environ) != 0) {
      throw std::runtime_error("cannot run make_test_certs.sh");
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) throw std::runtime_error("make_test_certs.sh failed");
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  static std::string file(const std::string& name) { return dir_ + "/" + name; }

 private:
  static inline std::string dir_;
};

[[maybe_unused]] testing::Environment* const certs = testing::AddGlobalTestEnvironment(new certificates);

// A redis-server with a plain port and a TLS port, presenting `cert` (server or expired);
// with clients_need_certs, a client must present a certificate the test CA signed.
struct tls_server {
  explicit tls_server(const std::string& cert = "server", bool clients_need_certs = false)
      : tls_port(redis_server::free_port()),
        server({"--tls-port", std::to_string(tls_port), "--tls-cert-file", certificates::file(cert + ".crt"),
                "--tls-key-file", certificates::file(cert + ".key"), "--tls-ca-cert-file", certificates::file("ca.crt"),
                "--tls-auth-clients", clients_need_certs ? "yes" : "no"}) {}

  // Options for its TLS port, trusting the test CA.
  [[nodiscard]] hr::options tls() const {
    hr::options o;
    o.port = tls_port;
    o.connect_timeout = 1s;
    o.command_timeout = 2s;
    o.tls.enabled = true;
    o.tls.ca_file = certificates::file("ca.crt");
    return o;
  }

  int tls_port;
  redis_server server;
};

// Runs make() and returns the redis::error it throws, or fails the test.
template <class F>
std::string error_of(F make) {
  try {
    make();
  } catch (const hr::error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no handoff::redis::error";
  return {};
}

TEST(RedisTls, LocksKeepMutualExclusionAndIncreasingTokensOverTls) {
  tls_server s;
  hr::keyed_mutex m(s.tls());
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false};
  std::atomic<std::uint64_t> last_token{0};
  std::atomic<bool> tokens_rose{true};
  std::vector<std::jthread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) {
        auto g = m.lock("player:42");
        if (inside.fetch_add(1) != 0) overlap = true;
        const std::uint64_t before = last_token.exchange(g.token());
        if (g.token() <= before) tokens_rose = false;
        inside.fetch_sub(1);
      }
    });
  }
  threads.clear();
  EXPECT_FALSE(overlap.load());
  EXPECT_TRUE(tokens_rose.load());
  EXPECT_EQ(m.stats().reconnects, 0U);
}

TEST(RedisTls, FencedAndVersionedStoresWorkOverTls) {
  tls_server s;
  hr::fenced_store fenced(s.tls());
  EXPECT_TRUE(fenced.write("k", "v1", 5));
  EXPECT_FALSE(fenced.write("k", "stale", 4));
  EXPECT_EQ(fenced.read("k").value, "v1");
  hr::versioned_store versioned(s.tls());
  EXPECT_TRUE(versioned.compare_and_set("r", 0, "first"));
  EXPECT_FALSE(versioned.compare_and_set("r", 0, "again"));
  EXPECT_EQ(versioned.read("r").version, 1U);
}

TEST(RedisTls, ActorsRunEveryMessageOnceInOrderOverTls) {
  tls_server s;
  hr::actor_options a;
  a.lease = handoff::lease{300ms};
  a.sweep_interval = 20ms;
  hr::actor_system actors(s.tls(), a);
  std::vector<std::string> seen;
  actors.on("room:", [&](hr::delivery& d) { seen.emplace_back(d.body()); });
  for (int i = 0; i < 20; ++i) (void)actors.post("room:1", std::to_string(i));
  ASSERT_EQ(seen.size(), 20U);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(seen[static_cast<std::size_t>(i)], std::to_string(i));
  EXPECT_EQ(actors.pending("room:1"), 0U);
}

TEST(RedisTls, ATlsClusterServesLocksStoresAndActorsOnEveryPrimaryOverTls) {
  // Three primaries with a plain port (the fixture's) and a TLS port each, their cluster
  // bus over TLS: a TLS client reads the TLS ports in CLUSTER SLOTS.
  const std::vector<std::string> tls_files{"--tls-cert-file",        certificates::file("server.crt"),
                                           "--tls-key-file",         certificates::file("server.key"),
                                           "--tls-client-cert-file", certificates::file("client.crt"),
                                           "--tls-client-key-file",  certificates::file("client.key"),
                                           "--tls-ca-cert-file",     certificates::file("ca.crt"),
                                           "--tls-auth-clients",     "no"};
  handoff::test::redis_cluster cluster(0,
                                       [&] {
                                         const int tls_port = redis_server::free_port();
                                         std::vector<std::string> args{
                                             "--tls-port",        std::to_string(tls_port),
                                             "--cluster-port",    std::to_string(redis_server::free_port()),
                                             "--tls-cluster",     "yes",
                                             "--tls-replication", "yes"};
                                         args.insert(args.end(), tls_files.begin(), tls_files.end());
                                         return handoff::test::redis_cluster::node_setup{args, tls_port};
                                       },
                                       {"--tls", "--cacert", certificates::file("ca.crt")});
  hr::options o;
  o.port = cluster.seed_create_port();
  o.tls.enabled = true;
  o.tls.ca_file = certificates::file("ca.crt");
  hr::keyed_mutex m(o);
  hr::fenced_store fenced(o);
  for (int i = 0; i < 30; ++i) {
    const std::string k = "tls-cluster:" + std::to_string(i);
    std::uint64_t token = 0;
    {
      auto g = m.lock(k);
      token = g.token();
    }
    ASSERT_TRUE(fenced.write(k, "v", token));
    EXPECT_FALSE(fenced.write(k, "stale", token - 1));
    auto again = m.lock(k);
    EXPECT_GT(again.token(), token);
  }
  {
    std::mutex mu;
    std::map<std::string, std::vector<std::string>> ran;  // guarded by mu
    hr::actor_system actors(o);
    actors.on("room:", [&](hr::delivery& d) {
      const std::lock_guard<std::mutex> lock(mu);
      ran[std::string(d.key())].emplace_back(d.body());
    });
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 30; ++k) (void)actors.post("room:" + std::to_string(k), std::to_string(i));
    }
    const std::lock_guard<std::mutex> lock(mu);  // the posts drained on this thread
    ASSERT_EQ(ran.size(), 30U);
    for (const auto& [key, bodies] : ran) EXPECT_EQ(bodies, (std::vector<std::string>{"0", "1", "2"})) << key;
  }
  for (const int port : cluster.primaries()) {
    handoff::test::raw_redis node(port);  // its plain port, which the library never used
    EXPECT_GT(node.integer({"DBSIZE"}), 5) << "the primary at port " << port << " holds few records";
    // CLIENT LIST names the port each client reached (laddr): no script came to the plain one.
    const std::string clients = node.string({"CLIENT", "LIST"});
    const std::string plain = "laddr=127.0.0.1:" + std::to_string(port) + " ";
    std::size_t scripts = 0;
    for (std::size_t at = 0; (at = clients.find("cmd=evalsha", at)) != std::string::npos; ++at, ++scripts) {
      const std::size_t line = clients.rfind('\n', at);
      const std::size_t from = line == std::string::npos ? 0 : line + 1;
      EXPECT_EQ(clients.substr(from, at - from).find(plain), std::string::npos) << "a script came over the plain port";
    }
    EXPECT_GT(scripts, 0U) << "no client of the library on the primary at port " << port;
  }
}

TEST(RedisTls, AnIdleTlsConnectionIsReusedAndOneTheServerDroppedIsReplaced) {
  tls_server s;
  hr::keyed_mutex m(s.tls());
  { auto g = m.lock("k"); }
  std::this_thread::sleep_for(100ms);  // TLS 1.3 session tickets arrive on the idle connection
  { auto g = m.lock("k"); }
  EXPECT_EQ(m.stats().reconnects, 0U) << "a session ticket must not make a connection look stale";
  s.server.restart();
  bool locked = false;
  for (int i = 0; i < 3 && !locked; ++i) {
    try {
      locked = m.lock("k").owns_lock();
    } catch (const hr::error&) {  // at most the connections that were open when it restarted
    }
  }
  EXPECT_TRUE(locked);
  EXPECT_GE(m.stats().reconnects, 1U);
}

TEST(RedisTls, AServerThatRequiresClientCertificatesServesAClientWithOneAndRefusesOneWithout) {
  tls_server s("server", /*clients_need_certs=*/true);
  hr::options with = s.tls();
  with.tls.cert_file = certificates::file("client.crt");
  with.tls.key_file = certificates::file("client.key");
  hr::keyed_mutex m(with);
  EXPECT_TRUE(m.try_lock("k").owns_lock());
  const auto t0 = steady::now();
  const std::string why = error_of([&] { hr::keyed_mutex no_cert(s.tls()); });
  EXPECT_LT(since(t0), 1500ms);
  EXPECT_NE(why.find("certificate"), std::string::npos) << why;  // an alert, or a hint when the server reset
}

TEST(RedisTls, ACertificateAnotherCaSignedFailsVerificationWithinTheConnectTimeout) {
  tls_server s;
  hr::options o = s.tls();
  o.tls.ca_file = certificates::file("other-ca.crt");
  const auto t0 = steady::now();
  const std::string why = error_of([&] { hr::keyed_mutex m(o); });
  EXPECT_LT(since(t0), 1500ms);
  EXPECT_NE(why.find("does not verify"), std::string::npos) << why;
}

TEST(RedisTls, AnExpiredServerCertificateFailsVerification) {
  tls_server s("expired");
  const std::string why = error_of([&] { hr::keyed_mutex m(s.tls()); });
  EXPECT_NE(why.find("certificate has expired"), std::string::npos) << why;
}

TEST(RedisTls, AServerNameTheCertificateDoesNotNameFailsVerificationAndAnIpItNamesPasses) {
  tls_server s;
  hr::options o = s.tls();
  o.tls.server_name = "redis.example.com";
  const std::string why = error_of([&] { hr::keyed_mutex m(o); });
  EXPECT_NE(why.find("does not verify"), std::string::npos) << why;
  EXPECT_NE(why.find("mismatch"), std::string::npos) << why;
  o.tls.server_name = "localhost";  // the certificate names localhost and 127.0.0.1
  hr::keyed_mutex by_name(o);
  o.tls.server_name = "";  // options::host, 127.0.0.1
  hr::keyed_mutex by_ip(o);
  EXPECT_TRUE(by_ip.try_lock("k").owns_lock());
}

TEST(RedisTls, TlsToAPlainTextPortFailsClearlyWithinTheConnectTimeout) {
  tls_server s;
  hr::options o = s.tls();
  o.port = s.server.port();
  const auto t0 = steady::now();
  const std::string why = error_of([&] { hr::keyed_mutex m(o); });
  EXPECT_LT(since(t0), 1500ms);
  EXPECT_NE(why.find("TLS handshake"), std::string::npos) << why;
  EXPECT_NE(why.find("is it a TLS port?"), std::string::npos) << why;
}

TEST(RedisTls, PlainTextToATlsPortFailsClearlyWithinTheConnectTimeout) {
  tls_server s;
  hr::options o = s.tls();
  o.tls = {};
  const auto t0 = steady::now();
  const std::string why = error_of([&] { hr::keyed_mutex m(o); });
  EXPECT_LT(since(t0), 1500ms);
  EXPECT_NE(why.find("a TLS port? see options::tls"), std::string::npos) << why;
}

TEST(RedisTls, NonsensicalTlsOptionsAreRefused) {
  tls_server s;
  hr::options o = s.tls();
  o.unix_socket = s.server.unix_socket();
  EXPECT_THROW(hr::keyed_mutex{o}, std::invalid_argument);
  o = s.tls();
  o.tls.cert_file = certificates::file("client.crt");
  EXPECT_THROW(hr::keyed_mutex{o}, std::invalid_argument);
  o = s.tls();
  o.tls.ca_file = certificates::file("missing.crt");
  const std::string why = error_of([&] { hr::keyed_mutex m(o); });
  EXPECT_NE(why.find("cannot load the CA file"), std::string::npos) << why;
}

}  // namespace
