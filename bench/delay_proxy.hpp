// handoff::bench::delay_proxy: a TCP proxy on loopback that delays each direction by a
// fixed time, so that the Redis benchmarks can run over a network's round trip on one
// machine. (netem in a network namespace does the same in the kernel, but needs
// CAP_NET_ADMIN and the sch_netem module, which containers often lack.)
//
//   handoff::bench::delay_proxy proxy(redis_port, 250us);  // 0.5 ms round trip
//   connect to 127.0.0.1:proxy.port() instead of redis_port
//
// One thread, epoll and a timerfd: the bytes read from one side at time t are written to
// the other side at t + one_way, in order, per direction; a close is passed on once the
// bytes before it are. The thread costs CPU on the machine under test (a read, a write and
// a timer wake-up per message), which a real network does not: measure the round trip
// through it rather than trust the nominal delay, or calibrate it (set_delay). Linux only.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <list>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace handoff::bench {

class delay_proxy {
 public:
  delay_proxy(int target_port, std::chrono::nanoseconds one_way) : target_(target_port), delay_(one_way.count()) {
    listen_ = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    if (listen_ < 0 || ::bind(listen_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_, 128) != 0 ||
        ::getsockname(listen_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      throw std::runtime_error(std::string("delay_proxy: listen: ") + std::strerror(errno));
    }
    port_ = ntohs(a.sin_port);
    epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
    timer_ = ::timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    stop_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (epoll_ < 0 || timer_ < 0 || stop_ < 0) throw std::runtime_error("delay_proxy: epoll/timerfd/eventfd");
    watch(listen_, nullptr, EPOLLIN);
    watch(timer_, &timer_tag_, EPOLLIN);
    watch(stop_, &stop_tag_, EPOLLIN);
    thread_ = std::thread([this] { run(); });
  }
  delay_proxy(const delay_proxy&) = delete;
  delay_proxy& operator=(const delay_proxy&) = delete;
  ~delay_proxy() {
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto n = ::write(stop_, &one, sizeof one);
    thread_.join();
    for (auto& c : conns_) close_conn(c);
    for (int fd : {listen_, epoll_, timer_, stop_}) ::close(fd);
  }

  [[nodiscard]] int port() const noexcept { return port_; }

  // Changes the delay of the bytes read from now on (say, once the proxy's own cost was
  // measured with a delay of 0). Thread-safe.
  void set_delay(std::chrono::nanoseconds one_way) noexcept {
    delay_.store(one_way.count(), std::memory_order_relaxed);
  }

 private:
  struct chunk {
    std::int64_t due;
    std::string bytes;
  };
  // One direction of a connection: read from `from`, written to `to`.
  struct direction {
    int from = -1, to = -1;
    std::deque<chunk> q;
    std::size_t sent = 0;  // of q.front()
    bool eof = false;      // `from` closed: shut `to` down once q is empty
    bool shut = false;
  };
  struct conn;
  struct endpoint {
    conn* c;
    bool client_side;
  };
  struct conn {
    direction up, down;  // client -> server, server -> client
    endpoint client_end{}, server_end{};
    bool dead = false;
  };

  static sockaddr_in loopback(int port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    return a;
  }
  static std::int64_t now() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
  void watch(int fd, void* tag, std::uint32_t events) const {
    epoll_event ev{};
    ev.events = events;
    ev.data.ptr = tag;
    ::epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
  }
  static void no_delay(int fd) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }

