/*
 * Promela model of the chunk pool behind the actor's mailbox: per-thread caches
 * (magazines) in front of one shared stack of chunk batches (lib/runtime/chunk_pool.cpp,
 * include/handoff/detail/chunk_depot.hpp).
 *
 *   stack:   a Treiber stack of batches. top = (index of the top batch's first chunk,
 *            version); below(h) links a batch to the one under it, next(c) the chunks of a
 *            batch, size(h) its length. push(h): read top, below(h) = top's index, CAS.
 *            pop: read top (load_top), read below(top) (read_below), CAS top -> (below,
 *            version + 1) (try_pop); every CAS bumps the version.
 *   thread:  `loaded`, a list of up to B free chunks, and `spare`, a full batch or none.
 *            take:  loaded empty: the spare becomes loaded, else a batch is popped; then the
 *                   first chunk of loaded is put to use.
 *            free:  any chunk in use (the sender took it, any owner frees it: the flows are
 *                   asymmetric); loaded full: a full spare is pushed first, then loaded
 *                   becomes the spare. Then the chunk goes in front of loaded.
 *            exit:  loaded (if not empty) and the spare are pushed.
 *
 * NT threads do OPS operations each, chosen freely (take, or free a chunk in use by
 * anyone), then exit. K chunks; at the start the stack holds S batches of B and the other
 * chunks are in use. Memory is sequentially consistent: the model checks the protocol's
 * interleavings, not the C++ memory orders. Checked by spin under ctest through
 * tests/model/check.sh (MODEL=depot.pml); see tests/model/README.md.
 *
 * The assertions: a ghost place per chunk (the stack, a thread's cache, in use) says where
 * every chunk is: a pop takes only chunks in the stack, a take only chunks of its own
 * cache, a free only chunks in use, a push only chunks of its cache (no chunk is ever in
 * two places); at the end every chunk is back in the stack, reachable from its top.
 *
 * Switches (spin -DNAME=VALUE):
 *   NT, OPS, B, S, K   threads, operations each, batch size, batches stacked at the start,
 *                      chunks (2, 5, 1, 3, 5)
 * Broken variants, each expected to be rejected:
 *   BROKEN_NO_VERSION  the stack's CAS compares the index only: a pop that read top a and
 *                      below b succeeds after another thread popped a and b and pushed a
 *                      back, and b, in use, becomes the top (ABA)
 *   BROKEN_SWAP        a thread that swaps its spare in keeps naming it the spare, and
 *                      later pushes it to the stack while its chunks are in use
 *   BROKEN_EXIT        an exiting thread keeps its cache: its chunks never come back
 */

#ifndef NT
#define NT 2
#endif
#ifndef OPS
#define OPS 5
#endif
#ifndef B
#define B 1
#endif
#ifndef S
#define S 3
#endif
#ifndef K
#define K 5
#endif

#if K > 6
#error "K up to 6 (pick_in_use() names each chunk)"
#endif

#define STACK 0
#define IN_USE 15
#define CACHE(t) (1 + (t))
#define FREEING(t) (16 + (t))

byte top = 0;      /* the top batch's first chunk (0: empty) */
byte version = 0;  /* bumped by every CAS (wraps: enough for these bounds) */
byte below[K + 1];
byte next[K + 1];
byte size[K + 1];
byte where[K + 1]; /* ghost */
byte done = 0;

#ifdef BROKEN_NO_VERSION
#define SAME_TOP(i, v) (top == (i))
#else
#define SAME_TOP(i, v) (top == (i) && version == (v))
#endif

/* Sets the ghost place of the chunks of batch h (from `from` to `to`). */
inline move_batch(mh, from, to, mx, mn) {
  mx = mh;
  mn = 0;
  do
  :: mn < size[mh] -> assert(mx != 0 && where[mx] == from); where[mx] = to; mx = next[mx]; mn++
  :: else -> break
  od
}

inline push(t, ph, po, pov, pok, px, pn) {
  do
  :: atomic { po = top; pov = version }
     below[ph] = po;
     d_step {
       pok = SAME_TOP(po, pov);
       if
       :: pok -> top = ph; version++; move_batch(ph, CACHE(t), STACK, px, pn)
       :: else -> skip
       fi
     }
     if
     :: pok -> break
     :: else -> skip
     fi
  od
}

