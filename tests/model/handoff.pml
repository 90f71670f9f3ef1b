/*
 * Promela model of the hand-off primitive (docs/design.md, "The hand-off protocol"): an
 * ownership word `count` and an MPSC mailbox. A party counts itself before it enqueues;
 * the 0 -> 1 increment makes it the owner; the owner releases by subtracting what it
 * consumed (fetch_sub(X) == X), and with nothing to pop while the count says more is
 * coming, it waits for the counted message that is not linked yet. This file models the
 * lock-free protocol, the actor's (lockfree_ownership in include/handoff/detail/ownership.hpp,
 * driven by lib/actor/actor_base.cpp), with the actor's budgets and executor hand-off on
 * top; its mailbox is Vyukov's queue, where a message is linked some steps after it was
 * counted (packed.pml models the one-atomic send of bench/packed_actor.hpp). keyed_lock.pml
 * models the keyed entry's word, taken under the table's shard lock and released by CAS
 * without it. Checked by spin under ctest through
 * tests/model/check.sh; see tests/model/README.md.
 *
 * One actor, NS sender processes sending M messages each, and (with EXEC) one executor
 * process that runs posted continuations. Memory is sequentially consistent here: the
 * model checks the protocol's interleavings, not the C++ memory orders.
 *
 * Switches (spin -DNAME=VALUE):
 *   NS, M          senders, messages per sender (defaults 3, 2)
 *   EXEC           1: the actor has an executor: an owner that waits for an in-flight
 *                  enqueue may hand the actor to it (the "spins_before_hand_off" path)
 *   BUDGET         0: no budget. n > 0: max_messages = n. -1: a time budget, which may
 *                  run out after any message of a turn (covers every message budget).
 *                  With EXEC the owner hands the actor to the executor; without one it
 *                  offers the drain to the next sender (the hand-over, below).
 *   BOTH_PATHS     1 (default): a winning sender either runs its message inline
 *                  (submit<false>: run_inline + finish_inline) or puts it in front of
 *                  the mailbox and drains from 0 (submit<true>, a nested send, an ask);
 *                  0: inline only
 *   RELEASE_CAS    release with compare_exchange_strong(X -> 0), on failure count -= X
 *                  (the equivalent form); default: fetch_sub(X) == X, as in the code
 * Broken variants, each expected to be rejected:
 *   BROKEN_ORDER   enqueue, then increment
 *   WEAK_CAS       release with compare_exchange_weak, whose spurious failure takes the
 *                  "count -= X, keep draining" path
 *   BROKEN_BUDGET  on a spent budget, post the continuation first, then subtract
 *   BROKEN_EARLY_HEIR    the successor drains as soon as it has claimed the offer,
 *                  without waiting for the old owner to hand over (two owners)
 *   BROKEN_OFFER_LEAVES  the owner offers the drain and returns at once instead of going
 *                  on until a successor takes over (messages left with no owner)
 *   BROKEN_WITHDRAW  the claimant withdraws by clearing TAKEN whether or not the owner
 *                  has handed over meanwhile (the actor is left with no owner)
 *   BROKEN_WAIT_FOREVER  the claimant waits for the hand-over with no bound (never
 *                  withdraws); with LOCK, the old owner's handler waits for the lock the
 *                  claimant holds (both wait forever)
 *   LOCK           1: sender 0 holds a lock across each of its sends, and the handlers of
 *                  sender NS-1's messages need it (the lock is recursive: the deadlock
 *                  of a thread with itself is not this model's)
 *   LIVENESS       adds the claim "every message eventually runs" (verify with pan -a -f)
 *
 * The hand-over (a budget without an executor): the owner that has spent its budget
 * subtracts what it ran (released: done) and sets OFFER in the word, then goes on
 * draining. A sender whose fetch_add returned OFFER without TAKEN enqueues its message,
 * then claims by a CAS that sets TAKEN only while OFFER is set and TAKEN is not; the
 * claimant waits until TAKEN is clear, or at any moment (the code: past a time bound)
 * withdraws by a CAS that clears TAKEN only while it is set, and returns with its message
 * queued. The offering owner may check TAKEN before any message (the code checks every
 * 16 messages): still set, it hands over in one CAS (subtract what it ran, clear OFFER
 * and TAKEN, add one unit that the successor holds as a message it ran) and returns;
 * withdrawn, it drains on with the offer out. Its release with an empty mailbox is a
 * CAS: TAKEN set -> the hand-over; count = X -> 0; else count -= X with OFFER kept. Here
 * `off` and `tak` are those two bits of the word.
 */

