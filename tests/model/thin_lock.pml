/*
 * Promela model of the thin keyed lock prototyped in bench/thin_keyed.hpp (docs/notebook.md,
 * "Thin keyed locks, prototyped"): an uncontended key has no state in any table; a stripe
 * word points to the holder's record, and a table takes over the stripe's keys only while
 * they are contended. Checked by spin through check.sh (MODEL=thin_lock.pml); see
 * tests/model/README.md.
 *
 * The library (include/handoff/detail/thin_record.hpp) runs the EVENTUAL 0, LAZY 1
 * protocol under fifo (model_thin_fifo, model_thin_fifo_nested) and the LIB 1, LAZY 1 one
 * under eventual fairness (model_thin_lib*): it parks on the word itself and its stripes
 * deflate lazily. The other parking runs check the prototype's protocol (a futex sequence,
 * one wake per unlock, eager deflation).
 *
 * One stripe, two keys on it (distinct keys share the word), NP threads (2 or 3). Thread 0
 * locks ROUNDS0 times in sequence, the others ROUNDS times, a key chosen nondeterministically
 * each time; a thread reuses its record for its next lock (a record goes back to the
 * thread's cache at the unlock and is popped again by the next lock: the ABA of a record).
 * With NEST, thread 0 may lock key 1 while it holds key 0 (with its second record), so a
 * thread's own record can be the stripe's holder. Memory is sequentially consistent: the
 * model checks the protocol's interleavings, not the C++ memory orders.
 *
 * The stripe word: 0 free; W(r) = 4(r+1) thin-held by record r; W(r)|1 the same with
 * threads parked on the stripe's futex; INFL the stripe's keys are served by its table.
 * What is modelled, as in the header:
 *   lock      fill the record (key, hash, token 0, thread), CAS 0 -> W(r); the owner of
 *             the word owns the stripe's counter: token = ++counter (a load and a store),
 *             then publish r.token.
 *   contended loop on the word w: free: CAS it, keeping the parked bit, which a thread
 *             that parked sets too; INFL: the table; the holder's record is this thread's
 *             own: the table; spin (re-read w, from 0 to SPINS times per round); then,
 *             eventual and the holder's hash (a hint read from a record that may be reused
 *             meanwhile) is this key's: set parked (CAS w -> w|1), load the futex
 *             sequence, re-read the word and, still parked and thin-held, FUTEX_WAIT on
 *             that sequence; else the table.
 *   unlock    CAS W(r) -> 0; else CAS W(r)|1 -> 0 and wake one (sequence++, then
 *             FUTEX_WAKE 1: the kernel wakes any one sleeper); else (INFL) under the
 *             table's mutex remove this key's entry with this token, then release_locked.
 *   table     under its mutex, in a loop: w not INFL: CAS w -> INFL (a record pinned by
 *             that CAS cannot be released without the mutex), wait for the holder's
 *             published token, add its key as held with that token, and wake every parked
 *             thread if the parked bit was set; then this key held: wait on the condition
 *             (counted in `waiting`); else take it: token = ++counter, under the mutex.
 *   release_locked  waiters: notify_all; nobody waiting and no key held: deflate, word = 0
 *             (not with LAZY).
 *   LAZY      a thread that finds INFL takes the mutex and, when the table holds no key and
 *             nobody waits, may deflate (word = 0: the library does so at a stripe's
 *             deflate_after-th calm lock, a choice here) and take the word thin; else the
 *             table. The table's keys stay inflated meanwhile.
 *   futex     FUTEX_WAIT sleeps only while the sequence is unchanged, until a wake picks
 *             it; the condition variable: notify_all wakes every waiter.
 *   LIB       the library's parking: the futex is the word itself (the library's compares
 *             the word's low half, which holds the bits: a thread sleeps only on a word
 *             with P, and P leaves a word only by a change that wakes). Words: W(r) held;
 *             |WT threads wait on it; |1 (P) some may sleep on it; WT, WT|1 free with
 *             waiters. A blocking lock of the key a thread holds: spin, then park:
 *             counted in the stripe (nwait; the deadline it keeps is the first counted
 *             thread's, sw, gone when that one leaves), CAS w -> w|WT|1 from the word it
 *             saw, sleep while the word is that. A free word: taken by a waiter, or by
 *             any lock while the kept deadline has not passed (sdue, set by the clock
 *             process whenever: the waiter need not run), keeping WT and P (a waiter sets
 *             WT); else the lock parks on it too, unless after setting P it finds no other
 *             waiter due (the one due took the word and left: nobody would wake it). The
 *             unlock of W(r)|bits reads nwait, then CASes to WT (nwait > 0) or 0, and wakes
 *             every sleeper if P was set. A waiter goes to the table when it chooses
 *             (fair_after passed; it must once its kept deadline passed), counted out.
 *             Sleeps never time out, so that a lost wake-up is an invalid end state.
 *             Fairness: `bypass` counts thin takes by threads that never waited while the
 *             kept deadline has passed and its waiter set WT; at most one per other thread
 *             (one that read the deadline just before it passed).
 * Assertions: one holder per key (`holders[k] == 1` at every grant); each grant's token
 * exceeds the key's last (`t > last[k]`); an inflater reads a record only while it is live
 * with the hold its CAS pinned (`rec_live[h] && rec_hold[h] == pin`); a thin take finds
 * the table empty (`held[0] == 0 && held[1] == 0`: it holds keys only while inflated); a
 * waiter in the table waits only for its own key (`held[k]`, exact); a thin unlock that
 * fails finds the stripe inflated and its own entry (`w == INFL`, `found`); at the end the
 * stripe is free (deflated), no key held or waited for, nobody asleep; and no invalid end
 * state (nobody left asleep on the futex or the condition: no lost wake-up, no deadlock).
 *
 * The unlock that clears the parked bit wakes ONE sleeper; the others stay asleep on the
 * promise that the woken one takes the key with the bit set, so that its unlock wakes the
 * next. A thread that parked and then goes to the table instead (it finds another key's
 * holder on the word, or the stripe inflated) keeps that promise by waking one sleeper
 * before it leaves: without it (NO_PASS_WAKE, the first version of the prototype, which
 * this model caught) a sleeper is never woken.
 *
 * Switches (spin -DNAME=VALUE):
 *   NP         threads, 2 or 3 (default 3)
 *   ROUNDS0, ROUNDS  locks of thread 0, of each other thread, in sequence (defaults 2, 1)
 *   EVENTUAL   1: contended lockers may park on the futex (default); 0: fifo, contended
 *              lockers always go to the table
 *   SPINS      re-reads of the word before a contended decision, at most (default 1)
 *   NEST       1: thread 0 may lock key 1 while it holds key 0 (default 0)
 *   SAME_HASH  both keys have one hash (a full-hash collision): the hint is wrong for the
 *              other key, so threads park behind another key's holder
 *   CLOCK      0: the kept deadline never passes (LIB; default 1)
 *   NO_PIN_CHECK, NO_END_CHECK  drop the inflater's record check, the final check (so
 *              that a broken variant's search reaches the assertion that names its bug)
 * Broken variants, each expected to be rejected:
 *   NO_PASS_WAKE  a thread that parked goes to the table without waking a sleeper: the
 *              wake-up it took is lost and a sleeper is left asleep (an invalid end state)
 *   RECORD_REUSED_UNDER_READER  the inflater reads the holder's record (token, key) before
 *              its CAS to INFL: the holder may release and reuse it for another key
 *              meanwhile (`rec_hold[h] == pin` at the CAS)
 *   TAG_AS_KEY the table compares the keys' tag, which both keys share: a waiter waits for
 *              a key it does not want (`held[k]`); with NEST, thread 0 holding key 0 waits
 *              for itself when it locks key 1
 *   UNLOCK_RACES_INFLATION  the thin unlock is a plain store 0: an inflated stripe goes
 *              free while the table holds its key, and a thin lock takes it (`held[0] == 0`)
 *   DEFLATE_RACES_WAITER  release_locked deflates when no key is held, whether or not a
 *              waiter is queued, and notifies only when it does not deflate: the waiter
 *              is left asleep (an invalid end state)
 *   TOKEN_GOES_BACK  a thin locker reads the counter before its CAS (a counter it does not
 *              own yet): a key's token repeats (`t > last[k]`)
 *   TABLE_COUNTER  the table gives tokens from a counter of its own: a key's token goes
 *              back across inflation (`t > last[k]`)
 *   NO_TOKEN_WAIT  the inflater does not wait for the holder's token: the entry gets 0 and
 *              the holder's unlock cannot find it (`found`)
 *   NO_INFLATE_WAKE  the inflater does not wake the parked threads: one is left asleep
 *              (with LIB too: the inflation that drops the parkers)
 *   UNLOCK_IGNORES_PARKED  with LIB, the unlock of a word with P frees it without waking:
 *              a parker is left asleep (a lost wake-up)
 *   TAKE_DROPS_PARKED  with LIB, a lock that takes a free WT|1 word drops P: a thread
 *              that parked on the free word (a waiter was due) is never woken
 *   UNLOCK_FORGETS_WAITERS  with LIB, the unlock frees the word to 0 whatever waits (the
 *              branch's first version): lockers take it by the plain CAS, which never
 *              looks at the deadline, again and again while the due waiter has yet to
 *              run (`bypass`)
 *   PARK_STALE with LIB, a parker sets the bits by a store of the word it read, not a
 *              CAS from it: a word freed meanwhile becomes a parked hold nobody unlocks,
 *              and the parker sleeps on it for ever (an invalid end state)
 *   DEFLATE_HELD  with LAZY, the deflation looks at the waiters only, not at the keys the
 *              table holds: a thin lock takes the stripe while a key is held in the table
 *              (`held[0] == 0`)
 *   DEFLATE_STALE  with LAZY, the deflation trusts the INFL read before the mutex: the
 *              stripe deflated and was taken thin meanwhile, and the deflation frees the
 *              holder's word (its unlock finds 0, `w == INFL`)
 */

