// The lock protocol of one request (private to lib/redis), written once and driven by
// both waits: the blocking lock() (client.cpp), which waits for its grant in BLPOP on a
// connection of its own, and an async request (async_waiters.cpp), which the background
// thread re-checks and a message on the subscriber wakes. The step decides; its driver
// sends the commands (commands.hpp) and waits:
//
//   start(now)          once: wait (queue while the key is taken) if the deadline is
//                       ahead, else one try, which never queues
//   begin_attempt(now)  before each attempt: its send time, from which a grant's lease
//                       clock starts (lease_clock.hpp); the attempt queues if waiting()
//   on_attempt(r)       the attempt's reply: the grant, or the heartbeat it recorded on
//                       the server and the holder's remaining lease
//   on_grant(notice)    a grant a release pushed or announced: ours only if it answers the
//                       last attempt (a grant that answers an older one has ended since,
//                       or that attempt would have found it)
//   next_check(now)     with no news, when to re-check (which is also the heartbeat): a
//                       recheck_interval on, sooner if the holder's lease ends, at the latest
//                       at the deadline
//   expired(now)        the deadline has passed: give up, cancelling if queued() (the
//                       cancel passes on a grant that came meanwhile)
//
// Owned by its driver's thread; never blocks, allocates only in the constructor.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "../common/names.hpp"
#include "commands.hpp"
#include "handoff/detail/assert.hpp"
#include "lease_clock.hpp"

namespace handoff::redis::detail {

// A grant to the request: its fencing token and when its lease ends.
struct grant {
  std::uint64_t fence;
  grant_clock clock;
};

class acquire_step {
 public:
  // `clock` must outlive the step. `names` and `id` from lock_commands::names and request_id.
  acquire_step(const lease_clock& clock, key_names names, std::string id, std::int64_t lease_ns, std::int64_t deadline)
      : clock_(clock), names_(std::move(names)), id_(std::move(id)), lease_ns_(lease_ns), deadline_(deadline) {}

  // Whether a request with `deadline` waits, decided at `now`: a deadline already past is
  // one try (handoff/detail/clock.hpp).
  [[nodiscard]] static bool waits(std::int64_t deadline, std::int64_t now) noexcept { return deadline > now; }

  void start(std::int64_t now) noexcept { wait_ = waits(deadline_, now); }

  void begin_attempt(std::int64_t now) noexcept {
    HANDOFF_ASSERT(now >= sent_);  // send times only move on
    sent_ = now;
    pttl_ = -1;
  }

  [[nodiscard]] std::optional<grant> on_attempt(const attempt_result& r) noexcept {
    HANDOFF_ASSERT(!r.granted || r.value > 0);  // a grant carries its fencing token
    queued_ = wait_ && !r.granted;
    if (r.granted) return grant{static_cast<std::uint64_t>(r.value), clock_.found(sent_, lease_ns_, r.extra)};
    beat_ = r.extra;
    pttl_ = r.value;
    return std::nullopt;
  }

  [[nodiscard]] std::optional<grant> on_grant(const grant_notice& g) const noexcept {
    if (g.fence == 0 || g.beat != beat_) return std::nullopt;
    return grant{g.fence, clock_.announced(sent_, lease_ns_, g.waited_ms)};
  }

  [[nodiscard]] std::int64_t next_check(std::int64_t now) const noexcept {
    using handoff::detail::add_saturating;
    std::int64_t t = std::min(deadline_, add_saturating(now, ms_to_ns(clock_.recheck_ms)));
    // The holder's lease runs out without a release (so without a notification): look then.
    if (pttl_ >= 0) t = std::min(t, add_saturating(now, ms_to_ns(pttl_ + 1)));
    return t;
  }

  [[nodiscard]] bool expired(std::int64_t now) const noexcept { return now >= deadline_; }

  [[nodiscard]] bool waiting() const noexcept { return wait_; }
  // Whether an attempt put the request in the key's queue: giving up must cancel it.
  [[nodiscard]] bool queued() const noexcept { return queued_; }
  [[nodiscard]] const key_names& names() const noexcept { return names_; }
  [[nodiscard]] const std::string& id() const noexcept { return id_; }
  [[nodiscard]] std::int64_t lease_ns() const noexcept { return lease_ns_; }
  [[nodiscard]] std::int64_t lease_ms() const noexcept { return clock_.lease_ms(lease_ns_); }

 private:
  const lease_clock& clock_;
  key_names names_;
  std::string id_;
  std::int64_t lease_ns_;
  std::int64_t deadline_;
  bool wait_ = false;
  bool queued_ = false;
  std::int64_t sent_ = 0;   // when the last attempt was sent: before the server saw it
  std::int64_t beat_ = -1;  // the server time (ms) of the heartbeat the last attempt recorded
  std::int64_t pttl_ = -1;  // the holder's remaining lease (ms) the last attempt saw; < 0: none
};

}  // namespace handoff::redis::detail
