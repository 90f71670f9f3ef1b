// Bounded mailboxes: what a send does when the mailbox is full, and how a sender waiting
// for room sleeps and is woken (see the capacity in actor_options.hpp).
//
// Sleeping senders wait on one of a fixed set of buckets, chosen by the actor's address,
// so that an actor carries no waiting state of its own. A sender that finds the mailbox
// full sleeps at once (it does not spin: with more blocked senders than cores, spinning
// takes the drainer's core), and sleeps while the mailbox is full. The owner wakes a
// bucket when a release takes the count from above half the capacity to half or below
// and someone sleeps there: one wake-up per half a mailbox drained, not one per message
// (which woke every sleeper for each freed slot: 7 blocked senders on 2 cores made a send
// 10-15x as slow as an unbounded one).
//
// The two sides are a store-buffer pattern, closed by seq_cst fences: the sender counts
// itself a sleeper, then reads the count; the owner subtracts from the count, then reads
// the sleepers. At least one of them sees the other's write (under the bucket's mutex,
// which the sender holds from its check until it sleeps, so a wake-up cannot fall between
// the two). A sender that read a full count read a value later than every crossing the
// owner had made, so the crossing that sees it is one still to come: the owner drains
// until the count is 0 and crosses half on the way down, unless other senders keep the
// mailbox above half meanwhile, in which case the sleeper waits while they progress
// (blocked senders are not served in FIFO order).
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "handoff/detail/actor_base.hpp"
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
  for (bool first = true;; first = false) {
    const admission a = core_.try_acquire_below(o.capacity);
    if (a != admission::full) return a;
    if (first) count_full();  // once per send, however long it waits
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