#ifndef NP
#define NP 3
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#ifndef ROUNDS0
#define ROUNDS0 2
#endif
#ifndef EVENTUAL
#define EVENTUAL 1
#endif
#ifndef SPINS
#define SPINS 1
#endif
#ifndef NEST
#define NEST 0
#endif
#ifndef LAZY
#define LAZY 0
#endif
#ifndef LIB
#define LIB 0
#endif
#ifndef CLOCK
#define CLOCK 1
#endif
#ifndef DEFLATE_HELD
#define DEFLATABLE (!held[0] && !held[1] && waiting == 0)
#else
#define DEFLATABLE (waiting == 0)
#endif

#if NP < 2 || NP > 3
#error "NP is 2 or 3"
#endif

/* The inflater's read of a record: live, with the hold its CAS pinned. */
#ifndef NO_PIN_CHECK
#define PIN_CHECK assert(rec_live[h] && rec_hold[h] == pin)
#else
#define PIN_CHECK skip
#endif

#define NK 2              /* keys, both on the one stripe */
#define NR (2 * NP)       /* records: 2p the thread's outer lock, 2p+1 a nested one */
#define INFL 252          /* the low two bits clear */
#define W(r) (4 * ((r) + 1))
#define REC(w) ((w) / 4 - 1)
#define PARKED(w) ((w) & 1)
#define WT 2              /* LIB: threads wait on the word */
#define ISREC(w) ((w) > 3 && (w) != INFL)
#define FREE(w) ((w) < 4) /* 0, or (LIB) WT or WT|1 */
/* LIB: the deadline the stripe keeps (its waiter's, sw) has passed; and that waiter has
 * set W on the word, or found it */
