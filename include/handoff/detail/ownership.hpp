// The hand-off primitive: an ownership word and a mailbox, and the two protocols that
// drive that storage.
//
//   ownership_storage      the word (`count`: requests accepted and not yet finished) and
//                          the mailbox (requests that found the word owned), with the
//                          owner's steps both protocols share: pop, push_front.
//   lockfree_ownership     the actor's protocol (actor_base): every acquirer and every
//                          release is one atomic read-modify-write, with no lock anywhere.
//   serialized_ownership   the keyed mutex's entry (lock_entry): acquirers and the final
//                          release already hold a lock (the table's shard lock), so they
//                          load and store; only a hand-off between owners, made outside that
//                          lock, subtracts atomically.
//
// The lock-free protocol:
//
//   acquire:  prev = count.fetch_add(1)     prev == 0: the caller owns (the 0 -> 1 hand-off)
//                                           else: it must enqueue its request, after counting
//   consume:  the owner pops requests; pop() may find the mailbox empty while the count
//             says a request is on its way (counted, not linked yet): the owner waits for
//             it or retries later, and never releases early, because
//   release:  count.fetch_sub(X) == X       X = requests the owner consumed (its own
//             included); false: more were counted meanwhile, the owner keeps them.
//
// Counting before enqueueing is what makes it safe: the owner can never consume a request
// that is not counted, so its subtraction can never take away a count that another
// sender's fetch_add still needs to see as pending. Releasing by fetch_sub cannot fail
// spuriously (a weak CAS could, and its failure path would subtract to 0 while the owner
// still consumes).
//
// Bounded use (an actor with a capacity): try_acquire_below() counts only while the count
// is below the capacity, by a CAS loop, so that a full word is never counted at all (a
// fetch_add undone by a fetch_sub would let the owner see a request that never comes and
// wait for it forever). The owner of a bounded word releases after every request, so that
// the count is the room that senders see.
//
// The serialized protocol (every step but uncount under the caller's lock):
//
//   take:     count == 0 -> count = 1      the caller owns; else nothing is counted, so that
//                                          a try-lock can decline to wait
//   join:     count += 1, then enqueue     the word is owned; the request waits its turn
//   release:  count = consumed -> 0        the owner found the mailbox empty under the
//                                          lock: every counted request was consumed
//   hand-off: uncount(X), outside the lock, then give the popped request the ownership
#pragma once

#include <atomic>
#include <cstdint>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/mpsc_queue.hpp"

namespace handoff::detail {

// The word and the mailbox, and the owner's steps that both protocols share.
class ownership_storage {
 public:
  ownership_storage() noexcept = default;
  ownership_storage(const ownership_storage&) = delete;
  ownership_storage& operator=(const ownership_storage&) = delete;
  ownership_storage(ownership_storage&&) = delete;
  ownership_storage& operator=(ownership_storage&&) = delete;
  ~ownership_storage() = default;

  // Owner only: its own request, to be consumed before every queued one (no atomic).
  void push_front(mailbox_node* n) noexcept { mailbox_.push_front(n); }

  // Owner only. The oldest request, or nullptr when none is linked yet (see above).
  [[nodiscard]] mailbox_node* pop() noexcept { return mailbox_.pop(); }
  // Owner only. True when pop() would return nullptr now (two loads, no write).
  [[nodiscard]] bool looks_empty() const noexcept { return mailbox_.looks_empty(); }

  // Requests accepted and not finished; exact only for the owner under the serializing
  // lock, a snapshot otherwise.
  [[nodiscard]] std::uint64_t pending() const noexcept { return count_.load(std::memory_order_relaxed); }

  // Tests: the mailbox, to drive its push in two steps.
  [[nodiscard]] mpsc_queue& mailbox() noexcept { return mailbox_; }

