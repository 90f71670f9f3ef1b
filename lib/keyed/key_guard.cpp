// key_guard's out-of-line members, those that reach the lock table: unlocking a hold
// and extending its lease.
#include "handoff/key_guard.hpp"

#include <stdexcept>
#include <utility>

#include "handoff/detail/lock_table.hpp"

namespace handoff {

void key_guard::release_held(detail::lock_entry* e) noexcept { table_->release_contended(e); }

void key_guard::unlock_leased() noexcept {
  detail::lock_entry* e = std::exchange(entry_, nullptr);
  if (table_->disarm_lease(e, token_)) return table_->release(e);
  expired_ = true;  // the timer released the key; only our reference is left
  table_->drop_ref(e);
}

bool key_guard::extend(std::chrono::nanoseconds d) {
  if (lease_ == 0) throw std::logic_error("handoff::key_guard::extend: the lock has no lease");
  if (d <= std::chrono::nanoseconds::zero()) {
    throw std::invalid_argument("handoff::key_guard::extend: duration must be positive");
  }
  if (entry_ == nullptr) return false;
  if (!table_->extend_lease(entry_, token_, d.count())) return false;
  lease_ = d.count();
  return true;
}

}  // namespace handoff
