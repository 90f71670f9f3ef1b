// handoff::redis::fenced_store and versioned_store against a real redis-server: the
// contracts of include/handoff/redis/fenced_store.hpp and versioned_store.hpp. Fenced
// writes refuse stale tokens (also before the next holder writes, and past 2^53), with
// writer processes whose leases run out; versioned writes win once per version, update()
// retries, with writer processes racing on one record; keys, prefixes and values of any
// bytes never collide; faults are handoff::redis::error within the command timeout.
//
// Each test starts its own server (tests/support/redis_server.hpp) on a free loopback port.
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>

#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "../support/redis_server.hpp"
#include "../support/redis_test_support.hpp"
#include "../support/test_timeout.hpp"

namespace {

using namespace std::chrono_literals;
using handoff::redis::fenced_store;
using handoff::redis::fenced_value;
using handoff::redis::keyed_mutex;
using handoff::redis::options;
using handoff::redis::versioned_store;
using handoff::redis::versioned_value;
using handoff::test::helper_process;
using handoff::test::raw_redis;
using handoff::test::redis_server;
using handoff::test::since;
using handoff::test::test_timeout;
using steady = std::chrono::steady_clock;
using redis_error = handoff::redis::error;

class RedisStore : public testing::Test {
 protected:
  options opts() const {
    options o;
    o.port = server_.port();
    o.connect_timeout = 1s;
    o.command_timeout = 2s;
    o.recheck_interval = 200ms;
    return o;
  }
  std::string port() const { return std::to_string(server_.port()); }
  long long counter(const std::string& k) {
    const std::string v = raw_.string({"GET", k});
    return v.empty() ? 0 : std::stoll(v);
  }

