/*
 * Promela model of the actor's bounded-mailbox path: the hand-off primitive of
 * handoff.pml with a capacity. A sender is admitted by try_acquire_below(CAP), a CAS
 * that counts only while the count is below the capacity (include/handoff/detail/
 * ownership.hpp); a sender that finds the mailbox full sleeps in wait_for_room until the
 * owner wakes it (lib/actor/mailbox_room.cpp); the owner releases after every message it runs
 * (drain_step in lib/actor/actor_base.cpp), reading the capacity before its release and waking
 * the sleepers when a release takes the count from above CAP/2 to CAP/2 or below
 * (actor_base::try_release). A destroyer deletes the actor as soon as it is idle and
 * every message has run; any later read of the actor is a use-after-free. Checked by spin
 * under ctest through tests/model/check.sh (MODEL=bounded.pml); see tests/model/README.md.
 *
 * Memory is sequentially consistent here, which is what the seq_cst fences of the
 * sleeper/owner store-buffer pattern provide for those two accesses; the other orders
 * are not modelled. No executor and no budget: a bounded drain without a budget.
 *
 * Switches (spin -DNAME=VALUE):
 *   NS, M, CAP     senders, messages per sender, capacity (defaults 3, 2, 2)
 *   BOTH_PATHS     1 (default): a winning sender runs its message inline (finish_inline)
 *                  or puts it in front of the mailbox and drains from 0; 0: inline only
 * Broken variants, each expected to be rejected:
 *   CAP_AFTER      the owner reads the capacity after its release (use-after-free)
 *   FETCH_ADD      admission by fetch_add, undone by a fetch_sub when it was full
 *   SLEEPER_READS_FIRST   the sleeper reads the count before it counts itself a sleeper
 *   OWNER_READS_FIRST     the owner reads the sleepers before its release (the store-load
 *                  reordering that the missing fence would allow)
 *   NO_MUTEX       the owner notifies without taking the bucket's mutex first
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
byte sleepers = 0;        /* room_bucket::sleepers */
bit waiting[NS];          /* in room.wait(): asleep until a notify clears it */

/* ---- ghost state for the assertions ---- */
byte owners = 0;
byte nextseq[NS];
byte nrun = 0;
byte done = 0;

/* Any access to the actor's memory (its count, mailbox or options). */
#define TOUCH assert(!destroyed)

#define INVARIANT (owners <= 1 && (count == 0) == (owners == 0) && (count != 0 || (H == R && !has_front)) && count >= 0 && count <= CAP)

/* The bucket's mutex. */
inline lock() { atomic { mtx == 0 -> mtx = _pid + 1 } }
inline unlock() { d_step { assert(mtx == _pid + 1); mtx = 0 } }

inline run_msg(mm) {
  d_step {
    assert(owners == 1);
    assert(mm % M == nextseq[mm / M]);
    nextseq[mm / M]++;
    nrun++;
    mm = 0
  }
}

inline push(mm, k) {
  d_step { TOUCH; k = R; slot[k] = mm; R++ }
  d_step { TOUCH; linked[k] = 1; k = 0 }
}

/* wake_senders(): fence; sleepers == 0: return; lock and unlock the bucket's mutex (waits
 * out a sender between its check and its sleep); notify_all. Touches only the bucket. */
inline wake_senders(sl) {
#ifndef OWNER_READS_FIRST
  sl = sleepers;
#endif
  if
  :: sl != 0 ->
#ifndef NO_MUTEX
     lock();
     unlock();
#endif
     d_step {
       sl = 0;
       do
       :: sl < NS -> waiting[sl] = 0; sl++
       :: else -> break
       od;
       sl = 0
     }
  :: else -> skip
  fi
}

/* actor_base::try_release(X): read the capacity, release, wake on crossing half. */
inline try_release(X, ok, cap, before, sl) {
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
  :: cap != 0 && before > cap / 2 && before - X <= cap / 2 -> wake_senders(sl)
  :: else -> skip
  fi;
  before = 0; cap = 0; sl = 0
}

/* drain(X): a bounded drain. Releases after every message (X is 0 or 1); with nothing
 * poppable and nothing to release, the count says a sender is between its count and its
 * link: wait for it. */
inline drain(X, ok, cap, before, sl, got, mm) {
  do
  :: X != 0 ->
     try_release(X, ok, cap, before, sl);
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

/* wait_for_room(): under the bucket's mutex, count itself a sleeper, fence, read the
 * count; sleep while it is full (room.wait unlocks and sleeps in one step); then uncount
 * itself and retry the admission. */
inline wait_for_room(s, isfull) {
  lock();
#ifdef SLEEPER_READS_FIRST
  d_step { TOUCH; isfull = (count >= CAP) }   /* BROKEN: read before it is a sleeper */
  sleepers++;
#else
  sleepers++;
  d_step { TOUCH; isfull = (count >= CAP) }   /* capacity and pending() after the fence */
#endif
  do
  :: isfull ->
     d_step { waiting[s] = 1; assert(mtx == _pid + 1); mtx = 0 }
     !waiting[s];                           /* notified */
     lock();
     d_step { TOUCH; isfull = (count >= CAP) }
  :: else -> break
  od;
  sleepers--;
  unlock()
}

proctype sender(byte s) {
  byte k = 0;
  byte mm, sl, cap;
  short prev, before;
  byte X;
  bit got, ok, isfull;
  do
  :: k < M ->
     mm = s * M + k;
     /* admit_bounded(): retry until counted */
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
        if
        :: isfull -> isfull = 0; wait_for_room(s, isfull)
        :: else -> break
        fi
     od;
     if
     :: prev != 0 -> prev = 0; push(mm, sl)
     :: prev == 0 ->
        if
        :: true ->                          /* run inline, then finish_inline() */
           run_msg(mm);
           X = 1;
           if
           :: LOOKS_EMPTY ->
              try_release(X, ok, cap, before, sl);
              X = 0;
              if
              :: ok -> ok = 0
              :: else -> drain(X, ok, cap, before, sl, got, mm)
              fi
           :: else -> drain(X, ok, cap, before, sl, got, mm)
           fi
#if BOTH_PATHS
        :: true ->                          /* enqueue_first, then drain_now(0) */
           d_step { TOUCH; assert(!has_front); front = mm; has_front = 1; mm = 0 }
           X = 0; drain(X, ok, cap, before, sl, got, mm)
#endif
        fi
     fi;
     mm = 0;
     k++
  :: else -> break
  od;
  done++
}

/* Whoever holds the actor (its user, not the drainer) deletes it once every message has
 * run and it is idle: the destructor's try_acquire() finds 0 and returns at once. From
 * then on, any access to the actor is a use-after-free (TOUCH); the room bucket is static
 * and stays valid. */
active proctype destroyer() {
  d_step { nrun == TOTAL && count == 0 -> destroyed = 1 }
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
  assert(count == 0 && H == R && !has_front && nrun == TOTAL && sleepers == 0 && mtx == 0);
  do
  :: i < NS -> assert(nextseq[i] == M && !waiting[i]); i++
  :: else -> break
  od
}
