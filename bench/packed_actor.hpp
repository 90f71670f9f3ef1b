// Prototypes of a one-atomic send, measured by fanin_bench beside the library's actor and
// the protocol baseline (mini_actor over the Vyukov mailbox): the library moved to the
// packed word; consumer batching (lines) and the sticky release stay prototypes.
//
// The ownership word packs the message count and a message ticket:
//
//   bits  0..30  count: messages accepted and not yet run (the owner's included)
//   bit   31     sticky: no handler is running, the last owner may take the actor back
//                without a hand-off (sticky_actor only; always 0 in packed_actor)
//   bits 32..63  ticket: how many messages were ever counted, modulo 2^32
//
//   send:    prev = word.fetch_add(1 + 2^32)     one atomic both counts and places the
//            count(prev) == 0: the caller owns   message: ticket(prev) is its slot
//            else: write the message into slot ticket(prev), then set the slot's sequence
//   drain:   the owner reads slots in ticket order from its own ticket + 1; a slot whose
//            sequence is not set yet belongs to a sender between its fetch_add and its
//            write: wait for it, never release past it
//   release: word.fetch_sub(X) with count(before) == X: released (X = messages run)
//
// The slots are a ring of 2^16 per actor, preallocated: enough that the fan-in rows never
// wrap it, so that the figure is the protocol's, not an allocator's. A sender that would
// lap the owner waits for its slot (the sequence tells which lap a slot is on). The
// library's version links pooled chunks instead, so that an idle actor holds none
// (lockfree_ownership in include/handoff/detail/ownership.hpp).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <utility>

#include "bench_support.hpp"

namespace handoff::bench {

// How a drain treats a slot that is ready while more are still being written.
enum class drain_mode : unsigned char {
  eager,  // run every ready message at once (packed_actor's baseline behaviour)
  lines,  // consumer batching: at the start of a cache line of slots that senders are still
          // filling, wait (briefly) until they have moved past it, then read the whole line
};

template <class Msg, class Handler, drain_mode Mode = drain_mode::eager>
class packed_actor {
 public:
  explicit packed_actor(Handler h) : handler_(std::move(h)), slots_(new slot[ring]) {
    for (std::uint32_t i = 0; i < ring; ++i) slots_[i].seq.store(i, std::memory_order_relaxed);
  }
  packed_actor(const packed_actor&) = delete;
  packed_actor& operator=(const packed_actor&) = delete;

  void send(Msg m) {
    // acquire; pairs with the release in drain() of the previous owner.
    const std::uint64_t prev = word_.fetch_add(one, std::memory_order_acquire);
    const auto ticket = static_cast<std::uint32_t>(prev >> 32);
    if ((prev & count_mask) != 0) return place(ticket, std::move(m));
    skip(ticket);  // the owner's own message runs inline: its slot stays empty this lap
    handler_(m);
    drain(ticket + 1, 1);
  }

 protected:
  static constexpr std::uint64_t one = (std::uint64_t{1} << 32) | 1;
  static constexpr std::uint64_t count_mask = 0x7fffffff;
  static constexpr std::uint64_t sticky_bit = std::uint64_t{1} << 31;
  static constexpr std::uint32_t ring = 1U << 16;
  static constexpr std::uint32_t per_line = 64 / 8;
  static constexpr unsigned max_linger = 8;  // pauses at one line's start (~25 ns each here)

  struct slot {
    // ticket: free for the sender of that ticket; ticket + 1: holds its message;
    // ticket + ring: freed by the owner for the next lap.
    std::atomic<std::uint32_t> seq;
    Msg msg;
  };

  void place(std::uint32_t ticket, Msg&& m) {
    slot& s = slots_[ticket & (ring - 1)];
    unsigned spins = 0;
    // acquire; pairs with the owner's release that freed the slot a lap ago.
    while (s.seq.load(std::memory_order_acquire) != ticket) cpu_relax(spins);
    s.msg = std::move(m);
    s.seq.store(ticket + 1, std::memory_order_release);  // pairs with the acquire in take()
  }

  void skip(std::uint32_t ticket) {
    slot& s = slots_[ticket & (ring - 1)];
    unsigned spins = 0;
    while (s.seq.load(std::memory_order_acquire) != ticket) cpu_relax(spins);
    s.seq.store(ticket + ring, std::memory_order_relaxed);  // no message to publish
  }

  // Owner only: the message of `ticket` if its sender has written it.
  bool take(std::uint32_t ticket, Msg& out) {
    slot& s = slots_[ticket & (ring - 1)];
    if (s.seq.load(std::memory_order_acquire) != ticket + 1) return false;
    out = std::move(s.msg);
    s.seq.store(ticket + ring, std::memory_order_release);  // pairs with the acquire in place()
    return true;
  }

  // Owner only: runs messages from ticket `next` on, `ran` already run and not uncounted,
  // until the count it subtracts releases the actor. Returns nothing: released.
  void drain(std::uint32_t next, std::uint64_t ran) {
    unsigned spins = 0;
    unsigned lingered = 0;
    Msg m;
    for (;;) {
      if constexpr (Mode == drain_mode::lines) {
        // At a line's first slot with senders still inside the line: let them fill it.
        if ((next % per_line) == 0 && lingered < max_linger) {
          const auto counted = static_cast<std::uint32_t>(word_.load(std::memory_order_relaxed) >> 32);
          if (static_cast<std::int32_t>(counted - (next + per_line)) < 0 &&
              static_cast<std::int32_t>(counted - next) > 0) {
            ++lingered;
            cpu_relax(spins);
            continue;
          }
        }
      }
      if (take(next, m)) {
        ++next;
        ++ran;
        spins = 0;
        lingered = 0;
        handler_(m);
        continue;
      }
      if (ran != 0) {
        // release; pairs with the acquire in send() of the next owner. ran <= count: the
        // subtraction never borrows from the ticket.
        const std::uint64_t before = word_.fetch_sub(ran, std::memory_order_release);
        if ((before & count_mask) == ran) return;
        ran = 0;
        continue;
      }
      cpu_relax(spins);  // counted, not written yet: that sender is a few instructions away
    }
  }

