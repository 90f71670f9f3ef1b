// The per-thread run queue: everything that becomes runnable on a thread while that thread
// is running something else — an actor won by a nested send, a coroutine resumed by
// async_ask, a keyed-mutex waiter (coroutine or callback) that was granted or timed out,
// a callback of handoff::redis, a handoff::redis actor won by a post — waits here and runs
// after the current work.
//
// The rule: work made runnable while a handler, a resumed coroutine or a callback runs on
// this thread runs after it returns, depth-first: before work queued earlier, in the order
// it became runnable, from a loop (the stack stays constant however long the chain). So a
// recursive fan-out (an actor per call) keeps one path of the tree alive, as a call stack
// would, instead of a whole level. After 64 such runs in a row, older work gets a turn, so
// that two actors that keep winning each other starve nothing. Work made runnable on a
// thread that runs nothing of the library (top level) runs at once, on that thread, before
// the call that made it runnable returns; anything it makes runnable queues behind it.
// Deferred sends (and an executor that runs a continuation inline) join a second, FIFO
// list, which runs when the depth-first one gives it a turn or is empty.
//
// One exception keeps threads from deadlocking: a thread about to block (ask() on a busy
// actor, a blocking keyed lock, destroying a busy actor) first runs what it owns only
// through this queue (run_before_blocking), since nobody else can.
//
// Entries are intrusive, of two kinds, and the queue knows nothing else of them:
//   task      a link word and its own run function (coroutines, grants, callbacks);
//   runnable  a link word only, run through run_runnable(), which the one kind of
//             runnable (the actor, lib/actor/actor_base.cpp) defines. An idle actor pays
//             one word of queue state and no function pointer.
// A link word holds the next entry's address with bit 0 set for a runnable (tagged
// pointers tell the kinds apart).
#pragma once

#include <coroutine>
#include <cstdint>

#include "handoff/detail/tls_model.hpp"

