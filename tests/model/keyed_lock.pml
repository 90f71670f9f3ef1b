/*
 * Promela model of the keyed mutex's per-key protocol (include/handoff/detail/lock_table.hpp,
 * lib/lock_table.cpp): lookup/creation and the 0 -> 1 transition under the shard lock,
 * waiters counted and pushed under it, the holder's hand-off outside it (pop, uncount,
 * CAS waiting -> granted, skipping waiters that gave up), and the final release and
 * removal of the entry under the shard lock. Checked by spin through check.sh
 * (MODEL=keyed_lock.pml); see tests/model/README.md.
 *
 * NL lockers take the key once each; each may give up while queued (a timeout: CAS
 * waiting -> cancelled). Memory is sequentially consistent: the model checks the
 * interleavings, not the C++ memory orders.
 *
 * Assertions: at most one holder; a waiter that gave up is never granted (and a granted
 * one never gives up); the entry is removed only when nobody is counted; when every
 * locker is done, count == 0, the mailbox is empty and the entry is gone (nothing
 * stranded). Invalid end states (a waiter blocked forever) are errors too.
 *
 * Broken variants, each expected to be rejected:
 *   PUSH_OUTSIDE   the waiter pushes its node after leaving the shard lock
 *   SUB_AFTER      the holder uncounts after its grant instead of before
 */

#ifndef NL
#define NL 3
#endif

#define WAITING 0
#define GRANTED 2
#define CANCELLED 3

bit shard = 0;        /* the shard lock */
bit in_table = 0;     /* the entry exists */
short count = 0;      /* requests counted, not finished */
byte holders = 0;
byte done = 0;
byte state[NL];

/* The mailbox: Vyukov's queue as slots in push order. reserve = the exchange on head_,
 * link = the store that makes the node reachable. pop returns nothing when the oldest
 * reserved slot is not linked yet (the in-flight window). */
byte slot_id[NL];
bit slot_linked[NL];
byte reserved = 0;    /* slots reserved */
byte head = 0;        /* next slot to pop */

inline lock_shard() { atomic { shard == 0 -> shard = 1 } }
inline unlock_shard() { shard = 0 }

/* Consumer only: w = the next waiter, or NL for "nothing now". */
inline pop(w) {
  atomic {
    if
    :: head < reserved && slot_linked[head] -> w = slot_id[head]; head++
    :: else -> w = NL
    fi
  }
}

inline critical_section() {
  atomic { holders++; assert(holders == 1) }
  holders--
}

/* The holder's release: hand the key to the next live waiter, or free it. */
inline release() {
  unc = 1;
  do
  :: pop(w);
     if
     :: w == NL ->
        lock_shard();
        pop(w);
        if
        :: w == NL ->
           assert(count == unc);     /* nobody else is counted: the entry can go */
           count = 0;
           in_table = 0;
           unlock_shard();
           break
        :: else -> unlock_shard()
        fi
     :: else -> skip
     fi;
#ifndef SUB_AFTER
     count = count - unc;             /* w is counted: never reaches 0 here */
     assert(count > 0);
#endif
     atomic {
       if
       :: state[w] == WAITING -> state[w] = GRANTED; granted = 1
       :: else -> assert(state[w] == CANCELLED); granted = 0
       fi
     }
#ifdef SUB_AFTER
     count = count - unc;
#endif
     unc = 1;
     if
     :: granted -> break
     :: else -> skip
     fi
  od
}

proctype locker(byte me) {
  byte w, unc, slot;
  bit granted;

  lock_shard();
  if
  :: !in_table -> in_table = 1; assert(count == 0)   /* created on first use */
  :: else -> skip
  fi;
  if
  :: count == 0 ->
     count = 1;
     unlock_shard();
     goto holding
  :: else ->
     count++;
     atomic { slot = reserved; slot_id[slot] = me; reserved++ };
#ifdef PUSH_OUTSIDE
     unlock_shard();
     slot_linked[slot] = 1;
#else
     slot_linked[slot] = 1;
     unlock_shard();
#endif
  fi;
  /* Wait for the grant, or give up. */
  if
  :: state[me] == GRANTED -> goto holding
  :: atomic { state[me] == WAITING -> state[me] = CANCELLED }; goto finished
  fi;

holding:
  assert(state[me] != CANCELLED);
  critical_section();
  release();

finished:
  done++
}

init {
  byte i;
  atomic {
    for (i : 0 .. NL - 1) { run locker(i) }
  }
  done == NL;
  assert(count == 0);
  assert(!in_table);
  assert(head == reserved);
  assert(holders == 0);
}
