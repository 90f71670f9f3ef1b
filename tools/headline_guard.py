#!/usr/bin/env python3
"""Whether README.md's headline table still measures the code it was taken on.

The headline (written by `bash tools/bench.sh --update-docs`, through tools/bench_table.py)
records a hash of the code its figures depend on. That code is every file under SOURCES
and every repository header those files and the FACADES include, followed transitively:
the facades' inline paths (`actor.hpp`'s `post`, `keyed_mutex.hpp`'s inline lock,
`key_guard.hpp`'s unlock) are timed as much as lib/ is. Comments and whitespace are not
hashed, so a comment or a reformat leaves the headline valid; any change to the code does
not. This check recomputes the hash and fails when it differs, naming the command that
regenerates the table. It reads a few dozen files: well under a second.

Run it before committing a change to anything it lists (`files` prints them), and before a
release; tools/bench.sh runs it after every run. CI does not: a change to the library
does not have to wait for a 15-minute benchmark run, but it is not done until the
headline is regenerated.

Usage: headline_guard.py hash          prints the hash of this tree's measured code
       headline_guard.py files         lists the files hashed
       headline_guard.py check [FILE]  exit 0: FILE (README.md) records this tree's hash;
                                       exit 1, with the reason: it records another or none
"""
import hashlib
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
# The compiled code the headline's rows run: the actor, the keyed mutex, the runtime.
SOURCES = ("lib/actor", "lib/keyed", "lib/runtime")
# The public headers whose inline code the headline's rows time.
FACADES = ("include/handoff/actor.hpp", "include/handoff/basic_actor.hpp",
           "include/handoff/keyed_mutex.hpp", "include/handoff/key_guard.hpp")
DESCRIPTION = "lib/actor, lib/keyed, lib/runtime, actor.hpp, basic_actor.hpp, keyed_mutex.hpp, key_guard.hpp and their includes"
MARK = re.compile(r"<!-- measured code: ([0-9a-f]+) ")
REGENERATE = "bash tools/bench.sh --update-docs"
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
# A C++ token stream without comments: string and character literals are kept whole (a
# "//" inside one is not a comment), comments and whitespace are dropped.
LEXEME = re.compile(r'R"([^(\s]*)\(.*?\)\1"|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?\*/|\s+|[^"\'/\s]+|.',
                    re.S)


def strip_code(text):
    """The file's code: no comments, no whitespace (literals kept as written)."""
    return "".join(m.group(0) for m in LEXEME.finditer(text)
                   if not (m.group(0).startswith(("//", "/*")) or m.group(0).isspace()))


def resolve(name, including, root):
    """The repository file an #include names, or None (a system or third-party header)."""
    for base in (including.parent, root / "include", root / "lib"):
        candidate = (base / name).resolve()
        if candidate.is_file() and root in candidate.parents:
            return candidate
    return None


def measured_files(root=ROOT):
    """SOURCES' files and the FACADES, with every repository header they include."""
    todo = [p for part in SOURCES for p in (root / part).rglob("*") if p.is_file()]
    todo += [root / f for f in FACADES]
    seen = set()
    while todo:
        path = todo.pop().resolve()
        if path in seen:
            continue
        seen.add(path)
        for name in INCLUDE.findall(path.read_text(encoding="utf-8")):
            found = resolve(name, path, root)
            if found:
                todo.append(found)
    return sorted(seen, key=lambda p: str(p.relative_to(root)))


def code_hash(root=ROOT):
    """sha256 over the measured files' paths and code, in path order: 16 hex digits."""
    h = hashlib.sha256()
    for path in measured_files(root):
        code = strip_code(path.read_text(encoding="utf-8"))
        h.update(str(path.relative_to(root)).encode() + b"\0" + code.encode() + b"\0")
    return h.hexdigest()[:16]


def mark_line(root=ROOT):
    """The line the headline carries."""
    return f"<!-- measured code: {code_hash(root)} ({DESCRIPTION}) -->"


def check(readme):
    text = readme.read_text(encoding="utf-8")
    found = MARK.search(text)
    now = code_hash()
    if not found:
        return f"{readme.name}: the headline table records no hash of the code it measured: regenerate it with {REGENERATE}"
    if found.group(1) != now:
        return (f"{readme.name}: the headline table measured other code ({found.group(1)}; this tree: {now}, "
                f"in {DESCRIPTION}; `headline_guard.py files` lists them): regenerate it with {REGENERATE}")
    return None


def main(argv):
    if argv[:1] == ["hash"]:
        print(code_hash())
        return 0
    if argv[:1] == ["files"]:
        for path in measured_files():
            print(path.relative_to(ROOT))
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
