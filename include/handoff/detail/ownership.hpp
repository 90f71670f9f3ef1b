// The actor's hand-off primitive: an ownership word that counts requests, a mailbox for
// the requests that found the word owned, and the protocol that drives them.
//
//   lockfree_ownership     the actor's protocol (actor_base): every acquirer and every
//                          release is one atomic read-modify-write, with no lock anywhere;
//                          a queued request adds the mailbox's exchange.
//
// (The keyed mutex's entry follows the same hand-off rule with a word of its own over the
// same mailbox: lock_word, detail/lock_entry.hpp.)
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
// A batch of k requests is counted by one fetch_add(k) and pushed as one chain (one
// exchange), so no other sender's request comes between them; a batch that wins the word
// goes in front of the mailbox whole, through the owner's end.
//
// Bounded use (an actor with a capacity): try_acquire_below() counts only while the count
// stays within the capacity, by a CAS loop, so that a full word is never counted at all (a
// fetch_add undone by a fetch_sub would let the owner see a request that never comes and
// wait for it forever). The owner of a bounded word releases after every request, so that
// the count is the room that senders see.
//
// The hand-over (an owner without an executor that has spent its budget): the two top
// bits of the word are flags, the rest is the count:
//   OFFER  set by the owner: it offers the drain to the next sender, and goes on meanwhile
//   TAKEN  set by the one sender whose CAS found OFFER without TAKEN: the successor
//   offer:     owner: release what it ran (released: done), else fetch_or(OFFER)
//   send:      prev has OFFER and not TAKEN -> the sender enqueues, then claim(): a CAS
//              that sets TAKEN only while OFFER is set and TAKEN is not; the claimant
//              waits until TAKEN is clear (handed_over()), but only for a bound: then it
//              withdraws, a CAS that clears TAKEN only while it is still set, and returns
//              with its message queued (the owner's handler may be waiting for something
//              the claimant holds: a lock around its post)
//   hand over: the offering owner finds TAKEN before its next message: a CAS that, while
//              TAKEN is still set, uncounts what it ran, clears both flags and leaves one
//              unit for the successor, which counts it as a message it ran; the old
//              owner returns. TAKEN gone (withdrawn): it drains on, the offer still out
//   release:   with an empty mailbox the offering owner releases by CAS: TAKEN -> hand
//              over; count == ran -> 0 (the offer goes with it); else count -= ran
// Both sides change TAKEN only by a CAS that expects it: exactly one of the hand-over and
// the withdrawal wins. So the successor starts only after the old owner's last handler
// (mutual exclusion), neither side waits for the other beyond the bound, and an offer
// nobody takes costs the owner one load every few messages. tests/model/handoff.pml
// checks it.
//
// The mailbox is Vyukov's intrusive queue (detail/mpsc_queue.hpp): a node per request,
// linked by the request itself, so an idle actor holds nothing but the queue's three words.
#pragma once

#include <atomic>
#include <cstdint>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/mpsc_queue.hpp"

namespace handoff::detail {

// The actor's protocol: lock-free acquire and release over the count and the mailbox.
class lockfree_ownership {
 public:
  // The outcome of counting a request: the caller owns the word, or must enqueue() its
  // request, or nothing was counted (a full bounded word).
  // `offered`: queued, and the owner offers the drain (claim() may make the caller its
  // successor, unless another sender claimed it first).
  enum class admission : unsigned char { owner, queued, full, offered };

  // The word's flags (see the overview); the count is the rest.
  static constexpr std::uint64_t offer_bit = std::uint64_t{1} << 63U;
  static constexpr std::uint64_t taken_bit = std::uint64_t{1} << 62U;
  static constexpr std::uint64_t count_mask = taken_bit - 1;

  lockfree_ownership() noexcept = default;
  lockfree_ownership(const lockfree_ownership&) = delete;
  lockfree_ownership& operator=(const lockfree_ownership&) = delete;
  lockfree_ownership(lockfree_ownership&&) = delete;
  lockfree_ownership& operator=(lockfree_ownership&&) = delete;
  ~lockfree_ownership() = default;

