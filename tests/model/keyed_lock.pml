/*
 * Promela model of the keyed mutex's per-key protocol (include/handoff/detail/lock_table.hpp,
 * lib/keyed/lock_protocol.cpp, detail/lock_entry.hpp's lock_word): handoff.pml's hand-off
 * rule (count before enqueue, the 0 -> 1 increment owns, release subtracts what was
 * consumed), with lockers that take and join under the table's shard lock and holders that
 * release by CAS without it, plus what the keyed mutex adds: waiters that time out, leases
 * that the timer expires, and the entry's life in the table (idle entries that stay, and
 * that a lock of another key in the same shard may reclaim at any moment).
 * Checked by spin through check.sh (MODEL=keyed_lock.pml); see tests/model/README.md.
 *
 * NL lockers take one key once each. Each chooses nondeterministically whether it asks
 * for a lease and whether its wait may time out, so every combination is explored. One
 * timer process (the lease timer's thread) may expire the current lease at any moment.
 * Memory is sequentially consistent: the model checks the interleavings, not the C++
 * memory orders.
 *
 * What is modelled, as in the code:
 *   lookup    under the shard lock: find the entry, or create it (a new object each time,
 *             so a reference kept past its removal is caught); whether it may stay idle
 *             is chosen at creation (both explored)
 *   lock      under the shard lock: count 0 -> 1 by a load and a plain store (nobody else
 *             writes a count of 0 without that lock), the key is held; else (after the
 *             waiter node is allocated) count++, and if that found 0 (released meanwhile
 *             by a holder's CAS) the key is held, else push a waiter node (reserve, link),
 *             both before the shard lock is let go
 *   wait      the waiter may go to sleep (CAS waiting -> sleeping); a timed one may give
 *             up: CAS waiting|sleeping -> cancelled. The grant is the CAS the other way.
 *   release   (the holder, or the timer for an expired lease) pop outside the lock;
 *             count -= uncounted; CAS the waiter to granted, or find it cancelled, count
 *             it as uncounted and pop again. Mailbox empty: an entry that may stay idle is
 *             released by CAS count uncounted -> 0 without the lock (failing, a waiter is
 *             counted: under the shard lock its node is linked); otherwise, under the
 *             shard lock, pop again; still empty: count = 0, and the entry leaves the
 *             table if refs == 0.
 *   reclaim   a lock of another key in the same shard (process `evictor`), under the shard
 *             lock, takes over the entry if it is idle: count == 0 and refs == 0.
 *   lease     armed after the grant; the holder's unlock and the timer's expiry both CAS
 *             `leased` token -> 0 under the timer mutex; the winner releases. The timer
 *             counts the expired guard in `refs` (under the shard lock, inside its timer
 *             mutex section) before the release; the guard's unlock then drops that
 *             reference, removing the entry if count == 0 and refs == 0.
 *
 * Assertions: the key is taken only when nobody holds it and handed over only by its
 * holder (ghost `own`); a cancelled waiter is never granted; grants follow push order,
 * skipping only cancelled waiters (FIFO of live waiters); the hand-off never subtracts
 * count to 0; the final release finds count == uncounted; an entry is removed only when
 * count == 0, refs == 0 and its mailbox is empty, and nobody touches it afterwards; the
 * monitor's invariant in every state; at the end the key is free, nothing is counted and
 * the entry is gone. Invalid end states (a waiter blocked forever) are errors too.
 *
 * The idle entry may outlive every locker: at the end the key is free, nothing is counted,
 * and the entry is gone or may stay idle.
 *
 * Switches (spin -DNAME=VALUE):
 *   NL             lockers (default 3)
 *   LEASES         0: nobody asks for a lease (no timer process). Default 1.
 *   TIMEOUTS       0: every wait is untimed. Default 1.
 *   EVICT          times the evictor looks for an idle entry to reclaim. Default 1.
 *   IDLE           whether a new entry may stay idle: 0 never, 1 always, 2 either
 *                  (chosen by the creating locker). Default 2.
 * Broken variants, each expected to be rejected:
 *   PUSH_OUTSIDE   the waiter pushes its node after leaving the shard lock
 *   SUB_AFTER      the holder uncounts after its grant instead of before
 *   BROKEN_CANCEL  the holder grants with a load and a plain store instead of a CAS,
 *                  so a waiter that gave up in between is granted (the key is lost)
 *   BROKEN_LEASE   the guard's unlock disarms the lease with a plain store and always
 *                  releases: after an expiry the key is released twice
 *   BROKEN_REFS    the timer does not count the expired guard in refs: the entry may be
 *                  removed while that guard still refers to it
 *   JOIN_BLIND     join pushes the waiter whatever count it found (as when the release
 *                  took the shard lock): a key released meanwhile strands the waiter
 *   STORE_RELEASE  the lock-free release checks count == uncounted, then stores 0: a
 *                  request counted in between is lost
 *   TAKE_OUTSIDE   the lock's take comes after the shard lock is let go: the entry may be
 *                  reclaimed in between
 *   JOIN_OUTSIDE   the join (count++ and its push, made one step) comes after the shard
 *                  lock is let go: a take's load and store may straddle it, and the store
 *                  overwrites the joiner's count (two holders, or a lost waiter)
 *   RECLAIM_HELD   the reclaim checks refs only, not count: it takes a held entry
 */

