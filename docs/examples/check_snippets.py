#!/usr/bin/env python3
"""Checks that a guide's C++ code blocks are exact copies of compiled example code.

Usage: check_snippets.py [--write] SOURCE.cpp [MORE.cpp ...] GUIDE.md

In a SOURCE, a snippet is the lines between `// [snippet:NAME]` and `// [/snippet]`
(each marker alone on its line). In GUIDE, every ```cpp block must follow a line
`<!-- snippet: NAME -->` and equal that snippet (from any of the sources; a name may be
defined once across them), both with their common indentation removed. Exits 1 and prints a diff for each block that differs, names no snippet, or
names one that does not exist. With --write, first copies every named snippet into its
block in GUIDE (after editing the code, run this, then review the guide's diff).
"""
import difflib
import re
import sys
import textwrap

BEGIN = re.compile(r"^\s*// \[snippet:([a-z0-9_]+)\]\s*$")
END = re.compile(r"^\s*// \[/snippet\]\s*$")
MARK = re.compile(r"^<!-- snippet: ([a-z0-9_]+) -->\s*$")


def snippets(path):
    found, name, body = {}, None, []
    for n, line in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
        if m := BEGIN.match(line):
            if name is not None:
                sys.exit(f"{path}:{n}: snippet '{m[1]}' starts inside '{name}'")
            name, body = m[1], []
        elif END.match(line):
            if name is None:
                sys.exit(f"{path}:{n}: [/snippet] without a start")
            if name in found:
                sys.exit(f"{path}:{n}: snippet '{name}' defined twice")
            found[name] = textwrap.dedent("\n".join(body))
            name = None
        elif name is not None:
            body.append(line)
    if name is not None:
        sys.exit(f"{path}: snippet '{name}' never ends")
    return found


def blocks(path):
    """Yields (line, name or None, text) for each ```cpp block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    mark, i = None, 0
    while i < len(lines):
        if m := MARK.match(lines[i]):
            mark = m[1]
        elif lines[i].strip() == "```cpp":
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            yield start, mark, textwrap.dedent("\n".join(lines[start:end]))
            mark, i = None, end
        elif lines[i].strip():
            mark = None  # a marker applies only to the block right after it
        i += 1


def write(guide, code):
    lines = open(guide, encoding="utf-8").read().split("\n")
    out, mark, i = [], None, 0
    while i < len(lines):
        out.append(lines[i])
        if m := MARK.match(lines[i]):
            mark = m[1]
        elif lines[i].strip() == "```cpp" and mark in code:
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            out.extend(code[mark].split("\n"))
            mark, i = None, end
            continue
        elif lines[i].strip():
            mark = None
        i += 1
    open(guide, "w", encoding="utf-8").write("\n".join(out))


def main():
    args = sys.argv[1:]
    fix = args[:1] == ["--write"]
    files = args[1:] if fix else args
    sources, guide = files[:-1], files[-1]
    source = ", ".join(sources)
    code = {}
    for path in sources:
        for name, text in snippets(path).items():
            if name in code:
                sys.exit(f"{path}: snippet '{name}' is also defined in another source")
            code[name] = text
    if fix:
        write(guide, code)
    failures, used = 0, set()
    for line, name, text in blocks(guide):
        if name is None:
            print(f"{guide}:{line}: a cpp block without a `<!-- snippet: NAME -->` line before it")
            failures += 1
        elif name not in code:
            print(f"{guide}:{line}: snippet '{name}' is not in {source}")
            failures += 1
        elif text != code[name]:
            print(f"{guide}:{line}: snippet '{name}' differs from {source}:")
            sys.stdout.writelines(difflib.unified_diff(
                code[name].splitlines(True), text.splitlines(True), "code", "guide"))
            print()
            failures += 1
        else:
            used.add(name)
    for name in sorted(set(code) - used):
        print(f"note: snippet '{name}' is not quoted in {guide}")
    print(f"{len(used)} snippet(s) match, {failures} problem(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
