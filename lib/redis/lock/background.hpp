// The lock client's background thread (private to lib/redis): its loop, and how other
// threads wake it. It sends on the background lane (router.hpp). Each round it runs the
// async waiters' due attempts (async_waiters.hpp) and the watchdog's due renewals
// (watchdog.hpp), then sleeps until the next of them is due, a wake-up, or a message on a
// subscriber. It
// never runs user code: callbacks go to the callback thread (async_waiters.hpp), so a
// slow callback cannot hold up heartbeats or renewals.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>

#include "../common/connection.hpp"
#include "../common/counters.hpp"
#include "../common/lease_ms.hpp"

namespace handoff::redis::detail {

class async_waiters;
class watchdog;

// The background thread's longest sleep: it picks up new watchdog holds at least this
// often (a hold whose first renewal is due within twice this wakes it, see watchdog::add),
// so no renewal is sent more than this late. A quarter second: a lease-less hold granted by
// a release renews a third into a heartbeat-long lease (1 s in, by default), and must be
// picked up in time without a wake-up of this thread on every hand-off; 4 wake-ups a
// second of an idle client cost nothing measurable.
constexpr std::int64_t max_sleep = 250 * ms_ns;

class background {
 public:
  // Opens the thread's wake-up eventfd. Throws std::system_error without one.
  background();
  ~background();
  background(const background&) = delete;
  background& operator=(const background&) = delete;

  // Starts the thread over the client's async waiters and watchdog; stop() joins it.
  void start(async_waiters& async, watchdog& dog);
  void stop() noexcept;
  // Thread-safe, never blocks: the thread re-reads its inputs and schedule.
  void wake() const noexcept;

 private:
  void run(async_waiters& async, watchdog& dog) noexcept;

  int wake_fd_ = -1;  // eventfd: wake() writes, the thread reads
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace handoff::redis::detail
