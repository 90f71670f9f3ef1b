// The timer service's entry and the calls its inline templates make into lib/timer/.
// Internal to handoff::timer_service (handoff/timer.hpp); users never name these.
//
// A timer_entry is one pending or running timer: 96 bytes from a pool of the service,
// linked into a slot of the timing wheel (lib/timer/wheel.hpp) while pending and into its
// target's list (lib/timer/target_table.hpp) until it is over. Its fields
// are touched only under its shard's lock (lib/timer/timer_shard.hpp), except the
// payload, which the thread that owns it touches without the lock:
//  - while the entry is firing, the driving thread (it sends the payload);
//  - while a delivery of it runs, the actor's handler (it runs the payload in place);
//  - once the timer is over, the one thread that destroys it.
// A delivery is the message a timer posts to an actor<State>: {core, entry, generation}.
// It runs the payload only if the entry's generation is still the one it was sent with;
// cancel() and rearm() bump the generation, so a cancel that happens before the delivery
// starts keeps the payload from running.
#pragma once

#include <cstddef>
#include <cstdint>

namespace handoff::detail {

class timer_core;
struct timer_entry;

enum class timer_op : unsigned char {
  send,     // post a delivery (actor<State>) or the message (basic_actor): true if accepted
  destroy,  // destroy the payload
};
// Per instantiation (target type, payload type). `gen` is the generation to send with.
using timer_ops = bool (*)(timer_core* c, timer_entry* e, std::uint64_t gen, timer_op op) noexcept;

enum class timer_kind : unsigned char { once, fixed_rate, fixed_delay };

// The bits of timer_entry::flags.
struct timer_flag {
  static constexpr std::uint8_t live = 1;         // will still send or run
  static constexpr std::uint8_t handle = 2;       // a handle refers to it
  static constexpr std::uint8_t payload = 4;      // holds a payload not yet destroyed
  static constexpr std::uint8_t trivial = 8;      // the payload's destruction is a no-op
  static constexpr std::uint8_t destroying = 16;  // the payload is being destroyed, unlocked
  static constexpr std::uint8_t delivers = 32;    // actor<State>: sends counted deliveries
  static constexpr unsigned kind_shift = 6;       // bits 6-7: timer_kind
  // A new timer's bits, but live, handle and payload: known where it is made.
  static constexpr std::uint8_t of(timer_kind kind, bool is_trivial, bool is_delivery) noexcept {
    return static_cast<std::uint8_t>((is_trivial ? trivial : 0) | (is_delivery ? delivers : 0) |
                                     (static_cast<unsigned>(kind) << kind_shift));
  }
};

struct timer_entry {
  static constexpr std::size_t payload_size = 24;
  static constexpr std::uint32_t no_index = ~std::uint32_t{0};
  static constexpr std::uint64_t max_in_flight = (std::uint64_t{1} << 48) - 1;

  timer_entry* next = nullptr;    // the slot's list, or the pool's free list
  timer_entry** pprev = nullptr;  // the pointer that points here: O(1) unlink
  std::int64_t deadline = 0;      // steady_clock ns (the service's clock)
  std::int64_t period = 0;        // ns; 0 for a one-shot
  timer_ops ops = nullptr;
  void* target = nullptr;  // the actor
  // Bumped by cancel, rearm, a one-shot's start, and reuse. 64-bit: a delivery queued
  // while the timer is re-armed 2^32 times (a minute of re-arms) would match a 32-bit one
  // again and run early; 2^64 re-arms take centuries.
  std::uint64_t gen = 0;
  // Deliveries posted and not yet run or destroyed. Each re-arm into the past while the
  // owner is busy queues one more, and a narrow count wraps (a 16-bit one after 65,536),
  // freeing the entry under the deliveries still queued. 48 bits cannot wrap: each count
  // is a message of at least 24 bytes held in a mailbox, and 2^48 of them exceed any
  // memory (asserted at the increment).
  std::uint64_t in_flight : 48 = 0;
  std::uint64_t where : 8 = 0;  // see timer_wheel: a level, the due list, or none
  std::uint64_t flags : 8 = 0;  // timer_flag
  // The list of the target's entries in the service (lib/timer/target_table.hpp), as pool
  // indices (lib/timer/entry_pool.hpp): 32-bit, so that the entry stays 96 bytes.
  std::uint32_t target_next = no_index;
  std::uint32_t target_prev = no_index;
  alignas(8) unsigned char payload[payload_size]{};
};
static_assert(sizeof(timer_entry) == 96);

// Thread-safe calls of the service, defined in lib/timer/timer_core.cpp.
struct timer_request {
  std::int64_t deadline;
  std::int64_t period;
  // timer_flag::of(kind; the payload's destructor does nothing, so it may run under the
  // lock; actor<State>: each send is a counted delivery)
  std::uint8_t flags;
  timer_ops ops;
  void* target;
  // Moves the payload in: under the lock (timer_schedule: a copy of bytes, a trivial move
  // constructor or a pointer to a boxed payload), or before the entry is linked with the
  // lock dropped (timer_schedule_moving: a move constructor is user code).
  void (*emplace)(timer_entry* e, void* source) noexcept;
  void* source;
};
// Allocates from the pool of this thread's shard (throws std::bad_alloc only when that
// shard's pool or table of targets must grow: more timers pending, or more actors with
// timers, than ever there; or at this thread's first schedule, which makes the shard),
// links the entry and returns it with a handle's reference.
timer_entry* timer_schedule(timer_core* c, const timer_request& r);
timer_entry* timer_schedule_moving(timer_core* c, const timer_request& r);  // the same: see emplace
bool timer_cancel(timer_core* c, timer_entry* e) noexcept;                  // also drops the handle's reference
bool timer_rearm(timer_core* c, timer_entry* e, std::int64_t deadline) noexcept;
bool timer_active(timer_core* c, timer_entry* e) noexcept;
void timer_detach(timer_core* c, timer_entry* e) noexcept;
// At least the service's now: what after(), rearm() and a fixed delay add their duration to.
std::int64_t timer_deadline_now(const timer_core* c) noexcept;
// A delivery: begin says whether to run the payload; end follows every begin, and a
// delivery destroyed unrun calls end alone (ran = false).
bool timer_delivery_begin(timer_core* c, timer_entry* e, std::uint64_t gen) noexcept;
void timer_delivery_end(timer_core* c, timer_entry* e, bool ran) noexcept;

}  // namespace handoff::detail
