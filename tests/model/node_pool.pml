/*
 * Promela model of the node pool's slabs (lib/runtime/node_pool.cpp): a slab is carved
 * by one thread, its nodes are freed by that thread or by another (an owner draining a
 * sender's messages), and it is recycled by whichever subtraction of its count reaches 0;
 * a recycled slab goes to the recycling thread's spares, from there (four at a time in
 * the library, all of them here) to a list shared under a mutex, and from there to a
 * carver's next refill. Checked by spin under ctest through tests/model/check.sh
 * (MODEL=node_pool.pml); see tests/model/README.md.
 *
 * The count (`outstanding`) is the nodes handed out and not yet freed plus one while the
 * carver holds the slab; the carver sets it to capacity + 1 when it starts a slab (every
 * node counted as out before it is carved), counts its own frees of the current slab
 * without an atomic (`local`), and on retiring subtracts the nodes it never carved, its
 * local frees and its hold in one fetch_sub. A free by another thread, or by the carver
 * after it retired the slab, is a fetch_sub of 1. The subtraction whose result reaches 0
 * (before == n) recycles. Memory is sequentially consistent here (the library's acq_rel
 * subtraction orders each free before the recycle).
 *
 * Processes: the carver C carves NODES nodes of a slab over two rounds (CAP nodes a
 * slab), freeing each itself or sending it to the freer F, and may retire its slab early
 * at any moment (once); F frees what it receives and moves its spares to the shared list. Slabs
 * are identified by index (SLABS of them); `where[s]` says where each one is.
 *
 * Assertions:
 *   - a slab is recycled only when none of its nodes is out and its carver retired it;
 *   - a slab is never in two places (carved, in a thread's spares, in the shared list);
 *   - at the end every slab is free (recycled or never used): nothing leaked.
 * Broken variants, each expected to be rejected:
 *   NO_HOLD        the count starts at the capacity (no carver's hold): a slab whose
 *                  carved nodes all came back is recycled while its carver still carves
 *   LOAD_ZERO      the recycler decides by a later load of the count instead of its own
 *                  subtraction's result: two threads both see 0 and recycle it twice
 *   LOCAL_AFTER    the carver counts a free as local after it retired the slab: the
 *                  count never reaches 0 (a leak)
 */

#ifndef CAP
#define CAP 2
#endif
#ifndef NODES
#define NODES 4
#endif
#define SLABS 3

/* where a slab is */
#define FREE_NEW 0    /* never used (the allocator's) */
#define CARVING 1     /* the carver's current slab */
#define RETIRED 2     /* retired by the carver, nodes still out */
#define SPARE_F 3     /* in F's spares */
#define SPARE_C 4     /* in C's spares */
#define SHARED 5      /* in the shared list */

byte where[SLABS];
byte outstanding[SLABS];   /* the atomic count */
byte out[SLABS];           /* nodes handed out and not yet freed (the model's truth) */
byte recycled = 0;         /* recycles performed: one per retired-and-emptied slab */
bool shared_lock = false;  /* the shared list's mutex */
chan to_f = [NODES] of { byte };  /* nodes sent to F, by slab index */

inline lock() { atomic { !shared_lock -> shared_lock = true } }
inline unlock() { shared_lock = false }

/* The subtraction that reaches 0 recycles, into the subtracting thread's spares. */
inline recycle(s, spare) {
  assert(out[s] == 0);
  assert(where[s] == RETIRED);
  where[s] = spare;
  recycled++
}

/* fetch_sub(n) on slab s's count, by a thread whose spares are `spare` */
inline uncount(s, n, spare) {
#ifdef LOAD_ZERO
  outstanding[s] = outstanding[s] - n;
  if
  :: outstanding[s] == 0 -> recycle(s, spare)   /* a separate load: both may see 0 */
  :: else -> skip
  fi
#else
  atomic {
    before = outstanding[s];
    outstanding[s] = outstanding[s] - n
  };
  if
  :: before == n -> recycle(s, spare)
  :: else -> skip
  fi
#endif
}

