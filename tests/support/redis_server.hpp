// handoff::test::redis_server: a throwaway redis-server child process on loopback, for the
// tests and benchmarks of handoff::redis. Header-only, POSIX only, no hiredis needed.
//
//   handoff::test::redis_server server;                   // a free port, no persistence
//   handoff::redis::keyed_mutex m({.port = server.port()});
//   server.kill();                                        // SIGKILL: a crashed server
//   server.restart();                                     // same port, empty data set
//
// The server runs `redis-server --port P --bind 127.0.0.1 --save "" --appendonly no
// --unixsocket <dir>/redis.sock --unixsocketperm 700 --dir <dir> [extra args]`, with its
// output in <dir>/redis.log; <dir> is a fresh directory under $TMPDIR (or /tmp), removed by
// the destructor. The process is started with posix_spawnp (no fork without exec, so that
// it also works under ThreadSanitizer). Readiness is a PING over a plain socket: "+PONG",
// or "-NOAUTH" for a server started with --requirepass, means it serves.
//
// Not thread-safe: one thread drives a redis_server (the server itself serves any number of
// clients, threads and processes).
#pragma once

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;  // NOLINT: POSIX, for posix_spawnp

namespace handoff::test {

class redis_server {
 public:
  // Picks a free loopback port and starts the server; returns once it answers PING (at most
  // 5 s). Throws std::runtime_error with the reason (and the tail of the server's log).
  redis_server() : redis_server(std::vector<std::string>{}) {}

  // As above, with more redis-server arguments, e.g. {"--requirepass", "s3cret"}.
  explicit redis_server(std::vector<std::string> extra_args) : extra_args_(std::move(extra_args)) {
    make_dir();
    // A port found free may be taken by a parallel test before the server binds it: try a
    // few ports.
    std::string why;
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = free_port();
      try {
        start();
        return;
      } catch (const std::runtime_error& e) {
        why = e.what();
      }
    }
    remove_dir();
    throw std::runtime_error("redis_server: could not start redis-server: " + why);
  }

  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  // Stops the server (SIGTERM, then SIGKILL after 5 s) and removes its directory.
  ~redis_server() {
    stop();
    remove_dir();
  }

  [[nodiscard]] int port() const noexcept { return port_; }
  [[nodiscard]] const std::string& unix_socket() const noexcept { return socket_path_; }
  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  [[nodiscard]] bool running() const noexcept { return pid_ > 0; }

  // SIGKILL now (a crash: open connections are reset), and waits for the process to end.
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    reap();
  }

  // Starts the server again on the same port (kills it first if it still runs), with an
  // empty data set; returns once it answers PING. Throws std::runtime_error.
  void restart() {
    kill();
    start();
  }

  // A port the kernel reports free on 127.0.0.1 (bind to port 0, read it back, close), at
  // most max_cluster_port: a Cluster node also listens on its port + 10000, and
  // redis-server refuses to start above that (the kernel's ephemeral range reaches 60999).
  // A second port of a server (--tls-port) takes one from here.
  static int free_port() {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      if (const int port = any_free_port(); port <= max_cluster_port) return port;
    }
    throw std::runtime_error("redis_server: no free loopback port at or below " + std::to_string(max_cluster_port));
  }
  static constexpr int max_cluster_port = 55535;

 private:
  static int any_free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) throw std::runtime_error(errno_text("redis_server: socket"));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      const std::string why = errno_text("redis_server: bind/getsockname");
      ::close(fd);
      throw std::runtime_error(why);
    }
    ::close(fd);
    return ntohs(addr.sin_port);
  }

  static std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

  void make_dir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/handoff-redis-XXXXXX";
    // The Unix socket path must fit in sockaddr_un (108 bytes).
    if (templ.size() + 16 > 100) templ = "/tmp/handoff-redis-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error(errno_text("redis_server: mkdtemp"));
    dir_ = buf.data();
    socket_path_ = dir_ + "/redis.sock";
    log_path_ = dir_ + "/redis.log";
  }

  void remove_dir() noexcept {
    if (dir_.empty()) return;
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    dir_.clear();
  }

  std::string log_tail() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    if (s.size() > 800) s = "..." + s.substr(s.size() - 800);
    return s;
  }

  // Spawns the server on port_ and waits (at most 5 s) for it to answer PING.
  void start() {
    std::vector<std::string> args = {"redis-server",
                                     "--port",
                                     std::to_string(port_),
                                     "--bind",
                                     "127.0.0.1",
                                     "--save",
                                     "",
                                     "--appendonly",
                                     "no",
                                     "--unixsocket",
                                     socket_path_,
                                     "--unixsocketperm",
                                     "700",
                                     "--dir",
                                     dir_,
                                     "--daemonize",
                                     "no"};
    args.insert(args.end(), extra_args_.begin(), extra_args_.end());
    std::vector<char*> argv;
    argv.reserve(args.size() + 1);
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    // The server must not keep the tests' own sockets (to other servers) open.
    posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);
#endif
    pid_t pid = 0;
    const int rc = ::posix_spawnp(&pid, "redis-server", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      throw std::runtime_error(std::string("redis_server: posix_spawnp(redis-server): ") + std::strerror(rc));
    }
    pid_ = pid;

    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (true) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("redis-server on port " + std::to_string(port_) +
                                 " exited during start-up: " + log_tail());
      }
      if (answers_ping()) return;
      if (std::chrono::steady_clock::now() > deadline) {
        kill();
        throw std::runtime_error("redis-server on port " + std::to_string(port_) +
                                 " did not answer PING within 5 s: " + log_tail());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // One PING over TCP; true on "+PONG" or "-NOAUTH ..." (the server serves, with a password).
  bool answers_ping() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    timeval tv{};
    tv.tv_sec = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<std::uint16_t>(port_));
    bool ok = false;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
      static constexpr char ping[] = "PING\r\n";
      if (::send(fd, ping, sizeof ping - 1, MSG_NOSIGNAL) == static_cast<ssize_t>(sizeof ping - 1)) {
        char reply[64] = {};
        const ssize_t n = ::recv(fd, reply, sizeof reply - 1, 0);
        if (n > 0) {
          const std::string r(reply, static_cast<std::size_t>(n));
          ok = r.rfind("+PONG", 0) == 0 || r.rfind("-NOAUTH", 0) == 0;
        }
      }
    }
    ::close(fd);
    return ok;
  }

  void stop() noexcept {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ::kill(pid_, SIGKILL);
    reap();
  }

  void reap() noexcept {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

  std::vector<std::string> extra_args_;
  std::string dir_;
  std::string socket_path_;
  std::string log_path_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace handoff::test
