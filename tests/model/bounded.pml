/*
 * Promela model of the actor's bounded-mailbox path: the hand-off primitive of
 * handoff.pml with a capacity. A sender is admitted by try_acquire_below(CAP), a CAS
 * that counts only while the count is below the capacity (include/handoff/detail/
 * ownership.hpp); a sender that finds the mailbox full links a node of its own into its
 * bucket's FIFO list and sleeps in wait_for_room until it is woken (lib/actor/
 * mailbox_room.cpp); the owner releases after every message it runs (drain_step in
 * lib/actor/actor_base.cpp), reading the capacity before its release and waking the
 * oldest waiting sender when a release takes the count from above CAP/2 to CAP/2 or below
 * (actor_base::try_release), unless the oldest is woken already; a woken sender (the
 * holder of the wake-up) keeps the bucket's mutex from its wake-up until its message is
 * in the mailbox, and, when it was admitted with the mailbox at most half full, then
 * wakes the next one (pass_room). A destroyer deletes
 * the actor as soon as it is idle and every message has run or was given up; any later
 * read of the actor is a use-after-free. Checked by spin under ctest through
 * tests/model/check.sh (MODEL=bounded.pml); see tests/model/README.md.
 *
 * Memory is sequentially consistent here, which is what the seq_cst fences of the
 * sleeper/owner store-buffer pattern provide for those two accesses; the other orders
 * are not modelled. No executor and no budget: a bounded drain without a budget.
 *
 * Switches (spin -DNAME=VALUE):
 *   NS, M, CAP     senders, messages per sender, capacity (defaults 3, 2, 2)
 *   BOTH_PATHS     1 (default): a winning sender runs its message inline (finish_inline)
 *                  or puts it in front of the mailbox and drains from 0; 0: inline only
 *   TIMED          the first TIMED senders wait with a deadline (max_block) that may pass
 *                  at any moment while they sleep; one that finds no room then gives its
 *                  message up (default 0)
 *   SPURIOUS       a sleeping sender may wake without a notify (the condition variable's
 *                  spurious wake-up)
 * Woken senders are served in the order they were woken (the oldest waiting first): a
 * wake-up finds no woken sender whose message is not in the mailbox yet (asserted in
 * unlink_first). A sender that found room without being woken (it had just linked its
 * node, or it lost a retry and came back) is not ordered.
 * Broken variants, each expected to be rejected:
 *   CAP_AFTER      the owner reads the capacity after its release (use-after-free)
 *   FETCH_ADD      admission by fetch_add, undone by a fetch_sub when it was full
 *   SLEEPER_READS_FIRST   the sleeper reads the count before it links its node
 *   OWNER_READS_FIRST     the owner reads the sleepers before its release (the store-load
 *                  reordering that the missing fence would allow)
 *   NO_MUTEX       the owner wakes a node (sets `woken`, notifies) without the bucket's mutex
 *   NO_PASS        a woken sender never passes the wake-up on: one notify_one per crossing
 *   PASS_EARLY     a woken sender lets the mutex go (and hands on) once counted, before its
 *                  push: the next one's message may overtake it
 *   WAKE_WHILE_WOKEN  a wake-up wakes the oldest sleeper although another sender is woken
 *                  and not yet admitted: two race, and the younger may win
 *   NOTIFY_AFTER_UNLOCK   the waker notifies after letting the mutex go (the node, in the
 *                  woken sender's frame, may be gone); needs SPURIOUS or TIMED
 *   NO_MONITOR     leaves out the invariant process (for a broken variant whose
 *                  counterexample should reach the bug itself)
 */

#ifndef NS
#define NS 3
#endif
#ifndef M
#define M 2
#endif
#ifndef CAP
#define CAP 2
#endif
#ifndef BOTH_PATHS
#define BOTH_PATHS 1
#endif
#ifndef TIMED
#define TIMED 0
#endif

#define TOTAL (NS * M)
#define HALF (CAP / 2)

/* ---- the actor ---- */
short count = 0;          /* message_count; signed so that a broken variant may go below 0 */
bit destroyed = 0;        /* the actor was deleted: nobody may touch it any more */

/* The mailbox, as in handoff.pml: slots in push order, a push is reserve + link, and a
 * slot is handed out only when it is linked and its successor (if reserved) is too. */
byte slot[TOTAL + 1];
bit linked[TOTAL + 1];
byte R = 0;
byte H = 0;
byte front = 0;           /* the owner's own message, put in front (push_front) */
bit has_front = 0;
#define POPPABLE (has_front || (H < R && linked[H] && (H + 1 == R || linked[H + 1])))
#define LOOKS_EMPTY (!has_front && !(H < R && linked[H]))

