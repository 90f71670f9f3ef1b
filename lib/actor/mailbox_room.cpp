// Bounded mailboxes: what a send does when the mailbox is full, and how a sender waiting
// for room sleeps and is woken (see the capacity in actor_options.hpp).
//
// Waiting senders sleep on one of a fixed set of buckets, chosen by the actor's address,
// so that an actor carries no waiting state of its own. Each links a node of its own (in
// its frame: a condition variable and a `woken` flag) into its bucket's list, ordered by
// the ticket its send took when it first waited, and sleeps while the mailbox is full. A
// sender that finds the mailbox full sleeps at once: spinning takes the drainer's core
// when blocked senders outnumber cores.
//
// Who wakes whom. A release that takes the count from above half the capacity to half or
// below (a crossing) wakes one sender, the oldest waiting for this actor. The woken sender
// holds the wake-up until it is admitted; if the mailbox was then at most half full, it
// wakes the next one (pass_room) once its message is in, because a sender that posts once and returns would
// otherwise leave the others asleep with room to spare, and no later release need cross
// half again (notify_one alone hangs so). Above half full it passes nothing: a crossing
// is still to come, and it wakes the next. So half a mailbox drained wakes one sender,
// and more only while the woken ones leave it at most half full. Waking every sleeper of
// the bucket instead made a send from more threads than cores many times as slow as an
// unbounded one (docs/notebook.md, "Oversubscribed bounded mailboxes: the targeted
// wake-up").
//
// Why no wake-up is lost. A sender sleeps only after reading a full count once its node
// is linked; the owner reads the bucket's count of linked nodes after its crossing
// release. That is a store-buffer pattern closed by seq_cst fences: the first crossing
// after the full read finds the node linked (or it was woken already). A woken sender
// that finds the mailbox full again, or whose max_block passes and then finds it full,
// drops the wake-up and sleeps in its old place (its ticket): the count is full, so a
// crossing is still to come. A woken sender always retries before giving up, so a timeout
// never swallows a wake-up. tests/model/bounded.pml checks all this, and rejects a woken
// sender that never hands on. A batch of k messages waits for room for all k, and k is
// one or at most half the capacity: it sleeps only after reading more than capacity - k
// counted, which is above half, so the same crossing is still to come. (A larger batch
// could sleep while the count rests at half, and no crossing would come.)
//
// A waker sets `woken` and notifies under the bucket's mutex: the node lives in the
// waiting sender's frame, which it leaves only after taking the mutex again.
//
// Why the blocked are served in the order they began to wait. One sender per actor is
// woken at a time: a woken node stays linked until its sender has the mutex back, and a
// wake-up that finds a woken node of the actor linked wakes nobody (that sender hands on,
// or a crossing is still to come, as above). The woken sender keeps the mutex until its
// message is in the mailbox (and it has woken the next, if it hands on). So the next one
// counts and pushes after it. Senders that never slept, one that lost its turn to a full
// mailbox and found room again at once, and one whose max_block passed may get in first
// while there is room.
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <utility>

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/ask_awaiter.hpp"
#include "handoff/detail/test_driver.hpp"
#include "handoff/metrics.hpp"

namespace handoff::detail {

// A send's state across its waits for room.
struct actor_base::room_wait {
  std::uint64_t ticket = 0;  // its place among its bucket's waiters (0: never waited)
  bool holder = false;       // woken: holds the bucket's mutex until its message is in (see above)
};

namespace {

struct room_waiter {
  room_waiter(const void* a, std::uint64_t t) noexcept : actor(a), ticket(t) {}
  const void* actor;
  std::uint64_t ticket;
  room_waiter* prev = nullptr;
  room_waiter* next = nullptr;
  std::condition_variable cv;
  bool woken = false;  // under the bucket's mutex
};

struct alignas(64) room_bucket {
  std::mutex mutex;
  room_waiter* head = nullptr;  // oldest ticket first; under `mutex`
  room_waiter* tail = nullptr;
  std::uint64_t tickets = 0;       // under `mutex`
  std::uint32_t woken_linked = 0;  // linked nodes whose `woken` is set; under `mutex`
  // Nodes linked here. Written under `mutex`; read by owners without it, after the fence
  // in wake_senders() (pairs with the fence in wait_for_room()).
  std::atomic<std::uint32_t> sleepers{0};

