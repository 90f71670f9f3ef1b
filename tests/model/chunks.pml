/*
 * Promela model of the one-atomic send over pooled chunks: the packed word of packed.pml
 * (count and ticket in one word, one atomic step per send) with its slots in chunks that
 * senders install, the owner recycles, and an idle actor does not hold.
 *
 *   word:    (count, ticket); a send adds (1, 1). count 0 before: the sender owns the
 *            actor and runs its message inline (its ticket has no slot).
 *   chunks:  chunk c serves the tickets base(c) .. base(c) + N - 1 (base a multiple of N);
 *            a slot holds a message or is empty (0). Chunks come from a pool that other
 *            actors share, so a chunk back in the pool may be reused at once. prev(c) and
 *            next(c) link the chunks of the actor; prev is 0 or a chunk not in the pool.
 *   head:    (idx, base, closing), one atomic word: the newest chunk and its base, or idx 0
 *            (no chunk); closing != 0 while the owner is detaching the chunk to release the
 *            actor (the owner's next ticket - base + 1: two detaches of one chunk differ).
 *   sender t (not the owner) finds its slot from the head it read:
 *            idx 0:          install a chunk of base t - t % N by CAS
 *            closing:        cancel the detach (CAS closing -> 0), retry
 *            t >= base + N:  install the next chunk (prev = idx) by CAS; the winner then
 *                            links next(idx); a loser returns its chunk to the pool
 *            else:           walk prev from idx to the chunk whose base <= t, and write
 *                            the slot. Every chunk on the walk serves tickets >= t, which
 *                            the owner has not passed: none is back in the pool. A chunk
 *                            installed from idx 0 has no prev: the walk puts one in front
 *                            (CAS prev 0 -> new).
 *   first:   every chunk names the first chunk of the turn it was installed in: itself
 *            when installed on an empty head, its predecessor's when appended, and the
 *            detaching owner names its own chunk (for the next turn, if a sender takes it
 *            back) before it marks the head closing.
 *   owner:   reads its chunk's slots in ticket order, empties each; past the end of a chunk
 *            it moves to next(c) once linked, clears its prev and returns c to the pool.
 *            A new owner holds no chunk: once a message is in flight it starts at the first
 *            chunk that the head's chunk names (cancelling a detach, as senders do; walking
 *            prev over a chunk a sender puts in front), and moves on from there: the
 *            chunks before its next ticket (a detached chunk that a sender took back, and
 *            the chunks appended after it) go back to the pool as it passes them.
 *   release: X = messages run. count > X, or no chunk held: fetch_sub(X), released iff
 *            count == X. count == X with a chunk: CAS head to closing, drop the chunk from
 *            the owner's state, CAS word (X, t) -> (0, t). Released: CAS head (closing) ->
 *            idx 0; if that held, the chunk goes back to the pool (a sender that cancelled
 *            the detach gave it to the next owner). Not released: take the chunk back,
 *            cancel the detach, drain on. After the release the old owner touches only the
 *            head word; it marks the actor (in its thread's record, a ghost count here)
 *            before its close CAS and clears the mark after that last CAS (or when the
 *            detach fails), and the actor's destructor waits until no mark names it.
 *   destroy: (DESTROY) once every send is counted, a destructor takes the idle actor (count
 *            0 -> 1), waits for the marks, destroys it (a released owner's later touch of
 *            the head is an error) and returns the chunks the head still names. With
 *            EXITING, an owner may find it cannot mark the actor (its thread has returned
 *            its record at exit): it names its chunk the next turn's first and releases by
 *            fetch_sub with the chunk; the next owner reads on from it, or the destructor
 *            returns it.
 *
 * NS senders send M messages each; N slots per chunk; a pool of K chunks (0 = none).
 * Memory is sequentially consistent here: the model checks the protocol's interleavings,
 * not the C++ memory orders. Checked by spin under ctest through tests/model/check.sh
 * (MODEL=chunks.pml); see tests/model/README.md.
 *
 * The assertions: every accepted message runs once, in its sender's order, by the owner;
 * a chunk is touched only while out of the pool and in the same allocation (a ghost
 * generation per chunk catches a reuse); a sender writes an empty slot of the chunk that
 * serves its ticket; a chunk goes back to the pool empty; a monitor: one owner, count 0
 * iff nobody owns; at the end the count is 0, the head empty, every chunk in the pool
 * (the idle actor holds none) and no process blocked.
 *
 * Switches (spin -DNAME=VALUE):
 *   NS, M, N, K   senders, messages each, slots per chunk, pool size (3, 2, 2, 6)
 *   T0            the first ticket (0), to line the tickets up with a chunk's end
 *   CAP           a bounded actor: admission by CAS while count < CAP (a full actor counts
 *                 nothing and takes no ticket: the send is refused), and the owner releases
 *                 after every message, so that the count is the room senders see
 *   DESTROY       a destructor process (see destroy above)
 *   EXITING       with DESTROY: owners may be unable to mark the actor, and keep the chunk
 * Broken variants, each expected to be rejected:
 *   BROKEN_NO_CLOSING     the owner empties the head before its release attempt instead of
 *                         marking it closing: a sender that read the head before writes the
 *                         old chunk, one that reads it after installs a second chunk for
 *                         the same tickets
 *   BROKEN_EARLY_RECYCLE  the owner returns a chunk to the pool once it has read its last
 *                         slot, without waiting for next(c): the installer of the next
 *                         chunk links a chunk that is back in the pool
 *   BROKEN_PLAIN_INSTALL  a sender installs the next chunk with a store, not a CAS
 *   BROKEN_NO_TAG         the released owner's CAS ignores the closing tag: a later detach
 *                         of the same chunk by the next owner looks like its own, and the
 *                         old owner recycles a chunk the new one still reads (needs N >= 3
 *                         and T0 = N - 1 to be reached within 3 senders x 2)
 *   BROKEN_KEEP_CHUNK     the owner releases by fetch_sub and keeps its chunk: the idle
 *                         actor holds memory (the end assertion)
 *   BROKEN_STALE_FIRST    the detaching owner does not name its chunk the first of the
 *                         next turn: a new owner starts from a chunk back in the pool
 *   BROKEN_NO_MARK_WAIT   (DESTROY) the destructor does not wait for the detach marks: a
 *                         released owner's last CAS touches the destroyed actor
 */

