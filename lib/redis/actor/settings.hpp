// A handoff::redis::actor_system's options, checked, with the forms the scripts take them
// in, written once (private to lib/redis).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>

#include "../common/lease_ms.hpp"
#include "handoff/redis/actor_system.hpp"

namespace handoff::redis::detail {

struct actor_settings {
  // Throws std::invalid_argument for options out of range.
  explicit actor_settings(actor_options options) : a(checked(std::move(options))) {}

  const actor_options a;
  // The ownership lease in whole milliseconds (common/lease_ms.hpp), and as sent.
  const std::int64_t lease_ms = lease_to_ms(a.lease.duration.count());
  const std::string lease_px = std::to_string(lease_ms);
  const std::string bound = a.capacity == 0 ? "" : std::to_string(a.capacity);  // '': unbounded
  const std::string attempts = std::to_string(a.max_attempts);
  // How long a due delayed message whose mailbox is full waits before it is tried again:
  // a sweep interval (100 ms where only calls of sweep() sweep).
  const std::string delayed_retry_ms = std::to_string(a.sweep_interval.count() > 0 ? a.sweep_interval.count() : 100);

 private:
  static actor_options checked(actor_options o) {
    const auto bad = [](const char* why) {
      throw std::invalid_argument(std::string("handoff::redis::actor_system: ") + why);
    };
    if (o.max_time.count() < 0) bad("max_time must not be negative");
    if (o.max_attempts == 0) bad("max_attempts must be at least 1");
    if (o.batch == 0 || o.batch > actor_options::max_batch) bad("batch must be from 1 to actor_options::max_batch");
    if (o.sweep_interval.count() < 0) bad("sweep_interval must not be negative");
    return o;
  }
};

}  // namespace handoff::redis::detail
