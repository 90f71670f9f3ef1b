/*
 * Promela model of a timer entry's life in a timer service (lib/timer/timer_core.hpp,
 * handoff/detail/timer_entry.hpp): cancel and re-arm by the handle's holder against a
 * fire by the driver and the deliveries it queued in the target actor's mailbox. Checked
 * by spin under ctest through tests/model/check.sh (MODEL=timer_entry.pml); see
 * tests/model/README.md.
 *
 * One one-shot entry aimed at an actor<State> (its sends are counted deliveries). Every
 * field is touched under the service's lock (`lk`), as in the library:
 *   live, linked (in the wheel, due: every deadline here is in the past), gen (the
 *   generation), in_flight (deliveries posted and not yet ended), firing (the driver is
 *   sending it, unlocked), handle, payload, freed (back in the pool).
 * Processes:
 *   D (the driver): while the entry is linked, unlinks it, counts a delivery in flight,
 *     marks it firing, unlocks, posts {gen} to the mailbox, locks, clears firing, tidies.
 *   A (the actor): takes deliveries one at a time, later than D posts them (a busy owner);
 *     begin: runs the payload only if the entry is live and the generation matches (a
 *     one-shot is then over: not live, generation bumped); end: in_flight - 1, tidy.
 *   C (the handle's holder): re-arms into the past up to REARMS times (each makes D fire
 *     again while the earlier deliveries wait), then cancels, which drops the handle.
 * tidy: an entry not live, not linked, not firing, with no delivery in flight destroys
 * its payload, and once no handle refers to it returns to the pool.
 *
 * Assertions:
 *   - the payload runs only for the latest arming (`arms`, a ghost count of schedules and
 *     re-arms, travels with each delivery) and never after a cancel;
 *   - nothing touches a freed entry: no delivery begins or ends on it, no free twice;
 *   - after cancel() returns the driver never touches the target;
 *   - at the end the entry is freed once, its payload destroyed, nothing in flight.
 * Broken variants, each expected to be rejected:
 *   WRAP         in_flight is a WRAP_BITS-bit counter (16 in the library's first version,
 *                2 here to keep the search small): 1 + REARMS >= 2^WRAP_BITS fires queue that
 *                many deliveries, the count wraps to 0, the cancel frees the entry under
 *                them, and a delivery then begins on a freed entry
 *   NO_GEN       a delivery checks only that the entry is live: one queued before a
 *                re-arm runs the payload for the old deadline
 *   NO_WAIT      cancel() returns while the driver is still sending the entry
 *   NO_INFLIGHT  tidy ignores the deliveries in flight: the entry is freed under them
 */

#ifndef REARMS
#define REARMS 2
#endif
#ifdef WRAP
#ifndef WRAP_BITS
#define WRAP_BITS 2
#endif
#define INC_INFLIGHT in_flight = (in_flight + 1) % (1 << WRAP_BITS)
#define DEC_INFLIGHT in_flight = (in_flight + (1 << WRAP_BITS) - 1) % (1 << WRAP_BITS)
#else
/* The library's count cannot wrap (48 bits, asserted at the increment). */
#define INC_INFLIGHT assert(in_flight < 255); in_flight++
#define DEC_INFLIGHT assert(in_flight > 0); in_flight--
#endif

bit lk = 0;
bool live = true, linked = true, firing = false, handle = true, payload = true, freed = false;
byte gen = 0, in_flight = 0;
byte arms = 1;          /* ghost: schedules and re-arms so far */
bool cancelled = false; /* ghost: cancel() cleared live */
bool cancel_returned = false, c_done = false, d_done = false;
byte frees = 0, runs = 0;
chan mailbox = [REARMS + 2] of { byte, byte };  /* {gen, arms} */

inline lock() { atomic { lk == 0 -> lk = 1 } }
inline unlock() { lk = 0 }

inline tidy() {
  if
  :: !live && !linked && !firing &&
#ifndef NO_INFLIGHT
     in_flight == 0 &&
#endif
     true ->
       payload = false;  /* destroyed (unlocked in the library; no one else touches it) */
       if
       :: !handle -> assert(!freed); freed = true; frees++
       :: else -> skip
       fi
  :: else -> skip
  fi
}

proctype driver() {
  byte g, a;
  do
  :: lock();
     if
     :: linked ->
          assert(!freed && live);
          linked = false;
          INC_INFLIGHT;
          firing = true;
          g = gen;
          a = arms;
          unlock();
          assert(!cancel_returned);  /* the send touches the target */
          mailbox ! g, a;
          lock();
          firing = false;
          tidy();
          unlock()
     :: !linked && c_done -> unlock(); break
     :: else -> unlock()
     fi
  od;
  d_done = true
}

proctype actor() {
  byte g, a;
  bool ran;
  do
  :: mailbox ? g, a ->
       lock();
       assert(!freed);  /* begin */
#ifdef NO_GEN
       ran = live;
#else
       ran = live && g == gen;
#endif
       if
       :: ran -> live = false; gen++  /* a one-shot is over once it starts */
       :: else -> skip
       fi;
       unlock();
       if
       :: ran -> assert(payload && !cancelled && a == arms); runs++
       :: else -> skip
       fi;
       lock();
       assert(!freed);  /* end */
       DEC_INFLIGHT;
       tidy();
       unlock()
  :: d_done && empty(mailbox) -> break
  od
}

proctype holder() {
  byte n = 0;
  do
  :: n < REARMS ->
       lock();
       if
       :: live -> gen++; arms++; linked = true  /* into the past: due at once */
       :: else -> skip
       fi;
       unlock();
       n++
  :: n < REARMS -> break  /* cancel early */
  :: n == REARMS -> break
  od;
  lock();
  if
  :: live -> live = false; cancelled = true; gen++; linked = false
  :: else -> skip
  fi;
#ifndef NO_WAIT
  do
  :: firing -> unlock(); lock()
  :: else -> break
  od;
#endif
  handle = false;
  tidy();
  cancel_returned = true;
  unlock();
  c_done = true
}

init {
  atomic { run driver(); run actor(); run holder() }
  _nr_pr == 1;
  assert(frees == 1 && freed && !payload && in_flight == 0 && runs <= 1)
}
