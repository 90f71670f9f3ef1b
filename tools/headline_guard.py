#!/usr/bin/env python3
"""Whether README.md's headline table still measures the code it was taken on.

The headline (written by `bash tools/bench.sh --update-docs`, through tools/bench_table.py)
records a content hash of the code its figures depend on: MEASURED below. This check
recomputes it and fails when it differs, naming the command that regenerates the table.
Run by tools/bench.sh after every run and before a release; not by CI (a change to the
library does not have to wait for a 15-minute benchmark run).

Usage: headline_guard.py hash          prints the hash of this tree's measured code
       headline_guard.py check [FILE]  exit 0: FILE (README.md) records this tree's hash;
                                       exit 1, with the reason: it records another or none
"""
import hashlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The code the headline's figures depend on: the actor, the keyed mutex, the runtime and
# the protocol headers.
MEASURED = ("lib/actor", "lib/keyed", "lib/runtime", "include/handoff/detail")
MARK = re.compile(r"<!-- measured code: ([0-9a-f]+) ")
REGENERATE = "bash tools/bench.sh --update-docs"


def code_hash(root=ROOT):
    """sha256 over the measured files' paths and contents, in path order: 16 hex digits."""
    h = hashlib.sha256()
    for part in MEASURED:
        for path in sorted(p for p in (root / part).rglob("*") if p.is_file()):
            h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def mark_line(root=ROOT):
    """The line the headline carries."""
    return f"<!-- measured code: {code_hash(root)} ({', '.join(MEASURED)}) -->"


def check(readme):
    text = readme.read_text(encoding="utf-8")
    found = MARK.search(text)
    now = code_hash()
    if not found:
        return f"{readme.name}: the headline table records no hash of the code it measured: regenerate it with {REGENERATE}"
    if found.group(1) != now:
        return (f"{readme.name}: the headline table measured other code ({found.group(1)}; this tree: {now}, "
                f"in {', '.join(MEASURED)}): regenerate it with {REGENERATE}")
    return None


def main(argv):
    if argv[:1] == ["hash"]:
        print(code_hash())
        return 0
    if argv[:1] == ["check"]:
        why = check(pathlib.Path(argv[1]) if len(argv) > 1 else ROOT / "README.md")
        if why:
            print(why, file=sys.stderr)
            return 1
        return 0
    print(__doc__.split("\n\n")[-1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