#ifndef NS
#define NS 3
#endif
#ifndef M
#define M 2
#endif
#ifndef N
#define N 2
#endif
#ifndef K
#define K 6
#endif

#if N < 2 || N > 3
#error "N from 2 to 3 (recycle() checks three slots at most)"
#endif

#ifndef T0
#define T0 0
#endif
#ifdef CAP
#define RELEASE_EACH true  /* the count is the room senders see */
#else
#define RELEASE_EACH false
#endif

/* ---- the actor ---- */
byte count = 0;
byte ticket = T0;  /* T0: where the tickets start, to line them up with a chunk's end */
byte hidx = 0;      /* head: newest chunk (0: none) */
byte hbase = 0;     /* head: its base (with idx 0: where the next chunk starts) */
byte hclose = 0;    /* head: closing tag, 0 = open */

/* ---- the pool: chunks 1..K; index 0 unused ---- */
bool pooled[K + 1];
byte cgen[K + 1];         /* ghost: allocations of each chunk, to catch a reuse (ABA) */
byte cbase[K + 1];
byte cprev[K + 1];
byte cnext[K + 1];
byte cfirst[K + 1];       /* the first chunk of the owner's turn, as of this chunk's install */
byte slot[(K + 1) * N];   /* message + 1, or 0 */
#define SLOT(c, t) slot[(c) * N + ((t) % N)]
#define ALIVE(c) ((c) != 0 && !pooled[c])

/* ---- ghost state ---- */
byte owners = 0;
pid owner = 0;
byte nextseq[NS];
byte nrun = 0;
byte accepted = 0;
byte done = 0;
byte marked = 0;         /* released owners that may still touch the head (their marks) */
bool destroyed = false;  /* DESTROY: the destructor went past its wait */

#define INVARIANT (owners <= 1 && (count == 0) == (owners == 0))

inline run_msg(mm) {
  d_step {
    assert(owners == 1 && owner == _pid);
    assert(mm % M >= nextseq[mm / M]);
    nextseq[mm / M] = mm % M + 1;
    nrun++;
    mm = 0
  }
}

