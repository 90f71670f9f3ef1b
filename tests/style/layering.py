#!/usr/bin/env python3
"""The layering rules of the source tree, checked on every test run.

- include/handoff/detail/ holds the protocols: it includes only other detail headers and
  the small vocabulary headers, never a facade (actor.hpp, keyed_mutex.hpp, ...).
- lib/ implements detail/: no lib/ file includes the keyed-mutex facade, and the Redis
  client (include/handoff/redis/, lib/redis/) never includes the in-process lock table,
  directly or through another header.
- lib/ is laid out by part, and the parts stack: the runtime (lib/runtime/, and the
  headers it owns: detail/run_queue.hpp, detail/node_pool.hpp, detail/tls_model.hpp)
  includes neither the actor (detail/actor_base.hpp, actor.hpp, basic_actor.hpp,
  lib/actor/) nor the keyed mutex (detail/lock_table.hpp, detail/lock_entry.hpp,
  keyed_mutex.hpp, key_guard.hpp, lib/keyed/); the keyed mutex (lib/keyed/) does not
  include the actor. Checked through every chain of handoff/ includes, and for relative
  includes between lib/ folders. The run queue drives the actor through the interface it
  declares (runnable, run_runnable), never through actor_base.hpp.
- lib/redis/ is laid out by part the same way: common/ (the connection, names, counters,
  leases, ids, shared Lua) includes none of lock/, store/ and actor/; the stores
  (lib/redis/store/) and the actors (lib/redis/actor/) never reach the lock client
  (lib/redis/lock/, or the Redis keyed mutex's facade handoff/redis/keyed_mutex.hpp).
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
ACTOR = {"handoff/detail/actor_base.hpp", "handoff/actor.hpp", "handoff/basic_actor.hpp"}
KEYED = {
    "handoff/detail/lock_table.hpp",
    "handoff/detail/lock_entry.hpp",
    "handoff/keyed_mutex.hpp",
    "handoff/key_guard.hpp",
}
REDIS_LOCK = {"handoff/redis/keyed_mutex.hpp"}
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
    errors = []
    for f in sorted((root / "include/handoff/detail").glob("*.hpp")):
        for inc in includes(f):
            if inc.startswith("handoff/") and not inc.startswith("handoff/detail/") and inc not in VOCABULARY:
                errors.append(f"{f.relative_to(root)}: detail/ includes the facade {inc}")
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
    for f in sorted(root.glob("lib/redis/common/*.[ch]pp")):
        for inc in forbidden(root, f, set(), {"redis/lock", "redis/store", "redis/actor"}):
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