#ifndef NS
#define NS 3
#endif
#ifndef M
#define M 2
#endif
#ifndef EXEC
#define EXEC 0
#endif
#ifndef BUDGET
#define BUDGET 0
#endif
#ifndef BOTH_PATHS
#define BOTH_PATHS 1
#endif
#if BUDGET != 0 && EXEC == 0
#define HANDOVER 1
#else
#define HANDOVER 0
#endif
#ifdef WEAK_CAS
#define RELEASE_CAS 1
#endif
#ifndef LOCK
#define LOCK 0
#endif

#define TOTAL (NS * M)

/* ---- the actor ---- */
short count = 0;          /* message_count; signed so that a broken variant may go below 0 */
bit off = 0;              /* the word's OFFER bit: the owner offers the drain */
bit tak = 0;              /* the word's TAKEN bit: a successor claimed it (one unit of count) */
#define WORD_ZERO (count == 0 && !off && !tak)

/* The mailbox: Vyukov's intrusive MPSC queue, abstracted to slots in push order.
 * push = reserve (the exchange on head_: fixes the position) + link (the store into the
 * predecessor's next: makes it reachable). The consumer pops slot H only when it is
 * linked and so is the slot after it, or nothing is reserved after it: a node whose
 * successor has swung head_ but not linked yet is not handed out (pop() returns nullptr
 * "when a producer is between its exchange and its link"). */
byte slot[TOTAL + 1];
bit linked[TOTAL + 1];
byte R = 0;               /* slots reserved */
byte H = 0;               /* next slot the consumer pops */
/* The owner's own message, put in front through the consumer's end (push_front): popped
 * before every slot, never touched by a producer. */
byte front = 0;
bit has_front = 0;
#define POPPABLE (has_front || (H < R && linked[H] && (H + 1 == R || linked[H + 1])))
#define LOOKS_EMPTY (!has_front && !(H < R && linked[H]))   /* mpsc_queue::looks_empty() */

/* Executor: continuations posted and not yet started (resume(a) -> drain(0, 0)). */
chan cont = [2] of { bit };

/* ---- ghost state for the assertions ---- */
byte owners = 0;          /* processes acting as owner right now */
byte nextseq[NS];         /* per sender: sequence number of the next message to run */
byte nrun = 0;            /* handler runs */
byte done = 0;            /* senders finished */
bit heir = 0;             /* handed over, the successor not started yet: it holds the actor */
byte lk = 0;              /* LOCK: the lock's holder (_pid + 1), 0: free */

#define TOKENS (owners + len(cont) + heir)
/* At most one owner (a posted continuation holds the ownership it will resume); the
 * count is non-zero exactly while someone holds it; count 0 leaves no message behind. */
#define INVARIANT (TOKENS <= 1 && (WORD_ZERO) == (TOKENS == 0) && (count != 0 || (H == R && !has_front)) && count >= 0)

#ifdef LIVENESS
ltl every_message_runs { <> (nrun == TOTAL) }
#endif

/* Runs message `mm` (sender mm / M, sequence mm % M): exactly once, in per-sender order,
 * by the only owner. */
inline run_msg(mm) {
#if LOCK
  if
  :: mm / M == NS - 1 -> (lk == 0 || lk == _pid + 1)   /* the handler takes the lock */
  :: else -> skip
  fi;
#endif
  d_step {
    assert(owners == 1);
    assert(mm % M == nextseq[mm / M]);
    nextseq[mm / M]++;
    nrun++;
    mm = 0
  }
}

/* mailbox_.push(mm): two steps, so the message becomes visible some steps after the
 * sender's increment (or, BROKEN_ORDER, before it). */
inline push(mm, k) {
  d_step { k = R; slot[k] = mm; R++ }
  d_step { linked[k] = 1; k = 0 }
}

/* try_release(X): true iff the actor was released. On failure the X messages run are
 * uncounted either way. */
inline try_release(ok) {
#ifndef RELEASE_CAS
  d_step {                                  /* count_.fetch_sub(X) == X */
    if
    :: count == X && !off && !tak -> count = 0; owners--; ok = 1
    :: else -> count = count - X; ok = 0
    fi
  }
#else
  atomic {                                  /* compare_exchange(X -> 0) */
    if
    :: count == X && !off && !tak -> count = 0; owners--; ok = 1
#ifdef WEAK_CAS
    :: count == X && !off && !tak -> ok = 0 /* spurious failure */
#endif
    :: else -> ok = 0
    fi
  }
  if
  :: !ok -> count = count - X               /* a second atomic: count_ -= X */
  :: else -> skip
  fi
#endif
}