#ifndef NL
#define NL 3
#endif
#ifndef LEASES
#define LEASES 1
#endif
#ifndef TIMEOUTS
#define TIMEOUTS 1
#endif
#ifndef EVICT
#define EVICT 1
#endif
#ifndef IDLE
#define IDLE 2
#endif

#define NONE 255
#define TIMER NL      /* `own` while the timer releases an expired lease */

#define WAITING 0
#define SLEEPING 1
#define GRANTED 2
#define CANCELLED 3

bit shard = 0;        /* the shard lock */
bit may_idle = 0;     /* the entry's: chosen at its creation */
bit tmx = 0;          /* the lease timer's mutex */

/* The table: the id of the key's entry, NONE when it has none. Each creation makes a new
 * id, so "entry e is alive" is e == cur. The fields below belong to entry `cur`: at most
 * one entry of the key exists at a time, and a new one starts from zero (asserted). */
byte cur = NONE;
byte nextid = 0;
short count = 0;      /* requests counted, not finished */
byte refs = 0;        /* expired guards that still refer to the entry */
byte leased = 0;      /* token of the leased hold, 0: none */
byte lease_token = 0; /* timer mutex: the token the scheduled lease expires */
bit scheduled = 0;    /* timer mutex: the lease is in the timer's heap */
byte lease_e = NONE;  /* timer mutex: the entry the scheduled lease belongs to */
byte token = 0;       /* fencing tokens: one per hold, never reused */

/* The mailbox: Vyukov's queue as slots in push order. reserve = the exchange on head_,
 * link = the store that makes the node reachable. pop returns nothing while a producer is
 * in its in-flight window: the oldest slot not linked yet, or linked but followed by a
 * reserved slot that is not (as handoff.pml's POPPABLE). One spare slot keeps the index
 * head + 1 in bounds. */
byte slot_id[NL + 1];
bit slot_linked[NL + 1];
byte reserved = 0;
byte head = 0;

byte state[NL];       /* each locker's waiter node */

/* ---- ghost state ---- */
byte own = NONE;      /* who holds the key: a locker, TIMER, or NONE */
byte k = 0;           /* a loop index inside one d_step, 0 outside */
byte done = 0;

#define alive(e) (e == cur)
/* Every state: count never negative, count 0 exactly when nobody holds the key, and then
 * the mailbox is empty; no entry means nothing counted or referenced; a live lease
 * belongs to a held key. */
#define INVARIANT (count >= 0 && (count == 0) == (own == NONE) && (count != 0 || head == reserved) && \
                   (cur != NONE || (count == 0 && refs == 0)) && (leased == 0 || own != NONE))

inline lock_shard() { atomic { shard == 0 -> shard = 1 } }
inline unlock_shard() { shard = 0 }
inline lock_timer() { atomic { tmx == 0 -> tmx = 1 } }
inline unlock_timer() { tmx = 0 }

/* Consumer only: w = the next waiter (ws its slot), or NONE for "nothing now". */
inline pop(e, w, ws) {
  d_step {
    assert(alive(e));
    if
    :: head < reserved && slot_linked[head] && (head + 1 == reserved || slot_linked[head + 1]) ->
       w = slot_id[head]; ws = head; head++
    :: else -> w = NONE
    fi
  }
}

/* With the shard lock held and count == 0: removes the entry unless a guard refers to it
 * or it may stay idle. */
inline remove_if_unused(e) {
  d_step {
    assert(alive(e) && count == 0);
    if
    :: refs == 0 && !may_idle -> assert(head == reserved); cur = NONE
    :: else -> skip
    fi
  }
}