/* ---- the actor's room bucket (static storage: outlives the actor) ---- */
byte mtx = 0;             /* the bucket's mutex: 0 free, else holder's _pid + 1 */
byte sleepers = 0;        /* room_bucket::sleepers: nodes linked */
byte tickets = 0;         /* room_bucket::tickets, kept dense (see drop_ticket) */
/* Sender s's node (room_waiter, in wait_for_room's frame) and its send's room_wait. */
bit alive[NS];            /* the node exists */
bit inlist[NS];           /* linked in the bucket's list */
byte tkt[NS];             /* room_wait::ticket, the node's place in the list (0: none yet) */
bit woken[NS];            /* room_waiter::woken */
bit asleep[NS];           /* in node.cv.wait(): until a notify (or a spurious wake-up) */

/* ---- ghost state for the assertions ---- */
byte owners = 0;
byte nextseq[NS];
byte nrun = 0;
byte gaveup = 0;          /* messages whose send timed out (mailbox_full, nothing sent) */
byte done = 0;
byte inflight = 0;        /* woken senders whose message is not in the mailbox yet (nor run) */

/* Any access to the actor's memory (its count, mailbox or options). */
#define TOUCH assert(!destroyed)

#define INVARIANT (owners <= 1 && (count == 0) == (owners == 0) && (count != 0 || (H == R && !has_front)) && count >= 0 && count <= CAP)

/* The bucket's mutex. */
inline lock() { atomic { mtx == 0 -> mtx = _pid + 1 } }
inline unlock() { d_step { assert(mtx == _pid + 1); mtx = 0 } }

/* Exactly once and per-sender FIFO: a sender's messages run in order, each once (a given
 * up one is skipped). */
inline run_msg(mm) {
  d_step {
    assert(owners == 1);
    assert(mm % M >= nextseq[mm / M]);
    nextseq[mm / M] = mm % M + 1;
    nrun++;
    mm = 0
  }
}

inline push(mm, k) {
  d_step { TOUCH; k = R; slot[k] = mm; R++ }
  d_step { TOUCH; linked[k] = 1; k = 0 }
}

/* room_bucket::wake_first(actor): unless a linked node is woken already (one woken at a
 * time), the oldest node (smallest ticket) gets its `woken` set and is notified (clears
 * `asleep`); it stays linked until its sender unlinks it. Touches only the bucket and the
 * node. With NOTIFY_AFTER_UNLOCK the notify is left to after_unlock_notify(). */
inline unlink_first(x, best) {
  d_step {
    best = NS; x = 0;
    do
    :: x < NS ->
       if
#ifndef WAKE_WHILE_WOKEN
       :: inlist[x] && woken[x] -> best = NS + 1   /* stays: nobody is woken */
#endif
       :: inlist[x] && !woken[x] && best != NS + 1 && (best == NS || tkt[x] < tkt[best]) -> best = x
       :: else -> skip
       fi;
       x++
    :: else -> break
    od;
    x = 0;
    if
    :: best > NS -> best = NS
    :: else -> skip
    fi;
    if
    :: best < NS ->
       assert(alive[best]);
#ifndef NO_MUTEX
       assert(inflight == 0);             /* FIFO: the last woken one's message is in */
#endif
       woken[best] = 1; inflight++;
#ifndef NOTIFY_AFTER_UNLOCK
       asleep[best] = 0;                  /* notify_one, under the mutex */
#endif
       skip
    :: else -> skip
    fi;
#ifndef NOTIFY_AFTER_UNLOCK
    best = 0
#else
    skip
#endif
  }
}

#ifdef NOTIFY_AFTER_UNLOCK
/* BROKEN: the notify after the unlock; the woken node may be gone by then. */
inline after_unlock_notify(best) {
  d_step {
    if
    :: best < NS -> assert(alive[best]); asleep[best] = 0
    :: else -> skip
    fi;
    best = 0
  }
}
#endif

/* Wake the oldest waiting sender, under the bucket's mutex (the owner's wake_senders
 * after its check of `sleepers`, and pass_room). */
inline wake_first(x, best) {
#ifdef NO_MUTEX
  unlink_first(x, best)
#else
  lock();
  unlink_first(x, best);
  unlock();
#ifdef NOTIFY_AFTER_UNLOCK
  after_unlock_notify(best)
#endif
#endif
}

/* wake_senders(): fence; sleepers == 0: return; else wake the oldest node. */
inline wake_senders(sl, x, best) {
#ifndef OWNER_READS_FIRST
  sl = sleepers;
#endif
  if
  :: sl != 0 -> wake_first(x, best)
  :: else -> skip
  fi;
  sl = 0
}

