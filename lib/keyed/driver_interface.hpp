// The keyed mutex's internal interface to the test scheduler (lib/testing/): what the
// scheduler needs of lib/keyed/ beyond the lock table's own header (detail/lock_table.hpp).
// Declared here for that one reader: lib/testing/ includes this header and no other file of
// lib/keyed/, so that the rest of lib/keyed/ stays private to it. Defined in
// lib/keyed/lock_parking.cpp.
#pragma once

namespace handoff::detail {

struct task;

// Whether t, an entry of a run queue, is a lock waiter queued by complete_waiter (a
// coroutine's or a callback's grant or timeout): the test scheduler names its events by
// kind. Never blocks; reads only t->run.
bool is_completion(const task* t) noexcept;

}  // namespace handoff::detail