/* Pops a batch into qh (0: the stack is empty). */
inline pop(t, qh, qv, qb, qok, qx, qn) {
  do
  :: atomic { qh = top; qv = version }            /* load_top */
     if
     :: qh == 0 -> break
     :: else -> skip
     fi;
     qb = below[qh];                               /* read_below */
     d_step {                                      /* try_pop */
       qok = SAME_TOP(qh, qv);
       if
       :: qok -> top = qb; version++; move_batch(qh, STACK, CACHE(t), qx, qn)
       :: else -> skip
       fi
     }
     if
     :: qok -> break
     :: else -> skip
     fi
  od
}

/* Picks a chunk in use and claims it for the freeing thread t (c = 0: none in use): the
 * party that frees a chunk is the only one that holds it then. */
inline pick_in_use(t, c) {
  d_step {
    if
    :: where[1] == IN_USE -> c = 1
    :: K >= 2 && where[2] == IN_USE -> c = 2
    :: K >= 3 && where[3] == IN_USE -> c = 3
    :: K >= 4 && where[4] == IN_USE -> c = 4
    :: K >= 5 && where[5] == IN_USE -> c = 5
    :: K >= 6 && where[6] == IN_USE -> c = 6
    :: else -> c = 0
    fi;
    if
    :: c != 0 -> where[c] = FREEING(t)
    :: else -> skip
    fi
  }
}

proctype worker(byte t) {
  byte loaded = 0, lsize = 0, spare = 0;
  byte c, h, hv, b, ok, x, n, ops = 0;
  do
  :: ops < OPS ->
     ops++;
     if
     :: true -> /* take */
        if
        :: lsize == 0 && spare != 0 ->
           d_step {
             loaded = spare;
             lsize = B;
#ifndef BROKEN_SWAP
             spare = 0
#endif
           }
        :: lsize == 0 && spare == 0 ->
           pop(t, h, hv, b, ok, x, n);
           if
           :: h != 0 -> loaded = h; lsize = size[h]
           :: else -> skip
           fi
        :: else -> skip
        fi;
        if
        :: lsize > 0 ->
           d_step {
             c = loaded;
             assert(where[c] == CACHE(t));
             where[c] = IN_USE;
             loaded = next[c];
             lsize--;
             c = 0
           }
        :: else -> skip
        fi
     :: true -> /* free a chunk in use, whoever took it */
        pick_in_use(t, c);
        if
        :: c != 0 ->
           if
           :: lsize == B ->
              if
              :: spare != 0 -> push(t, spare, h, hv, ok, x, n)
              :: else -> skip
              fi;
              size[loaded] = B;
              spare = loaded;
              loaded = 0;
              lsize = 0
           :: else -> skip
           fi;
           d_step {
             assert(where[c] == FREEING(t));
             where[c] = CACHE(t);
             next[c] = loaded;
             loaded = c;
             lsize++;
             c = 0
           }
        :: else -> skip
        fi
     fi
  :: else -> break
  od;
#ifndef BROKEN_EXIT
  /* exit: the cache goes back to the stack */
  if
  :: lsize > 0 -> size[loaded] = lsize; push(t, loaded, h, hv, ok, x, n)
  :: else -> skip
  fi;
  if
  :: spare != 0 -> push(t, spare, h, hv, ok, x, n)
  :: else -> skip
  fi;
#endif
  done++
}

init {
  byte i, j, c, n;
  atomic {
    /* S batches of B chunks on the stack (chunks 1 .. S * B, batch heads 1, B + 1, ...);
     * the other chunks in use. */
    i = 0;
    do
    :: i < S ->
       j = 0;
       do
       :: j < B ->
          c = i * B + j + 1;
          where[c] = STACK;
          next[c] = (j + 1 < B -> c + 1 : 0);
          j++
       :: else -> break
       od;
       size[i * B + 1] = B;
       below[i * B + 1] = (i + 1 < S -> (i + 1) * B + 1 : 0);
       i++
    :: else -> break
    od;
    top = (S > 0 -> 1 : 0);
    c = S * B + 1;
    do
    :: c <= K -> where[c] = IN_USE; c++
    :: else -> break
    od;
    i = 0;
    do
    :: i < NT -> run worker(i); i++
    :: else -> break
    od
  }
  (done == NT);
  /* Every chunk not in use is back in the stack, reachable from its top, once. */
  n = 0;
  c = top;
  do
  :: c != 0 ->
     i = c;
     j = 0;
     do
     :: j < size[c] -> assert(where[i] == STACK); where[i] = 14; n++; i = next[i]; j++
     :: else -> break
     od;
     c = below[c]
  :: else -> break
  od;
  c = 1;
  do
  :: c <= K -> assert(where[c] == 14 || where[c] == IN_USE); n = n + (where[c] == IN_USE -> 1 : 0); c++
  :: else -> break
  od;
  assert(n == K)
}