/* Hand the still-owned actor to the executor and stop: resume() will drain(0, 0). */
inline post_and_stop() {
  d_step { assert(len(cont) == 0); cont!1; owners-- }
}

/* The hand-over, in the same atomic step as its test of TAKEN (a CAS that expects it):
 * the old owner stops; the claimant holds one unit as a message it ran. */
#define HAND_OVER assert(off); count = count - X + 1; off = 0; tak = 0; owners--; heir = 1; X = 0

/* actor_base::drain(X, turn): owner only. Ends released, handed to the executor, or
 * handed over to a successor. `offd`: this owner offers the drain. */
inline drain(X, turn, got, ok, mm, offd) {
  do
  :: d_step { offd && tak -> HAND_OVER; offd = 0; turn = 0 } -> break
  :: true ->                                /* no look for a claim now: the code looks every
                                               16 messages, so any message may go first */
     if
#if BUDGET > 0
     :: (!offd && turn != 0 && turn >= BUDGET) -> ok = 0
     :: else -> ok = 1                      /* not spent */
#elif BUDGET < 0
     :: (!offd && turn != 0) -> ok = 0      /* a time budget may run out after any message */
     :: true -> ok = 1
#else
     :: true -> ok = 1                      /* no budget */
#endif
     fi;
     if
     :: !ok && HANDOVER ->
        /* budget spent, no executor: release, else offer the drain and go on */
        ok = 0;
        if
        :: X != 0 -> try_release(ok)
        :: else -> skip
        fi;
        if
        :: ok -> X = 0; turn = 0; ok = 0; break /* released */
        :: else -> X = 0
        fi;
        d_step { assert(!off && !tak); off = 1 };  /* fetch_or(OFFER) */
        offd = 1;
#ifdef BROKEN_OFFER_LEAVES
        d_step { owners--; offd = 0; turn = 0 };
        break;
#endif
        skip
     :: !ok && !HANDOVER ->
        /* budget spent */
#ifndef BROKEN_BUDGET
        /* account first, then post: only a still-owned actor may be handed over */
        if
        :: X == 0 -> post_and_stop()
        :: else ->
           try_release(ok);
           if
           :: !ok -> post_and_stop()
           :: else -> skip                  /* released */
           fi
        fi;
#else
        /* post first (the continuation now holds the actor), then subtract: the
         * continuation may run while our subtraction takes the count to 0 */
        post_and_stop();
        if
        :: X != 0 -> d_step { count = count - X }
        :: else -> skip
        fi;
#endif
        X = 0; turn = 0; ok = 0;
        break
     :: else -> ok = 0
     fi;
     d_step {                               /* mailbox_.pop() */
       if
       :: has_front -> mm = front; has_front = 0; front = 0; got = 1
       :: !has_front && POPPABLE -> mm = slot[H]; H++; got = 1
       :: else -> got = 0
       fi
     }
     if
     :: got ->
        run_msg(mm); X++; turn++; got = 0
     :: !got && X != 0 && offd ->
#ifndef BROKEN_WITHDRAW
        d_step {                            /* the offering owner's CAS loop */
          if
          :: tak -> HAND_OVER; ok = 2
          :: !tak && count == X -> count = 0; off = 0; owners--; ok = 1
          :: else -> count = count - X; ok = 0
          fi
        }
        if
        :: ok == 2 -> offd = 0; turn = 0; ok = 0; break
        :: ok == 1 -> X = 0; offd = 0; turn = 0; ok = 0; break
        :: ok == 0 -> X = 0
        fi
#else
        d_step { count = count - X; off = 0; X = 0 };  /* fetch_sub(X + OFFER), TAKEN ignored */
        offd = 0
#endif
     :: !got && X != 0 && !offd ->
        try_release(ok);
        if
        :: ok -> X = 0; turn = 0; ok = 0; break   /* released */
        :: else -> X = 0                          /* more were counted: keep draining */
        fi
     :: !got && X == 0 ->
        /* count > 0 and nothing poppable: a sender is between its increment and its
         * link. Wait for it (backoff), or, with an executor, hand off. */
        if
        :: POPPABLE -> skip
        :: offd && tak -> skip
#if EXEC
        :: post_and_stop(); turn = 0; break
#endif
        fi
     fi
  od
}