/* actor_base::try_release(X): read the capacity, release, wake on crossing half. */
inline try_release(X, ok, cap, before, sl, x, best) {
#ifndef CAP_AFTER
  d_step { TOUCH; cap = CAP }              /* options_->capacity, before the release */
#endif
#ifdef OWNER_READS_FIRST
  sl = sleepers;                           /* the fence's store-load order lost */
#endif
  d_step {                                 /* before = count_.fetch_sub(X) */
    TOUCH;
    before = count; count = count - X;
    if
    :: before == X -> owners--; ok = 1
    :: else -> ok = 0
    fi
  }
#ifdef CAP_AFTER
  d_step { TOUCH; cap = CAP }              /* BROKEN: *this may be gone by now */
#endif
  if
  :: cap != 0 && before > cap / 2 && before - X <= cap / 2 -> wake_senders(sl, x, best)
  :: else -> skip
  fi;
  before = 0; cap = 0; sl = 0
}

/* drain(X): a bounded drain. Releases after every message (X is 0 or 1); with nothing
 * poppable and nothing to release, the count says a sender is between its count and its
 * link: wait for it. */
inline drain(X, ok, cap, before, sl, got, mm, x, best) {
  do
  :: X != 0 ->
     try_release(X, ok, cap, before, sl, x, best);
     X = 0;
     if
     :: ok -> ok = 0; break
     :: else -> skip
     fi
  :: else ->
     d_step {
       TOUCH;
       if
       :: has_front -> mm = front; has_front = 0; front = 0; got = 1
       :: !has_front && POPPABLE -> mm = slot[H]; H++; got = 1
       :: else -> got = 0
       fi
     }
     if
     :: got -> run_msg(mm); X = 1; got = 0
     :: else -> POPPABLE
     fi
  od
}

/* wait_for_room(): under the bucket's mutex, take a ticket on the first wait of this
 * send, link the node in ticket order, fence, read the count. Full: no longer a holder
 * (a crossing is still to come); sleep until woken (cv.wait unlocks and sleeps in one
 * step), re-reading the count after each wake-up. Woken: the waker unlinked the node and
 * this sender is a holder; else unlink it. `room`: retry the admission (0: the deadline
 * passed with the mailbox full). */
inline wait_for_room(s, h, room, to) {
  lock();
  d_step {
    if
    :: tkt[s] == 0 -> tickets++; tkt[s] = tickets
    :: else -> skip
    fi
  }
#ifdef SLEEPER_READS_FIRST
  d_step { TOUCH; room = (count < CAP) }      /* BROKEN: read before the node is linked */
  d_step { alive[s] = 1; inlist[s] = 1; sleepers++ }
#else
  d_step { alive[s] = 1; inlist[s] = 1; sleepers++ }
  d_step { TOUCH; room = (count < CAP) }      /* capacity and pending() after the fence */
#endif
  do
  :: room || woken[s] -> break
  :: else ->
     d_step { asleep[s] = 1; assert(mtx == _pid + 1); mtx = 0 }
     if
     :: !asleep[s]                            /* notified */
#if TIMED > 0
     :: s < TIMED -> d_step { asleep[s] = 0; to = 1 }   /* wait_until: the deadline passed */
#endif
#ifdef SPURIOUS
     :: d_step { asleep[s] = 0 }              /* a spurious wake-up */
#endif
     fi;
     lock();
     d_step { TOUCH; room = (count < CAP) };
     if
     :: to -> break
     :: else -> skip
     fi
  od;
  skip;                                       /* (a break may not jump into a d_step) */
  d_step {
    inlist[s] = 0; sleepers--;
    if
    :: woken[s] -> woken[s] = 0; h = 1; room = 1
    :: else -> skip
    fi;
    to = 0
  }
  d_step {                                    /* the node dies; a holder keeps the lock */
    alive[s] = 0; assert(mtx == _pid + 1);
    if
    :: !h -> mtx = 0
    :: else -> skip
    fi
  }
}

/* pass_room(): a holder, its message counted (and pushed, unless it owns the actor),
 * wakes the next if it was admitted with the mailbox at most half full, then lets the
 * bucket's mutex go. Touches only the bucket. */
inline hand_on(held, owed, x, best) {
  if
  :: held ->
     if
     :: owed -> unlink_first(x, best)
     :: else -> skip
     fi;
     unlock();
#ifdef NOTIFY_AFTER_UNLOCK
     if
     :: owed -> after_unlock_notify(best)
     :: else -> skip
     fi;
#endif
     held = 0; owed = 0
  :: else -> skip
  fi
}

/* The send is over: its ticket goes. Only the order of the tickets matters, so the later
 * ones move down by one (fewer states than the code's ever-growing counter). */
