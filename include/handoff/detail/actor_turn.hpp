// The owner's turns that are inlined into every send (see detail/actor_base.hpp): the
// winner's own message run on its thread (run_inline), the release after it
// (finish_inline, try_release_inline), and the run queue's turn for a carried message
// (run_carried_turn). Included by every header that sends, with the batch node it needs.
#pragma once

#include <cstdint>

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/batch_node.hpp"
#include "handoff/detail/clock.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::detail {

template <bool TopLevel, class Run>
inline void actor_base::run_inline(Run& run) noexcept {
  // A time budget counts the owner's own message too.
  const std::int64_t turn_start = options_ != nullptr && options_->max_time.count() != 0 ? now_ns() : 0;
  drain_frame frame{this, 0, TopLevel ? nullptr : tls.top};
  tls.top = &frame;
  try {
    run();
  } catch (...) {
    report_handler_error(frame);
  }
  tls.top = TopLevel ? nullptr : frame.parent;
  if (frame.stop == 0) [[likely]]
    return finish_inline<TopLevel>(turn_start);
  if ((frame.stop & stop_destroyed) == 0) yield_turn(1);
  if (TopLevel && has_queued()) run_queued();
}

inline bool actor_base::run_carried_turn(void (*message)(actor_base*)) noexcept {
  if (options_ != nullptr) [[unlikely]] {
    run_carried_limited(message);
    return true;
  }
  drain_frame frame{this, 0, tls.top};
  tls.top = &frame;
  try {
    message(this);
  } catch (...) {
    report_handler_error(frame);
  }
  tls.top = frame.parent;
  if (frame.stop != 0) [[unlikely]] {
    after_stopped_turn(frame.stop);
    return true;
  }
  std::uint64_t uncounted = 1;
  if (!try_release_inline<true>(uncounted)) drain(uncounted, 0);
  return true;
}

template <bool TopLevel>
inline void actor_base::finish_inline(std::int64_t turn_start) noexcept {
  std::uint64_t uncounted = 1;
  if (!try_release_inline(uncounted)) return TopLevel ? drain_now(uncounted, turn_start) : drain(uncounted, turn_start);
  if (TopLevel && has_queued()) run_queued();
}

template <bool Unbounded>
inline bool actor_base::try_release_inline(std::uint64_t& uncounted) noexcept {
  if (!core_.looks_empty()) return false;
  if (Unbounded ? try_release_unbounded(1) : try_release(1)) [[likely]]
    return true;
  uncounted = 0;  // the failed release subtracted it
  return false;
}

}  // namespace handoff::detail
