/*
 * Promela model of a PROPOSED bounded-mailbox protocol (not the one in the code: see
 * bounded.pml for that): admission by one fetch_add on the ownership word, room given
 * back by the owner with a plain store per message. docs/notebook.md, "Bounded admission
 * in one atomic: a ticket design, modelled, not built; a smaller bounded send", says why
 * and what is left to build.
 *
 * The ownership word of a bounded actor packs three fields, changed together:
 *   cnt   messages counted and not yet subtracted by the owner (the hand-off count:
 *         cnt 0 -> k makes the sender the owner)
 *   sub   messages the owners have subtracted, ever (modulo a field width)
 *   W     a sender sleeps waiting for room (set under the bucket's mutex)
 * and the owner publishes `ran`, the messages run ever, by a plain store after each one.
 * A sender's ticket is cnt + sub read by its own read-modify-write: the messages counted
 * before it, ever. Room for k: ticket + k <= ran + CAP. Tickets are taken in order and
 * ran only grows, so a stale `ran` only errs toward "full".
 *
 * Senders:
 *   claim (post at top level, full_policy::block, no max_block): fetch_add(k); owner if
 *          cnt was 0; else if room, push; else wait (never gives up: its claim is counted,
 *          so the owner keeps the actor and its later tickets are placed behind it) until
 *          room, then push.
 *   try   (try_post, a send in a handler, full_policy::fail): reads `ran`, then a CAS that
 *          counts only with room: exact, no claim to undo. Full: gives the message up.
 *   timed (post with max_block): as try, but waits for room (the sleep of a claimer, with
 *          a deadline that may pass at any moment); a woken or timed-out sender retries its
 *          CAS once before it gives up.
 * Sleeping: lock the bucket, link, set W (a read-modify-write of the word), read `ran` and
 * the word: room -> unlink, go; else sleep. Waking: under the mutex every linked sender of
 * the actor is woken and W cleared.
 * Owner: after each message, store ran + 1, then MAY read W without a fence (so may miss a
 * sleeper: modelled by a choice to skip); the wake-up that must not miss is the release's
 * read-modify-write, which returns W. No fence anywhere: a sleeper sets W by a
 * read-modify-write of the word and then reads `ran`, so a sleeper whose W the release
 * missed reads every `ran` stored before that release, and finds its room. An owner
 * waiting for a counted claim that sleeps has always released (subtracted) before: the
 * claim's W came after that, and its read of `ran` finds room.
 *
 * Checked: one owner, exactly once, per-sender FIFO, messages admitted and not run never
 * exceed CAP, every message runs or its send gave up, no sender asleep at the end (an
 * invalid end state otherwise: a sleeper left with room). Sequentially consistent memory.
 *
 * Switches: NS, M, CAP, K (messages per send, all claimed at once), NTRY, NTIMED (the
 * first NTRY senders try, the next NTIMED are timed, the rest claim), FOREVER (a timed
 * sender's deadline never passes: it waits without a claim, so a lost wake-up shows).
 * Broken variants, each expected to be rejected:
 *   NO_RELEASE_WAKE   the release ignores W (room given back without a wake-up)
 *   STALE_SUB         the claimer reads `sub` before its fetch_add: a ticket on stale room
 *   UNDO_CLAIM        a claimer may time out and undo its claim by a fetch_sub (a lost
 *                     ticket: the owner's count and the later tickets are wrong)
 *   SLEEPER_READS_FIRST  the sleeper reads `ran` before it sets W (a lost wake-up)
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
#ifndef K
#define K 1
#endif
#ifndef NTRY
#define NTRY 0
#endif
#ifndef NTIMED
#define NTIMED 0
#endif

#define TOTAL (NS * M * K)

/* the ownership word */
short cnt = 0;
byte sub = 0;
bit W = 0;
byte ran = 0;             /* the owner's plain store */

/* the mailbox: slots in push order; a batch is reserved and linked as one chain */
byte slot[TOTAL + 1];
bit linked[TOTAL + 1];
byte R = 0;
byte H = 0;
#define POPPABLE (H < R && linked[H])

/* the bucket */
byte mtx = 0;
bit inlist[NS];
bit asleep[NS];

/* ghosts */
byte owners = 0;
byte nextseq[NS];
byte nrun = 0;
byte gaveup = 0;
byte admitted = 0;        /* admitted (counted with room) and not run */
byte claims = 0;          /* messages counted, ever: the ticket check */

inline lock() { atomic { mtx == 0 -> mtx = _pid + 1 } }
inline unlock() { d_step { assert(mtx == _pid + 1); mtx = 0 } }

inline admit(k) { d_step { admitted = admitted + k; assert(admitted <= CAP) } }

/* message mm: sender mm / (M * K), sequence mm % (M * K) */
inline run_msg(mm) {
  d_step {
    assert(owners == 1);
    assert(mm % (M * K) >= nextseq[mm / (M * K)]);
    nextseq[mm / (M * K)] = mm % (M * K) + 1;
    nrun++; admitted--;
    mm = 0
  }
}

inline push(first, k, x) {
  d_step { x = R; do :: x < R + k -> slot[x] = first + x - R; x++ :: else -> break od; x = R; R = R + k }
  d_step { do :: x < R -> linked[x] = 1; x++ :: else -> break od; x = 0 }
}