#define SLOT_DUE (sdue)
#define DUE_FLAGGED (sdue && sflag)
#ifdef SAME_HASH
#define HASH(k) 7
#else
#define HASH(k) (5 + (k))
#endif

/* ---- the stripe ---- */
byte word = 0;
byte counter = 0;         /* the last token: owned by the word's owner */
byte seq = 0;             /* the futex word of the threads parked here */
bit fw[3];                /* asleep in FUTEX_WAIT */
/* LIB (declared always: the other protocols' guards name them) */
byte nwait = 0;             /* the stripe's count of waiters on its word */
byte sw = 0;              /* whose deadline the stripe keeps, + 1 (0: none): the first counted
                           * (later ones' deadlines are later), until it leaves */
bit sdue = 0;             /* that deadline has passed (the clock's) */
bit sflag = 0;            /* ghost: that waiter found or set WT on the word */
byte bypass = 0;          /* ghost: thin takes by a thread that never waited, while DUE_FLAGGED */

/* ---- the records (type-stable, per thread) ---- */
byte rec_key[NR];
byte rec_hash[NR];
byte rec_tok[NR];         /* 0 until the holder published it */
byte rec_thr[NR];

/* ---- the table ---- */
bit tm = 0;               /* its mutex */
bit held[NK];             /* keys held through the table (at most one entry per key) */
byte heldtok[NK];
byte waiting = 0;
bit cvw[3];               /* waiting on the condition */
#ifdef TABLE_COUNTER
byte tcounter = 0;
#endif

