// A batch send's one mailbox node (actor::post_all, basic_actor::send_all): a header and
// the batch's k messages stored by value behind it, in one allocation. The sender counts
// the k messages with one fetch_add and links the node with one exchange; the owner pops
// it once, runs its messages in a loop as far as its turn's limits allow (a drain budget's
// messages left, the hand-over's check interval; one message per pop where the drain checks
// after every message: a bounded mailbox's room, a time budget, a test scheduler's step),
// and frees it after the last.
//
// A partly run batch stays at the head of the mailbox: when the loop stops early (the
// limit, a handler that threw or deferred to its own actor) the node goes back in front
// through the owner's end (two stores, no atomic), so that the rest runs next, in order,
// whoever owns the actor then. A handler that destroys its actor ends the batch: the rest
// is destroyed unrun, as every other queued message is then.
//
// Memory: the node takes 32 bytes plus k times the message's size, from the node pool's
// size classes up to 512 bytes, else from operator new (one allocation either way).
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <new>
#include <ranges>
#include <utility>
#include <vector>

#include "handoff/detail/actor_base.hpp"
#include "handoff/detail/assert.hpp"
#include "handoff/detail/message.hpp"
#include "handoff/detail/node_pool.hpp"
#include "handoff/detail/run_queue.hpp"

namespace handoff::detail {

// Elem: the stored message; Deliver(actor, message) runs one (may throw).
template <class Elem, void (*Deliver)(actor_base*, Elem&)>
class batch_node final : public message {
 public:
  // Builds the node from n >= 1 elements from `it`, each Elem(*it), or Elem(std::move(*it))
  // when Move. A throw destroys what was built, frees the node and propagates.
  template <bool Move, class It>
  static batch_node* make(It it, std::size_t n) {
    void* p = allocate_node(bytes(n));
    auto* b = ::new (p) batch_node(n);
    std::size_t built = 0;
    try {
      for (; built < n; ++built, ++it) {
        void* at = b->storage() + built * sizeof(Elem);
        if constexpr (Move) {
          ::new (at) Elem(std::move(*it));
        } else {
          ::new (at) Elem(*it);
        }
      }
    } catch (...) {
      for (std::size_t i = 0; i < built; ++i) std::destroy_at(b->item(i));
      b->free();
      throw;
    }
    return b;
  }

 private:
  explicit batch_node(std::size_t n) noexcept : size_(n) { invoke = &run; }

  static constexpr std::size_t items_offset() noexcept {
    return (sizeof(batch_node) + alignof(Elem) - 1) / alignof(Elem) * alignof(Elem);
  }
  static constexpr std::size_t bytes(std::size_t n) noexcept { return items_offset() + n * sizeof(Elem); }
  unsigned char* storage() noexcept { return reinterpret_cast<unsigned char*>(this) + items_offset(); }
  Elem* item(std::size_t i) noexcept { return std::launder(reinterpret_cast<Elem*>(storage() + i * sizeof(Elem))); }
  void free() noexcept {
    const std::size_t n = size_;
    this->~batch_node();
    free_node(this, bytes(n));
  }
  // Destroys the messages not run yet, unrun, and frees the node.
  void destroy_rest() noexcept {
    for (std::size_t i = next_; i < size_; ++i) std::destroy_at(item(i));
    free();
  }

  // Runs messages from next_ while the turn's limits allow (one at least), then frees the
  // node after its last message, else puts it back in front: after `allowed`, after a throw
  // (reported as the drain reports one), or when a handler stopped the turn (then, if it
  // destroyed the actor, the rest is destroyed unrun instead).
  static bool run(message* m, actor_base* a, turn_tally* turn) {
    auto* b = static_cast<batch_node*>(m);
    if (turn == nullptr) {
      b->destroy_rest();
      return true;
    }
    drain_frame& frame = *tls.top;
    HANDOFF_ASSERT(frame.actor == a && b->next_ < b->size_);
    const std::uint64_t allowed = turn->limit > turn->turn ? turn->limit - turn->turn : 1;
    const std::size_t end = b->size_ - b->next_ > allowed ? b->next_ + allowed : b->size_;
    const std::size_t first = b->next_;
    std::size_t i = first;  // in a register: a handler's writes could alias next_
    bool threw = false;
    do {
      Elem* e = b->item(i);
      try {
        Deliver(a, *e);
      } catch (...) {
        a->report_handler_error(frame);
        threw = true;
      }
      std::destroy_at(e);
      ++i;
    } while (i != end && frame.stop == 0 && !threw);
    b->next_ = i;
    turn->uncounted += i - first - 1;  // the drainer counts the first
    turn->turn += i - first - 1;
    if (b->next_ == b->size_) {
      b->free();
    } else if ((frame.stop & stop_destroyed) != 0) {
      b->destroy_rest();  // *a is gone: its other messages were destroyed too
    } else {
      a->enqueue_first(b);
    }
    return true;
  }

  // Both touched only by the actor's owner (passed between owners by the count's
  // release/acquire, as the mailbox's nodes are).
  std::size_t next_ = 0;  // the next message to run
  std::size_t size_;      // the batch's messages
};

// Builds the batch of messages [first, last), in order, as one node (none when empty). A
// range whose size is not known before its end (single pass, no sized sentinel) is gathered
// in a vector first. A throw destroys what was built and propagates: nothing was sent.
template <class Elem, void (*Deliver)(actor_base*, Elem&), class It, class End>
message_batch build_batch(It first, End last) {
  using node = batch_node<Elem, Deliver>;
  if constexpr (std::sized_sentinel_for<End, It> || std::forward_iterator<It>) {
    const auto n = static_cast<std::size_t>(std::ranges::distance(first, last));
    if (n == 0) return {};
    return {node::template make<false>(std::move(first), n), n};
  } else {
    std::vector<Elem> held;
    for (; first != last; ++first) held.emplace_back(*first);
    if (held.empty()) return {};
    return {node::template make<true>(held.begin(), held.size()), held.size()};
  }
}

}  // namespace handoff::detail