/* Takes a chunk from the pool (base b, prev p), all slots empty. */
inline alloc(c, b, p) {
  d_step {
    c = 1;
    do
    :: c <= K && !pooled[c] -> c++
    :: else -> break
    od;
    assert(c <= K);  /* the pool is large enough for the bounds */
    pooled[c] = false;
    cgen[c]++;
    cbase[c] = b;
    cprev[c] = p;
    cnext[c] = 0;
    cfirst[c] = 0
  }
}

inline recycle(c) {
  d_step {
    assert(ALIVE(c));
    assert(SLOT(c, 0) == 0 && SLOT(c, 1) == 0 && (N < 3 || SLOT(c, 2) == 0));
    pooled[c] = true
  }
}

/* A head (lidx, lbase, lclose) read closing, by a party that needs a chunk: cancel the
 * owner's detach (its CAS then fails and it leaves the chunk alone). Whoever owns the
 * actor next reads the chunk, or, if the chunk serves no ticket it will read, finds it
 * right before its first chunk and returns it to the pool. */
inline settle_closing(lidx, lbase, lclose) {
  d_step { if :: hidx == lidx && hbase == lbase && hclose == lclose -> hclose = 0 :: else fi }
}

/* A sender that lost the hand-off writes message mm for ticket t. */
inline place(t, mm, c, lidx, lbase, lclose, ok) {
  do
  :: d_step { lidx = hidx; lbase = hbase; lclose = hclose; lgen = cgen[hidx] }
     if
     :: lidx == 0 ->
        alloc(c, t - t % N, 0);
        cfirst[c] = c;  /* the first chunk of the turn: itself */
        d_step {
          ok = (hidx == 0 && hbase == lbase && hclose == 0);
          if
          :: ok -> hidx = c; hbase = t - t % N
          :: else -> pooled[c] = true
          fi
        }
     :: lidx != 0 && lclose != 0 ->
        settle_closing(lidx, lbase, lclose)
     :: lidx != 0 && lclose == 0 && t >= lbase + N ->
        alloc(c, lbase + N, lidx);
        cfirst[c] = cfirst[lidx];  /* lidx may be back in the pool: then the CAS fails */
#ifdef BROKEN_PLAIN_INSTALL
        d_step { hidx = c; hbase = lbase + N; ok = true }
#else
        d_step {
          ok = (hidx == lidx && hbase == lbase && hclose == 0);
          if
          :: ok -> hidx = c; hbase = lbase + N
          :: else -> pooled[c] = true
          fi
        }
#endif
        if
        :: ok -> d_step { assert(ALIVE(lidx)); cnext[lidx] = c }
        :: else
        fi
     :: lidx != 0 && lclose == 0 && t < lbase + N ->
        c = lidx;
        do
        :: d_step { assert(ALIVE(c)); ok = (cbase[c] <= t) }
           if
           :: ok -> break
           :: else ->
              if
              :: cprev[c] == 0 ->
                 /* the first chunk installed since the actor was idle: put the chunk of
                    the tickets before it in front */
                 alloc(lidx, cbase[c] - N, 0);
                 d_step {
                   cnext[lidx] = c;
                   if
                   :: cprev[c] == 0 -> cprev[c] = lidx
                   :: else -> pooled[lidx] = true
                   fi;
                   lidx = 0
                 }
              :: else
              fi;
              d_step { c = cprev[c]; assert(ALIVE(c)); lgen = cgen[c] }
           fi
        od;
        skip;  /* the walk's exit: a jump may not land on a d_step */
        d_step {
          assert(ALIVE(c) && cgen[c] == lgen && cbase[c] <= t && t < cbase[c] + N);
          assert(SLOT(c, t) == 0);
          SLOT(c, t) = mm + 1
        }
        break
     fi;
     c = 0; ok = false; lgen = 0
  od;
  c = 0; lidx = 0; lbase = 0; lclose = 0; ok = false; lgen = 0
}

/* Owner only: from ticket `next` on, holding chunk rc (0: none yet), `ran` run and not
 * subtracted, until a release. */