 protected:
  std::atomic<std::uint64_t> count_{0};  // the ownership word: see the overview
  mpsc_queue mailbox_;                   // producers: non-owners that counted; consumer: the owner
};

// The actor's protocol: lock-free acquire and release.
class lockfree_ownership : public ownership_storage {
 public:
  // Counts one request. True: the caller became the owner.
  // acquire; pairs with the release in release(): everything the previous owner
  // wrote is visible to the new one.
  [[nodiscard]] bool try_acquire() noexcept {
    const std::uint64_t before = count_.fetch_add(1, std::memory_order_acquire);
    HANDOFF_ASSERT(before != ~std::uint64_t{0});  // a count that wrapped: a release subtracted too much
    return before == 0;
  }

  enum class admission : unsigned char { owner, queued, full };

  // Counts one request if fewer than `capacity` are counted. owner: the caller became the
  // owner; queued: it must enqueue its request; full: nothing was counted.
  // acquire on success; pairs with the release in release(), as in try_acquire().
  [[nodiscard]] admission try_acquire_below(std::uint64_t capacity) noexcept {
    std::uint64_t before = count_.load(std::memory_order_relaxed);
    do {
      if (before >= capacity) return admission::full;
      // weak: a spurious failure only retries (no release depends on this CAS)
    } while (!count_.compare_exchange_weak(before, before + 1, std::memory_order_acquire, std::memory_order_relaxed));
    return before == 0 ? admission::owner : admission::queued;
  }

  // After losing try_acquire(): hands the (already counted) request to the owner.
  void enqueue(mailbox_node* n) noexcept { mailbox_.push(n); }

  // Owner only. Uncounts `consumed` requests; true if that released the word.
  [[nodiscard]] bool try_release(std::uint64_t consumed) noexcept { return release(consumed) == consumed; }

  // try_release(), returning the count before the subtraction (released: == consumed).
  // release; pairs with the acquire in try_acquire() of the next owner.
  [[nodiscard]] std::uint64_t release(std::uint64_t consumed) noexcept {
    const std::uint64_t before = count_.fetch_sub(consumed, std::memory_order_release);
    HANDOFF_ASSERT(before >= consumed);
    return before;
  }
};

// The keyed entry's protocol: acquire and final release under the caller's lock, which
// serializes every acquirer and that release (relaxed: the lock orders the owners).
class serialized_ownership : public ownership_storage {
 public:
  // Takes a free word (0 -> 1: true), or, when it is owned, counts nothing (false), so that
  // the caller may decide not to wait (a try-lock) before join().
  [[nodiscard]] bool try_take() noexcept {
    if (count_.load(std::memory_order_relaxed) != 0) return false;
    count_.store(1, std::memory_order_relaxed);
    return true;
  }

  // Owned word: counts the caller's request and enqueues it, in that order.
  void join(mailbox_node* n) noexcept {
    [[maybe_unused]] const std::uint64_t before =
        count_.fetch_add(1, std::memory_order_relaxed);  // atomic: uncount() runs outside the lock
    HANDOFF_ASSERT(before >= 1);
    mailbox_.push(n);
  }

  // Owner only, outside the lock, handing ownership to a request it popped (still
  // counted): uncounts what it consumed before; never reaches 0. Atomic: a join() may count
  // under the lock meanwhile. Relaxed: the hand-off itself (the waiter's state) publishes
  // the owner's writes.
  void uncount(std::uint64_t consumed) noexcept {
    [[maybe_unused]] const std::uint64_t before = count_.fetch_sub(consumed, std::memory_order_relaxed);
    HANDOFF_ASSERT(before > consumed);
  }

  // Owner only, with the mailbox found empty under the lock: every counted request was
  // consumed (acquirers count and enqueue under the same lock), so the count is exactly
  // `consumed`: release.
  void release([[maybe_unused]] std::uint64_t consumed) noexcept {
    HANDOFF_ASSERT(count_.load(std::memory_order_relaxed) == consumed);
    count_.store(0, std::memory_order_relaxed);
  }
};

}  // namespace handoff::detail
