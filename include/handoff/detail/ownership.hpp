// The actor's hand-off primitive: an ownership word that counts requests, a mailbox for
// the requests that found the word owned, and the protocol that drives them.
//
//   lockfree_ownership     the actor's protocol (actor_base): one atomic read-modify-write
//                          per send, lock-free everywhere. The word packs the count and a
//                          message ticket; messages wait in ticketed slots of pooled chunks.
//
// (The keyed mutex's entry follows the same hand-off rule with a word and a queue of its
// own: lock_word, detail/lock_entry.hpp.)
//
// The lock-free protocol. The word (`word_`):
//
//   bits  0..31  count: requests accepted and not finished (the owner's own included; at
//                most 2^32 - 1, checked by an assertion: a count that carried into the
//                ticket would corrupt both)
//   bits 32..63  ticket: requests ever counted, modulo 2^32
//
//   acquire:  prev = word.fetch_add(1 + 2^32)   count(prev) == 0: the caller owns (the 0 -> 1
//                                               hand-off); else it stores its request in the
//                                               slot of ticket(prev), after counting
//   consume:  the owner reads slots in ticket order from its own ticket + 1. A slot still
//             empty belongs to a sender between its fetch_add and its store: the owner waits
//             for it or retries later, and never releases early, because
//   release:  count(word.fetch_sub(X)) == X     X = requests the owner consumed (its own
//                                               included); false: more were counted meanwhile
//
// Counting before storing is what makes it safe: the owner can never consume a request that
// is not counted, so its subtraction never takes away a count that another sender's
// fetch_add still needs to see as pending. Releasing by fetch_sub cannot fail spuriously.
//
// The slots live in chunks of `slots_per_chunk` (detail/slot_chunk.hpp) that an idle actor
// does not hold. `head_` names the newest chunk:
//
//   bits  0..30  chunk index (0: no chunk)
//   bits 31..36  closing tag: 0, or while the owner detaches the chunk to release the actor,
//                its next ticket - base + 1, at most 33 (two detaches of one chunk never
//                look alike)
//   bits 32..63  the chunk's base ticket: a multiple of slots_per_chunk, whose low 5 bits
//                (always 0) leave bits 32..36 to the tag. With no tag, the high half is
//                the base as it is (a sender's fast path reads it with one shift).
//
//   sender t, from the head it read:  no chunk: install one of base t - t % N (CAS)
//                                     closing: cancel the detach (CAS), read again
//                                     t past the chunk: install the next one (CAS, prev =
//                                       the head's), then link the old head's `next`
//                                     else: walk `prev` to the chunk of t, store the slot
//   owner:    past a chunk's end, moves to `next` once it is linked and frees the chunk. A
//             new owner starts at the first chunk of its turn, which every chunk names
//             (`first`), and frees the chunks before its ticket as it passes them.
//   release with a chunk: head -> closing, word (X, t) -> (0, t) by CAS; released: head ->
//             empty if it still carries our tag, and free the chunk; else take it back.
//
// tests/model/chunks.pml checks these steps (and the bounded form below) with spin. Every
// chunk a sender touches serves a ticket the owner has not passed, so none is back in the
// pool. After a release the old owner touches only `head_`, and marks the actor in its
// thread's record meanwhile (mark_detaching() in detail/slot_chunk.hpp); the destructor
// waits until no thread's record names its actor (discard()): a sender may cancel the
// detach (clearing the tag) before the old owner's last CAS. A thread that has returned
// its record at exit keeps its chunk instead of detaching it; the next owner detaches it.
//
// Bounded use (an actor with a capacity): try_acquire_below() counts only while the count
// is below the capacity, by a CAS loop, so that a full word is never counted and takes no
// ticket (a fetch_add undone by a fetch_sub would leave a ticket whose slot is never
// stored). The owner of a bounded word releases after every request, so that the count is
// the room that senders see.
//
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/mpsc_queue.hpp"
#include "handoff/detail/slot_chunk.hpp"

namespace handoff::detail {

// The actor's protocol: lock-free acquire and release over the packed word.
class lockfree_ownership {
 public:
  // The outcome of counting a request: the caller owns the word, or must enqueue() its
  // request (at the ticket it took), or nothing was counted (a full bounded word).
  class admission {
   public:
    enum kind : unsigned char { owner, queued, full };
    // Implicit both ways, so that an admission reads as its kind (`return admission::full`,
    // `switch (a)`, `a == admission::queued`).
    // NOLINTNEXTLINE(google-explicit-constructor)
    constexpr admission(kind k, std::uint32_t ticket = 0) noexcept : ticket_(ticket), kind_(k) {}
    // NOLINTNEXTLINE(google-explicit-constructor)
    constexpr operator kind() const noexcept { return kind_; }
    [[nodiscard]] constexpr std::uint32_t ticket() const noexcept { return ticket_; }

