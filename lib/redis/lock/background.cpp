// The lock client's background thread: its loop (see background.hpp).
#include "background.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <system_error>
#include <vector>

#include "async_waiters.hpp"
#include "watchdog.hpp"

namespace handoff::redis::detail {

background::background() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "handoff::redis: eventfd");
}

background::~background() {
  if (wake_fd_ >= 0) close(wake_fd_);
}

void background::start(async_waiters& async, watchdog& dog) {
  thread_ = std::thread([this, &async, &dog] { run(async, dog); });
}

void background::stop() noexcept {
  stop_.store(true);
  wake();
  if (thread_.joinable()) thread_.join();
}

void background::wake() const noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = write(wake_fd_, &one, sizeof one);
}

void background::run(async_waiters& async, watchdog& dog) noexcept {
  std::vector<int> subs;
  std::vector<pollfd> fds;
  for (;;) {
    if (stop_.load()) return;
    std::int64_t now = handoff::detail::now_ns();
    async.reconnect_subscriber(now);
    try {
      async.run(now);
      dog.run(now);
    } catch (const std::exception& e) {  // bad_alloc: keep the thread alive, retry later
      std::fprintf(stderr, "handoff::redis: background thread: %s\n", e.what());
    }

    now = handoff::detail::now_ns();
    const std::int64_t next = dog.next_due(async.next_due(now + max_sleep));
    subs.clear();
    async.subscriber_fds(subs);
    fds.clear();
    fds.push_back({.fd = wake_fd_, .events = POLLIN, .revents = 0});
    for (const int fd : subs) fds.push_back({.fd = fd, .events = POLLIN, .revents = 0});
    const int timeout_ms = static_cast<int>(std::max<std::int64_t>(0, (next - now + ms_ns - 1) / ms_ns));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0) continue;  // EINTR
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t v = 0;
      [[maybe_unused]] const auto n = read(wake_fd_, &v, sizeof v);
    }
    if (std::any_of(fds.begin() + 1, fds.end(), [](const pollfd& p) { return p.revents != 0; })) {
      async.read_subscribers();
    }
  }
}

}  // namespace handoff::redis::detail