/* ---- ghost state ---- */
byte holders[NK];         /* threads holding the key */
byte last[NK];            /* the key's last token granted */
byte rec_hold[NR];        /* a new id for each hold of the record (each fill) */
bit rec_live[NR];         /* the record is held by its current hold */
byte done = 0;

inline grant(k, t) {
  d_step {
    holders[k]++;
    assert(holders[k] == 1);
    assert(t > last[k]);
    last[k] = t
  }
}

inline lock_mutex() { atomic { tm == 0 -> tm = 1 } }

/* seq.fetch_add(1), then FUTEX_WAKE 1: the kernel wakes any one sleeper, if any */
inline wake_one() {
  seq++;
  atomic {
    if
    :: fw[0] -> fw[0] = 0
    :: fw[1] -> fw[1] = 0
    :: fw[2] -> fw[2] = 0
    :: else -> skip
    fi
  }
}
inline wake_all() {
  seq++;
  d_step { fw[0] = 0; fw[1] = 0; fw[2] = 0 }
}

#if LIB
/* A waiter stops waiting on the word (took it, or goes to the table). */
inline leave(me) {
  d_step {
    nwait--;
    if
    :: sw == me + 1 -> sw = 0; sdue = 0; sflag = 0   /* its deadline goes with it */
    :: else -> skip
    fi;
    if
    :: !DUE_FLAGGED -> bypass = 0
    :: else -> skip
    fi
  }
}

/* Time: the waiter whose deadline the stripe keeps reaches it whenever, running or not.
 * (The others' deadlines matter to themselves only: a choice where they look.) */
proctype clock() {
end: do
  :: d_step { CLOCK && sw != 0 && !sdue -> sdue = 1 }
  od
}
#endif

/* With the mutex held, after a key left `held`. */
inline release_locked() {
#ifndef DEFLATE_RACES_WAITER
  if
  :: waiting != 0 -> d_step { cvw[0] = 0; cvw[1] = 0; cvw[2] = 0 }   /* notify_all */
  :: else ->
     if
     :: !LAZY && !held[0] && !held[1] -> word = 0                 /* deflate */
     :: else -> skip
     fi
  fi
#else
  if
  :: !held[0] && !held[1] -> word = 0
  :: else ->
     if
     :: waiting != 0 -> d_step { cvw[0] = 0; cvw[1] = 0; cvw[2] = 0 }
     :: else -> skip
     fi
  fi
#endif
}

/* The thin holder publishes its token: token = ++counter, a load and a store. */
inline take_token(r, k, t) {
#ifndef TOKEN_GOES_BACK
  t = counter + 1;
  counter = t;
#else
  counter = t;              /* t was read before the CAS */
#endif
  rec_tok[r] = t;
  grant(k, t)
}