proctype carver() {
  byte cur = SLABS;     /* current slab; SLABS: none */
  byte carved = 0;      /* nodes carved from cur */
  byte lfreed = 0;
  bool early = false;  /* retired a slab before it was full */       /* cur's nodes freed by this thread, not yet uncounted */
  byte made = 0;        /* nodes carved in all */
  byte mine[NODES];     /* slab of each node kept to free later (SLABS: none) */
  byte k = 0;
  byte s;
  byte before;
  byte n;
  for (k : 0 .. NODES - 1) { mine[k] = SLABS }
  do
  :: made < NODES ->
     /* refill: retire cur if full (or now, early), then take a spare, a shared or a new slab */
     if
     :: cur == SLABS || carved == CAP ->
        if
        :: cur != SLABS ->
           where[cur] = RETIRED;
           n = (CAP - carved) + lfreed + 1;
           s = cur; cur = SLABS; lfreed = 0;
           uncount(s, n, SPARE_C)
        :: else -> skip
        fi;
        /* a slab for the refill: own spares, else the shared list, else a new one */
        s = SLABS;
        for (k : 0 .. SLABS - 1) { if :: s == SLABS && where[k] == SPARE_C -> s = k :: else -> skip fi }
        if
        :: s == SLABS ->
           lock();
           for (k : 0 .. SLABS - 1) { if :: s == SLABS && where[k] == SHARED -> s = k :: else -> skip fi }
           unlock()
        :: else -> skip
        fi;
        if
        :: s == SLABS ->
           for (k : 0 .. SLABS - 1) { if :: s == SLABS && where[k] == FREE_NEW -> s = k :: else -> skip fi }
        :: else -> skip
        fi;
        assert(s != SLABS);   /* SLABS is enough for this many nodes */
        assert(out[s] == 0);
        where[s] = CARVING;
#ifdef NO_HOLD
        outstanding[s] = CAP;
#else
        outstanding[s] = CAP + 1;
#endif
        cur = s; carved = 0
     :: else -> skip
     fi;
     /* carve one node */
     carved++; out[cur]++; made++;
     if
     :: to_f!cur                                  /* sent: another thread frees it */
     :: mine[made - 1] = cur                      /* kept: freed here, later */
     fi
  :: made < NODES && cur != SLABS && carved < CAP && !early ->   /* retire early, once (so SLABS suffice) */
     early = true;
     where[cur] = RETIRED;
     n = (CAP - carved) + lfreed + 1;
     s = cur; cur = SLABS; lfreed = 0; carved = 0;
     uncount(s, n, SPARE_C)
  :: true ->   /* free a node it kept */
     k = 0;
     do
     :: k < NODES && mine[k] == SLABS -> k++
     :: k < NODES && mine[k] != SLABS -> break
     :: k == NODES -> break
     od;
     if
     :: k < NODES ->
        s = mine[k]; mine[k] = SLABS; out[s]--;
        if
#ifdef LOCAL_AFTER
        :: true -> lfreed++   /* counted as local whatever the slab */
#else
        :: s == cur -> lfreed++
        :: else -> uncount(s, 1, SPARE_C)
#endif
        fi
     :: else -> skip
     fi
  :: made == NODES ->
     /* nothing left to carve: free what it kept (above), then retire */
     if
     :: cur != SLABS ->
        k = 0;
        do
        :: k < NODES && mine[k] == SLABS -> k++
        :: else -> break
        od;
        if
        :: k == NODES ->
           where[cur] = RETIRED;
           n = (CAP - carved) + lfreed + 1;
           s = cur; cur = SLABS; lfreed = 0;
           uncount(s, n, SPARE_C)
        :: else -> skip
        fi
     :: else -> break
     fi
  od;
  /* the exit hook gives the spares back */
  lock();
  for (k : 0 .. SLABS - 1) { if :: where[k] == SPARE_C -> where[k] = SHARED :: else -> skip fi }
  unlock()
}

proctype freer() {
  byte s;
  byte k;
  byte before;
  byte freed = 0;
  do
  :: to_f?s ->
     out[s]--; freed++;
     uncount(s, 1, SPARE_F)
  :: true ->   /* give the spares to the shared list (a full spare batch, or the exit hook) */
     lock();
     for (k : 0 .. SLABS - 1) { if :: where[k] == SPARE_F -> where[k] = SHARED :: else -> skip fi }
     unlock()
  :: empty(to_f) -> break
  od
}

init {
  byte k;
  byte s;
  byte before;
  atomic { run carver(); run freer() };
  (_nr_pr == 1);
  /* F may have stopped before the carver sent its last nodes: free them here */
  do
  :: to_f?s -> out[s]--; uncount(s, 1, SPARE_F)
  :: empty(to_f) -> break
  od;
  for (k : 0 .. SLABS - 1) {
    assert(out[k] == 0);
    assert(where[k] != CARVING && where[k] != RETIRED)   /* every used slab came back */
  }
}
