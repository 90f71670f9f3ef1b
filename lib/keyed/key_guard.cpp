// key_guard's out-of-line members, those that reach the lock table: unlocking an entry's
// hold or an inflated thin one, forgetting the holder's thread, and extending a lease.
#include "handoff/key_guard.hpp"

#include <stdexcept>
#include <utility>

#include "handoff/detail/lock_table.hpp"

namespace handoff {

void key_guard::release_held(detail::lock_entry* e) noexcept { table_->release_contended(e); }

void key_guard::release_inflated(detail::thin_record* r) noexcept { table_->release_thin_inflated(r); }

void key_guard::forget_thin() noexcept {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): tagged: a record
  table_->forget_thin_holder(reinterpret_cast<detail::thin_record*>(held_ & ~thin_tag));
}

void key_guard::unlock_leased() noexcept {
  auto* e =
      reinterpret_cast<detail::lock_entry*>(std::exchange(held_, 0));  // NOLINT(performance-no-int-to-ptr): an entry
  if (table_->disarm_lease(e, token_)) return table_->release(e);
  expired_ = true;  // the timer released the key; only our reference is left
  table_->drop_ref(e);
}

bool key_guard::extend(std::chrono::nanoseconds d) {
  if (lease_ == 0) throw std::logic_error("handoff::key_guard::extend: the lock has no lease");
  if (d <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("handoff::key_guard::extend: duration must be positive");
  }
  if (held_ == 0) return false;
  if (!table_->extend_lease(entry(), token_, d.count())) return false;
  lease_ = d.count();
  return true;
}

}  // namespace handoff