  // Counts `k` >= 1 requests (more than one: a batch, see the overview).
  // acquire; pairs with the release in release(): everything the previous owner
  // wrote is visible to the new one.
  [[nodiscard, gnu::always_inline]] admission try_acquire(std::uint64_t k = 1) noexcept {
    const std::uint64_t before = count_.fetch_add(k, std::memory_order_acquire);
    HANDOFF_ASSERT(((before + k) & count_mask) > (before & count_mask));  // wrapped: a release subtracted too much
    if (before == 0) return admission::owner;
    // OFFER (the sign bit: one test); claim() then fails at once if TAKEN is set too.
    return static_cast<std::int64_t>(before) < 0 ? admission::offered : admission::queued;
  }

  // Counts `k` >= 1 requests if at most `capacity` are then counted (all or none).
  // acquire on success; pairs with the release in release(), as in try_acquire().
  [[nodiscard]] admission try_acquire_below(std::uint64_t capacity, std::uint64_t k = 1) noexcept {
    std::uint64_t before = count_.load(std::memory_order_relaxed);
    do {
      if (before + k > capacity) return admission::full;
      // weak: a spurious failure only retries (no release depends on this CAS)
    } while (!count_.compare_exchange_weak(before, before + k, std::memory_order_acquire, std::memory_order_relaxed));
    return before == 0 ? admission::owner : admission::queued;
  }

  // After a `queued` admission: hands the (already counted) request to the owner.
  // Wait-free.
  void enqueue(mailbox_node* n) noexcept { mailbox_.push(n); }

  // After a batch was counted as `queued`: hands its requests, first .. last (linked
  // through `next`), to the owner in one exchange.
  void enqueue_all(mailbox_node* first, mailbox_node* last) noexcept { mailbox_.push_chain(first, last); }

  // Owner only: its own request, to be consumed before every queued one (no atomic).
  void push_front(mailbox_node* n) noexcept { mailbox_.push_front(n); }
  // Owner only: its own batch, first .. last, before every queued request (no atomic):
  // requests counted after the batch and pushed before it still come after it.
  void push_front_all(mailbox_node* first, mailbox_node* last) noexcept { mailbox_.push_front_chain(first, last); }

  // Owner only. The oldest request, or nullptr when none is linked yet (see above).
  [[nodiscard]] mailbox_node* pop() noexcept { return mailbox_.pop(); }

  // Owner only. True when pop() would return nullptr now (two loads, no write).
  [[nodiscard]] bool looks_empty() const noexcept { return mailbox_.looks_empty(); }

  // Owner only. Uncounts `consumed` requests; true if that released the word.
  [[nodiscard]] bool try_release(std::uint64_t consumed) noexcept { return release(consumed) == consumed; }

  // try_release(), returning the count before the subtraction (released: == consumed).
  // release; pairs with the acquire in try_acquire() of the next owner.
  [[nodiscard]] std::uint64_t release(std::uint64_t consumed) noexcept {
    const std::uint64_t before = count_.fetch_sub(consumed, std::memory_order_release);
    HANDOFF_ASSERT(before >= consumed);
    return before;
  }

  // Requests accepted and not finished: a snapshot.
  [[nodiscard]] std::uint64_t pending() const noexcept { return count_.load(std::memory_order_relaxed) & count_mask; }

  // --- the hand-over (see the overview) ---