  void accept_all() {
    for (;;) {
      const int a = ::accept4(listen_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (a < 0) return;
      const int b = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      const sockaddr_in t = loopback(target_);
      if (b < 0 || ::connect(b, reinterpret_cast<const sockaddr*>(&t), sizeof t) != 0) {  // loopback: at once
        ::close(a);
        if (b >= 0) ::close(b);
        continue;
      }
      ::fcntl(b, F_SETFL, ::fcntl(b, F_GETFL) | O_NONBLOCK);
      no_delay(a);
      no_delay(b);
      conn& c = conns_.emplace_back();
      c.up.from = c.down.to = a;
      c.up.to = c.down.from = b;
      c.client_end = {&c, true};
      c.server_end = {&c, false};
      watch(a, &c.client_end, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
      watch(b, &c.server_end, EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET);
    }
  }

  void read_all(conn& c, direction& d) {
    char buf[65536];
    while (!d.eof) {
      const ssize_t n = ::read(d.from, buf, sizeof buf);
      if (n > 0) {
        d.q.push_back({now() + delay_.load(std::memory_order_relaxed), std::string(buf, static_cast<std::size_t>(n))});
      } else if (n == 0) {
        d.eof = true;
      } else {
        if (errno != EAGAIN && errno != EINTR) c.dead = true;
        return;
      }
    }
  }

  void flush(conn& c, direction& d, std::int64_t t) {
    while (!d.q.empty() && d.q.front().due <= t) {
      const std::string& b = d.q.front().bytes;
      const ssize_t n = ::send(d.to, b.data() + d.sent, b.size() - d.sent, MSG_NOSIGNAL);
      if (n < 0) {
        if (errno != EAGAIN && errno != EINTR) c.dead = true;
        return;  // EPOLLOUT (edge-triggered) comes when it drains
      }
      d.sent += static_cast<std::size_t>(n);
      if (d.sent == b.size()) {
        d.q.pop_front();
        d.sent = 0;
      }
    }
    if (d.eof && d.q.empty() && !d.shut) {
      ::shutdown(d.to, SHUT_WR);
      d.shut = true;
    }
  }

  void close_conn(conn& c) const {
    ::close(c.up.from);
    ::close(c.up.to);
  }

  void run() {
    std::vector<epoll_event> evs(64);
    for (;;) {
      const int n = ::epoll_wait(epoll_, evs.data(), static_cast<int>(evs.size()), -1);
      if (n < 0 && errno != EINTR) return;
      for (int i = 0; i < n; ++i) {
        void* tag = evs[static_cast<std::size_t>(i)].data.ptr;
        if (tag == &stop_tag_) return;
        if (tag == nullptr) {
          accept_all();
        } else if (tag == &timer_tag_) {
          std::uint64_t expirations = 0;
          [[maybe_unused]] const auto r = ::read(timer_, &expirations, sizeof expirations);
        } else {
          auto* e = static_cast<endpoint*>(tag);
          read_all(*e->c, e->client_side ? e->c->up : e->c->down);
        }
      }
      // Write what is due, on every connection (few: the benchmark's clients), and arm the
      // timer for the next due chunk.
      const std::int64_t t = now();
      std::int64_t next = -1;
      for (auto it = conns_.begin(); it != conns_.end();) {
        for (direction* d : {&it->up, &it->down}) {
          flush(*it, *d, t);
          if (!d->q.empty()) next = next < 0 ? d->q.front().due : std::min(next, d->q.front().due);
        }
        if (it->dead || (it->up.shut && it->down.shut)) {
          close_conn(*it);
          it = conns_.erase(it);
        } else {
          ++it;
        }
      }
      itimerspec when{};
      if (next >= 0) {
        next = std::max(next, t + 1);
        when.it_value.tv_sec = static_cast<time_t>(next / 1'000'000'000);
        when.it_value.tv_nsec = static_cast<long>(next % 1'000'000'000);
      }
      ::timerfd_settime(timer_, TFD_TIMER_ABSTIME, &when, nullptr);
    }
  }

  int target_;
  std::atomic<std::int64_t> delay_;  // one way, ns; relaxed: a value on its own
  int listen_ = -1, epoll_ = -1, timer_ = -1, stop_ = -1;
  int port_ = 0;
  char timer_tag_ = 0, stop_tag_ = 0;  // their addresses tag the timer's and stop's events
  std::list<conn> conns_;              // proxy thread only (and the destructor, after it)
  std::thread thread_;                 // last: starts once the rest exists
};

}  // namespace handoff::bench