/* lock_table: under the mutex, inflate if needed, then take key k or wait. */
inline lock_table(me, k, t) {
  lock_mutex();
  do
  :: w = word;
     if
     :: w != INFL ->
#ifdef RECORD_REUSED_UNDER_READER
        if
        :: ISREC(w) ->
           h = REC(w);
           rec_tok[h] != 0;                       /* the token first ... */
           d_step { t = rec_tok[h]; hk = rec_key[h]; pin = rec_hold[h] }
        :: else -> skip
        fi;
#endif
        atomic {                                  /* CAS w -> INFL */
          if
          :: word == w -> word = INFL; ok = 1;
#ifndef RECORD_REUSED_UNDER_READER
             if
             :: ISREC(w) -> pin = rec_hold[REC(w)]
             :: else -> skip
             fi
#else
             if                                   /* ... then the pin: the hold read must be the pinned one */
             :: ISREC(w) -> assert(rec_live[h] && rec_hold[h] == pin)
             :: else -> skip
             fi
#endif
          :: else -> ok = 0
          fi
        }
        if
        :: ok && ISREC(w) ->
#ifndef RECORD_REUSED_UNDER_READER
           h = REC(w);
#ifndef NO_TOKEN_WAIT
           rec_tok[h] != 0;                       /* wait for the holder's token */
#endif
           d_step { PIN_CHECK; t = rec_tok[h] };
           d_step { PIN_CHECK; hk = rec_key[h] };
#endif
           d_step { held[hk] = 1; heldtok[hk] = t; t = 0; hk = 0; h = 0; pin = 0 }
        :: else -> skip
        fi;
        if
#ifndef NO_INFLATE_WAKE
        :: ok && PARKED(w) -> wake_all()          /* they queue in the table now */
#endif
        :: else -> skip
        fi
     :: else -> ok = 1
     fi;
     if
     :: ok ->
#ifndef TAG_AS_KEY
        busy = held[k];
#else
        busy = held[0] || held[1];                /* one tag for both keys */
#endif
        if
        :: !busy -> break
        :: else ->
           assert(held[k]);                       /* a waiter waits for its own key only */
           d_step { waiting++; cvw[me] = 1; tm = 0 };   /* cv.wait: unlock and sleep */
           cvw[me] == 0;
           lock_mutex();
           waiting--
        fi
     :: else -> skip                              /* the CAS failed: again */
     fi
  od;
#ifndef TABLE_COUNTER
  t = counter + 1;
  counter = t;
#else
  tcounter++;
  t = tcounter;
#endif
  d_step { held[k] = 1; heldtok[k] = t };
  grant(k, t);
  busy = 0; ok = 0; w = 0;
  tm = 0
}