  // Owner only, still owning after a failed release: offers the drain. relaxed: the offer
  // publishes nothing; the successor's acquire pairs with try_hand_over().
  void offer() noexcept {
    [[maybe_unused]] const std::uint64_t before = count_.fetch_or(offer_bit, std::memory_order_relaxed);
    HANDOFF_ASSERT((before & (offer_bit | taken_bit)) == 0 && before != 0);
  }
  // Offering owner: a successor has claimed the drain (it may still withdraw). relaxed:
  // a hint; try_hand_over() decides.
  [[nodiscard]] bool taken() const noexcept { return (count_.load(std::memory_order_relaxed) & taken_bit) != 0; }
  // Offering owner: if TAKEN is still set, uncounts `consumed`, clears both flags and
  // leaves the successor one unit (then the caller must not touch the actor again);
  // false: no successor (it withdrew), the offer stays out.
  // release; pairs with the acquire in handed_over() and withdraw().
  [[nodiscard]] bool try_hand_over(std::uint64_t consumed) noexcept {
    std::uint64_t w = count_.load(std::memory_order_relaxed);
    while ((w & taken_bit) != 0) {
      HANDOFF_ASSERT((w & offer_bit) != 0 && (w & count_mask) >= consumed);
      // weak: a spurious failure only retries with the word reloaded
      if (count_.compare_exchange_weak(w, w - consumed - offer_bit - taken_bit + 1, std::memory_order_release,
                                       std::memory_order_relaxed)) {
        return true;
      }
    }
    return false;
  }
  // A sender whose admission was `offered`, its request enqueued: true if it is now the
  // claimant (it waits for handed_over(), or withdraw()s). relaxed: the ordering comes
  // from handed_over().
  [[nodiscard]] bool claim() noexcept {
    std::uint64_t w = count_.load(std::memory_order_relaxed);
    while ((w & (offer_bit | taken_bit)) == offer_bit) {
      // weak: a spurious failure only retries
      if (count_.compare_exchange_weak(w, w | taken_bit, std::memory_order_relaxed)) return true;
    }
    return false;
  }
  // The claimant: true once the old owner has handed over; it then owns the word with one
  // unit to uncount. acquire; pairs with the release in try_hand_over(): the old owner's
  // handlers happen-before.
  [[nodiscard]] bool handed_over() const noexcept { return (count_.load(std::memory_order_acquire) & taken_bit) == 0; }
  // The claimant, tired of waiting: clears TAKEN if it is still set (true: withdrawn, its
  // request stays queued for the owner); false: handed over meanwhile, it owns the word.
  // relaxed: a withdrawal publishes nothing; acquire on the reload that finds the
  // hand-over (pairs with try_hand_over()).
  [[nodiscard]] bool withdraw() noexcept {
    std::uint64_t w = count_.load(std::memory_order_acquire);
    while ((w & taken_bit) != 0) {
      // weak: a spurious failure only retries with the word reloaded
      if (count_.compare_exchange_weak(w, w & ~taken_bit, std::memory_order_relaxed, std::memory_order_acquire)) {
        return true;
      }
    }
    return false;
  }

  enum class offered_release : unsigned char { released, handed_over, kept };
  // Offering owner, nothing to pop: releases if only `consumed` is counted (the offer goes
  // with it), hands over if a successor has claimed, else uncounts `consumed` and keeps
  // both the word and the offer. With `may_release` false (a counted request is known to
  // wait) it withdraws the offer instead of keeping it.
  // release; pairs with the acquire in try_acquire(), handed_over() or withdraw().
  [[nodiscard]] offered_release release_offered(std::uint64_t consumed, bool may_release = true) noexcept {
    std::uint64_t w = count_.load(std::memory_order_relaxed);
    for (;;) {
      HANDOFF_ASSERT((w & offer_bit) != 0 && (w & count_mask) >= consumed);
      const bool taken = (w & taken_bit) != 0;
      const bool last = !taken && w == (offer_bit | consumed);
      HANDOFF_ASSERT(may_release || !last);
      const std::uint64_t desired = taken         ? w - consumed - offer_bit - taken_bit + 1
                                    : last        ? 0
                                    : may_release ? w - consumed
                                                  : w - consumed - offer_bit;
      // weak: a spurious failure only retries with the word reloaded
      if (count_.compare_exchange_weak(w, desired, std::memory_order_release, std::memory_order_relaxed)) {
        return taken ? offered_release::handed_over : last ? offered_release::released : offered_release::kept;
      }
    }
  }

  // Tests: the whole word, flags included (a snapshot).
  [[nodiscard]] std::uint64_t word() const noexcept { return count_.load(std::memory_order_relaxed); }

  // Tests: the mailbox, to drive a push in its two steps.
  [[nodiscard]] mpsc_queue& mailbox() noexcept { return mailbox_; }

 private:
  std::atomic<std::uint64_t> count_{0};  // the ownership word: see the overview
  mpsc_queue mailbox_;                   // producers: non-owners that counted; consumer: the owner
};

}  // namespace handoff::detail