  alignas(64) std::atomic<std::uint64_t> word_{0};
  Handler handler_;
  std::unique_ptr<slot[]> slots_;
};

// The sticky release: the last owner keeps a claim on the idle actor. Its next send takes
// the actor back with one compare-and-swap and runs whatever others queued meanwhile on the
// core that already holds the actor's state; another sender that finds the actor sticky
// queues its message, waits up to `grace` pauses for the claimant to come back, and takes
// the actor over itself if it does not (so no message is ever left without an owner).
//
//   release (owner T, ran X): count == X: CAS word -> (count 0, sticky), claimant_ = T
//   send by T, word sticky, claimant_ == T:  CAS -> (count + 1, not sticky, ticket + 1):
//                                            owner; its message goes in its slot too, and
//                                            the drain starts at cursor_ (the old owner's)
//   send by another, word sticky:           fetch_add (count + 1, ticket + 1), write the
//                                            slot, then wait: sticky cleared by someone, or
//                                            sticky again with our ticket older than the
//                                            count's: done; grace over: CAS clearing
//                                            sticky: owner
template <class Msg, class Handler>
class sticky_actor : private packed_actor<Msg, Handler> {
  using base = packed_actor<Msg, Handler>;
  using base::count_mask;
  using base::one;
  using base::sticky_bit;
  using base::word_;

 public:
  explicit sticky_actor(Handler h, unsigned grace = 16) : base(std::move(h)), grace_(grace) {}

  void send(Msg m) {
    const void* me = &tag;
    std::uint64_t w = word_.load(std::memory_order_relaxed);
    // The claimant's fast path: take the sticky actor back in one CAS.
    while ((w & sticky_bit) != 0 && claimant_.load(std::memory_order_relaxed) == me) {
      // acquire; pairs with the release of the sticky release.
      if (word_.compare_exchange_weak(w, (w + one) & ~sticky_bit, std::memory_order_acquire,
                                      std::memory_order_relaxed)) {
        const auto ticket = static_cast<std::uint32_t>(w >> 32);
        this->place(ticket, std::move(m));
        return drain_from(cursor_);
      }
    }
    const std::uint64_t prev = word_.fetch_add(one, std::memory_order_acquire);
    const auto ticket = static_cast<std::uint32_t>(prev >> 32);
    if ((prev & sticky_bit) == 0) {
      if ((prev & count_mask) != 0) return this->place(ticket, std::move(m));
      this->skip(ticket);
      this->handler_(m);
      return release_or_drain(ticket + 1, 1);
    }
    // Sticky: queue, then make sure someone owns the actor.
    this->place(ticket, std::move(m));
    for (unsigned spins = 0;; ++spins) {
      w = word_.load(std::memory_order_relaxed);
      if ((w & sticky_bit) == 0) return;  // taken back or over: the new owner runs it
      // Sticky again, but a later episode: the tickets counted since its release are the
      // last count(w) ones; ours is older, so it ran (taking over now would make an owner
      // of a count that is not ours).
      const auto oldest = static_cast<std::uint32_t>(w >> 32) - static_cast<std::uint32_t>(w & count_mask);
      if (static_cast<std::int32_t>(ticket - oldest) < 0) return;
      if (spins >= grace_ &&
          word_.compare_exchange_strong(w, w & ~sticky_bit, std::memory_order_acquire, std::memory_order_relaxed)) {
        return drain_from(cursor_);
      }
      handoff::detail::backoff(spins < handoff::detail::spins_before_yield ? spins : 0);
    }
  }

 private:
  static inline thread_local char tag = 0;

  void drain_from(std::uint32_t next) { release_or_drain(next, 0); }

  // base::drain with a sticky release: the count reaching 0 leaves the word sticky.
  void release_or_drain(std::uint32_t next, std::uint64_t ran) {
    unsigned spins = 0;
    Msg m;
    for (;;) {
      if (this->take(next, m)) {
        ++next;
        ++ran;
        spins = 0;
        this->handler_(m);
        continue;
      }
      std::uint64_t w = word_.load(std::memory_order_relaxed);
      if ((w & count_mask) == ran) {
        cursor_ = next;  // published by the release CAS below
        claimant_.store(&tag, std::memory_order_relaxed);
        // release; pairs with the acquire of whoever takes the sticky actor.
        if (word_.compare_exchange_strong(w, (w - ran) | sticky_bit, std::memory_order_release,
                                          std::memory_order_relaxed)) {
          return;
        }
        continue;
      }
      if (ran != 0) {
        word_.fetch_sub(ran, std::memory_order_relaxed);  // count stays > 0: still ours
        ran = 0;
        continue;
      }
      cpu_relax(spins);
    }
  }

  std::atomic<const void*> claimant_{nullptr};  // written by the owner before its sticky release
  std::uint32_t cursor_ = 0;                    // the next ticket to run; owner only
  unsigned grace_;
};

}  // namespace handoff::bench
