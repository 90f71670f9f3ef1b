/*
 * Promela model of the node pool's slabs (lib/runtime/node_pool.cpp): a slab is carved
 * by one thread, its nodes are freed by that thread or by another (an owner draining a
 * sender's messages), and it is reused node by node: once half of it is free, the
 * subtraction of its count that gets there adopts it; an adopted slab goes to the
 * adopting thread's spares, from there to a list shared under a mutex (or back to the
 * allocator, if none of its nodes is out), and from there to a carver's next refill, which
 * carves its free nodes around those still out. Checked by spin under ctest through
 * tests/model/check.sh (MODEL=node_pool.pml); see tests/model/README.md.
 *
 * The count (`outstanding`) is the nodes handed out and not yet uncounted, plus HOLD while
 * a carver or a list holds the slab (so that no free can adopt a held slab). Each node has
 * a free mark (`map`), set by its free before the free uncounts it and cleared by the
 * carver that claims it. A carver takes a held slab whole when its count is HOLD (no node
 * out, no free on its way: all claimed at once, count += CAP), else claims its marked nodes
 * one by one (count += 1 each; the library claims runs of them). It counts its own frees
 * of its current slab without an atomic (`lfreed`), and on retiring marks the claimed
 * nodes it never carved, then subtracts them, its local frees and HOLD in one fetch_sub.
 * A free by another thread, or by the carver of another slab, is a fetch_sub of 1. The
 * subtraction whose result falls to T or below from above T adopts the slab (adds HOLD
 * back); the count only falls while nobody holds the slab, so exactly one does. Memory
 * is sequentially consistent here (the library's acq_rel subtraction and the marks'
 * release/acquire order each free before the node's reuse).
 *
 * Processes: the carver C carves NODES nodes (CAP a slab), freeing each itself or sending
 * it to the freer F, and may retire its slab early at any moment (once); F frees what it
 * receives and moves its spares to the shared list. Slabs are identified by index (SLABS
 * of them), node k of slab s by s * CAP + k; `where[s]` says where each slab is.
 *
 * Assertions:
 *   - a node is handed out only when it is not live (never twice at once);
 *   - a slab is adopted only while nobody holds it, and by one thread (never in two
 *     places: carved, floating, in a thread's spares, in the shared list);
 *   - a slab goes back to the allocator only with no node out;
 *   - at the end every slab is held or the allocator's (nothing leaked).
 * Broken variants, each expected to be rejected:
 *   NO_HOLD        a holder adds no HOLD: a free adopts a slab its carver still carves
 *   LOAD_CROSS     the adopter decides by a later load of the count instead of its own
 *                  subtraction's result: two threads both see it at T and adopt it twice
 *   LOCAL_AFTER    the carver counts a free as local after it retired the slab: the
 *                  count never falls to T (a leak)
 *   WHOLE          a held slab is taken whole without checking that no node is out: a
 *                  live node is handed out again
 */

#ifndef CAP
#define CAP 2
#endif
#ifndef NODES
#define NODES 4
#endif
#define SLABS 3
#define T (CAP / 2)    /* adopt_at */
#ifdef NO_HOLD
#define HOLD 0
#else
#define HOLD 16
#endif
#define NONE 255

/* where a slab is */
#define FREE_NEW 0    /* the allocator's (never used, or given back) */
#define CARVING 1     /* the carver's current slab */
#define FLOATING 2    /* retired, nobody holds it: its nodes out come back */
#define SPARE_F 3     /* in F's spares */
#define SPARE_C 4     /* in C's spares */
#define SHARED 5      /* in the shared list */

byte where[SLABS];
byte outstanding[SLABS];   /* the atomic count */
byte out[SLABS];           /* nodes handed out and not yet freed (the model's truth) */
bool map[SLABS * CAP];     /* free marks */
bool live[SLABS * CAP];    /* the model's truth: handed out and not freed */
bool shared_lock = false;  /* the shared list's mutex */
chan to_f = [NODES] of { byte };  /* nodes sent to F */

inline lock() { atomic { !shared_lock -> shared_lock = true } }
inline unlock() { shared_lock = false }

/* The subtraction that crossed T: the slab is this thread's now. */
inline adopt(s, spare) {
  assert(where[s] == FLOATING);
  where[s] = spare;
  outstanding[s] = outstanding[s] + HOLD
}

/* fetch_sub(n) on slab s's count, by a thread whose spares are `spare` */
inline uncount(s, n, spare) {
#ifdef LOAD_CROSS
  outstanding[s] = outstanding[s] - n;
  if
  :: outstanding[s] <= T -> adopt(s, spare)   /* a separate load: two may see T or less */
  :: else -> skip
  fi
#else
  atomic {
    before = outstanding[s];
    outstanding[s] = outstanding[s] - n
  };
  if
  :: before > T && before - n <= T -> adopt(s, spare)
  :: else -> skip
  fi
#endif
}

/* A free of node `nd` by a thread that is not carving its slab: mark, then uncount. */
inline free_remote(nd, spare) {
  s = nd / CAP;
  assert(live[nd]);
  live[nd] = false; out[s]--;
  map[nd] = true;
  uncount(s, 1, spare)
}

/* The spares of `spare` to the shared list; a slab with no node out may go to the allocator. */
inline give_spares(spare) {
  lock();
  for (k : 0 .. SLABS - 1) {
    if
    :: where[k] == spare ->
       if
       :: where[k] = SHARED
       :: outstanding[k] == HOLD -> assert(out[k] == 0); where[k] = FREE_NEW
       fi
    :: else -> skip
    fi
  }
  unlock()
}