  test_timeout timeout_{90s};
  redis_server server_;
  raw_redis raw_{server_.port()};
};

// --- fenced writes ------------------------------------------------------------------------

TEST_F(RedisStore, AFencedWriteStoresTheValueWithItsTokenAndAnUnwrittenKeyReadsAsTokenZero) {
  fenced_store store(opts());
  const fenced_value none = store.read("order:9");
  EXPECT_EQ(none.token, 0U);
  EXPECT_EQ(none.value, "");
  EXPECT_TRUE(store.write("order:9", "paid", 7));
  const fenced_value v = store.read("order:9");
  EXPECT_EQ(v.value, "paid");
  EXPECT_EQ(v.token, 7U);
}

TEST_F(RedisStore, AFencedWriteWithALowerTokenIsRefusedAndTheSameOrAHigherOneStores) {
  fenced_store store(opts());
  ASSERT_TRUE(store.write("k", "a", 10));
  EXPECT_FALSE(store.write("k", "stale", 9));
  EXPECT_EQ(store.read("k").value, "a");
  EXPECT_TRUE(store.write("k", "b", 10));  // the same holder writes again
  EXPECT_TRUE(store.write("k", "c", 11));
  EXPECT_FALSE(store.write("k", "stale", 10));
  const fenced_value v = store.read("k");
  EXPECT_EQ(v.value, "c");
  EXPECT_EQ(v.token, 11U);
}

TEST_F(RedisStore, FencingTokensCompareExactlyPast2To53AndUpTo2To64) {
  fenced_store store(opts());
  constexpr std::uint64_t two_53 = std::uint64_t{1} << 53U;
  constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  ASSERT_TRUE(store.write("big", "x", two_53 + 1));
  EXPECT_FALSE(store.write("big", "y", two_53)) << "as doubles, these two are equal";
  EXPECT_FALSE(store.write("big", "y", 99'999'999'999)) << "fewer digits";
  EXPECT_TRUE(store.write("big", "z", max - 1));
  EXPECT_FALSE(store.write("big", "y", max - 2));
  EXPECT_TRUE(store.write("big", "w", max));
  const fenced_value v = store.read("big");
  EXPECT_EQ(v.value, "w");
  EXPECT_EQ(v.token, max);
}

TEST_F(RedisStore, AHolderWhoseLeaseRanOutIsRefusedOnceTheKeyWasGrantedAgainBeforeItsSuccessorWrites) {
  keyed_mutex a(opts());
  keyed_mutex b(opts());
  fenced_store store(opts());
  auto stale = a.lock("order:9", handoff::lease{50ms});
  ASSERT_TRUE(store.write("order:9", "first", stale.token()));
  std::this_thread::sleep_for(150ms);  // paused past its lease
  auto next = b.lock("order:9");       // granted again; writes nothing yet
  ASSERT_GT(next.token(), stale.token());
  EXPECT_FALSE(store.write("order:9", "late", stale.token()));
  EXPECT_EQ(store.read("order:9").value, "first");
  EXPECT_TRUE(store.write("order:9", "second", next.token()));
  EXPECT_FALSE(store.write("order:9", "late", stale.token()));
  EXPECT_EQ(store.read("order:9").value, "second");
}

TEST_F(RedisStore, AHolderWritesAsOftenAsItLikesWhileTheKeyWasNotGrantedAgain) {
  keyed_mutex m(opts());
  fenced_store store(opts());
  auto g = m.lock("order:9", handoff::lease{50ms});
  std::this_thread::sleep_for(100ms);  // the lease ran out, but nobody took the key
  EXPECT_TRUE(store.write("order:9", "1", g.token()));
  EXPECT_TRUE(store.write("order:9", "2", g.token()));
  EXPECT_EQ(store.read("order:9").value, "2");
}

// Writer processes each do read-increment-write under the lock, and every few iterations
// pause past their lease. A late write lands only if no grant came after its own, and then
// nothing else was written since its read: the record counts exactly the accepted writes.
TEST_F(RedisStore, FencedWritersInSeveralProcessesWhoseLeasesRunOutLoseNoAcceptedIncrement) {
  constexpr int processes = 3;
  constexpr int iterations = 24;
  std::vector<std::unique_ptr<helper_process>> helpers;
  for (int i = 0; i < processes; ++i) {
    helpers.push_back(std::make_unique<helper_process>(
        std::vector<std::string>{port(), "200", "order:9", "fenced", std::to_string(iterations), "60", "6", "result"}));
  }
  for (auto& h : helpers) EXPECT_EQ(h->wait(60s), 0);
  fenced_store store(opts());
  const long long accepted = counter("result:accepted");
  const long long refused = counter("result:refused");
  std::printf("fenced writers: %lld accepted, %lld refused\n", accepted, refused);
  EXPECT_EQ(accepted + refused, processes * iterations);
  EXPECT_GT(refused, 0) << "a holder paused past its lease while another waited: refused";
  EXPECT_EQ(store.read("order:9").value, std::to_string(accepted));
}

TEST_F(RedisStore, AFencedWriteWithTokenZeroIsAnInvalidArgument) {
  fenced_store store(opts());
  EXPECT_THROW((void)store.write("k", "v", 0), std::invalid_argument);
}

// --- versioned writes ---------------------------------------------------------------------

TEST_F(RedisStore, CompareAndSetWinsOncePerVersionAndVersionZeroCreatesOnlyAMissingRecord) {
  versioned_store store(opts());
  EXPECT_EQ(store.read("cart:7").version, 0U);
  EXPECT_TRUE(store.compare_and_set("cart:7", 0, "a"));
  EXPECT_FALSE(store.compare_and_set("cart:7", 0, "again")) << "version 0 creates only";
  const versioned_value v1 = store.read("cart:7");
  EXPECT_EQ(v1.value, "a");
  EXPECT_EQ(v1.version, 1U);
  EXPECT_TRUE(store.compare_and_set("cart:7", 1, "ab"));
  EXPECT_FALSE(store.compare_and_set("cart:7", 1, "ax")) << "a second writer from version 1 loses";
  EXPECT_FALSE(store.compare_and_set("cart:7", 5, "ay")) << "a version from the future loses";
  const versioned_value v2 = store.read("cart:7");
  EXPECT_EQ(v2.value, "ab");
  EXPECT_EQ(v2.version, 2U);
}

TEST_F(RedisStore, UpdateRetriesFromTheNewerRecordAfterAConflict) {
  versioned_store store(opts());
  versioned_store other(opts());
  ASSERT_TRUE(store.compare_and_set("n", 0, "10"));
  int calls = 0;
  const auto written = store.update("n", [&](const versioned_value& cur) {
    if (++calls == 1) {
      EXPECT_EQ(cur.value, "10");
      EXPECT_TRUE(other.compare_and_set("n", cur.version, "20"));  // someone else wins first
    } else {
      EXPECT_EQ(cur.value, "20") << "the retry sees the newer record";
    }
    return std::to_string(std::stoi(cur.value) + 1);
  });
  EXPECT_EQ(calls, 2);
  ASSERT_TRUE(written.has_value());
  EXPECT_EQ(written->value, "21");
  EXPECT_EQ(written->version, 3U);
  const versioned_value now = store.read("n");
  EXPECT_EQ(now.value, "21");
  EXPECT_EQ(now.version, 3U);
}

TEST_F(RedisStore, UpdateGivesUpAfterMaxAttemptsConflictsAndWritesNothingOfItsOwn) {
  versioned_store store(opts());
  versioned_store other(opts());
  int calls = 0;
  const auto written = store.update(
      "n",
      [&](const versioned_value& cur) {
        ++calls;
        EXPECT_TRUE(other.compare_and_set("n", cur.version, "theirs"));  // always first
        return std::string("mine");
      },
      3);
  EXPECT_FALSE(written.has_value());
  EXPECT_EQ(calls, 3);
  const versioned_value now = store.read("n");
  EXPECT_EQ(now.value, "theirs");
  EXPECT_EQ(now.version, 3U);
  EXPECT_THROW((void)store.update(
                   "n", [](const versioned_value&) { return std::string(); }, 0),
               std::invalid_argument);
}

TEST_F(RedisStore, AnExceptionFromTheUpdateFunctionPropagatesAndNothingIsWritten) {
  versioned_store store(opts());
  ASSERT_TRUE(store.compare_and_set("n", 0, "1"));
  EXPECT_THROW((void)store.update("n", [](const versioned_value&) -> std::string { throw std::logic_error("no"); }),
               std::logic_error);
  EXPECT_EQ(store.read("n").version, 1U);
}

TEST_F(RedisStore, VersionedWritersInSeveralProcessesLoseNoUpdate) {
  constexpr int processes = 3;
  constexpr int iterations = 100;
  std::vector<std::unique_ptr<helper_process>> helpers;
  for (int i = 0; i < processes; ++i) {
    helpers.push_back(std::make_unique<helper_process>(
        std::vector<std::string>{port(), "200", "stock:1", "versioned", std::to_string(iterations), "result"}));
  }
  for (auto& h : helpers) EXPECT_EQ(h->wait(60s), 0);
  versioned_store store(opts());
  const versioned_value v = store.read("stock:1");
  const long long calls = counter("result:calls");
  std::printf("versioned writers: %d updates, %lld conflicts retried\n", processes * iterations,
              calls - processes * iterations);
  EXPECT_EQ(v.value, std::to_string(processes * iterations));
  EXPECT_EQ(v.version, static_cast<std::uint64_t>(processes * iterations));
  EXPECT_GE(calls, processes * iterations);
}

// --- names, bad input and faults ----------------------------------------------------------

TEST_F(RedisStore, KeysPrefixesAndValuesOfAnyBytesNeverCollide) {
  using namespace std::string_literals;
  const std::vector<std::string> keys = {
      "a b", "a\nb", "a\r\nb", "a*", "a?",   "[ab]",  "a[b]*?", "*", "?", "a\0b"s,    "a\0c"s,     "\xff\xfe\x80",
      "{a}", "a}",   "{",      "}",  "\x01", "\x01(", "(",      "",  "a", "a:fenced", "a}:fenced", "}:fenced"};
  const std::vector<std::string> prefixes = {"p:", "p{", "p*", "p\n", "p\0"s, "", "p:{a}"};
  std::vector<std::unique_ptr<fenced_store>> fenced;
  std::vector<std::unique_ptr<versioned_store>> versioned;
  for (const std::string& p : prefixes) {
    options o = opts();
    o.prefix = p;
    o.pool_size = 1;
    fenced.push_back(std::make_unique<fenced_store>(o));
    versioned.push_back(std::make_unique<versioned_store>(o));
  }
  const auto value_of = [&](std::size_t p, std::size_t k, char kind) {
    return std::string(1, kind) + "\0\n*"s + prefixes[p] + "|" + keys[k];
  };
  for (std::size_t p = 0; p < prefixes.size(); ++p) {
    for (std::size_t k = 0; k < keys.size(); ++k) {
      ASSERT_TRUE(fenced[p]->write(keys[k], value_of(p, k, 'f'), 1 + k));
      ASSERT_TRUE(versioned[p]->compare_and_set(keys[k], 0, value_of(p, k, 'v')));
    }
  }
  for (std::size_t p = 0; p < prefixes.size(); ++p) {
    for (std::size_t k = 0; k < keys.size(); ++k) {
      const fenced_value f = fenced[p]->read(keys[k]);
      EXPECT_EQ(f.value, value_of(p, k, 'f')) << "prefix " << p << " key " << k;
      EXPECT_EQ(f.token, 1 + k);
      const versioned_value v = versioned[p]->read(keys[k]);
      EXPECT_EQ(v.value, value_of(p, k, 'v')) << "prefix " << p << " key " << k;
      EXPECT_EQ(v.version, 1U);
    }
  }
  EXPECT_EQ(raw_.integer({"DBSIZE"}), static_cast<long long>(2 * prefixes.size() * keys.size() + prefixes.size()))
      << "each prefix's values and its format marker";
}

TEST_F(RedisStore, ARecordNameHoldingAnotherTypeIsAnError) {
  fenced_store fenced(opts());
  versioned_store versioned(opts());
  raw_.command({"SET", "handoff:{k}:fenced", "a string"});
  raw_.command({"SET", "handoff:{k}:versioned", "a string"});
  EXPECT_THROW((void)fenced.read("k"), redis_error);
  EXPECT_THROW((void)fenced.write("k", "v", 1), redis_error);
  EXPECT_THROW((void)versioned.read("k"), redis_error);
  EXPECT_THROW((void)versioned.compare_and_set("k", 0, "v"), redis_error);
  raw_.command({"HSET", "handoff:{j}:fenced", "token", "not a number", "value", "v"});
  EXPECT_THROW((void)fenced.read("j"), redis_error);
  EXPECT_THROW((void)fenced.write("j", "v", 1), redis_error);
  // The store still works for other keys.
  EXPECT_TRUE(fenced.write("ok", "v", 1));
}

TEST_F(RedisStore, AStalledServerFailsEachCallWithinTheCommandTimeout) {
  options o = opts();
  o.command_timeout = 300ms;
  o.connect_timeout = 300ms;
  fenced_store fenced(o);
  versioned_store versioned(o);
  (void)fenced.read("warm");  // a pooled connection open
  (void)versioned.read("warm");
  ::kill(server_.pid(), SIGSTOP);
  struct resume_server {
    pid_t pid;
    ~resume_server() { ::kill(pid, SIGCONT); }
  } resume{server_.pid()};
  const auto bound = o.command_timeout + o.connect_timeout + 200ms;  // + scheduling slack
  const auto check = [&](const char* what, auto&& call) {
    const auto t0 = steady::now();
    EXPECT_THROW(call(), redis_error) << what;
    const auto took = since(t0);
    std::printf("stalled server: %s failed after %lld ms (command_timeout 300 ms)\n", what,
                static_cast<long long>(took.count()));
    EXPECT_LE(took, bound) << what;
  };
  check("fenced write", [&] { (void)fenced.write("k", "v", 1); });
  check("fenced read", [&] { (void)fenced.read("k"); });
  check("compare_and_set", [&] { (void)versioned.compare_and_set("k", 0, "v"); });
  check("update", [&] { (void)versioned.update("k", [](const versioned_value&) { return std::string("v"); }); });
}

TEST_F(RedisStore, AKilledServerIsAnErrorAndARestartedOneWorksAgain) {
  fenced_store fenced(opts());
  versioned_store versioned(opts());
  ASSERT_TRUE(fenced.write("k", "v", 1));
  server_.kill();
  EXPECT_THROW((void)fenced.write("k", "v", 2), redis_error);
  EXPECT_THROW((void)versioned.read("k"), redis_error);
  server_.restart();  // empty: the scripts are loaded again on first use
  EXPECT_TRUE(fenced.write("k", "w", 2));
  EXPECT_EQ(fenced.read("k").value, "w");
  EXPECT_TRUE(versioned.compare_and_set("k", 0, "v"));
}

TEST(RedisStoreOptions, AnUnreachableServerOrNonsensicalOptionsFailAtConstruction) {
  options o;
  o.port = 1;  // nothing listens there
  o.connect_timeout = 200ms;
  EXPECT_THROW(fenced_store{o}, redis_error);
  EXPECT_THROW(versioned_store{o}, redis_error);
  o.pool_size = 0;
  EXPECT_THROW(fenced_store{o}, std::invalid_argument);
  EXPECT_THROW(versioned_store{o}, std::invalid_argument);
}

}  // namespace
