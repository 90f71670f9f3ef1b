// chunk_depot: the process-wide stack of free chunk batches behind the per-thread chunk
// caches (lib/runtime/chunk_pool.cpp). A batch is a list of free chunks linked through
// their `next`; its first chunk carries the batch's length in `base` and the batch below
// it in the stack in `first`. Threads move whole batches, so the depot is touched once per
// batch, never per chunk.
//
// A Treiber stack (R. K. Treiber, "Systems Programming: Coping with Parallelism", IBM
// RJ 5118, 1986). Its top word packs:
//
//   bits  0..31  index of the top batch's first chunk (0: empty)
//   bits 32..63  version, bumped by every push and pop
//
// The version is what makes a pop safe against ABA: a pop that read top A and below it B
// must fail if, meanwhile, A was popped, B popped (and put to use) and A pushed back;
// with the index alone its CAS would succeed and make B, a chunk in use, the top. The pop
// is split into its three steps (load_top, read_below, try_pop) so that tests can put
// other parties' pops and pushes between them.
#pragma once

#include <atomic>
#include <cstdint>

#include "handoff/detail/slot_chunk.hpp"

namespace handoff::detail {

class chunk_depot {
 public:
  constexpr chunk_depot() noexcept = default;
  chunk_depot(const chunk_depot&) = delete;
  chunk_depot& operator=(const chunk_depot&) = delete;
  chunk_depot(chunk_depot&&) = delete;
  chunk_depot& operator=(chunk_depot&&) = delete;
  ~chunk_depot() = default;

  // Pushes the batch whose first chunk is `batch` (its `base` = its length, its chunks
  // linked through `next`). Thread-safe, lock-free.
  void push(std::uint32_t batch) noexcept {
    slot_chunk& c = chunk_at(batch);
    std::uint64_t top = top_.load(std::memory_order_relaxed);
    for (;;) {
      c.first.store(index_of(top), std::memory_order_relaxed);  // published by the CAS
      // release; pairs with the acquire in load_top() and try_pop(): what the pusher did
      // with the batch's chunks happens-before their reuse by the popper.
      if (top_.compare_exchange_weak(top, bumped(top, batch), std::memory_order_release, std::memory_order_relaxed)) {
        return;
      }
    }
  }

  // Pops a batch: the index of its first chunk, or 0 when the depot is empty.
  // Thread-safe, lock-free.
  [[nodiscard]] std::uint32_t pop() noexcept {
    std::uint64_t top = load_top();
    while (index_of(top) != 0) {
      if (try_pop(top, read_below(top))) return index_of(top);
    }
    return 0;
  }

  // The pop's steps. load_top(): the top word (acquire; pairs with the push's release).
  [[nodiscard]] std::uint64_t load_top() const noexcept { return top_.load(std::memory_order_acquire); }
  // read_below(top): the batch under top's. May read a batch another thread has popped
  // meanwhile (arena memory either way): the version then fails the CAS.
  [[nodiscard]] static std::uint32_t read_below(std::uint64_t top) noexcept {
    return chunk_at(index_of(top)).first.load(std::memory_order_relaxed);
  }
  // try_pop(top, below): the CAS. True: the batch of `top` is the caller's. False: `top`
  // holds the word now seen; start again from read_below().
  [[nodiscard]] bool try_pop(std::uint64_t& top, std::uint32_t below) noexcept {
    // acquire (both outcomes): the next read_below() reads a pushed batch's link. Strong:
    // a step that tests drive fails only when the top has changed.
    return top_.compare_exchange_strong(top, bumped(top, below), std::memory_order_acquire, std::memory_order_acquire);
  }

  [[nodiscard]] static constexpr std::uint32_t index_of(std::uint64_t top) noexcept {
    return static_cast<std::uint32_t>(top);
  }

 private:
  static constexpr std::uint64_t bumped(std::uint64_t top, std::uint32_t index) noexcept {
    return ((top >> 32) + 1) << 32 | index;
  }

  std::atomic<std::uint64_t> top_{0};  // top batch and version: see the overview
};

}  // namespace handoff::detail
