// handoff::run_deferred(): runs, now, what this thread has queued to run later.
#pragma once

namespace handoff {

// Runs this thread's run queue until it is empty: the actors it took over through defer()
// (those without an executor), and everything they make runnable in turn. From top level
// only; inside a handler, a resumed coroutine or a callback of the library it does
// nothing and returns false, since the queue runs when that work returns anyway. True if
// anything ran. Never throws (handlers' exceptions go to their actors' error hooks).
bool run_deferred() noexcept;

}  // namespace handoff
