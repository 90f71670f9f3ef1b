// Intrusive multi-producer / single-consumer queue: the per-actor mailbox.
//
// Dmitry Vyukov, "Intrusive MPSC node-based queue" (1024cores.net, 2010). Producers
// link a node with one `exchange` on `head_` and one store; the consumer walks `tail_`.
// The queue owns no memory: nodes are the caller's, and an empty queue is three words
// (head, tail, the embedded stub's link), which is what lets an idle actor stay small.
//
// Not linearizable as seen by the consumer: between a producer's `exchange` and its
// link store, `pop()` returns nullptr although the node has been "pushed". The actor
// protocol copes with that window through its message count (see actor_base.hpp).
#pragma once

#include <atomic>

namespace handoff::detail {

struct mailbox_node {
  // Written by the producer that links the node after it, read by the consumer.
  std::atomic<mailbox_node*> next{nullptr};
};

class mpsc_queue {
 public:
  mpsc_queue() noexcept = default;
  mpsc_queue(const mpsc_queue&) = delete;
  mpsc_queue& operator=(const mpsc_queue&) = delete;
  ~mpsc_queue() = default;

  // Thread-safe, wait-free, never allocates. `n` must not be in any queue.
  void push(mailbox_node* n) noexcept { link(claim(n), n); }

  // push() in its two steps, for tests that interleave them with the consumer. Between
  // them, n is behind head_ but unreachable from tail_: the in-flight window.
  mailbox_node* claim(mailbox_node* n) noexcept {
    n->next.store(nullptr, std::memory_order_relaxed);
    // acq_rel: the release publishes n's initialisation to the next producer, which links
    // after n; the acquire makes the previous producer's initialisation of `prev` visible
    // before we write prev->next.
    return head_.exchange(n, std::memory_order_acq_rel);
  }

  // Thread-safe, wait-free: pushes the chain first .. last, already linked through `next`
  // (by this thread, before the call), with one exchange: no other producer's node comes
  // between them. None of its nodes may be in any queue.
  void push_chain(mailbox_node* first, mailbox_node* last) noexcept { link(claim(last), first); }

  static void link(mailbox_node* prev, mailbox_node* n) noexcept {
    // release; pairs with the acquire loads of `next` in pop(): the node's payload (a
    // chain's nodes and links too), written before push(), is visible to the consumer that
    // reaches it.
    prev->next.store(n, std::memory_order_release);
  }

  // Consumer only: puts n before every node, so that pop() returns it next. Touches only
  // the consumer's end (tail_ and n), never head_: no atomic read-modify-write, and no
  // producer can reach n. The owner's own first message takes this way: the 0 -> 1 winner's
  // message precedes every message counted after it.
  void push_front(mailbox_node* n) noexcept { push_front_chain(n, n); }
  // Consumer only: push_front() for the chain first .. last, linked through `next`.
  void push_front_chain(mailbox_node* first, mailbox_node* last) noexcept {
    last->next.store(tail_, std::memory_order_relaxed);  // read only by this consumer's pop()
    tail_ = first;
  }

  // Consumer only. Returns the oldest node, or nullptr when the queue is empty *or* a
  // producer is between its exchange and its link (the caller retries later).
  mailbox_node* pop() noexcept {
    mailbox_node* tail = tail_;
    mailbox_node* next = tail->next.load(std::memory_order_acquire);  // pairs with push()
    if (tail == &stub_) {
      if (next == nullptr) return nullptr;
      tail_ = next;
      tail = next;
      next = next->next.load(std::memory_order_acquire);
    }
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    // `tail` is the last linked node. If a producer has already swung head_ past it, its
    // link is in flight: report empty and let the caller retry.
    if (tail != head_.load(std::memory_order_acquire)) return nullptr;
    // Re-insert the stub so that `tail` can be handed out while staying linkable.
    push(&stub_);
    next = tail->next.load(std::memory_order_acquire);
    if (next != nullptr) {
      tail_ = next;
      return tail;
    }
    return nullptr;
  }

  // Consumer only. True when pop() would return nullptr right now without touching head_
  // (empty, or a producer is mid-push). One cache line, two loads: the uncontended path.
  [[nodiscard]] bool looks_empty() const noexcept {
    return tail_ == &stub_ && stub_.next.load(std::memory_order_acquire) == nullptr;
  }

 private:
  std::atomic<mailbox_node*> head_{&stub_};  // producers' end; shared
  mailbox_node* tail_{&stub_};               // consumer's end; touched only by the owner
  mailbox_node stub_;
};

}  // namespace handoff::detail
