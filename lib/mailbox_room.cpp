// Bounded mailboxes: what a send does when the mailbox is full, and how a sender waiting
// for room sleeps and is woken (see the capacity in actor_options.hpp).
//
// Sleeping senders wait on one of a fixed set of buckets, chosen by the actor's address,
// so that an actor carries no waiting state of its own. The owner wakes a bucket only
// when a release finds the count at the capacity or above (the mailbox was full) and
// someone sleeps there. The two sides are a store-buffer pattern, closed by seq_cst
// fences: the sender counts itself a sleeper, then reads the count; the owner subtracts
// from the count, then reads the sleepers. At least one of them sees the other's write:
// the sender sees room, or the owner sees a sleeper and wakes it (under the bucket's
// mutex, which the sender holds from its check until it sleeps).
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/backoff.hpp"
#include "handoff/metrics.hpp"

namespace handoff::detail {

namespace {

struct alignas(64) room_bucket {
  std::mutex mutex;
  std::condition_variable room;
  // Senders sleeping here. Written under `mutex`; read by owners without it, after the
  // fence in wake_senders() (pairs with the fence in wait_for_room()).
  std::atomic<std::uint32_t> sleepers{0};
};

// 64 buckets: senders blocked at once on different actors rarely share one, and a shared
// one costs only a spurious wake-up (each sleeper re-checks its own actor's count).
constexpr std::size_t room_buckets = 64;

room_bucket& bucket_of(const void* actor) noexcept {
  static std::array<room_bucket, room_buckets> buckets;  // constructed on first use: no order fiasco
  const auto bits = reinterpret_cast<std::uintptr_t>(actor);
  return buckets[((bits >> 6U) ^ (bits >> 12U)) % room_buckets];  // actors are at least 64 bytes apart
}

[[noreturn]] void throw_full(const char* why) { throw mailbox_full(why); }

}  // namespace

actor_base::admission actor_base::admit_bounded(message* built) {
  const actor_options& o = *options_;
  bool ran_queue = false;
  std::int64_t deadline = 0;
  for (unsigned spins = 0;; ++spins) {
    const admission a = core_.try_acquire_below(o.capacity);
    if (a != admission::full) return a;
    if (spins == 0) count_full();  // once per send, however long it waits
    const char* why = nullptr;
    if (tls.top != nullptr) {
      why = "handoff: the actor's mailbox is full (a send from inside a handler never waits for room)";
    } else if (o.on_full == full_policy::fail) {
      why = "handoff: the actor's mailbox is full";
    } else if (!ran_queue) {
      // What this thread owns through its queue may be the very actor that is full.
      ran_queue = true;
      run_before_blocking();
      deadline = o.max_block.count() == 0 ? no_deadline : add_saturating(now_ns(), o.max_block.count());
      continue;
    } else if (spins < spins_before_yield) {
      backoff(spins);  // the owner frees a slot per message it runs: often within microseconds
      continue;
    } else if (wait_for_room(deadline)) {
      continue;
    } else {
      why = "handoff: the actor's mailbox stayed full for max_block";
    }
    if (built != nullptr) discard(built);
    throw_full(why);
  }
}

void actor_base::count_full() noexcept { count_event(nullptr, metric_counter::mailbox_full); }

bool actor_base::wait_for_room(std::int64_t deadline) {
  room_bucket& b = bucket_of(this);
  std::unique_lock<std::mutex> lock(b.mutex);
  b.sleepers.fetch_add(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in wake_senders()
  const std::uint64_t capacity = options_->capacity;
  bool room = true;
  while (core_.pending() >= capacity) {
    if (deadline == no_deadline) {
      b.room.wait(lock);
    } else if (b.room.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline))) ==
               std::cv_status::timeout) {
      room = core_.pending() < capacity;
      break;
    }
  }
  b.sleepers.fetch_sub(1, std::memory_order_relaxed);
  return room;
}

void actor_base::wake_senders() noexcept {
  room_bucket& b = bucket_of(this);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in wait_for_room()
  if (b.sleepers.load(std::memory_order_relaxed) == 0) return;
  // Taking the mutex waits out a sender between its check and its sleep.
  { const std::lock_guard<std::mutex> lock(b.mutex); }
  b.room.notify_all();
}

}  // namespace handoff::detail
