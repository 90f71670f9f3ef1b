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

#include "async_waiters.hpp"
#include "watchdog.hpp"

namespace handoff::redis::detail {

background::background(const options& o, client_counters& counters)
    : o_(o), counters_(counters), conn_(std::make_unique<connection>(o, &counters)) {
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

connection& background::conn() {
  if (conn_ == nullptr || conn_->stale()) {
    const bool replaces = conn_ != nullptr;  // a reconnect, for the statistics
    conn_.reset();
    conn_ = std::make_unique<connection>(o_, &counters_);
    if (replaces) counters_.reconnect();
  }
  return *conn_;
}

void background::run(async_waiters& async, watchdog& dog) noexcept {
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
    const int sub = async.subscriber_fd();
    pollfd fds[2] = {{.fd = wake_fd_, .events = POLLIN, .revents = 0}, {.fd = sub, .events = POLLIN, .revents = 0}};
    const int timeout_ms = static_cast<int>(std::max<std::int64_t>(0, (next - now + ms_ns - 1) / ms_ns));
    if (poll(fds, 2, timeout_ms) < 0) continue;  // EINTR
    if ((fds[0].revents & POLLIN) != 0) {
      std::uint64_t v = 0;
      [[maybe_unused]] const auto n = read(wake_fd_, &v, sizeof v);
    }
    if (sub >= 0 && fds[1].revents != 0) async.read_subscriber();
  }
}

}  // namespace handoff::redis::detail