inline drop_ticket(s, x) {
  d_step {
    if
    :: tkt[s] != 0 ->
       x = 0;
       do
       :: x < NS -> if :: tkt[x] > tkt[s] -> tkt[x]-- :: else -> skip fi; x++
       :: else -> break
       od;
       tickets--; tkt[s] = 0; x = 0
    :: else -> skip
    fi
  }
}

proctype sender(byte s) {
  byte k = 0;
  byte mm, sl, cap, x, best;
  short prev, before;
  byte X;
  bit got, ok, isfull, h, room, to, held, owed, woke;
  do
  :: k < M ->
     mm = s * M + k;
     /* admit_bounded(): retry until counted, or give up when the deadline passed */
     do
     :: true ->
#ifndef FETCH_ADD
        d_step {                            /* try_acquire_below(CAP): the CAS loop */
          TOUCH;
          if
          :: count < CAP ->
             prev = count; count++; isfull = 0;
             if
             :: prev == 0 -> assert(owners == 0); owners++
             :: else -> skip
             fi
          :: else -> isfull = 1
          fi
        }
#else
        d_step {                            /* BROKEN: count_.fetch_add(1) ... */
          TOUCH;
          prev = count; count++; isfull = 0;
          if
          :: prev == 0 -> assert(owners == 0); owners++
          :: else -> skip
          fi
        }
        if
        :: prev >= CAP -> d_step { TOUCH; count--; isfull = 1 }   /* ... undone if full */
        :: else -> skip
        fi;
#endif
        d_step { held = h; h = 0 }           /* a holder has the bucket's mutex */
        if
        :: isfull ->
           isfull = 0;
           if
           :: held -> d_step { held = 0; inflight-- }; unlock()   /* waits again, in its old place */
           :: else -> skip
           fi;
           wait_for_room(s, h, room, to);
           if
           :: room -> skip
           :: else -> break                 /* max_block passed: mailbox_full */
           fi
        :: else ->
           room = 1;
           if                               /* counted, the actor lives: read the count */
           :: held -> d_step { TOUCH; owed = (count <= HALF); woke = 1 }
           :: else -> skip
           fi;
#ifdef NO_PASS
           owed = 0;
#endif
#ifdef PASS_EARLY
           hand_on(held, owed, x, best);
#endif
           break
        fi
     od;
     assert(!h && (!held || room));         /* a sender gives up only holding no wake-up */
     drop_ticket(s, x);
     d_step { isfull = room; room = 0 }
     if
     :: !isfull -> d_step { mm = 0; gaveup++ }
     :: isfull && prev != 0 ->
        prev = 0; push(mm, sl);
        d_step { if :: woke -> woke = 0; inflight-- :: else -> skip fi };
        hand_on(held, owed, x, best)
     :: isfull && prev == 0 ->              /* owns the actor: its message runs first */
        d_step { if :: woke -> woke = 0; inflight-- :: else -> skip fi };
        hand_on(held, owed, x, best);
        if
        :: true ->                          /* run inline, then finish_inline() */
           run_msg(mm);
           X = 1;
           if
           :: LOOKS_EMPTY ->
              try_release(X, ok, cap, before, sl, x, best);
              X = 0;
              if
              :: ok -> ok = 0
              :: else -> drain(X, ok, cap, before, sl, got, mm, x, best)
              fi
           :: else -> drain(X, ok, cap, before, sl, got, mm, x, best)
           fi
#if BOTH_PATHS
        :: true ->                          /* enqueue_first, then drain_now(0) */
           d_step { TOUCH; assert(!has_front); front = mm; has_front = 1; mm = 0 }
           X = 0; drain(X, ok, cap, before, sl, got, mm, x, best)
#endif
        fi
     fi;
     isfull = 0;
     mm = 0;
     k++
  :: else -> break
  od;
  done++
}

/* Whoever holds the actor (its user, not the drainer) deletes it once every message has
 * run (or was given up) and it is idle: the destructor's try_acquire() finds 0 and
 * returns at once. From then on, any access to the actor is a use-after-free (TOUCH); the
 * room bucket is static and stays valid. */
active proctype destroyer() {
  d_step { nrun + gaveup == TOTAL && count == 0 -> destroyed = 1 }
}

#ifndef NO_MONITOR
active proctype monitor() {
end:
  !(INVARIANT) -> assert(INVARIANT)
}
#endif

init {
  byte i;
  atomic {
    i = 0;
    do
    :: i < NS -> run sender(i); i++
    :: else -> break
    od;
    i = 0
  };
  (done == NS && destroyed) ->
  assert(count == 0 && H == R && !has_front && nrun + gaveup == TOTAL && sleepers == 0 && mtx == 0);
  assert(TIMED > 0 || gaveup == 0);
  do
  :: i < NS -> assert(!inlist[i] && !alive[i] && !woken[i] && !asleep[i]); i++
  :: else -> break
  od
}
