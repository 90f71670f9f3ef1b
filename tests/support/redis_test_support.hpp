// Shared by the tests of handoff::redis (tests/redis): the tests' own view of the server
// (raw_redis, plain hiredis, independent of the library) and the second processes of the
// cross-process tests (helper_process runs redis_lock_helper, see that file for its modes).
#pragma once

#include <hiredis/hiredis.h>

#include <chrono>
#include <csignal>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <spawn.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "test_support.hpp"

extern char** environ;  // NOLINT: POSIX, for posix_spawn

namespace handoff::test {

using steady = std::chrono::steady_clock;

inline std::chrono::milliseconds since(steady::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(steady::now() - t0);
}

// A plain hiredis connection: the tests' view of the server, independent of the library.
class raw_redis {
 public:
  explicit raw_redis(int port) : ctx_(redisConnect("127.0.0.1", port)) {
    if (ctx_ == nullptr || ctx_->err != 0) {
      const std::string why = ctx_ != nullptr ? ctx_->errstr : "out of memory";
      if (ctx_ != nullptr) redisFree(ctx_);
      throw std::runtime_error("raw_redis: connect: " + why);
    }
  }
  ~raw_redis() { redisFree(ctx_); }
  raw_redis(const raw_redis&) = delete;
  raw_redis& operator=(const raw_redis&) = delete;

  struct reply_free {
    void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
  };
  using reply = std::unique_ptr<redisReply, reply_free>;

  reply command(const std::vector<std::string>& args) {
    std::vector<const char*> argv;
    std::vector<std::size_t> lens;
    for (const std::string& a : args) {
      argv.push_back(a.data());
      lens.push_back(a.size());
    }
    reply r(static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data())));
    if (r == nullptr) throw std::runtime_error("raw_redis: I/O error: " + std::string(ctx_->errstr));
    if (r->type == REDIS_REPLY_ERROR) throw std::runtime_error("raw_redis: " + std::string(r->str, r->len));
    return r;
  }
  long long integer(const std::vector<std::string>& args) {
    reply r = command(args);
    if (r->type != REDIS_REPLY_INTEGER) throw std::runtime_error("raw_redis: not an integer reply");
    return r->integer;
  }
  std::string string(const std::vector<std::string>& args) {
    reply r = command(args);
    return r->type == REDIS_REPLY_STRING || r->type == REDIS_REPLY_STATUS ? std::string(r->str, r->len) : "";
  }
  std::vector<std::string> strings(const std::vector<std::string>& args) {
    reply r = command(args);
    std::vector<std::string> out;
    for (std::size_t i = 0; i < r->elements; ++i) out.emplace_back(r->element[i]->str, r->element[i]->len);
    return out;
  }

  // For reading pushed replies (a SUBSCRIBE's messages) with redisGetReply.
  redisContext* context() const noexcept { return ctx_; }

  // The key names of the default prefix (keyed_mutex.hpp's overview).
  static std::string lock_key(const std::string& k) { return "handoff:{" + k + "}:lock"; }
  static std::string queue_key(const std::string& k) { return "handoff:{" + k + "}:queue"; }
  static std::string waiters_key(const std::string& k) { return "handoff:{" + k + "}:waiters"; }
  static std::string fence_key(const std::string& k) { return "handoff:{" + k + "}:fence"; }

  long long queue_length(const std::string& k) { return integer({"LLEN", queue_key(k)}); }
  bool locked(const std::string& k) { return integer({"EXISTS", lock_key(k)}) == 1; }
  long long pttl(const std::string& k) { return integer({"PTTL", lock_key(k)}); }

  // Calls of EVALSHA the server has run (INFO commandstats): the library's scripts.
  long long evalsha_calls() { return calls("evalsha"); }

  // How often the server ran `command` (as INFO commandstats names it: "evalsha",
  // "client|reply"), since it started.
  long long calls(const std::string& command) {
    const std::string info = string({"INFO", "commandstats"});
    const std::string field = "cmdstat_" + command + ":calls=";
    const auto at = info.find(field);
    if (at == std::string::npos) return 0;
    return std::stoll(info.substr(at + field.size()));
  }

  // Waits until `k`'s queue holds `n` waiters.
  bool wait_queue_length(const std::string& k, long long n,
                         std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    return eventually([&] { return queue_length(k) == n; }, limit);
  }

 private:
  redisContext* ctx_;
};

// A redis_lock_helper (or another helper) process, spawned with posix_spawn.
class helper_process {
 public:
#ifdef HANDOFF_REDIS_LOCK_HELPER  // the path of redis_lock_helper (tests/CMakeLists.txt); not in redis_bench
  explicit helper_process(std::vector<std::string> args) : helper_process(HANDOFF_REDIS_LOCK_HELPER, std::move(args)) {}
#endif
  // Another helper binary (redis_actor_helper).
  helper_process(const char* binary, std::vector<std::string> args) {
    args.insert(args.begin(), binary);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
#endif
    const int rc = posix_spawn(&pid_, binary, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) throw std::runtime_error(std::string("posix_spawn(") + binary + ") failed: " + std::to_string(rc));
  }
  helper_process(const helper_process&) = delete;
  helper_process& operator=(const helper_process&) = delete;
  ~helper_process() { kill(); }

  // The exit status (0: success), -signal if killed, or -1000 if it did not end in `limit`
  // (it is then killed).
  int wait(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    if (pid_ <= 0) return status_;
    int status = 0;
    if (!eventually([&] { return ::waitpid(pid_, &status, WNOHANG) != 0; }, limit)) {
      kill();
      return status_ = -1000;
    }
    pid_ = -1;
    return status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    status_ = -SIGKILL;
  }
  void signal(int sig) const { ::kill(pid_, sig); }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
};

}  // namespace handoff::test