/* The lock of key k by thread me with record r; intab: held through the table. */
inline lock(me, r, k, t, intab) {
  d_step {                                        /* fill the record (pop from the cache) */
    rec_key[r] = k; rec_hash[r] = HASH(k); rec_tok[r] = 0; rec_thr[r] = me;
    rec_hold[r]++; rec_live[r] = 1
  };
#ifdef TOKEN_GOES_BACK
  t = counter + 1;                                /* a counter this thread does not own yet */
#endif
  atomic {                                        /* CAS 0 -> W(r) */
    if
    :: word == 0 -> word = W(r); ok = 1; assert(held[0] == 0 && held[1] == 0);  /* a free stripe: nothing in the table */
#if LIB
       if
       :: DUE_FLAGGED -> bypass++; assert(bypass < NP)
       :: else -> skip
       fi
#endif
    :: else -> w = word; ok = 0
    fi
  }
  if
  :: ok -> take_token(r, k, t); intab = 0
  :: else ->                                      /* lock_slow */
     tf = 0; spins = 0; intab = 0; pk = 0;
     do
     :: !LIB && w == 0 ->                         /* free: take it, keeping parked */
        atomic {
          if
          :: word == w -> word = W(r) | PARKED(w) | tf; ok = 1;
             assert(held[0] == 0 && held[1] == 0)
          :: else -> w = word; ok = 0
          fi
        }
        if
        :: ok -> take_token(r, k, t); break
        :: else -> skip
        fi
#if LIB
     :: FREE(w) && (w == 0 || pk || !SLOT_DUE) ->      /* free, no waiter due (or this one waits): take it */
        atomic {
          if
#ifndef TAKE_DROPS_PARKED
          :: word == w -> word = W(r) | w | (pk -> WT : 0); ok = 1;   /* W and P kept; a waiter sets W */
#else
          :: word == w -> word = W(r) | (w & WT) | (pk -> WT : 0); ok = 1;
#endif
             assert(held[0] == 0 && held[1] == 0);
             if
             :: !pk && DUE_FLAGGED -> bypass++; assert(bypass < NP)
             :: else -> skip
             fi
          :: else -> w = word; ok = 0
          fi
        }
        if
        :: ok ->
           take_token(r, k, t);
           if
           :: pk -> leave(me)
           :: else -> skip
           fi;
           break
        :: else -> skip
        fi
#endif
     :: w == INFL && !LAZY -> intab = 1; break
     :: w == INFL && LAZY ->
        lock_mutex();
        if
#ifndef DEFLATE_STALE
        :: word == INFL && DEFLATABLE -> word = 0; tm = 0; w = 0   /* calm: deflate, then the thin CAS */
#else
        :: DEFLATABLE -> word = 0; tm = 0; w = 0    /* w, read before the mutex, taken as the word */
#endif
        :: true -> tm = 0; intab = 1; break                 /* the table (relocks the mutex) */
        fi
     :: ISREC(w) || (LIB && FREE(w) && w != 0 && !pk && SLOT_DUE) ->  /* held (LIB: or free for the waiters, one due) */
        if
        :: ISREC(w) ->
           h = REC(w);
           if
           :: rec_thr[h] == me -> intab = 1; break   /* its own record: another key, the table */
           :: else -> skip
           fi
        :: else -> h = 0
        fi;
        if
        :: spins < SPINS -> spins++; w = word     /* spin */
        :: true ->
           if
           :: !EVENTUAL || (ISREC(w) && rec_hash[h] != HASH(k)) -> intab = 1; break
           :: else -> skip
           fi;
#if LIB
           if
           :: pk -> intab = 1; break                    /* waited fair_after: the table */
           :: !(sdue && sw == me + 1) -> skip
           fi;
           /* park: counted first (with its deadline), then W and P set, then sleep while the word keeps them */
           d_step {                                     /* one CAS on the stripe's count and deadline */
             if
             :: !pk -> pk = 1; nwait++
             :: else -> skip
             fi;
             if
             :: sw == 0 -> sw = me + 1
             :: else -> skip
             fi
           };
           if
           :: (w & (WT | 1)) == (WT | 1) -> ok = 1
           :: else ->
#ifndef PARK_STALE
              atomic {
                if
                :: word == w -> word = w | WT | 1; ok = 1
                :: else -> w = word; ok = 0
                fi
              }
#else
              word = w | WT | 1; ok = 1                 /* the word read before: stale */
#endif
           fi;
           if
           :: ok && FREE(w) && !(SLOT_DUE && sw != me + 1) ->  /* no other waiter due now: take it
                                                        * (its own deadline: the futex's timeout) */
              w = word
           :: ok && (!FREE(w) || (SLOT_DUE && sw != me + 1)) ->
              if
              :: sw == me + 1 -> sflag = 1
              :: else -> skip
              fi;
              atomic {                                  /* FUTEX_WAIT(word, w|WT|1) */
                if
                :: word == (w | WT | 1) -> fw[me] = 1
                :: else -> skip
                fi
              }
              fw[me] == 0;
              spins = 0;
              w = word
           :: else -> skip                              /* the CAS failed: w is the new word */
           fi
#else
           /* park: set the parked bit, then sleep while the sequence is unchanged */
           if
           :: PARKED(w) -> ok = 1
           :: else ->
              atomic {
                if
                :: word == w -> word = w | 1; ok = 1
                :: else -> w = word; ok = 0
                fi
              }
           fi;
           if
           :: ok ->
              tf = 1;
              sq = seq;
              w = word;
              if
              :: PARKED(w) && ISREC(w) ->
                 atomic {                         /* FUTEX_WAIT(seq, sq) */
                   if
                   :: seq == sq -> fw[me] = 1
                   :: else -> skip
                   fi
                 }
                 fw[me] == 0
              :: else -> skip
              fi;
              spins = 0;
              w = word
           :: else -> skip                        /* the CAS failed: w is the new word */
           fi
#endif
        fi
     od;
     h = 0; spins = 0; sq = 0;
     if
     :: intab ->
        rec_live[r] = 0;                          /* the record goes back to the cache */
#if LIB
        if
        :: pk -> leave(me)
        :: else -> skip
        fi;
#endif
#ifndef NO_PASS_WAKE
        if
        :: tf -> wake_one()                       /* pass on the wake-up this thread took */
        :: else -> skip
        fi;
#endif
        lock_table(me, k, t)
     :: else -> skip
     fi;
     tf = 0; pk = 0
  fi;
  ok = 0; w = 0
}