/* try_grant(w): the holder `r` hands the key to w unless w gave up. */
inline try_grant(r, w, ws, granted) {
#ifndef BROKEN_CANCEL
  d_step {                                  /* CAS waiting|sleeping -> granted */
    if
    :: state[w] == WAITING || state[w] == SLEEPING ->
       assert(own == r);
       /* FIFO of live waiters: everyone pushed before w was granted or gave up */
       k = 0;
       do
       :: k < ws -> assert(state[slot_id[k]] >= GRANTED); k++
       :: else -> break
       od;
       k = 0; token++; state[w] = GRANTED; own = w; granted = 1
    :: else -> assert(state[w] == CANCELLED); granted = 0
    fi
  }
#else
  granted = (state[w] != CANCELLED);        /* a load ... */
  if
  :: granted -> d_step { assert(own == r); assert(state[w] != CANCELLED); token++; state[w] = GRANTED; own = w }   /* ... then a store */
  :: else -> skip
  fi
#endif
}

/* lock_table::release(e) by `r` (a holder, or TIMER). */
inline release(r, e, w, ws, unc, granted) {
  unc = 1;
  do
  :: pop(e, w, ws);
     if
     :: w == NONE && may_idle ->            /* the lock-free release: CAS unc -> 0 */
#ifndef STORE_RELEASE
        d_step {
          assert(alive(e) && own == r);
          if
          :: count == unc -> count = 0; own = NONE; granted = 1
          :: else -> granted = 0
          fi
        }
#else
        granted = (count == unc);
        if
        :: granted -> d_step { count = 0; own = NONE }
        :: else -> skip
        fi
#endif
        if
        :: granted -> break                 /* e is not touched again: it may go now */
        :: else ->
           lock_shard();                    /* the counted request's push is done under it */
           pop(e, w, ws);
           assert(w != NONE);
           unlock_shard()
        fi
     :: w == NONE && !may_idle ->
        lock_shard();
        pop(e, w, ws);                      /* exact here: requests push under this lock */
        if
        :: w == NONE ->
           d_step {
             assert(alive(e));
             assert(own == r);
             assert(count == unc);          /* nobody else is counted */
             count = 0; own = NONE
           }
           remove_if_unused(e);
           unlock_shard();
           break
        :: else -> unlock_shard()
        fi
     :: else -> skip
     fi;
#ifndef SUB_AFTER
     d_step { assert(alive(e)); count = count - unc; assert(count > 0) }   /* w is counted */
#endif
     try_grant(r, w, ws, granted);
#ifdef SUB_AFTER
     d_step { assert(alive(e)); count = count - unc }
#endif
     unc = 1;
     if
     :: granted -> break
     :: else -> skip                        /* skipped: w's count is uncounted next round */
     fi
  od;
  w = 0; ws = 0; unc = 0; granted = 0
}

/* Another key's lock in the same shard, finding it full: takes over an idle entry. It
 * looks EVICT times, each at any moment. */
active proctype evictor() {
  byte tries = 0;
  do
  :: tries == EVICT -> break
  :: else ->
     tries++;
     lock_shard();
     d_step {
#ifndef RECLAIM_HELD
       if
       :: cur != NONE && count == 0 && refs == 0 -> assert(head == reserved && leased == 0); cur = NONE
       :: else -> skip
       fi
#else
       if
       :: cur != NONE && refs == 0 -> cur = NONE
       :: else -> skip
       fi
#endif
     }
     unlock_shard()
  od;
  tries = 0
}

/* A guard whose lease expired lets go of the entry. */
inline drop_ref(e) {
  lock_shard();
  d_step { assert(alive(e)); assert(refs > 0); refs-- }
  if
  :: count == 0 -> remove_if_unused(e)
  :: else -> skip
  fi;
  unlock_shard()
}