/* under the mutex: wake every linked sender of the actor, clear W */
inline wake_all(x) {
  lock();
  d_step {
    x = 0;
    do :: x < NS -> if :: inlist[x] -> asleep[x] = 0 :: else -> skip fi; x++ :: else -> break od;
    x = 0; W = 0
  }
  unlock()
}

/* the owner drains, `X` run and not yet subtracted */
inline drain(X, mm, rel, w, x) {
  do
  :: d_step { POPPABLE -> mm = slot[H]; H++ };
     run_msg(mm);
     ran++;                                   /* plain store */
     X++;
     if
     :: W -> wake_all(x)                      /* unfenced read: may miss ... */
     :: skip                                  /* ... which this choice stands for */
     fi
  :: d_step { !POPPABLE && X > 0 ->          /* release: one read-modify-write */
       w = W;
       if :: cnt == X -> rel = 1; owners-- :: else -> rel = 0 fi;
       cnt = cnt - X; sub = sub + X; X = 0 };
#ifndef NO_RELEASE_WAKE
     if :: w -> wake_all(x) :: else -> skip fi;
#endif
     w = 0;
     if :: rel -> rel = 0; break :: else -> skip fi
  od
}

/* link, set W, then read: room (for ticket t, or for a CAS) -> go, else sleep */
inline sleep_for_room(s, has_room) {
  lock();
#ifdef SLEEPER_READS_FIRST
  if :: has_room -> hr = 1 :: else -> hr = 0 fi;   /* BROKEN: read before W is set */
  d_step { inlist[s] = 1; W = 1 };
#else
  d_step { inlist[s] = 1; W = 1 };
  if :: has_room -> hr = 1 :: else -> hr = 0 fi;
#endif
  if
  :: hr -> hr = 0; inlist[s] = 0; unlock()
  :: else ->
     d_step { asleep[s] = 1; mtx = 0 };     /* cv.wait: unlock and sleep */
     if
     :: !asleep[s] -> skip                   /* woken */
#ifndef FOREVER
     :: kind == 2 -> asleep[s] = 0           /* timed: the deadline passed */
#endif
     fi;
     lock();
     inlist[s] = 0;
     unlock()
  fi
}

proctype sender(byte s) {
  byte i = 0, kind, prev, t, r, X = 0, mm, rel, w, x, sb;
  bit ok, hr;
  kind = (s < NTRY -> 1 : (s < NTRY + NTIMED -> 2 : 0));
  do
  :: i < M ->
     if
     :: kind == 0 ->
#ifdef STALE_SUB
        sb = sub;
        d_step { prev = cnt; t = prev + sb; cnt = cnt + K; claims = claims + K;
                 if :: prev == 0 -> owners++ :: else -> skip fi };
#else
        d_step { prev = cnt; t = prev + sub; assert(t == claims); cnt = cnt + K; claims = claims + K;
                 if :: prev == 0 -> owners++ :: else -> skip fi };
#endif
        if
        :: prev == 0 -> admit(K)
        :: else ->
           do
           :: t + K <= ran + CAP -> admit(K); break
           :: else ->
#ifdef UNDO_CLAIM
              if
              :: d_step { cnt = cnt - K; claims = claims - K; gaveup = gaveup + K; ok = 1 }; break
              :: skip
              fi;
#endif
              sleep_for_room(s, t + K <= ran + CAP)
           od
        fi;
#ifdef UNDO_CLAIM
        if :: ok -> ok = 0; i++; goto next :: else -> skip fi;
#endif
        ok = 0
     :: else ->                               /* try and timed: a CAS that counts only with room */
        do
        :: r = ran;
           d_step { if
                    :: cnt + sub + K <= r + CAP -> prev = cnt; cnt = cnt + K; claims = claims + K; ok = 1;
                       if :: prev == 0 -> owners++ :: else -> skip fi
                    :: else -> ok = 0
                    fi };
           if
           :: ok -> admit(K); break
           :: !ok && (kind == 1 || t == 1) -> d_step { gaveup = gaveup + K; t = 0 }; break
           :: else ->
              sleep_for_room(s, cnt + sub + K <= ran + CAP);
              t = 1                            /* retries once, then may give up */
           fi
        od;
        t = 0;
        if :: !ok -> i++; goto next :: else -> ok = 0 fi
     fi;
     if
     :: prev == 0 ->                          /* the owner: its own message first */
        mm = s * M * K + i * K;
        run_msg(mm); ran++; X = 1;
        do                                    /* the rest of its batch, in front */
        :: X < K -> mm = s * M * K + i * K + X; run_msg(mm); ran++; X++
        :: else -> break
        od;
        drain(X, mm, rel, w, x)
     :: else -> push(s * M * K + i * K, K, x)
     fi;
     prev = 0; i++;
next: skip
  :: else -> break
  od
}

init {
  byte s = 0;
  atomic {
    do :: s < NS -> run sender(s); s++ :: else -> break od
  }
  (_nr_pr == 1);
  assert(owners == 0 && cnt == 0 && nrun + gaveup == TOTAL && admitted == 0 && H == R);
  s = 0;
  do :: s < NS -> assert(!asleep[s] && !inlist[s]); s++ :: else -> break od
}