proctype carver() {
  byte cur = NONE;      /* current slab */
  byte bump = 0;        /* next claimed node of cur to carve */
  byte run_end = 0;     /* past the claimed nodes */
  byte scan = 0;        /* where the next claim looks */
  byte lfreed = 0;      /* cur's nodes freed by this thread, not yet uncounted */
  bool early = false;   /* retired a slab before carving all of it */
  byte made = 0;        /* nodes carved in all */
  byte mine[NODES];     /* nodes kept to free later (NONE: none) */
  byte k = 0;
  byte s;
  byte nd;
  byte before;
  byte n;
  for (k : 0 .. NODES - 1) { mine[k] = NONE }
  do
  :: made < NODES ->
     /* a claimed node to carve: claim the next marked one of cur, or retire cur and take a slab */
     do
     :: cur != NONE && bump < run_end -> break
     :: cur != NONE && bump == run_end && scan < CAP ->
        if
        :: map[cur * CAP + scan] ->
           map[cur * CAP + scan] = false;
           outstanding[cur] = outstanding[cur] + 1;   /* fetch_add */
           bump = scan; run_end = scan + 1
        :: else -> skip
        fi;
        scan++
     :: cur != NONE && bump == run_end && scan == CAP ->   /* nothing left: retire */
        where[cur] = FLOATING;
        n = lfreed + HOLD;
        s = cur; cur = NONE; lfreed = 0;
        uncount(s, n, SPARE_C)
     :: cur == NONE ->
        /* a held slab: own spares, else the shared list, else a new one */
        s = NONE;
        for (k : 0 .. SLABS - 1) { if :: s == NONE && where[k] == SPARE_C -> s = k :: else -> skip fi }
        if
        :: s == NONE ->
           lock();
           for (k : 0 .. SLABS - 1) { if :: s == NONE && where[k] == SHARED -> s = k :: else -> skip fi }
           unlock()
        :: else -> skip
        fi;
        if
        :: s == NONE ->
           for (k : 0 .. SLABS - 1) {
             if
             :: s == NONE && where[k] == FREE_NEW ->
                s = k;
                outstanding[k] = HOLD
             :: else -> skip
             fi
           }
        :: else -> skip
        fi;
        assert(s != NONE);   /* SLABS is enough for this many nodes */
        where[s] = CARVING;
        cur = s; lfreed = 0;
        if
#ifdef WHOLE
        :: true ->
#else
        :: outstanding[s] == HOLD ->
#endif
           /* no node out: claimed whole */
           for (k : 0 .. CAP - 1) { map[s * CAP + k] = false };
           outstanding[s] = outstanding[s] + CAP;
           bump = 0; run_end = CAP; scan = CAP
        :: else -> bump = 0; run_end = 0; scan = 0
        fi
     od;
     /* carve one node */
     nd = cur * CAP + bump;
     assert(!live[nd]);   /* never handed out while live */
     live[nd] = true; out[cur]++; bump++; made++;
     if
     :: to_f!nd                                   /* sent: another thread frees it */
     :: mine[made - 1] = nd                       /* kept: freed here, later */
     fi
  :: made < NODES && cur != NONE && bump < run_end && !early ->   /* retire early, once */
     early = true;
     where[cur] = FLOATING;
     n = lfreed + HOLD;
     for (k : bump .. run_end - 1) { map[cur * CAP + k] = true; n++ };
     s = cur; cur = NONE; lfreed = 0; bump = 0; run_end = 0;
     uncount(s, n, SPARE_C)
  :: true ->   /* free a node it kept */
     k = 0;
     do
     :: k < NODES && mine[k] == NONE -> k++
     :: k < NODES && mine[k] != NONE -> break
     :: k == NODES -> break
     od;
     if
     :: k < NODES ->
        nd = mine[k]; mine[k] = NONE;
        if
#ifdef LOCAL_AFTER
        :: true ->   /* counted as local whatever the slab */
#else
        :: nd / CAP == cur ->
#endif
           assert(live[nd]);
           live[nd] = false; out[nd / CAP]--;
           map[nd] = true; lfreed++
        :: else -> free_remote(nd, SPARE_C)
        fi
     :: else -> skip
     fi
  :: made == NODES ->
     /* nothing left to carve: free what it kept (above), then retire */
     if
     :: cur != NONE ->
        k = 0;
        do
        :: k < NODES && mine[k] == NONE -> k++
        :: else -> break
        od;
        if
        :: k == NODES ->
           where[cur] = FLOATING;
           n = lfreed + HOLD;
           for (k : bump .. run_end - 1) { map[cur * CAP + k] = true; n++ };
           s = cur; cur = NONE; lfreed = 0; bump = 0; run_end = 0;
           uncount(s, n, SPARE_C)
        :: else -> skip
        fi
     :: else -> break
     fi
  od;
  /* the exit hook gives the spares back */
  give_spares(SPARE_C)
}

proctype freer() {
  byte s;
  byte k;
  byte nd;
  byte before;
  do
  :: to_f?nd -> free_remote(nd, SPARE_F)
  :: true -> give_spares(SPARE_F)   /* a full spare batch, or the exit hook */
  :: empty(to_f) -> break
  od
}

init {
  byte k;
  byte s;
  byte nd;
  byte before;
  atomic { run carver(); run freer() };
  (_nr_pr == 1);
  /* F may have stopped before the carver sent its last nodes: free them here */
  do
  :: to_f?nd -> free_remote(nd, SPARE_F)
  :: empty(to_f) -> break
  od;
  for (k : 0 .. SLABS - 1) {
    assert(out[k] == 0);
    assert(where[k] != CARVING && where[k] != FLOATING)   /* every used slab came back */
  }
}
