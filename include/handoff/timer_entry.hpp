// The timer service's entry and the calls its inline templates make into lib/timer/.
// Internal to handoff::timer_service (handoff/timer.hpp); users never name these.
//
// A timer_entry is one pending or running timer: 80 bytes from a pool of the service,
// linked into a slot of the timing wheel (lib/timer/wheel.hpp) while pending. Its fields
// are touched only under the service's lock (lib/timer/timer_core.hpp), except the
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
using timer_ops = bool (*)(timer_core* c, timer_entry* e, std::uint32_t gen, timer_op op) noexcept;

enum class timer_kind : unsigned char { once, fixed_rate, fixed_delay };

struct timer_entry {
  static constexpr std::size_t payload_size = 24;

  timer_entry* next = nullptr;    // the slot's list, or the pool's free list
  timer_entry** pprev = nullptr;  // the pointer that points here: O(1) unlink
  std::int64_t deadline = 0;      // steady_clock ns (the service's clock)
  std::int64_t period = 0;        // ns; 0 for a one-shot
  timer_ops ops = nullptr;
  void* target = nullptr;       // the actor
  std::uint32_t gen = 0;        // bumped by cancel, rearm, a one-shot's start, and reuse
  std::uint16_t in_flight = 0;  // deliveries posted and not yet run or destroyed
  std::uint8_t where = 0;       // see timer_wheel: a level, the due list, or none
  std::uint8_t flags = 0;       // see timer_core: live, handle, payload, kind
  alignas(8) unsigned char payload[payload_size]{};
};
static_assert(sizeof(timer_entry) == 80);

// Thread-safe calls of the service, defined in lib/timer/timer_core.cpp.
struct timer_request {
  std::int64_t deadline;
  std::int64_t period;
  timer_kind kind;
  bool trivial;   // the payload's destructor does nothing: it may run under the lock
  bool delivers;  // actor<State>: each send is a counted delivery
  timer_ops ops;
  void* target;
  void (*emplace)(timer_entry* e, void* source) noexcept;  // moves the payload in, under the lock
  void* source;
};
// Allocates from the pool (throws std::bad_alloc only when the pool must grow), links the
// entry and returns it with a handle's reference.
timer_entry* timer_schedule(timer_core* c, const timer_request& r);
bool timer_cancel(timer_core* c, timer_entry* e) noexcept;  // also drops the handle's reference
bool timer_rearm(timer_core* c, timer_entry* e, std::int64_t deadline) noexcept;
bool timer_active(timer_core* c, timer_entry* e) noexcept;
void timer_detach(timer_core* c, timer_entry* e) noexcept;
// At least the service's now: what after(), rearm() and a fixed delay add their duration to.
std::int64_t timer_deadline_now(const timer_core* c) noexcept;
// A delivery: begin says whether to run the payload; end follows every begin, and a
// delivery destroyed unrun calls end alone (ran = false).
bool timer_delivery_begin(timer_core* c, timer_entry* e, std::uint32_t gen) noexcept;
void timer_delivery_end(timer_core* c, timer_entry* e, bool ran) noexcept;

}  // namespace handoff::detail
