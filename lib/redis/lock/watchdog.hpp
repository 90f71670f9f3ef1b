// The lock client's watchdog (private to lib/redis): renews the lease of every lease-less
// hold, from the background thread (background.hpp), a third into each lease and again a
// third later after a renewal that got no reply (common/renewal.hpp), with the renewal
// extend() sends (lock_commands::renew), until the guard releases the hold or a renewal
// finds it lost.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "commands.hpp"
#include "hold.hpp"

namespace handoff::redis::detail {

class background;

class watchdog {
 public:
  watchdog(lock_commands& commands, background& bg) noexcept : commands_(commands), bg_(bg) {}

  // Thread-safe. Renews h from now on. Wakes the background thread if the first renewal
  // is due before that thread would look on its own.
  void add(std::shared_ptr<hold> h);

  // Background thread only: takes in the holds add() gave, renews those due at `now`, and
  // forgets those released, lost or expired.
  void run(std::int64_t now);
  // Background thread only: the earlier of `next` and the next renewal due.
  [[nodiscard]] std::int64_t next_due(std::int64_t next) const noexcept;
  // After the background thread ended: renewals stop, and the holds end with their lease.
  void clear() noexcept;

 private:
  lock_commands& commands_;
  background& bg_;
  std::mutex mu_;
  std::vector<std::shared_ptr<hold>> incoming_;  // guarded by mu_
  std::vector<std::shared_ptr<hold>> watched_;   // background thread only
};

}  // namespace handoff::redis::detail