inline drain(next, ran, rc, before, mm, lidx, lbase, lclose, ok) {
  do
  /* read the next slot */
  :: rc != 0 && next < cbase[rc] + N && SLOT(rc, next) != 0 ->
     d_step {
       assert(ALIVE(rc) && cgen[rc] == rgen && cbase[rc] <= next);
       mm = SLOT(rc, next) - 1;
       SLOT(rc, next) = 0
     }
     run_msg(mm);
     next++;
     ran++
  /* end of a chunk: move on, return it to the pool */
  :: rc != 0 && ALIVE(rc) && next >= cbase[rc] + N && cnext[rc] != 0 ->
     d_step { assert(cgen[rc] == rgen); lidx = rc; rc = cnext[rc]; cprev[rc] = 0; rgen = cgen[rc] }
     recycle(lidx);
     lidx = 0
#ifdef BROKEN_EARLY_RECYCLE
  :: rc != 0 && next >= cbase[rc] + N && cnext[rc] == 0 && !pooled[rc] ->
     recycle(rc)
  :: rc != 0 && next >= cbase[rc] + N && cnext[rc] != 0 && pooled[rc] ->
     rc = cnext[rc];
     rgen = cgen[rc]
#endif
  /* no chunk, a message in flight: find the chunk of `next` from the head */
  :: rc == 0 && count > ran && hidx != 0 && hclose != 0 ->
     d_step { lidx = hidx; lbase = hbase; lclose = hclose }
     settle_closing(lidx, lbase, lclose);
     lidx = 0; lbase = 0; lclose = 0; ok = false
  :: rc == 0 && count > ran && hidx != 0 && hclose == 0 ->
     /* the head chunk names the first chunk of this turn; start there (walking back over
        a chunk a sender is putting in front); the chunks before `next` are passed, and
        returned, by the moves to next */
     d_step { lbase = hidx; assert(ALIVE(lbase)) }
     d_step { lidx = cfirst[lbase]; assert(ALIVE(lidx)) }
     do
     :: d_step { assert(ALIVE(lidx)); ok = (cbase[lidx] <= next) }
        if
        :: ok -> break
        :: else ->
           (cprev[lidx] != 0);  /* the sender of `next` puts its chunk in front */
           d_step { lidx = cprev[lidx]; assert(ALIVE(lidx)) }
        fi
     od;
     skip;  /* the walk's exit: a jump may not land on a d_step */
     d_step { rc = lidx; rgen = cgen[rc] }
     lidx = 0; lbase = 0; ok = false
  /* nothing to read: release what ran (nothing ran: wait for the sender in flight) */
  :: ran != 0 && (RELEASE_EACH ||
     (!(rc != 0 && next < cbase[rc] + N && SLOT(rc, next) != 0) &&
      !(rc != 0 && next >= cbase[rc] + N && cnext[rc] != 0))) ->
     d_step { before = count }
     if
#ifdef EXITING
     :: before == ran && rc != 0 ->
        /* cannot mark the actor: release with the chunk, named the next turn's first */
        cfirst[rc] = rc;
        d_step {
          before = count;
          assert(before >= ran);
          count = count - ran;
          if
          :: before == ran -> owners--; owner = 0
          :: else
          fi
        }
        if
        :: before == ran -> break
        :: else -> ran = 0
        fi
#endif
     :: before != ran || rc == 0 ->
        /* fetch_sub */
        d_step {
          before = count;
          assert(before >= ran);
          count = count - ran;
          if
          :: before == ran -> owners--; owner = 0
          :: else
          fi
        }
        if
        :: before == ran -> break
        :: else -> ran = 0
        fi
#ifdef BROKEN_KEEP_CHUNK
     :: else -> d_step { count = count - ran; assert(count == 0); owners--; owner = 0 }
        break
#else
     :: else ->
        /* detach, then try the release */
        lbase = cbase[rc];
        lclose = next - lbase + 1;
#ifndef BROKEN_STALE_FIRST
        cfirst[rc] = rc;  /* the next turn starts here if a sender takes the chunk back */
#endif
        marked++;
#ifdef BROKEN_NO_CLOSING
        d_step {
          ok = (hidx == rc && hbase == lbase && hclose == 0);
          if :: ok -> hidx = 0 :: else fi
        }
#else
        d_step {
          ok = (hidx == rc && hbase == lbase && hclose == 0);
          if :: ok -> hclose = lclose :: else fi
        }
#endif
        if
        :: !ok -> marked--  /* a sender installed a chunk meanwhile: the count moved too */
        :: else ->
           lidx = rc;
           rc = 0;
           d_step {
             ok = (count == ran);
             if
             :: ok -> count = 0; owners--; owner = 0
             :: else
             fi
           }
           if
           :: ok ->
#ifdef BROKEN_NO_CLOSING
              recycle(lidx);
#else
              d_step {
                assert(!destroyed);  /* the released owner's last touch of the actor */
#ifdef BROKEN_NO_TAG
                ok = (hidx == lidx && hbase == lbase && hclose != 0);
#else
                ok = (hidx == lidx && hbase == lbase && hclose == lclose);
#endif
                if :: ok -> hidx = 0; hclose = 0 :: else fi
              }
              marked--;
              if
              :: ok -> recycle(lidx)
              :: else
              fi;
#endif
              break
           :: else ->
              rc = lidx;
#ifdef BROKEN_NO_CLOSING
              d_step { if :: hidx == 0 && hbase == lbase -> hidx = rc :: else fi }
#else
              /* take the chunk back (a sender may have cancelled the detach already) */
              settle_closing(rc, lbase, lclose);
#endif
              marked--
           fi
        fi;
        lidx = 0; lbase = 0; lclose = 0; ok = false
#endif
     fi
  od;
  next = 0; ran = 0; rc = 0; rgen = 0; before = 0; mm = 0; lidx = 0; lbase = 0; lclose = 0; ok = false
}

