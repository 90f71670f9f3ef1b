// The per-thread run queue (see detail/run_queue.hpp).
#include "handoff/detail/run_queue.hpp"

#include "handoff/detail/assert.hpp"
#include "handoff/run_deferred.hpp"

namespace handoff::detail {

HANDOFF_TLS_MODEL constinit thread_local thread_state tls{};

namespace {

// Depth-first runs in a row, while other work waits, before older work gets a turn: long
// enough that a recursive fan-out keeps its memory near a depth-first run's (a tree of
// actors, measured in the benchmarks), short enough that a conversation that keeps winning
// actors delays queued coroutines and grants by at most this many drains.
constexpr unsigned max_now_streak = 64;

// A tagged entry's runnable: its address is the entry less the tag (a subtraction that
// folds into the load's addressing; a mask would be an instruction of its own).
runnable* runnable_of(std::uintptr_t e) noexcept {
  return reinterpret_cast<runnable*>(e - 1);  // NOLINT(performance-no-int-to-ptr): see run_queue.hpp
}

std::uintptr_t* link_of(std::uintptr_t e) noexcept {
  if ((e & 1U) != 0) return &runnable_of(e)->ready_next;
  return &reinterpret_cast<task*>(e)->next;  // NOLINT(performance-no-int-to-ptr): untagged: a task
}

// The next entry, `now` first, off the queue (0: both lists empty).
[[gnu::always_inline]] inline std::uintptr_t pop_front() noexcept {
  std::uintptr_t e = tls.now;
  if (e != 0) {
    tls.now = *link_of(e);
  } else if ((e = tls.later) != 0) {
    tls.later = *link_of(e);
    if (tls.later == 0) tls.tail = nullptr;
  }
  return e;
}

// The streak is spent (or `now` is empty): the next entry comes from `later` if anything
// waits there; else the front of `now` (which may be a conversation that keeps re-queueing
// itself there) goes behind the rest. 0 when both lists are empty.
[[gnu::noinline]] std::uintptr_t pop_after_streak() noexcept {
  tls.now_streak = 0;
  if (tls.now != 0 && tls.later == 0) {
    const std::uintptr_t e = tls.now;
    tls.now = *link_of(e);
    push_later(e, link_of(e));
  }
  return pop_front();
}

// run_next()'s body, inlined into run_queued(): the loop a forwarding chain goes round
// once per hop.
[[gnu::always_inline]] inline bool pop_and_run(drain_frame* parent) noexcept {
  HANDOFF_ASSERT(tls.top == parent);
  for (;;) {
    std::uintptr_t entry = tls.now;
    if (entry != 0 && tls.now_streak < max_now_streak) {
      tls.now = *link_of(entry);
    } else if ((entry = pop_after_streak()) == 0) {
      return false;
    }
    // Counted whether or not other work waits: when nothing does, the turn `later` gets
    // after the streak (pop_after_streak) moves the one entry there and back, in order.
    ++tls.now_streak;
    tls.insert = nullptr;  // what this entry makes runnable goes first
    if ((entry & 1U) != 0) {
      if (!run_runnable(runnable_of(entry), parent)) continue;
    } else {
      auto* t = reinterpret_cast<task*>(entry);  // NOLINT(performance-no-int-to-ptr): untagged: a task
      // A sentinel frame: what the task makes runnable queues behind it instead of
      // recursing (a million granted coroutines must not nest), and ask() from it still
      // sees the actors being drained below it.
      drain_frame sentinel{nullptr, 0, parent};
      tls.top = &sentinel;
      t->run(t);
      tls.top = parent;
    }
    return true;
  }
}

}  // namespace

bool run_next(drain_frame* parent) noexcept { return pop_and_run(parent); }

std::uintptr_t pop_entry() noexcept {
  tls.insert = nullptr;  // it may point into the entry taken
  return pop_front();
}

void run_entry(std::uintptr_t entry, drain_frame* parent) noexcept {
  // Alone on the queue (the scheduler takes every entry off as it appears), so run_next
  // pops exactly this one; nothing else waits, so it is never handed to idle workers.
  HANDOFF_ASSERT(!has_queued());
  tls.insert = nullptr;
  push_now(entry, link_of(entry));
  (void)run_next(parent);
}

void run_queued() noexcept {
  HANDOFF_ASSERT(tls.top == nullptr);
  while (pop_and_run(nullptr)) {
  }
  tls.insert = nullptr;  // it points into an entry that has run (perhaps freed since)
}

std::uintptr_t take_queue() noexcept {
  std::uintptr_t list = tls.now;
  if (list == 0) {
    list = tls.later;
  } else {
    std::uintptr_t last = list;
    while (*link_of(last) != 0) last = *link_of(last);
    *link_of(last) = tls.later;
  }
  tls.now = 0;
  tls.later = 0;
  tls.tail = nullptr;
  tls.insert = nullptr;
  return list;
}

void adopt_queue(std::uintptr_t list) noexcept {
  while (list != 0) {
    const std::uintptr_t next = *link_of(list);
    push_later(list, link_of(list));
    list = next;
  }
}

void run_before_blocking() noexcept {
  drain_frame* const top = tls.top;
  if (top == nullptr) {
    if (has_queued()) run_queued();
    return;
  }
  while (run_next(top)) {
  }
  tls.insert = nullptr;  // the caller's sends go to the (empty) front, not after a run entry
}

void schedule(task* t) noexcept {
  push_now(reinterpret_cast<std::uintptr_t>(t), &t->next);
  if (tls.top == nullptr) run_queued();
}

}  // namespace handoff::detail

namespace handoff {

bool run_deferred() noexcept {
  if (detail::tls.top != nullptr || !detail::has_queued()) return false;
  detail::run_queued();
  return true;
}

}  // namespace handoff