   private:
    std::uint32_t ticket_;
    kind kind_;
  };

  lockfree_ownership() noexcept = default;
  lockfree_ownership(const lockfree_ownership&) = delete;
  lockfree_ownership& operator=(const lockfree_ownership&) = delete;
  lockfree_ownership(lockfree_ownership&&) = delete;
  lockfree_ownership& operator=(lockfree_ownership&&) = delete;
  ~lockfree_ownership() = default;  // holds no chunk once idle, or after discard()

  // Counts one request and gives it a ticket.
  // acquire; pairs with the release in release(): everything the previous owner
  // wrote is visible to the new one.
  [[nodiscard]] admission try_acquire() noexcept {
    const std::uint64_t before = word_.fetch_add(one_request, std::memory_order_acquire);
    HANDOFF_ASSERT(count_of(before) != count_mask);  // a count that wrapped: a release subtracted too much
    return admitted(before);
  }

  // Counts one request if fewer than `capacity` are counted.
  // acquire on success; pairs with the release in release(), as in try_acquire().
  [[nodiscard]] admission try_acquire_below(std::uint64_t capacity) noexcept {
    std::uint64_t before = word_.load(std::memory_order_relaxed);
    do {
      if (count_of(before) >= capacity) return admission::full;
      // weak: a spurious failure only retries (no release depends on this CAS)
    } while (!word_.compare_exchange_weak(before, before + one_request, std::memory_order_acquire,
                                          std::memory_order_relaxed));
    return admitted(before);
  }

  // After a `queued` admission: hands the (already counted) request to the owner, in the
  // slot of its ticket. Wait-free unless a chunk is missing: then it installs one itself
  // (lock-free: it never waits for another thread).
  void enqueue(admission a, mailbox_node* n) noexcept {
    HANDOFF_ASSERT(a == admission::queued);
    const std::uint32_t t = a.ticket();
    // acquire; pairs with the release of the chunk's installer (its base, emptied slots).
    const std::uint64_t h = head_.load(std::memory_order_acquire);
    // The base when the tag is 0 (else i is not used); wraps past slots_per_chunk when t is
    // before the base.
    const std::uint32_t i = t - static_cast<std::uint32_t>(h >> 32);
    if (index_of(h) != 0 && !closing(h) && i < slots_per_chunk) {
      // release; pairs with the acquire in pop(): the request's payload is visible to the owner.
      chunk_at(index_of(h)).slots[i].store(n, std::memory_order_release);
      return;
    }
    place_slow(t, n);
  }

  // Owner only: its own request, to be consumed before every queued one (no atomic).
  void push_front(mailbox_node* n) noexcept {
    HANDOFF_ASSERT(front_ == nullptr);
    front_ = n;
  }

  // Owner only. The oldest request, or nullptr when none is stored yet (see above).
  [[nodiscard]] mailbox_node* pop() noexcept {
    if (front_ != nullptr) return std::exchange(front_, nullptr);
    if (read_ != 0) {
      slot_chunk& c = chunk_at(read_);
      const std::uint32_t i = next_ - c.base.load(std::memory_order_relaxed);
      if (i < slots_per_chunk) return take(c, i);
    }
    return pop_slow();
  }

  // Owner only. True when no request was counted after the ones consumed (one load).
  [[nodiscard]] bool looks_empty() const noexcept {
    return front_ == nullptr && ticket_of(word_.load(std::memory_order_relaxed)) == next_;
  }

  // Owner only. Uncounts `consumed` requests; true if that released the word.
  [[nodiscard]] bool try_release(std::uint64_t consumed) noexcept { return release(consumed) == consumed; }

  // try_release(), returning the count before the subtraction (released: == consumed).
  // release; pairs with the acquire in try_acquire() of the next owner.
  [[nodiscard]] std::uint64_t release(std::uint64_t consumed) noexcept {
    if (read_ == 0) [[likely]] {  // no chunk to detach
      const std::uint64_t before = word_.fetch_sub(consumed, std::memory_order_release);
      HANDOFF_ASSERT(count_of(before) >= consumed);
      return count_of(before);
    }
    return release_detaching(consumed);
  }

  // Requests accepted and not finished: a snapshot.
  [[nodiscard]] std::uint64_t pending() const noexcept { return count_of(word_.load(std::memory_order_relaxed)); }

