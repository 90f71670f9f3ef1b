// A second process for the cross-process tests of handoff::redis::keyed_mutex
// (redis_keyed_mutex_*_test.cpp drive it with posix_spawn).
//
//   redis_lock_helper <port> <recheck ms> <key> count <iterations> <counter key>
//       Each iteration: lock(key); an unprotected read-modify-write of the Redis string
//       <counter key> (GET, a pause, SET v+1); RPUSH <counter key>:tokens <fencing token>;
//       unlock. A broken exclusion loses increments; the token list must be increasing.
//   redis_lock_helper <port> <recheck ms> <key> append <list key> <id>
//       lock(key) (blocking, FIFO); RPUSH <list key> <id>; unlock.
//   redis_lock_helper <port> <recheck ms> <key> wait
//       lock(key), then sleeps for ever: a waiter (or holder) to be SIGKILLed.
//   redis_lock_helper <port> <recheck ms> <key> fenced <iterations> <lease ms> <stale every> <result key>
//       Each iteration: lock(key, lease); read key's fenced record; every <stale every>th
//       iteration sleep 4 leases (the lease runs out: a stale holder); write the value + 1
//       with the grant's token; INCR <result key>:accepted or <result key>:refused.
//   redis_lock_helper <port> <recheck ms> <key> versioned <iterations> <result key>
//       Each iteration: versioned_store::update(key, value + 1); INCRBY <result key>:calls
//       by the number of times the update function ran (1 + its conflicts).
//
// Exits 0 on success, 1 with a message on stderr on any failure.
#include <handoff/redis/fenced_store.hpp>
#include <handoff/redis/keyed_mutex.hpp>
#include <handoff/redis/versioned_store.hpp>

#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

// One raw hiredis connection for the helper's own reads and writes.
class raw_connection {
 public:
  explicit raw_connection(int port) : ctx_(redisConnect("127.0.0.1", port)) {
    if (ctx_ == nullptr || ctx_->err != 0) throw std::runtime_error("helper: connect failed");
  }
  ~raw_connection() { redisFree(ctx_); }
  raw_connection(const raw_connection&) = delete;
  raw_connection& operator=(const raw_connection&) = delete;

  // Runs a command; returns the reply as a string (integers printed, nil as "").
  std::string command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    auto* r = static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
    if (r == nullptr) throw std::runtime_error("helper: redis I/O error");
    std::string out;
    if (r->type == REDIS_REPLY_ERROR) {
      out = std::string(r->str, r->len);
      freeReplyObject(r);
      throw std::runtime_error("helper: redis error: " + out);
    }
    if (r->type == REDIS_REPLY_INTEGER) out = std::to_string(r->integer);
    if (r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS) out.assign(r->str, r->len);
    freeReplyObject(r);
    return out;
  }

 private:
  redisContext* ctx_;
};

int run(int argc, char** argv) {
  if (argc < 5) throw std::invalid_argument("usage: redis_lock_helper <port> <recheck ms> <key> <mode> ...");
  const int port = std::stoi(argv[1]);
  const std::string key = argv[3];
  const std::string mode = argv[4];
  handoff::redis::options o;
  o.port = port;
  o.recheck_interval = std::chrono::milliseconds(std::stoi(argv[2]));
  o.command_timeout = std::chrono::seconds(5);
  o.watchdog_lease = std::chrono::seconds(10);
  handoff::redis::keyed_mutex m(o);
  raw_connection raw(port);

  if (mode == "count" && argc == 7) {
    const int iterations = std::stoi(argv[5]);
    const std::string counter = argv[6];
    std::minstd_rand rng(std::random_device{}());
    for (int i = 0; i < iterations; ++i) {
      auto g = m.lock(key);
      if (!g.owns_lock()) throw std::runtime_error("helper: lock() returned an empty guard");
      const std::string v = raw.command({"GET", counter});
      // Widen the window in which a second holder would interleave.
      if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 500));
      raw.command({"SET", counter, std::to_string((v.empty() ? 0 : std::stoll(v)) + 1)});
      raw.command({"RPUSH", counter + ":tokens", std::to_string(g.token())});
      g.unlock();
    }
    return 0;
  }
  if (mode == "append" && argc == 7) {
    auto g = m.lock(key);
    if (!g.owns_lock()) throw std::runtime_error("helper: lock() returned an empty guard");
    raw.command({"RPUSH", argv[5], argv[6]});
    g.unlock();
    return 0;
  }
  if (mode == "fenced" && argc == 9) {
    const int iterations = std::stoi(argv[5]);
    const std::chrono::milliseconds lease(std::stoi(argv[6]));
    const int stale_every = std::stoi(argv[7]);
    const std::string result = argv[8];
    handoff::redis::fenced_store store(o);
    for (int i = 0; i < iterations; ++i) {
      auto g = m.lock(key, handoff::lease{lease});
      const handoff::redis::fenced_value v = store.read(key);
      if (i % stale_every == stale_every - 1) std::this_thread::sleep_for(4 * lease);
      const long long next = (v.value.empty() ? 0 : std::stoll(v.value)) + 1;
      const bool stored = store.write(key, std::to_string(next), g.token());
      raw.command({"INCR", result + (stored ? ":accepted" : ":refused")});
    }
    return 0;
  }
  if (mode == "versioned" && argc == 7) {
    const int iterations = std::stoi(argv[5]);
    const std::string result = argv[6];
    handoff::redis::versioned_store store(o);
    for (int i = 0; i < iterations; ++i) {
      int calls = 0;
      const auto written = store.update(
          key,
          [&calls](const handoff::redis::versioned_value& cur) {
            ++calls;
            return std::to_string((cur.value.empty() ? 0 : std::stoll(cur.value)) + 1);
          },
          1000);
      if (!written) throw std::runtime_error("helper: update lost 1000 times in a row");
      raw.command({"INCRBY", result + ":calls", std::to_string(calls)});
    }
    return 0;
  }
  if (mode == "wait" && argc == 5) {
    auto g = m.lock(key);
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  throw std::invalid_argument("redis_lock_helper: unknown mode or wrong arguments: " + mode);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "redis_lock_helper: %s\n", e.what());
    return 1;
  }
}