proctype sender(byte s) {
  byte k = 0;
  byte mm, sl;
  short prev;
  byte X, turn;
  bit got, offd, claimed;
  byte ok;
  do
  :: k < M ->
     mm = s * M + k;
#if LOCK
     if
     :: s == 0 -> lk = _pid + 1             /* the sender holds the lock across its send */
     :: else -> skip
     fi;
#endif
#ifndef BROKEN_ORDER
     d_step {                               /* try_acquire(): count_.fetch_add(1) */
       if
       :: WORD_ZERO -> prev = 0; assert(TOKENS == 0); owners++
       :: !WORD_ZERO && off && !tak -> prev = 2     /* the owner offers the drain */
       :: !WORD_ZERO && !(off && !tak) -> prev = 1
       fi;
       count++
     }
     if
     :: prev == 1 -> prev = 0; push(mm, sl)           /* the owner will run it */
     :: prev == 2 ->
        prev = 0; push(mm, sl);
        d_step {                            /* claim: CAS sets TAKEN only on OFFER without it */
          if
          :: off && !tak -> tak = 1; claimed = 1
          :: else -> claimed = 0
          fi
        }
        if
        :: claimed ->
           claimed = 0;
#ifndef BROKEN_EARLY_HEIR
           if
           :: atomic { !tak -> heir = 0; owners++; assert(owners == 1) };  /* handed over */
              X = 1; turn = 0; drain(X, turn, got, ok, mm, offd)
#ifndef BROKEN_WAIT_FOREVER
#ifndef BROKEN_WITHDRAW
           :: d_step { tak -> tak = 0 }      /* withdraw: a CAS that clears TAKEN while set */
#else
           :: d_step { tak = 0 }             /* clears TAKEN, a hand-over or not */
#endif
#endif
           fi
#else
           d_step { owners++ };
           X = 1; turn = 0; drain(X, turn, got, ok, mm, offd)
#endif
        :: else -> skip
        fi
     :: prev == 0 ->
        if
        :: true ->                          /* submit<false>: run inline */
           run_msg(mm);
           /* finish_inline(): release if nothing else arrived, else drain */
           if
           :: !LOOKS_EMPTY -> X = 1; turn = 1; drain(X, turn, got, ok, mm, offd)
           :: else ->
              X = 1;
              try_release(ok);
              if
              :: ok -> X = 0; ok = 0
              :: else -> X = 0; turn = 0; drain(X, turn, got, ok, mm, offd)
              fi
           fi
#if BOTH_PATHS
        :: true ->                          /* submit<true>: enqueue_first, then drain_now(0) */
           d_step { assert(!has_front); front = mm; has_front = 1; mm = 0 }
           X = 0; turn = 0; drain(X, turn, got, ok, mm, offd)
#endif
        fi
     fi;
#else
     push(mm, sl);                          /* BROKEN: enqueue first ... */
     d_step {                               /* ... then count */
       prev = count; count++;
       if
       :: prev == 0 -> assert(TOKENS == 0); owners++
       :: else -> skip
       fi
     }
     if
     :: prev == 0 -> X = 0; turn = 0; drain(X, turn, got, ok, mm, offd)
     :: else -> prev = 0
     fi;
#endif
     mm = 0;
#if LOCK
     if
     :: s == 0 -> lk = 0
     :: else -> skip
     fi;
#endif
     k++
  :: else -> break
  od;
  done++
}

#if EXEC
/* A worker of the executor: runs continuations, each drain(0, 0) of the still-owned
 * actor. One worker suffices: at most one continuation exists at a time (asserted). */
active proctype executor() {
  byte X, turn, mm;
  bit got, offd;
  byte ok;
end:
  do
  :: d_step { cont?_; owners++; assert(owners == 1) } ->
     drain(X, turn, got, ok, mm, offd)
  od
}
#endif

#ifndef NO_MONITOR
/* The invariant, checked in every reachable state. -DNO_MONITOR leaves only the direct
 * checks (a second owner at its acquisition or handler run, the end state), so that a
 * broken variant's counterexample ends at the second owner itself. */
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
  /* quiescent: every sender returned and nobody owns the actor */
  (done == NS && owners == 0 && len(cont) == 0) ->
  /* nothing stranded, every message ran exactly once */
  assert(WORD_ZERO && H == R && nrun == TOTAL);
  do
  :: i < NS -> assert(nextseq[i] == M); i++
  :: else -> break
  od
}
