/*
 * Promela model of the Redis shard's poster hand-off (lib/redis/actor/shard_owner.hpp,
 * drain(); lib/redis/actor/shard_store.hpp): a post appends to the shard's queue, and the
 * post whose append answers 1 (the queue was empty) takes the shard's lease if nobody
 * holds it and drains the shard on its own thread. The drain reads everything queued,
 * runs it, acknowledges it (trims it), and, once a read finds nothing new, releases the
 * lease only while the queue is still empty (checked in the releasing script). Checked by
 * spin under ctest through tests/model/check.sh (MODEL=shard_handoff.pml); see
 * tests/model/README.md.
 *
 * Each server step (an append and its reply, a read, a take, an acknowledgement, a
 * release) is atomic, as a command or script is on the server. No crash: leases do not
 * run out here (what a crash leaves is a sweeper's to find, outside this model).
 *
 * Assertions:
 *   - one owner at a time drains the shard (the lease);
 *   - at the end, once every poster returned and nobody holds the lease, every entry
 *     posted ran exactly once and the queue is empty: no entry is left without an owner.
 * Broken variants, each expected to be rejected:
 *   BROKEN_RELEASE  the drain releases without checking that the queue is empty: a post
 *                   that came after its last read found the shard owned, did not take it,
 *                   and is stranded
 *   BROKEN_NO_TAKE  posters only append (nobody lingers to read them): stranded at once
 */

#ifndef NP
#define NP 3
#endif
#ifndef M
#define M 2
#endif

byte posted = 0;  /* entries appended ever */
byte trimmed = 0; /* entries acknowledged (trimmed from the head) ever */
byte handled = 0; /* ghost: handler runs */
byte lease = 0;   /* 0: free; else the owner's number */
byte owners = 0;  /* ghost: drains between take and release */
byte done = 0;    /* posters returned */

inline drain(me) {
  read_end = trimmed; /* a takeover reads from the head */
  owners++;
  assert(owners == 1);
  do
  :: atomic { n = posted - read_end; read_end = posted }; /* the read: everything queued */
     handled = handled + n;                                 /* run, in order */
     atomic { assert(lease == me); trimmed = read_end };    /* the fenced acknowledgement */
     if
     :: n == 0 ->
#ifdef BROKEN_RELEASE
        atomic { owners--; lease = 0 };
        break
#else
        atomic {
          if
          :: posted == trimmed -> owners--; lease = 0; released = true
          :: else -> released = false /* a post came after the read: read on */
          fi
        };
        if
        :: released -> break
        :: else -> skip
        fi
#endif
     :: else -> skip
     fi
  od
}

proctype poster(byte me) {
  byte i = 0, n = 0, read_end = 0;
  bool took = false, released = false;
  do
  :: i < M ->
     atomic { posted++; n = posted - trimmed }; /* RPUSH answers the queue's length */
     i++;
#ifndef BROKEN_NO_TAKE
     if
     :: n == 1 ->
        atomic {
          if
          :: lease == 0 -> lease = me; took = true
          :: else -> took = false
          fi
        };
        if
        :: took -> drain(me)
        :: else -> skip
        fi
     :: else -> skip
     fi
#endif
  :: else -> break
  od;
  done++
}

init {
  byte p;
  atomic {
    for (p : 1 .. NP) {
      run poster(p)
    }
  };
  (done == NP && lease == 0);
  assert(handled == posted && trimmed == posted)
}
