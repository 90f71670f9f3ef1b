// The chunk steps of the actor's mailbox: installing, walking, detaching and recycling the
// chunks behind lockfree_ownership (detail/ownership.hpp; model: tests/model/chunks.pml).
#include <atomic>
#include <cstdint>

#include "handoff/detail/assert.hpp"
#include "handoff/detail/ownership.hpp"

namespace handoff::detail {

namespace {

constexpr std::uint32_t chunk_of(std::uint32_t t) noexcept { return t & ~(slots_per_chunk - 1); }
// Tickets wrap: compare them by their signed distance.
constexpr bool before(std::uint32_t a, std::uint32_t b) noexcept { return static_cast<std::int32_t>(a - b) < 0; }

}  // namespace

std::uint64_t lockfree_ownership::open_head() noexcept {
  // acquire; pairs with the release of whoever installed the head's chunk.
  std::uint64_t h = head_.load(std::memory_order_acquire);
  while (closing(h)) {
    const std::uint64_t open = head(base_of(h), index_of(h), 0);
    if (head_.compare_exchange_weak(h, open, std::memory_order_acquire, std::memory_order_acquire)) return open;
  }
  return h;
}

void lockfree_ownership::place_slow(std::uint32_t t, mailbox_node* n) noexcept {
  for (;;) {
    std::uint64_t h = open_head();
    const std::uint32_t index = index_of(h);
    if (index == 0) {
      // No chunk (the actor was idle): install the first one, of the chunk-aligned base.
      const std::uint32_t c = allocate_chunk(chunk_of(t), 0);
      chunk_at(c).first.store(c, std::memory_order_relaxed);  // published by the CAS
      // release; pairs with the acquire loads of the head: the chunk's initialisation.
      if (!head_.compare_exchange_strong(h, head(chunk_of(t), c, 0), std::memory_order_release,
                                         std::memory_order_relaxed)) {
        free_chunk(c);
      }
      continue;
    }
    const std::uint32_t base = base_of(h);
    if (!before(t, base + slots_per_chunk)) {
      // Past the head's chunk: install the next one. The winner links the old head to it;
      // the owner cannot leave (and free) the old head before that link.
      const std::uint32_t c = allocate_chunk(base + slots_per_chunk, index);
      // `index` may be back in the pool by now (a stale head): then the CAS below fails.
      chunk_at(c).first.store(chunk_at(index).first.load(std::memory_order_relaxed), std::memory_order_relaxed);
      if (head_.compare_exchange_strong(h, head(base + slots_per_chunk, c, 0), std::memory_order_release,
                                        std::memory_order_relaxed)) {
        chunk_at(index).next.store(c, std::memory_order_release);  // pairs with the acquire in pop_slow()
      } else {
        free_chunk(c);
      }
      continue;
    }
    // In or before the head's chunk: walk back to ours. Every chunk on the way serves
    // tickets >= t, which the owner has not passed: none is back in the pool.
    std::uint32_t c = index;
    std::uint32_t c_base = base;
    while (before(t, c_base)) {
      slot_chunk& at = chunk_at(c);
      std::uint32_t p = at.prev.load(std::memory_order_acquire);  // pairs with the release below
      if (p == 0) {
        // The first chunk since the actor was idle, and ours comes before it: put ours in front.
        const std::uint32_t q = allocate_chunk(c_base - slots_per_chunk, 0);
        chunk_at(q).next.store(c, std::memory_order_relaxed);  // published by the CAS
        if (at.prev.compare_exchange_strong(p, q, std::memory_order_release, std::memory_order_acquire)) {
          p = q;
        } else {
          free_chunk(q);
        }
      }
      c = p;
      c_base = chunk_at(c).base.load(std::memory_order_relaxed);
    }
    HANDOFF_ASSERT(t - c_base < slots_per_chunk);
    HANDOFF_ASSERT(chunk_at(c).slots[t - c_base].load(std::memory_order_relaxed) == nullptr);
    chunk_at(c).slots[t - c_base].store(n, std::memory_order_release);  // pairs with the acquire in pop()
    return;
  }
}

mailbox_node* lockfree_ownership::pop_slow() noexcept {
  if (read_ == 0 && !find_first_chunk()) return nullptr;
  for (;;) {
    slot_chunk& c = chunk_at(read_);
    const std::uint32_t i = next_ - c.base.load(std::memory_order_relaxed);
    if (i < slots_per_chunk) return take(c, i);
    // Past our chunk (its end, or a chunk of the turn before ours): move on once its
    // installer has linked the next one, and return this one.
    const std::uint32_t next = c.next.load(std::memory_order_acquire);  // pairs with place_slow()
    if (next == 0) return nullptr;
    chunk_at(next).prev.store(0, std::memory_order_relaxed);  // no sender walks back past it: all ran
    free_chunk(read_);
    read_ = next;
  }
}

bool lockfree_ownership::find_first_chunk() noexcept {
  // Nothing counted after our own requests: no sender will install anything for us.
  if (ticket_of(word_.load(std::memory_order_relaxed)) == next_) return false;
  const std::uint64_t h = open_head();  // a released owner's detach: cancelled, as a sender does
  if (index_of(h) == 0) return false;   // not installed yet
  // The head chunk names the first chunk of our turn (alive: only we free chunks now, and
  // a detach's chunk is the head's until cancelled). Start there: the chunks before our
  // next ticket, if any, are returned as pop_slow() passes them.
  std::uint32_t c = chunk_at(index_of(h)).first.load(std::memory_order_relaxed);
  HANDOFF_ASSERT(c != 0);
  while (before(next_, chunk_at(c).base.load(std::memory_order_relaxed))) {
    const std::uint32_t p = chunk_at(c).prev.load(std::memory_order_acquire);
    if (p == 0) return false;  // the sender of next_ is putting its chunk in front
    c = p;
  }
  read_ = c;
  return true;
}

std::uint64_t lockfree_ownership::release_detaching(std::uint64_t consumed) noexcept {
  // Nothing else counted: detach our chunk while releasing, so that the idle actor holds none.
  detach d{};
  if (close_head(consumed, d)) {
    if (release_closed(consumed, d)) {
      finish_detach(d);
      return consumed;
    }
  }
  // Counted meanwhile (and maybe a chunk installed): the subtraction cannot release. Or a
  // thread past its exit hook, which cannot mark the actor: it releases with the chunk,
  // which the next owner reads on from (or the destructor frees).
  const std::uint64_t before_sub = word_.fetch_sub(consumed, std::memory_order_release);
  HANDOFF_ASSERT(count_of(before_sub) >= consumed);
  return count_of(before_sub);
}

bool lockfree_ownership::close_head(std::uint64_t consumed, detach& d) noexcept {
  d.word = word_.load(std::memory_order_relaxed);
  HANDOFF_ASSERT(count_of(d.word) >= consumed);
  if (count_of(d.word) != consumed) return false;
  d.held = read_;
  slot_chunk& held = chunk_at(d.held);
  const std::uint32_t base = held.base.load(std::memory_order_relaxed);
  d.open = head(base, d.held, 0);
  HANDOFF_ASSERT(next_ - base <= slots_per_chunk);  // the tag fits its bits
  d.closing = head(base, d.held, next_ - base + 1);
  // Where the next turn starts if a sender takes the chunk back (published by the word's
  // release, which the next owner acquires).
  held.first.store(d.held, std::memory_order_relaxed);
  std::uint64_t h = d.open;
  // Relaxed: ordered before the word's release in release_closed(), which a later sender
  // acquires before it reads the head (so it sees closing, or later).
  // Before the release: a destructor that acquires the idle actor after it sees the mark.
  // A thread past its exit hook has no record to mark: it keeps the chunk.
  if (!mark_detaching(this)) return false;
  if (!head_.compare_exchange_strong(h, d.closing, std::memory_order_relaxed, std::memory_order_relaxed)) {
    clear_detaching();  // still the owner: no destructor waits
    return false;
  }
  read_ = 0;
  return true;
}

bool lockfree_ownership::release_closed(std::uint64_t consumed, detach& d) noexcept {
  // release; pairs with the acquire in try_acquire() of the next owner.
  if (word_.compare_exchange_strong(d.word, d.word - consumed, std::memory_order_release, std::memory_order_relaxed)) {
    return true;
  }
  read_ = d.held;  // counted meanwhile: still ours, with the chunk
  std::uint64_t h = d.closing;
  head_.compare_exchange_strong(h, d.open, std::memory_order_relaxed, std::memory_order_relaxed);  // or a sender did
  clear_detaching();  // still the owner: no destructor waits
  return false;
}

void lockfree_ownership::finish_detach(const detach& d) noexcept {
  std::uint64_t h = d.closing;
  // acquire: the chunk's last uses by senders (their stores, all read) come before its reuse.
  const bool detached = head_.compare_exchange_strong(h, 0, std::memory_order_acquire, std::memory_order_relaxed);
  clear_detaching();  // our last touch of *this is done: its destructor may go on
  if (detached) free_chunk(d.held);
}

void lockfree_ownership::discard() noexcept {
  // A released owner's last touch of the head may be in flight (a sender may even have
  // cancelled its detach already): wait for every thread that marked this actor.
  wait_for_detaching(this);
  const std::uint64_t h = head_.load(std::memory_order_acquire);
  HANDOFF_ASSERT(!closing(h));
  front_ = nullptr;
  if (read_ != 0) {
    // Ours, and the chunks after it up to the head.
    for (std::uint32_t c = read_; c != 0;) {
      const std::uint32_t next = chunk_at(c).next.load(std::memory_order_acquire);
      free_chunk(c);
      c = next;
    }
  } else {
    // No chunk read this turn: whatever the head holds, back to the first.
    for (std::uint32_t c = index_of(h); c != 0;) {
      const std::uint32_t prev = chunk_at(c).prev.load(std::memory_order_acquire);
      free_chunk(c);
      c = prev;
    }
  }
  read_ = 0;
  head_.store(0, std::memory_order_relaxed);
}

}  // namespace handoff::detail
