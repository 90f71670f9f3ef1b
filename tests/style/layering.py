#!/usr/bin/env python3
"""The layering rules of the source tree, checked on every test run.

"Reaches" means: includes, directly or through a chain of includes, following both
handoff/ headers (resolved under include/) and relative includes between lib/ files.

- include/handoff/detail/ holds the protocols: each of its headers includes (directly)
  only other detail/ headers and the vocabulary headers (VOCABULARY below), never a facade
  (actor.hpp, keyed_mutex.hpp, ...).
- No public header (include/handoff/, detail/ included) reaches detail/test_driver.hpp:
  the test scheduler's seam, with its vtable, stays out of users' builds. The headers
  declare `class test_driver;` and only lib/ .cpp files include it.
- No lib/ file includes the keyed-mutex facade (handoff/keyed_mutex.hpp) directly.
- The Redis client (include/handoff/redis/, lib/redis/) never reaches the in-process lock
  table (handoff/keyed_mutex.hpp, handoff/key_guard.hpp, handoff/detail/lock_*.hpp)
  through handoff/ headers.
- lib/ is laid out by part, and the parts stack: the runtime (lib/runtime/, and the
  headers it owns: detail/run_queue.hpp, detail/node_pool.hpp, detail/tls_model.hpp)
  reaches neither the actor (detail/actor_base.hpp, actor.hpp, basic_actor.hpp,
  lib/actor/) nor the keyed mutex (detail/lock_table.hpp, detail/lock_entry.hpp,
  keyed_mutex.hpp, key_guard.hpp, lib/keyed/); the keyed mutex (lib/keyed/) does not
  reach the actor. The run queue drives the actor through the interface it declares
  (runnable, run_runnable), never through actor_base.hpp.
- The timers (lib/timer/) stack on the actor and the runtime: they reach neither the
  keyed mutex (KEYED, lib/keyed/) nor lib/actor/'s or lib/redis/'s files, and nothing
  of the actor or the runtime (ACTOR, lib/actor/, lib/runtime/, the runtime's headers)
  reaches the timers (TIMER, lib/timer/): an actor learns of its timers only through
  detail/actor_destroy_hook.hpp.
- The test scheduler (lib/testing/) reaches no private file of another part of lib/ but
  the internal interfaces declared for it (TESTING_INTERFACES below): what it needs of a
  part beyond that part's detail/ headers is declared there, for it alone.
- lib/redis/ is laid out by part the same way: common/ (what the parts share: the
  connection, the router, names, counters, leases, ids, shared Lua) reaches none of lock/,
  store/ and actor/, nor any Redis facade (a header under include/handoff/redis/ other
  than the Redis vocabulary, REDIS_VOCABULARY below); the stores (lib/redis/store/) and
  the actors (lib/redis/actor/) never reach the lock client (lib/redis/lock/, or the Redis
  keyed mutex's facade handoff/redis/keyed_mutex.hpp).
- No file in lib/ or include/ is longer than MAX_LINES: a protocol reads in one sitting.

Usage: layering.py SOURCE_DIR. Prints each violation and exits 1 if there is any.
"""
import pathlib
import re
import sys

MAX_LINES = 400
# Shared vocabulary any layer may include: no facade logic in them.
VOCABULARY = {
    "handoff/actor_options.hpp",
    "handoff/executor.hpp",
    "handoff/keyed_mutex_options.hpp",
    "handoff/lease.hpp",
    "handoff/metrics.hpp",
    "handoff/multi_guard.hpp",
}
ACTOR = {"handoff/detail/actor_base.hpp", "handoff/detail/actor_turn.hpp", "handoff/actor.hpp", "handoff/basic_actor.hpp"}
KEYED = {
    "handoff/detail/lock_table.hpp",
    "handoff/detail/lock_entry.hpp",
    "handoff/keyed_mutex.hpp",
    "handoff/key_guard.hpp",
}
TIMER = {"handoff/timer.hpp", "handoff/timer_service.hpp", "handoff/detail/timer_entry.hpp"}
REDIS_LOCK = {"handoff/redis/keyed_mutex.hpp"}
# The Redis parts' shared vocabulary (the error, the options, the client's counts): every
# other header under include/handoff/redis/ is a facade.
REDIS_VOCABULARY = {"handoff/redis/options.hpp", "handoff/redis/client_stats.hpp"}
TEST_DRIVER = "handoff/detail/test_driver.hpp"
# The files of other parts that lib/testing/ may include: interfaces their part declares
# for the test scheduler (relative to lib/).
TESTING_INTERFACES = {"keyed/driver_interface.hpp", "timer/driver_interface.hpp"}
RUNTIME_HEADERS = ["run_queue.hpp", "node_pool.hpp", "tls_model.hpp"]
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)


def includes(path):
    return INCLUDE.findall(path.read_text(encoding="utf-8"))


def reachable(root, path):
    """Every handoff/ header that path includes, directly or through other handoff/ headers."""
    seen = set()
    todo = [inc for inc in includes(path) if inc.startswith("handoff/")]
    while todo:
        inc = todo.pop()
        if inc in seen:
            continue
        seen.add(inc)
        header = root / "include" / inc
        if header.exists():
            todo.extend(i for i in includes(header) if i.startswith("handoff/"))
    return seen