  // The destructor, owning the word with no sender left and every request consumed or
  // abandoned: waits until a released owner's last touch of the head is done, then returns
  // every chunk to the pool.
  void discard() noexcept;

 private:
  static constexpr std::uint64_t one_request = (std::uint64_t{1} << 32) | 1;
  static constexpr std::uint64_t count_mask = 0xffffffff;
  static constexpr std::uint32_t count_of(std::uint64_t w) noexcept { return static_cast<std::uint32_t>(w); }
  static constexpr std::uint32_t ticket_of(std::uint64_t w) noexcept { return static_cast<std::uint32_t>(w >> 32); }
  static constexpr unsigned tag_shift = chunk_index_bits;  // 31
  static constexpr std::uint32_t tag_mask = 63;
  static_assert(slots_per_chunk + 1 <= tag_mask, "a closing tag must fit its bits");
  static_assert(tag_shift + 6 <= 32 + 5 && slots_per_chunk == 32,
                "the tag may only share the base's bits that are always 0");
  // True while the head carries a closing tag (a detach in flight or not yet cancelled).
  static constexpr bool closing(std::uint64_t h) noexcept { return (h & (std::uint64_t{tag_mask} << tag_shift)) != 0; }
  static constexpr std::uint32_t index_of(std::uint64_t h) noexcept {
    return static_cast<std::uint32_t>(h) & max_chunks;
  }
  static constexpr std::uint32_t base_of(std::uint64_t h) noexcept {
    return static_cast<std::uint32_t>(h >> 32) & ~(slots_per_chunk - 1);
  }
  static constexpr std::uint64_t head(std::uint32_t base, std::uint32_t index, std::uint32_t tag) noexcept {
    return std::uint64_t{base} << 32 | std::uint64_t{tag} << tag_shift | index;
  }

  // Owner only: the request of ticket next_, in slot i of its chunk c, if stored yet.
  mailbox_node* take(slot_chunk& c, std::uint32_t i) noexcept {
    mailbox_node* n = c.slots[i].load(std::memory_order_acquire);  // pairs with enqueue()
    if (n != nullptr) ++next_;
    return n;
  }

  admission admitted(std::uint64_t before) noexcept {
    if (count_of(before) != 0) return {admission::queued, ticket_of(before)};
    next_ = ticket_of(before) + 1;  // ours now: the owner's own request has no slot
    return admission::owner;
  }

  friend struct ownership_access;  // tests: the detach's steps one by one

  // lib/actor/slot_mailbox.cpp: the steps that install, walk, detach and recycle chunks.
  void place_slow(std::uint32_t t, mailbox_node* n) noexcept;
  [[nodiscard]] mailbox_node* pop_slow() noexcept;
  [[nodiscard]] bool find_first_chunk() noexcept;
  // The head, read (acquire) and with a released owner's detach cancelled: that owner's
  // last CAS then fails, and the chunk stays for whoever needed the head.
  [[nodiscard]] std::uint64_t open_head() noexcept;
  [[nodiscard]] std::uint64_t release_detaching(std::uint64_t consumed) noexcept;

  // release_detaching()'s three steps, which tests drive with other parties' steps between.
  struct detach {
    std::uint64_t word;     // as read: count == consumed
    std::uint64_t open;     // the head naming our chunk
    std::uint64_t closing;  // the same, with our closing tag
    std::uint32_t held;     // our chunk
  };
  // Nothing else counted and our chunk is the head: mark it closing and drop it from the
  // owner's state (true). False: something was counted; subtract instead.
  [[nodiscard]] bool close_head(std::uint64_t consumed, detach& d) noexcept;
  // The release CAS. True: released, then finish_detach(). False: counted meanwhile, the
  // chunk is ours again (the detach cancelled) and the count is above `consumed`.
  [[nodiscard]] bool release_closed(std::uint64_t consumed, detach& d) noexcept;
  // After the release, touching only the head: empty it and free the chunk, unless a
  // sender took the chunk back for the next owner.
  void finish_detach(const detach& d) noexcept;

  std::atomic<std::uint64_t> word_{0};  // count and ticket: see the overview
  std::atomic<std::uint64_t> head_{0};  // newest chunk, base, closing tag: see the overview
  // Owner only: its own request pushed in front (nullptr: none), the chunk it reads (0:
  // none yet this turn) and the next ticket it reads. Passed from owner to owner by the
  // word's release and acquire.
  mailbox_node* front_ = nullptr;
  std::uint32_t read_ = 0;
  std::uint32_t next_ = 0;
};

}  // namespace handoff::detail
