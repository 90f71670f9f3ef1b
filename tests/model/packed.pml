/*
 * Promela model of the one-atomic send (bench/packed_actor.hpp; docs/notebook.md, "Fan-in:
 * the matrix, and three prototypes of a one-atomic send"), the protocol the actor's
 * ownership word moved to: one word packs the message count and a message ticket, so
 * that one fetch_add both counts a message and gives it its slot (the library's slots
 * are in chunks: chunks.pml).
 *
 *   send:    (count, ticket) += (1, 1), one atomic step. The sender that found count 0
 *            owns the actor: it skips its own slot (frees it for the next lap), runs its
 *            message, and drains from its ticket + 1. Any other sender waits until its
 *            slot is free for its ticket (the owner freed it a lap ago), writes the
 *            message, then sets the slot's sequence to ticket + 1 (the ready flag).
 *   drain:   the owner takes the slots in ticket order: a slot whose sequence says ready
 *            is read, freed for the next lap (sequence ticket + RING) and run. A slot not
 *            ready belongs to a sender between its fetch_add and its write: with nothing
 *            run since the last subtraction the owner waits for it; otherwise it releases
 *            a batch: fetch_sub(ran), released iff the count was exactly ran, else it
 *            keeps the actor and drains on.
 *
 * One actor, NS sender processes sending M messages each, a ring of RING slots (small, so
 * that senders lap the owner). Memory is sequentially consistent here: the model checks
 * the protocol's interleavings, not the C++ memory orders. Checked by spin under ctest
 * through tests/model/check.sh (MODEL=packed.pml); see tests/model/README.md.
 *
 * Switches (spin -DNAME=VALUE):
 *   NS, M, RING    senders, messages per sender, slots (defaults 3, 2, 2; RING 2 to 4)
 * Broken variants, each expected to be rejected:
 *   BROKEN_READY_FIRST  a sender sets the ready flag before it writes the message: the
 *                       owner runs what the slot held before (the message assertion)
 *   BROKEN_NO_LAP_WAIT  a sender writes its slot without waiting for the owner to have
 *                       freed it: a message not yet run is overwritten (lost)
 *   BROKEN_NO_SKIP      the owner does not free its own (empty) slot: the sender of the
 *                       ticket a lap later waits for it for ever (an invalid end state)
 *   BROKEN_RELEASE      the owner subtracts its batch and leaves whatever the count was:
 *                       messages counted meanwhile are left with no owner (the invariant)
 */

#ifndef NS
#define NS 3
#endif
#ifndef M
#define M 2
#endif
#ifndef RING
#define RING 2
#endif

#if RING < 2 || RING > 4
#error "RING from 2 to 4 (the invariant looks at four slots at most)"
#endif

#define TOTAL (NS * M)

/* ---- the actor ---- */
byte count = 0;     /* the word's count: messages counted and not yet released */
byte ticket = 0;    /* the word's ticket: messages ever counted */
/* Slot i serves the tickets t with t % RING == i. seq: t, free for the sender of t;
 * t + 1, holds its message (ready); t + RING, freed by the owner: free for t + RING. */
byte seq[RING];
byte msg[RING];

/* ---- ghost state for the assertions ---- */
byte owners = 0;    /* processes acting as owner right now */
pid owner = 0;      /* the owner's process id, while owners == 1 */
byte nextseq[NS];   /* per sender: sequence number of the next message to run */
byte nrun = 0;      /* handler runs */
byte done = 0;      /* senders finished */

#define READY(i) ((seq[i] + RING - i) % RING == 1)
/* At most one owner; the count is non-zero exactly while someone owns the actor; with
 * count 0 no slot holds a message that has not run. */
#define INVARIANT (owners <= 1 && (count == 0) == (owners == 0) && \
                   (count != 0 || (!READY(0) && !READY(1) && (RING < 3 || !READY(2)) && (RING < 4 || !READY(3)))))

/* Runs message `mm` (sender mm / M, sequence mm % M): exactly once, in per-sender order,
 * by the owner. */
inline run_msg(mm) {
  d_step {
    assert(owners == 1 && owner == _pid);
    assert(mm % M == nextseq[mm / M]);
    nextseq[mm / M]++;
    nrun++;
    mm = 0
  }
}

/* A sender that is not the owner: waits for its slot, writes, sets the ready flag. */
inline place(t, mm) {
#ifndef BROKEN_NO_LAP_WAIT
  (seq[t % RING] == t);
#endif
#ifdef BROKEN_READY_FIRST
  seq[t % RING] = t + 1;
  msg[t % RING] = mm;
#else
  msg[t % RING] = mm;
  seq[t % RING] = t + 1;
#endif
}

/* The owner's own ticket: its message runs inline, the slot is freed for the next lap. */
inline skip_own(t) {
#ifdef BROKEN_NO_SKIP
  skip
#else
  (seq[t % RING] == t);
  seq[t % RING] = t + RING
#endif
}

/* Owner only: runs from ticket `next` on, `ran` run and not yet subtracted, until a
 * subtraction releases the actor. */
inline drain(next, ran, before, mm) {
  do
  :: seq[next % RING] == next + 1 ->
     mm = msg[next % RING];
     seq[next % RING] = next + RING;
     run_msg(mm);
     next++;
     ran++
  :: ran != 0 && seq[next % RING] != next + 1 ->
     d_step {
       before = count;
       count = count - ran;
#ifdef BROKEN_RELEASE
       before = ran;
#endif
       if
       :: before == ran -> owners--; owner = 0
       :: else
       fi
     }
     if
     :: before == ran -> break
     :: else -> ran = 0
     fi
  /* ran == 0 and the slot not ready: blocked until its sender writes it */
  od;
  next = 0; ran = 0; before = 0
}

proctype sender(byte s) {
  byte k = 0;
  byte t, prev, next, ran, before, mm;
  do
  :: k < M ->
     d_step {
       prev = count;
       t = ticket;
       count++;
       ticket++;
       if
       :: prev == 0 -> assert(owners == 0); owners++; owner = _pid
       :: else
       fi
     }
     if
     :: prev != 0 -> place(t, s * M + k)
     :: else ->
        skip_own(t);
        mm = s * M + k;
        run_msg(mm);
        next = t + 1;
        ran = 1;
        drain(next, ran, before, mm)
     fi;
     k++;
     prev = 0;
     t = 0
  :: else -> break
  od;
  done++
}

/* Checked in every state once the slots are set up: blocks until the invariant fails,
 * then asserts it. */
proctype monitor() {
end_watch:
  atomic { !(INVARIANT) -> assert(INVARIANT) }
}

init {
  byte i;
  d_step {
    i = 0;
    do
    :: i < RING -> seq[i] = i; i++
    :: else -> break
    od;
    i = 0
  }
  atomic {
    run monitor();
    i = 0;
    do
    :: i < NS -> run sender(i); i++
    :: else -> break
    od
  }
  (done == NS);
  assert(nrun == TOTAL && count == 0 && owners == 0);
}