  void link(room_waiter& w) noexcept {
    room_waiter* after = tail;  // usually the newest; a holder waiting again goes back in its place
    while (after != nullptr && after->ticket > w.ticket) after = after->prev;
    w.prev = after;
    w.next = after != nullptr ? after->next : head;
    (w.next != nullptr ? w.next->prev : tail) = &w;
    (after != nullptr ? after->next : head) = &w;
    sleepers.store(sleepers.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  void unlink(room_waiter& w) noexcept {
    (w.prev != nullptr ? w.prev->next : head) = w.next;
    (w.next != nullptr ? w.next->prev : tail) = w.prev;
    sleepers.store(sleepers.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  }
  // Under `mutex`: wakes the oldest sender waiting for `actor`, if any, unless one is
  // woken already (it stays linked until it has the mutex back: one woken at a time; a
  // sender that lost a retry may link again ahead of it, in its old place).
  void wake_first(const void* actor) noexcept {
    room_waiter* oldest = nullptr;
    for (room_waiter* w = head; w != nullptr; w = w->next) {
      if (w->actor != actor) continue;
      if (w->woken) return;
      if (oldest == nullptr) oldest = w;
      if (woken_linked == 0) break;  // none woken anywhere: the first is the one
    }
    if (oldest == nullptr) return;
    oldest->woken = true;
    ++woken_linked;
    oldest->cv.notify_one();  // under the mutex: *oldest may be gone once it is released
  }
};

// 64 buckets: senders blocked at once on different actors rarely share one, and sharing
// costs only a longer walk of the list.
constexpr std::size_t room_buckets = 64;

room_bucket& bucket_of(const void* actor) noexcept {
  static std::array<room_bucket, room_buckets> buckets;  // constructed on first use: no order fiasco
  const auto bits = reinterpret_cast<std::uintptr_t>(actor);
  return buckets[((bits >> 6U) ^ (bits >> 12U)) % room_buckets];  // actors are at least 64 bytes apart
}

[[noreturn]] void throw_full(const char* why) { throw mailbox_full(why); }

}  // namespace

actor_base::admission actor_base::admit_bounded(message* built, std::uint64_t k) {
  const admission a = core_.try_acquire_below(options_->capacity, k);
  if (a != admission::full) [[likely]]
    return a;
  return wait_or_throw_full(built, k);
}

actor_base::admission actor_base::wait_or_throw_full(message* built, std::uint64_t k) {
  const actor_options& o = *options_;
  bool ran_queue = false;
  std::int64_t deadline = 0;
  room_wait wait;
  for (bool first = true;; first = false) {
    const admission a = core_.try_acquire_below(o.capacity, k);
    if (wait.holder) {  // woken, its bucket's mutex held since
      wait.holder = false;
      if (a == admission::full) {
        bucket_of(this).mutex.unlock();  // it waits again, in its old place
      } else {
        tls.after_push = this;                              // enqueue() calls pass_room() once the message is in
        tls.room_owed = core_.pending() <= o.capacity / 2;  // read while counted: the actor lives on
        if (a == admission::owner) pass_room();             // no push: its message runs first
        return a;
      }
    } else if (a != admission::full) {
      return a;
    }
    if (first) count_full();  // once per send, however long it waits
    const char* why = nullptr;
    test_driver* const driver = tls.driver;  // a test scheduler: its test waits through it
    if (driver != nullptr ? !driver->at_top_level() : tls.top != nullptr) {
      why = "handoff: the actor's mailbox is full (a send from inside a handler never waits for room)";
    } else if (o.on_full == full_policy::fail) {
      why = "handoff: the actor's mailbox is full";
    } else if (driver != nullptr) [[unlikely]] {
      struct wanted {
        const actor_base* actor;
        std::uint64_t k;
      } const want{this, k};
      auto room = [](const void* w) noexcept {
        const auto& [self, n] = *static_cast<const wanted*>(w);
        return self->core_.pending() + n <= self->options_->capacity;
      };
      if (first) deadline = o.max_block.count() == 0 ? no_deadline : add_saturating(driver->now(), o.max_block.count());
      if (driver->block_until(room, &want, deadline, "post to a full mailbox", true)) continue;
      why = "handoff: the actor's mailbox stayed full for max_block";
    } else if (!ran_queue) {
      // What this thread owns through its queue may be the very actor that is full.
      ran_queue = true;
      run_before_blocking();
      deadline = o.max_block.count() == 0 ? no_deadline : add_saturating(now_ns(), o.max_block.count());
      continue;
    } else if (wait_for_room(wait, deadline, k)) {
      continue;
    } else {
      why = "handoff: the actor's mailbox stayed full for max_block";
    }
    // Never a holder here: a woken sender retries, and gives the wake-up up only on
    // finding the mailbox full (then a crossing is still to come).
    discard_built(built);
    throw_full(why);
  }
}

bool actor_base::try_release_bounded(std::uint64_t ran) noexcept {
  // Read before the release: once it reaches 0, another thread may destroy *this.
  const std::uint64_t capacity = options_->capacity;
  const std::uint64_t before = core_.release(ran);
  // wake_senders() uses only the address of *this, so it is safe after a release.
  if (before > capacity / 2 && before - ran <= capacity / 2) wake_senders();
  return before == ran;
}

void throw_async_ask_full() { throw_full("handoff: the actor's mailbox is full (async_ask never waits for room)"); }

void actor_base::count_full() noexcept { count_event(nullptr, metric_counter::mailbox_full); }

void actor_base::check_batch_fits(const message_batch& b) {
  const actor_options& o = *options_;
  const char* why = nullptr;
  if (b.size > o.capacity) {
    why = "handoff: a batch larger than the mailbox's capacity can never be sent";
  } else if (b.size > 1 && b.size > o.capacity / 2 && o.on_full == full_policy::block) {
    why = "handoff: a batch that waits for room may hold at most half the mailbox's capacity";
  }
  if (why == nullptr) return;
  discard_built(b.node);
  throw std::invalid_argument(why);
}

bool actor_base::wait_for_room(room_wait& wait, std::int64_t deadline, std::uint64_t k) {
  room_bucket& b = bucket_of(this);
  std::unique_lock<std::mutex> lock(b.mutex);
  if (wait.ticket == 0) wait.ticket = ++b.tickets;
  room_waiter node(this, wait.ticket);
  b.link(node);
  std::atomic_thread_fence(std::memory_order_seq_cst);    // pairs with the fence in wake_senders()
  const std::uint64_t capacity = options_->capacity - k;  // the most counted that leaves room for k
  bool room = core_.pending() <= capacity;
  while (!room && !node.woken) {
    if (deadline == no_deadline) {
      node.cv.wait(lock);
    } else if (node.cv.wait_until(lock, std::chrono::steady_clock::time_point(std::chrono::nanoseconds(deadline))) ==
               std::cv_status::timeout) {
      room = core_.pending() <= capacity;
      break;
    }
    room = core_.pending() <= capacity;  // a spurious wake-up finds room too
  }
  b.unlink(node);
  if (node.woken) {
    --b.woken_linked;
    wait.holder = true;
    lock.release();  // held until its message is in (wait_or_throw_full(), pass_room())
    return true;
  }
  return room;
}

void actor_base::after_push() noexcept {
  if (tls.take_over) {
    tls.take_over = false;
    static_cast<actor_base*>(std::exchange(tls.after_push, nullptr))->take_over();
    return;
  }
  pass_room();
}

void actor_base::pass_room() noexcept {
  const void* actor = std::exchange(tls.after_push, nullptr);
  room_bucket& b = bucket_of(actor);
  if (tls.room_owed) b.wake_first(actor);
  b.mutex.unlock();  // locked by wait_or_throw_full()
}

std::size_t actor_base::waiting_senders() const noexcept {
  room_bucket& b = bucket_of(this);
  const std::lock_guard<std::mutex> lock(b.mutex);
  std::size_t n = 0;
  for (const room_waiter* w = b.head; w != nullptr; w = w->next) n += w->actor == this ? 1 : 0;
  return n;
}

void actor_base::wake_senders() noexcept {
  room_bucket& b = bucket_of(this);
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in wait_for_room()
  if (b.sleepers.load(std::memory_order_relaxed) == 0) return;
  const std::lock_guard<std::mutex> lock(b.mutex);
  b.wake_first(this);
}

}  // namespace handoff::detail