def lib_files(path):
    """The files that path reaches through relative includes (lib/ headers, resolved)."""
    seen = set()
    todo = [path]
    while todo:
        f = todo.pop()
        for inc in includes(f):
            target = (f.parent / inc).resolve()
            if inc.startswith("handoff/") or not target.exists() or target in seen:
                continue
            seen.add(target)
            todo.append(target)
    return seen


def lib_folders(root, path):
    """The lib/ folders (relative to root) that path reaches through relative includes."""
    lib = (root / "lib").resolve()
    return {t.parent.relative_to(lib).as_posix() for t in lib_files(path) if lib in t.parents}


def forbidden(root, f, headers, folders):
    """What f includes, directly or not, of `headers` (handoff/ names) or `folders` (of lib/)."""
    found = set()
    for g in [f, *lib_files(f)]:
        found |= reachable(root, g) & headers
    found = sorted(found)
    found += [f"lib/{d}/" for d in sorted(lib_folders(root, f) & folders)]
    return found


def main():
    root = pathlib.Path(sys.argv[1])
    lib = (root / "lib").resolve()
    errors = []
    for f in sorted((root / "include/handoff/detail").glob("*.hpp")):
        for inc in includes(f):
            if inc.startswith("handoff/") and not inc.startswith("handoff/detail/") and inc not in VOCABULARY:
                errors.append(f"{f.relative_to(root)}: detail/ includes the facade {inc}")
    for f in sorted(root.glob("include/handoff/**/*.hpp")):
        if f.relative_to(root / "include").as_posix() != TEST_DRIVER and TEST_DRIVER in reachable(root, f):
            errors.append(f"{f.relative_to(root)}: a public header includes {TEST_DRIVER} (declare the class instead)")
    for f in sorted(root.glob("lib/**/*.[ch]pp")):
        for inc in includes(f):
            if inc == "handoff/keyed_mutex.hpp":
                errors.append(f"{f.relative_to(root)}: lib/ includes the facade {inc}")
    for f in sorted(list(root.glob("include/handoff/redis/*.hpp")) + list(root.glob("lib/redis/**/*.[ch]pp"))):
        for inc in sorted(reachable(root, f)):
            if inc in ("handoff/keyed_mutex.hpp", "handoff/key_guard.hpp") or inc.startswith("handoff/detail/lock_"):
                errors.append(f"{f.relative_to(root)}: the Redis client includes the in-process lock table ({inc})")
    runtime = sorted(root.glob("lib/runtime/*.[ch]pp")) + [root / "include/handoff/detail" / h for h in RUNTIME_HEADERS]
    for f in runtime:
        for inc in forbidden(root, f, ACTOR | KEYED, {"actor", "keyed"}):
            errors.append(f"{f.relative_to(root)}: the runtime includes the actor or the keyed mutex ({inc})")
    for f in sorted(root.glob("lib/keyed/*.[ch]pp")):
        for inc in forbidden(root, f, ACTOR, {"actor"}):
            errors.append(f"{f.relative_to(root)}: the keyed mutex includes the actor ({inc})")
    for f in sorted(root.glob("lib/timer/*.[ch]pp")):
        for inc in forbidden(root, f, KEYED, {"keyed", "actor", "redis"}):
            errors.append(f"{f.relative_to(root)}: the timers include the keyed mutex or another part's files ({inc})")
    actor_headers = [root / "include" / h for h in sorted(ACTOR)]
    for f in sorted(root.glob("lib/actor/*.[ch]pp")) + actor_headers + runtime:
        for inc in forbidden(root, f, TIMER, {"timer"}):
            errors.append(f"{f.relative_to(root)}: the actor or the runtime includes the timers ({inc})")
    for f in sorted(root.glob("lib/testing/*.[ch]pp")):
        for t in sorted(lib_files(f)):
            if lib not in t.parents or t.parent == (lib / "testing"):
                continue
            if t.relative_to(lib).as_posix() not in TESTING_INTERFACES:
                errors.append(f"{f.relative_to(root)}: lib/testing/ includes a private file of another part "
                              f"(lib/{t.relative_to(lib).as_posix()}; declare what it needs in an interface for it)")
    redis_facades = {
        h.relative_to(root / "include").as_posix() for h in root.glob("include/handoff/redis/*.hpp")
    } - REDIS_VOCABULARY
    for f in sorted(root.glob("lib/redis/common/*.[ch]pp")):
        for inc in forbidden(root, f, redis_facades, {"redis/lock", "redis/store", "redis/actor"}):
            errors.append(f"{f.relative_to(root)}: lib/redis/common/ includes a part built on it ({inc})")
    for part in ("store", "actor"):
        for f in sorted(root.glob(f"lib/redis/{part}/*.[ch]pp")):
            for inc in forbidden(root, f, REDIS_LOCK, {"redis/lock"}):
                errors.append(f"{f.relative_to(root)}: lib/redis/{part}/ includes the lock client ({inc})")
    for f in sorted(list(root.glob("lib/**/*.[ch]pp")) + list(root.glob("include/**/*.hpp"))):
        n = len(f.read_text(encoding="utf-8").splitlines())
        if n > MAX_LINES:
            errors.append(f"{f.relative_to(root)}: {n} lines (at most {MAX_LINES})")
    for e in errors:
        print(e)
    print(f"layering: {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