proctype sender(byte s) {
  byte k = 0;
  byte t, prev, next, ran, rc, before, mm, c, lidx, lbase, lclose;
  byte rgen, lgen;  /* ghost: the generation of the owner's chunk, of the sender's */
  bool ok, admitted;
  do
  :: k < M ->
     d_step {
#ifdef CAP
       admitted = (count < CAP);
#else
       admitted = true;
#endif
       if
       :: admitted ->
          prev = count;
          t = ticket;
          count++;
          ticket++;
          accepted++;
          if
          :: prev == 0 -> assert(owners == 0); owners++; owner = _pid
          :: else
          fi
       :: else
       fi
     }
     if
     :: !admitted -> skip  /* refused: nothing counted, no ticket */
     :: admitted && prev != 0 -> place(t, s * M + k, c, lidx, lbase, lclose, ok)
     :: admitted && prev == 0 ->
        mm = s * M + k;
        run_msg(mm);
        next = t + 1;
        ran = 1;
        drain(next, ran, rc, before, mm, lidx, lbase, lclose, ok)
     fi;
     k++;
     prev = 0;
     t = 0;
     admitted = false
  :: else -> break
  od;
  done++
}

#ifdef DESTROY
proctype destructor() {
  byte c, p;
  atomic {
    accepted == NS * M && count == 0 ->
    count = 1; ticket++; owners++; owner = _pid
  }
#ifndef BROKEN_NO_MARK_WAIT
  (marked == 0);
#endif
  destroyed = true;
  /* discard(): the chunks the head still names, back to the first */
  d_step {
    assert(hclose == 0);
    c = hidx;
    do
    :: c != 0 -> p = cprev[c]; recycle(c); c = p
    :: else -> break
    od;
    hidx = 0;
    p = 0
  }
  d_step { count = 0; owners--; owner = 0 }
  done++
}
#define DESTRUCTORS 1
#else
#define DESTRUCTORS 0
#endif

proctype monitor() {
end_watch:
  atomic { !(INVARIANT) -> assert(INVARIANT) }
}

init {
  byte i;
  d_step {
    i = 1;
    do
    :: i <= K -> pooled[i] = true; i++
    :: else -> break
    od;
    i = 0
  }
  atomic {
    run monitor();
    do
    :: i < NS -> run sender(i); i++
    :: else -> break
    od;
#ifdef DESTROY
    run destructor()
#endif
  }
  (done == NS + DESTRUCTORS);
  /* everything accepted ran once; the idle actor holds no chunk; the pool is whole */
  d_step {
    assert(nrun == accepted && count == 0 && owners == 0);
    assert(hidx == 0 && hclose == 0);
    i = 1;
    do
    :: i <= K -> assert(pooled[i]); i++
    :: else -> break
    od
  }
}
