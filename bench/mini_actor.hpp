// The minimal actor of the benchmarks: the library's hand-off protocol (count first, the
// 0 -> 1 winner runs inline and drains, release with fetch_sub) over an exchangeable
// mailbox, with no budget, nesting or error hook. actor_bench compares mailboxes under it
// (docs/notebook.md, "Mailbox choice"); fanin_bench keeps it as the protocol baseline that
// the packed-word prototypes are measured against.
#pragma once

#include <atomic>
#include <cstdint>
#include <new>
#include <utility>

#include "bench_support.hpp"
#include "handoff/detail/mpsc_queue.hpp"
#include "handoff/detail/node_pool.hpp"

namespace handoff::bench {

// The same hand-off protocol as handoff::detail::actor_base, parameterised on the mailbox:
// only the mailbox differs between the instantiations.

template <class Msg, class Handler, class Mailbox>
class mini_actor {
 public:
  mini_actor() = default;
  explicit mini_actor(Handler h) : handler_(std::move(h)) {}

  void send(Msg m) {
    // acquire; pairs with the release below in the previous owner.
    if (count_.fetch_add(1, std::memory_order_acquire) != 0) {
      mailbox_.push(std::move(m));
      return;
    }
    handler_(m);
    std::uint64_t ran = 1;  // run and not yet uncounted
    unsigned spins = 0;
    for (;;) {
      if (mailbox_.try_pop(m)) {
        handler_(m);
        ++ran;
        spins = 0;
        continue;
      }
      if (ran != 0) {
        // release; pairs with the acquire above in the next owner.
        if (count_.fetch_sub(ran, std::memory_order_release) == ran) return;
        ran = 0;
        continue;
      }
      cpu_relax(spins);  // counted, not yet pushed: wait for that sender
    }
  }

 private:
  std::atomic<std::uint64_t> count_{0};
  Mailbox mailbox_;
  Handler handler_;
};

// handoff's mailbox: the intrusive Vyukov queue with nodes from handoff's node pool,
// exactly what basic_actor uses.
template <class Msg>
class vyukov_mailbox {
  struct node : handoff::detail::mailbox_node {
    explicit node(Msg&& m) : msg(std::move(m)) {}
    Msg msg;
  };

 public:
  vyukov_mailbox() = default;
  vyukov_mailbox(const vyukov_mailbox&) = delete;
  vyukov_mailbox& operator=(const vyukov_mailbox&) = delete;
  ~vyukov_mailbox() {
    Msg m;
    while (try_pop(m)) {
    }
  }

  void push(Msg&& m) {
    void* p = handoff::detail::allocate_node(sizeof(node));
    queue_.push(::new (p) node(std::move(m)));
  }
  bool try_pop(Msg& out) {
    auto* n = static_cast<node*>(queue_.pop());
    if (n == nullptr) return false;
    out = std::move(n->msg);
    n->~node();
    handoff::detail::free_node(n, sizeof(node));
    return true;
  }

 private:
  handoff::detail::mpsc_queue queue_;
};

}  // namespace handoff::bench
