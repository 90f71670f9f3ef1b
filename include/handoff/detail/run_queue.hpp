// The per-thread run queue: everything that becomes runnable on a thread while that thread
// is running something else — an actor won by a nested send, a coroutine resumed by
// async_ask, a keyed-mutex waiter (coroutine or callback) that was granted or timed out,
// a callback of handoff::redis — waits here and runs after the current work, FIFO.
//
// The rule: work made runnable while a handler, a resumed coroutine or a callback runs on
// this thread runs after it returns, in the order it became runnable, from a loop (the
// stack stays constant however long the chain). Work made runnable on a thread that runs
// nothing of the library (top level) runs at once, on that thread, before the call that
// made it runnable returns; anything it makes runnable queues behind it.
//
// One exception keeps threads from deadlocking: a thread about to block inside a handler
// (ask() on a busy actor, a blocking keyed lock, destroying a busy actor) first runs
// what it owns only through this queue (run_before_blocking), since nobody else can.
//
// Entries are intrusive: an actor's link is its `ready_next_` word, a task's is `next`.
// A link word holds the next entry's address with bit 0 set for an actor (tagged
// pointers keep an idle actor at one word of queue state).
#pragma once

#include <cstdint>

namespace handoff::detail {

class actor_base;

// Something to run once on this thread's queue. `run` must not throw; it may free *t.
struct task {
  std::uintptr_t next = 0;  // queue link; touched only by the thread whose queue holds it
  void (*run)(task*) noexcept = nullptr;
};

// One actor this thread is draining, or a sentinel (actor == nullptr) while a task runs;
// frames form a stack through `parent`.
struct drain_frame {
  actor_base* actor;
  drain_frame* parent;
  bool destroyed;  // the actor was destroyed by one of its own handlers: stop touching it
};

// Per-thread scheduler state; touched only by its own thread. Trivial, so that access
// needs no TLS wrapper call on the hot path.
struct thread_state {
  drain_frame* top;      // innermost work running on this thread; nullptr at top level
  std::uintptr_t head;   // first queued entry (tagged link), 0: empty
  std::uintptr_t* tail;  // link word of the last entry; nullptr: empty
};
// initial-exec: a direct %fs-relative access even from the -fPIC library (the default
// model there calls __tls_get_addr on every access). The state is a few words, well within
// the static TLS space glibc reserves for libraries loaded with dlopen.
#if defined(__GNUC__)
#define HANDOFF_TLS_MODEL [[gnu::tls_model("initial-exec")]]
#else
#define HANDOFF_TLS_MODEL
#endif
HANDOFF_TLS_MODEL extern constinit thread_local thread_state tls;

// Appends an entry (its tagged address and its link word) to this thread's queue.
inline void enqueue_runnable(std::uintptr_t entry, std::uintptr_t* link) noexcept {
  *link = 0;
  if (tls.tail != nullptr) {
    *tls.tail = entry;
  } else {
    tls.head = entry;
  }
  tls.tail = link;
}

// Pops and runs the first entry under `parent` (the current frame; nullptr at top level):
// drains an actor, or runs a task under a sentinel frame so that what it makes runnable
// queues. False when the queue is empty.
bool run_next(drain_frame* parent) noexcept;

// Runs the queue until it is empty. Top level only (tls.top == nullptr).
void run_queued() noexcept;

// Makes t runnable on this thread: runs it now (and then the queue) at top level, else
// queues it behind the current work.
void schedule(task* t) noexcept;

// Inside a handler, before blocking: runs every queued entry now, nested under the
// current work (see the overview). No-op at top level or with an empty queue.
void run_before_blocking() noexcept;

// True when a call about to block must run_before_blocking() first: inside a handler,
// with entries queued. A blocking call that also joins a queue (a keyed lock's waiters)
// checks this before joining, so that what it runs cannot end up waiting behind it.
[[nodiscard]] inline bool must_run_before_blocking() noexcept { return tls.top != nullptr && tls.head != 0; }

}  // namespace handoff::detail