namespace handoff::detail {

// Something to run once on this thread's queue. `run` must not throw; it may free *t.
struct task {
  std::uintptr_t next = 0;  // queue link; touched only by the thread whose queue holds it
  void (*run)(task*) noexcept = nullptr;
};

// Something the queue runs again and again, with no run function of its own: its
// implementer derives from it and defines run_runnable().
struct runnable {
  std::uintptr_t ready_next = 0;  // queue link; touched only by the thread whose queue holds it
};

// A coroutine resumed from the run queue (async_ask's answer).
struct resumable : task {
  resumable() noexcept { run = &resume_handle; }
  std::coroutine_handle<> handle;
  static void resume_handle(task* t) noexcept { static_cast<resumable*>(t)->handle.resume(); }
};

struct drain_frame;
class test_driver;

// Runs r, just popped from this thread's queue, with tls.top == parent (the current frame;
// nullptr at top level). False: r went on elsewhere without running here (an actor handed
// to an executor with idle workers because other entries wait behind it: has_queued()), and
// the queue pops its next entry. Defined by the implementer of runnable, not by the queue.
bool run_runnable(runnable* r, drain_frame* parent) noexcept;

// r's run-queue entry: its address, tagged.
[[nodiscard]] inline std::uintptr_t entry_of(runnable* r) noexcept { return reinterpret_cast<std::uintptr_t>(r) | 1U; }

// One runnable this thread is draining (an actor; compared by address only), or a sentinel
// (actor == nullptr) while a task runs; frames form a stack through `parent`.
// (`stop` sits between the two pointers: adjacent, GCC's -O2 stored them through a vector
// register, at a cost in instructions on every frame.)
struct drain_frame {
  const runnable* actor;
  // Why the turn ends after the running handler, 0: it need not. One byte, so that the
  // drain loop tests one load per message. Bits:
  //   stop_destroyed  the actor was destroyed by one of its own handlers: stop touching it
  //   stop_yield      a handler deferred to its own actor: hand the actor on after it
  unsigned char stop;
  drain_frame* parent;
};
inline constexpr unsigned char stop_destroyed = 1;
inline constexpr unsigned char stop_yield = 2;

// Per-thread scheduler state; touched only by its own thread. Trivial, so that access
// needs no TLS wrapper call on the hot path.
struct thread_state {
  drain_frame* top;        // innermost work running on this thread; nullptr at top level
  std::uintptr_t now;      // depth-first list: what the running work made runnable, first
  std::uintptr_t* insert;  // link word the current work's next entry goes after; nullptr: `now`
  unsigned now_streak;     // entries run from `now` since `later` last had a turn (see run_next)
  std::uintptr_t later;    // FIFO list (tagged links), 0: empty
  std::uintptr_t* tail;    // link word of the last `later` entry; nullptr: empty
  // Set by a send between its admission and its push, which then calls
  // actor_base::after_push(): with take_over, an actor whose owner offers the drain, which
  // this sender may take over (detail/ownership.hpp); else a bounded actor whose room
  // bucket this woken sender holds locked until its message is in, then wakes the next
  // blocked sender if room_owed (lib/actor/mailbox_room.cpp). One field, so that a push
  // tests one word for both.
  void* after_push;
  bool room_owed;
  bool take_over;
  // The handoff::testing::scheduler this thread runs under (detail/test_driver.hpp);
  // nullptr: none, everything runs as documented.
  test_driver* driver;
};
HANDOFF_TLS_MODEL extern constinit thread_local thread_state tls;

// Makes an entry (its tagged address and its link word) runnable after the current work,
// behind what the current work made runnable before it and ahead of everything else.
// (Two branches rather than one pointer to the link word to change: the address of
// tls.now takes several instructions to form, and the first push after each pop takes
// that branch.)
inline void push_now(std::uintptr_t entry, std::uintptr_t* link) noexcept {
  if (std::uintptr_t* at = tls.insert; at != nullptr) {
    *link = *at;
    *at = entry;
  } else {
    *link = tls.now;
    tls.now = entry;
  }
  tls.insert = link;
}

// Appends an entry to the FIFO list: it runs after everything queued before it.
inline void push_later(std::uintptr_t entry, std::uintptr_t* link) noexcept {
  *link = 0;
  if (tls.tail != nullptr) {
    *tls.tail = entry;
  } else {
    tls.later = entry;
  }
  tls.tail = link;
}

// True when this thread has queued work.
[[nodiscard]] inline bool has_queued() noexcept { return (tls.now | tls.later) != 0; }

// Pops and runs the next entry under `parent` (the current frame; nullptr at top level):
// runs a runnable (run_runnable: an actor drains, or, when more work waits here and its
// executor has idle workers, is handed to it so that the pool spreads it), or runs a task
// under a sentinel frame so that what it makes runnable queues. False when the queue is
// empty.
bool run_next(drain_frame* parent) noexcept;

// For a test scheduler (handoff/testing.hpp), which picks the order itself: takes the
// next entry off this thread's queue without running it (0: empty), and runs one entry
// under `parent` as run_next() would have.
std::uintptr_t pop_entry() noexcept;
void run_entry(std::uintptr_t entry, drain_frame* parent) noexcept;

// Runs the queue until it is empty. Top level only (tls.top == nullptr).
void run_queued() noexcept;

// Hands this thread's queue to another thread: take_queue() takes every entry off it, as
// one list in the order they would have run (0: empty); adopt_queue(list) appends such a
// list to the calling thread's FIFO list. For work that a thread made runnable and another
// runs (a timer service's batch, sent on its thread, run on an executor). The entries
// must not depend on the taking thread's carry slot (see detail/message.hpp): no send
// queued them with the slot free.
[[nodiscard]] std::uintptr_t take_queue() noexcept;
void adopt_queue(std::uintptr_t list) noexcept;

// Makes t runnable on this thread: runs it now (and then the queue) at top level, else
// queues it after the current work (push_now).
void schedule(task* t) noexcept;

// Before blocking: runs every queued entry now, nested under the current work if any (see
// the overview). At top level the queue holds only deferred sends. No-op when empty.
void run_before_blocking() noexcept;

// True when a call about to block must run_before_blocking() first: entries are queued.
// A blocking call that also joins a queue (a keyed lock's waiters) checks this before
// joining, so that what it runs cannot end up waiting behind it.
[[nodiscard]] inline bool must_run_before_blocking() noexcept { return has_queued(); }

}  // namespace handoff::detail