inline unlock(me, r, k, t, intab) {
  d_step { holders[k]--; };
  if
  :: intab ->                                     /* unlock_table */
     lock_mutex();
     d_step { assert(held[k] && heldtok[k] == t); held[k] = 0 };
     release_locked();
     tm = 0
  :: else ->                                      /* unlock_thin */
#ifndef UNLOCK_RACES_INFLATION
     atomic {
       if
       :: word == W(r) -> word = 0; ok = 1
       :: else -> w = word; ok = 0
       fi
     }
#if LIB
     /* waited on: free it, to W while waiters are counted (a load, then the CAS), and
      * wake the sleepers if P was set; its own hold gains bits only, until inflated */
     do
     :: ok || w == INFL -> break
     :: else ->
        assert(REC(w) == r);
        c = nwait;
        atomic {
          if
#ifndef UNLOCK_FORGETS_WAITERS
          :: word == w -> word = (c > 0 -> WT : 0); ok = 1
#else
          :: word == w -> word = 0; ok = 1         /* the waiters' W dropped */
#endif
          :: else -> w = word; ok = 0
          fi
        }
        if
#ifndef UNLOCK_IGNORES_PARKED
        :: ok && PARKED(w) -> wake_all()          /* they take it or park again */
#endif
        :: else -> skip
        fi
     od;
     c = 0;
#else
     if
     :: !ok && w == (W(r) | 1) ->
        atomic {                                  /* the parked bit is set: CAS it to 0 */
          if
          :: word == w -> word = 0; ok = 1
          :: else -> w = word; ok = 0
          fi
        }
        if
        :: ok -> wake_one()
        :: else -> skip
        fi
     :: else -> skip
     fi;
#endif
     if
     :: !ok ->                                    /* inflated: the key is in the table */
        assert(w == INFL);
        lock_mutex();
        d_step {
          found = held[rec_key[r]] && heldtok[rec_key[r]] == rec_tok[r];
          assert(found);
          held[rec_key[r]] = 0; found = 0
        };
        release_locked();
        tm = 0
     :: else -> skip
     fi;
#else
     if
     :: PARKED(word) -> word = 0; wake_one()
     :: else -> word = 0
     fi;
#endif
     rec_live[r] = 0                              /* back to the cache */
  fi;
  ok = 0; w = 0; t = 0; intab = 0
}

proctype thread(byte me) {
  byte round = 0, k, t, t2, w, h, hk, pin, sq, spins, c;
  bit ok, busy, tf, pk, found, intab, intab2;
  do
  :: (me == 0 && round < ROUNDS0) || (me != 0 && round < ROUNDS) ->
     round++;
     if
     :: k = 0
     :: k = 1
     fi;
     lock(me, 2 * me, k, t, intab);
#if NEST
     if
     :: me == 0 && k == 0 ->                      /* key 1 too, while key 0 is held */
        lock(me, 2 * me + 1, 1, t2, intab2);
        unlock(me, 2 * me + 1, 1, t2, intab2)
     :: else -> skip
     fi;
#endif
     unlock(me, 2 * me, k, t, intab);
     k = 0
  :: else -> break
  od;
  done++
}

init {
  byte i;
  atomic {
    for (i : 0 .. NP - 1) { run thread(i) }
#if LIB
    run clock();
#endif
    i = 0
  };
  done == NP;
#ifndef NO_END_CHECK
  assert((word == 0 || (LIB && word == WT) || (LAZY && word == INFL)) && !held[0] && !held[1] && waiting == 0 && tm == 0);
#if LIB
  assert(nwait == 0);             /* a stale W (an unlock that counted a waiter leaving) is free */
#endif
  assert(holders[0] == 0 && holders[1] == 0 && !fw[0] && !fw[1] && !fw[2])
#endif
}