proctype locker(byte me) {
  byte e, w, ws, unc, mytok;
  bit lease, timed, granted, stays;

  if
  :: lease = 0
#if LEASES
  :: lease = 1
#endif
  fi;
  if
  :: timed = 0
#if TIMEOUTS
  :: timed = 1
#endif
  fi;

  if                                        /* whether an entry this lock creates may stay idle */
#if IDLE != 1
  :: stays = 0
#endif
#if IDLE != 0
  :: stays = 1
#endif
  fi;
  lock_shard();
  d_step {                                  /* find, or create */
    if
    :: cur == NONE ->
       assert(count == 0 && refs == 0 && leased == 0 && head == reserved);
       cur = nextid; nextid++; may_idle = stays
    :: else -> skip
    fi;
    e = cur
  }
#ifdef TAKE_OUTSIDE
  unlock_shard();
#endif
  if
  :: count == 0 ->                          /* the take: a load finds the count 0, then a */
     d_step {                               /* plain store, which nobody may have preceded */
       assert(alive(e) && own == NONE && count == 0);
       count = 1; own = me; token++; mytok = token
     }
#ifndef TAKE_OUTSIDE
     unlock_shard()
#endif
  :: else ->
#ifdef TAKE_OUTSIDE
     lock_shard();
#endif
#ifdef JOIN_OUTSIDE
     unlock_shard();
#endif
     d_step {                               /* join: fetch_add */
       assert(alive(e));
       granted = (count == 0); count++;
#ifdef JOIN_BLIND
       granted = 0;
#endif
       if
       :: granted -> assert(own == NONE); own = me; token++; mytok = token
       :: else -> skip
       fi;
#ifdef JOIN_OUTSIDE
       /* the push with the count, so that only a take's load and store can straddle them */
       if
       :: !granted -> ws = reserved; slot_id[ws] = me; reserved++; slot_linked[ws] = 1
       :: else -> skip
       fi
#endif
     }
#ifdef JOIN_OUTSIDE
     lock_shard();
#endif
     if
     :: granted -> granted = 0; unlock_shard(); goto held
     :: else -> skip
     fi;
#ifdef JOIN_OUTSIDE
     unlock_shard();
#else
     d_step { ws = reserved; slot_id[ws] = me; reserved++ };
#endif
#if defined(PUSH_OUTSIDE)
     unlock_shard();
     slot_linked[ws] = 1;
#elif defined(JOIN_OUTSIDE)
     skip;
#else
     slot_linked[ws] = 1;
     unlock_shard();
#endif
     ws = 0;
     /* wait_for_grant: spin, maybe sleep, maybe time out */
     do
     :: state[me] == GRANTED -> break
     :: d_step { state[me] == WAITING -> state[me] = SLEEPING }
     :: timed ->
        d_step {                            /* cancel(): CAS waiting|sleeping -> cancelled */
          if
          :: state[me] == WAITING || state[me] == SLEEPING -> state[me] = CANCELLED; granted = 0
          :: else -> granted = 1            /* the grant won */
          fi
        }
        if
        :: granted -> break
        :: else -> goto finished            /* still counted: a holder skips and uncounts us */
        fi
     od;
     atomic { assert(own == me && state[me] == GRANTED); granted = 0; mytok = token }
  fi;
held:

  if
  :: lease ->                               /* arm_lease, after the grant */
     lock_timer();
     d_step { assert(alive(e) && own == me); leased = mytok; lease_token = mytok; lease_e = e; scheduled = 1 }
     unlock_timer()
  :: else -> skip
  fi;

  /* the critical section: the key is ours unless our lease expires */
  assert(own == me || lease);

  if
  :: lease ->                               /* unlock_leased */
#ifndef BROKEN_LEASE
     lock_timer();
     d_step {                               /* disarm_lease: CAS leased mytok -> 0 */
       if
       :: leased == mytok -> leased = 0; scheduled = 0; granted = 1
       :: else -> granted = 0
       fi
     }
     unlock_timer();
#else
     lock_timer();
     d_step { leased = 0; scheduled = 0; granted = 1 }   /* plain store: releases regardless */
     unlock_timer();
#endif
     if
     :: granted -> granted = 0; release(me, e, w, ws, unc, granted)
     :: else -> assert(own != me); drop_ref(e)   /* the timer released the key for us */
     fi
  :: else -> release(me, e, w, ws, unc, granted)
  fi;

finished:
  e = 0; mytok = 0; lease = 0; timed = 0; stays = 0;
  done++
}

#if LEASES
/* The lease timer's thread: fires the scheduled lease at any moment (under its mutex),
 * then releases the key outside the mutex, as run_fired() does. */
active proctype timer() {
  byte e, w, ws, unc;
  bit granted;
end:
  do
  :: atomic { tmx == 0 && scheduled -> tmx = 1; scheduled = 0 }
     d_step {                               /* fire(): CAS leased lease_token -> 0 */
       e = lease_e;
       assert(alive(e));
       if
       :: leased == lease_token -> leased = 0; assert(own != NONE && own != TIMER); own = TIMER; granted = 1
       :: else -> granted = 0
       fi
     }
     if
     :: granted ->
#ifndef BROKEN_REFS
        lock_shard();                       /* count the expired guard: lock order timer, shard */
        d_step { assert(alive(e)); refs++ }
        unlock_shard();
#endif
        unlock_timer();
        granted = 0;
        release(TIMER, e, w, ws, unc, granted)
     :: else -> unlock_timer()
     fi;
     e = 0
  od
}
#endif

/* The invariant, checked in every reachable state. */
active proctype monitor() {
end:
  !(INVARIANT) -> assert(INVARIANT)
}

init {
  byte i;
  atomic {
    for (i : 0 .. NL - 1) { run locker(i) }
    i = 0
  };
  /* quiescent: every locker returned, the key is free and no release is finishing (the
   * last one lets go of the shard lock after removing the entry) */
  (done == NL && own == NONE && shard == 0 && tmx == 0);
  assert(count == 0 && refs == 0 && leased == 0 && (cur == NONE || may_idle) && head == reserved)
}
