#!/usr/bin/env python3
"""The docs point at things that exist, checked on every test run.

Over README.md, CONTRIBUTING.md and every docs/*.md:
- every `handoff::...` name in code (a code span or a code block) is declared under
  include/: its last identifier is declared (class, struct, union, enum, enumerator,
  alias, concept, function, variable or namespace) in the scope the name spells, or, for
  a member named through a class (`handoff::actor<State>::post`), in some class of the
  library (it may be inherited from a base). Template arguments, call parentheses and
  brace initialisers are dropped first. `handoff::X` CMake targets (add_library(...
  ALIAS)) count as declared;
- every <handoff/...> header named anywhere in the text exists under include/;
- every relative Markdown link [text](path#anchor) outside code names an existing file,
  and its anchor, if any, a heading of the Markdown file it points to.
- docs/api.md, the API index, has a section `<handoff/...>` for every public header
  (every header under include/handoff/ outside detail/).

A line that ends with <!-- docs-check: ignore --> is not checked (for a name mentioned
on purpose as absent).

The C++ "parser" is a scope tracker over comment- and string-free text: good enough for
this library's headers, not for C++ at large.

Usage: check_docs.py SOURCE_DIR. Prints each stale reference and exits 1 if there is any.
"""
import pathlib
import re
import sys

IGNORE = "<!-- docs-check: ignore -->"
IDENT = r"[A-Za-z_]\w*"

# ---------------------------------------------------------------------------------------
# Declarations under include/


def strip_code(text):
    """The text with comments, string and character literals and preprocessor lines blanked."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and (text[j] != "\n" or text[j - 1] == "\\"):
                j += 1
            i = j
            continue
        if c in " \t" and line_start:
            out.append(c)
            i += 1
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
            out.append(" ")
            continue
        m = re.match(r'R"([^(]*)\(', text[i:i + 40])
        if m:
            j = text.find(")" + m[1] + '"', i)
            i = n if j < 0 else j + len(m[1]) + 2
            out.append('""')
            continue
        if c in "\"'":
            # A digit separator (1'000'000) is not a character literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append(c + c)
            continue
        out.append(c)
        i += 1
    return "".join(out)


TOKEN = re.compile(
    rf"(?P<ns>\bnamespace\s+(?P<nsname>{IDENT}(?:::{IDENT})*)?\s*\{{)"
    rf"|(?P<cls>\b(?:class|struct|union)\s+(?:\[\[[^\]]*\]\]\s*)?(?P<clsname>{IDENT})(?:\s+final)?"
    rf"(?P<clsrest>\s*(?::[^;{{()]*)?)(?P<clsend>[{{;]))"
    r"|(?P<template>\btemplate\s*<)"
    rf"|(?P<enum>\benum\s+(?P<scoped>class\s+|struct\s+)?(?P<enumname>{IDENT})(?:\s*:\s*[\w:\s]+)?\s*(?P<enumend>[{{;]))"
    rf"|(?P<alias>\busing\s+(?P<aliasname>{IDENT})\s*=)"
    rf"|(?P<usingdecl>\busing\s+(?!namespace\b)(?:typename\s+)?[\w:]*::(?P<usingname>{IDENT})\s*;)"
    rf"|(?P<concept>\bconcept\s+(?P<conceptname>{IDENT})\s*=)"
    rf"|(?P<op>\boperator\b)"
    rf"|(?P<call>(?P<callname>~?{IDENT})\s*\()"
    rf"|(?P<var>(?P<varname>{IDENT})\s*(?:\[[^\]]*\]\s*)?(?:=(?!=)|;|\{{))"
    r"|(?P<open>\{)|(?P<close>\})"
)
NOT_DECLARED = {
    "if", "while", "for", "switch", "return", "sizeof", "alignof", "alignas", "decltype",
    "noexcept", "requires", "static_assert", "catch", "throw", "co_await", "co_return",
    "co_yield", "explicit", "operator", "template", "typename", "const", "override", "final",
    "else", "do", "try", "default", "delete", "public", "private", "protected", "case",
}


def declarations(include_dir):
    """(scopes, declared): every named scope (namespace or class) as a tuple of names, and
    every (scope, name) declared in one."""
    scopes, declared, classes = set(), set(), set()
    for path in sorted(include_dir.rglob("*.hpp")):
        text = strip_code(path.read_text(encoding="utf-8"))
        # Each open brace: the scope it opens, or None for a block (function body,
        # initialiser, enum body) whose contents declare nothing we look up.
        stack = [()]

        def named():
            for s in reversed(stack):
                if s is not None:
                    return s
            return ()

        def in_block():
            return stack[-1] is None

        pos = 0
        while True:
            m = TOKEN.search(text, pos)
            if not m:
                break
            pos = m.end()
            if m["ns"]:
                scope = named() + tuple(m["nsname"].split("::")) if m["nsname"] else named()
                for k in range(1, len(scope) + 1):
                    scopes.add(scope[:k])
                stack.append(scope)
            elif m["cls"]:
                if in_block() and m["clsend"] == ";":
                    continue
                scope = named()
                declared.add((scope, m["clsname"]))
                if m["clsend"] == "{":
                    inner = scope + (m["clsname"],)
                    scopes.add(inner)
                    classes.add(inner)
                    stack.append(inner)
            elif m["template"]:
                depth = 1  # skip the parameter list: its names are not declarations
                while depth and pos < len(text):
                    depth += {"<": 1, ">": -1}.get(text[pos], 0)
                    pos += 1
            elif m["enum"]:
                scope = named()
                declared.add((scope, m["enumname"]))
                if m["enumend"] == "{":
                    close = text.find("}", pos)
                    for e in re.findall(rf"({IDENT})\s*(?:=[^,}}]*)?(?:,|$)", text[pos:close]):
                        declared.add((scope + (m["enumname"],), e))
                        if not m["scoped"]:
                            declared.add((scope, e))
                    scopes.add(scope + (m["enumname"],))
                    pos = close + 1
            elif m["alias"]:
                if not in_block():
                    declared.add((named(), m["aliasname"]))
            elif m["usingdecl"]:
                if not in_block():
                    declared.add((named(), m["usingname"]))
            elif m["concept"]:
                declared.add((named(), m["conceptname"]))
            elif m["op"]:
                continue
            elif m["call"]:
                name = m["callname"].lstrip("~")
                if not in_block() and name not in NOT_DECLARED:
                    declared.add((named(), name))
            elif m["var"]:
                name = m["varname"]
                if not in_block() and name not in NOT_DECLARED:
                    declared.add((named(), name))
                if text[m.end() - 1] == "{":
                    stack.append(None)
            elif m["open"]:
                stack.append(None)
            elif m["close"]:
                if len(stack) > 1:
                    stack.pop()
    return scopes, declared, classes


def cmake_targets(source_dir):
    targets = set()
    for path in [source_dir / "CMakeLists.txt", *source_dir.glob("cmake/*.cmake*")]:
        if path.is_file():
            targets.update(re.findall(r"add_library\(\s*handoff::(\w+)\s+ALIAS", path.read_text(encoding="utf-8")))
    return targets


def drop_brackets(name, opening, closing):
    """name without its bracketed parts (nested ones too): keyed_mutex<Key>::lock -> keyed_mutex::lock."""
    out, depth = [], 0
    for c in name:
        if c == opening:
            depth += 1
        elif c == closing and depth:
            depth -= 1
        elif not depth:
            out.append(c)
    return "".join(out)


def resolve(name, scopes, declared, classes, targets):
    """None if `name` (handoff::a::b...) is declared, else why not."""
    for opening, closing in ("<>", "()", "{}", "[]"):
        name = drop_brackets(name, opening, closing)
    parts = [p for p in re.sub(r"\s+", "", name).split("::") if p]
    path = tuple(parts)
    if path in scopes or (len(parts) == 2 and parts[1] in targets):
        return None
    scope, last = path[:-1], path[-1].lstrip("~")
    if (scope, last) in declared or (scope[:-1], scope[-1]) in declared and scope[-1] == last:
        return None  # a declaration, or a constructor spelled through its class
    if scope in classes or (scope[:-1], scope[-1]) in declared and scope[:-1] in scopes:
        # A member named through its class (or an alias of one): inherited members count,
        # so any class of the library that declares it will do.
        if any(s in classes and n == last for s, n in declared):
            return None
        return f"no class under include/ declares '{last}'"
    if scope not in scopes:
        return f"'{'::'.join(scope)}' is not a namespace or class under include/"
    return f"'{last}' is not declared in '{'::'.join(scope)}' under include/"


# ---------------------------------------------------------------------------------------
# The Markdown side


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|__", "", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and (m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            base = slug(m[1])
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        if not in_fence:
            found.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return found


CODE_SPAN = re.compile(r"(`+)(.+?)\1")
NAME = re.compile(r"\bhandoff::(?:[\w~]+(?:<[^`]*?>)?(?:\([^`]*?\))?(?:\{[^`]*?\})?::)*[\w~]+")
HEADER = re.compile(r"<(handoff/\w[\w./]*)>")
LINK = re.compile(r"(?<!!)\[(?:[^\]]|\][^(])*?\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_LINK = re.compile(r"^\s*\[[^\]]+\]:\s*(\S+)")


def check_file(md, root, include_dir, decl, targets, anchor_cache):
    scopes, declared, classes = decl
    problems = []
    in_fence = False
    for n, line in enumerate(md.read_text(encoding="utf-8").splitlines(), 1):
        where = f"{md.relative_to(root)}:{n}"
        if line.rstrip().endswith(IGNORE):
            continue
        for header in HEADER.findall(line):
            if not (include_dir / header).is_file():
                problems.append(f"{where}: <{header}> is not a header under include/")
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        # Names: in code blocks, and in code spans outside them.
        for code in [line] if in_fence else [span[2] for span in CODE_SPAN.finditer(line)]:
            for m in NAME.finditer(code):
                why = resolve(m[0], scopes, declared, classes, targets)
                if why:
                    problems.append(f"{where}: `{m[0]}`: {why}")
        if in_fence:
            continue
        prose = CODE_SPAN.sub("", line)
        for target in LINK.findall(prose) + REF_LINK.findall(prose):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto:
            file_part, _, anchor = target.partition("#")
            dest = (md.parent / file_part).resolve() if file_part else md
            if not dest.exists():
                problems.append(f"{where}: link to '{target}': no such file")
            elif anchor and dest.suffix == ".md":
                if dest not in anchor_cache:
                    anchor_cache[dest] = anchors(dest)
                if anchor.lower() not in anchor_cache[dest]:
                    problems.append(f"{where}: link to '{target}': no heading with that anchor")
    return problems


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = pathlib.Path(sys.argv[1]).resolve()
    include_dir = root / "include"
    decl = declarations(include_dir)
    targets = cmake_targets(root)
    docs = [root / "README.md", root / "CONTRIBUTING.md", *sorted((root / "docs").glob("*.md"))]
    problems, anchor_cache = [], {}
    for md in docs:
        problems += check_file(md, root, include_dir, decl, targets, anchor_cache)
    api = root / "docs" / "api.md"
    if api.is_file():
        indexed = set(re.findall(r"^## `<(handoff/[\w./]+)>`", api.read_text(encoding="utf-8"), re.M))
        for header in sorted(include_dir.glob("handoff/**/*.hpp")):
            name = header.relative_to(include_dir).as_posix()
            if not name.startswith("handoff/detail/") and name not in indexed:
                problems.append(f"docs/api.md: no section for <{name}>")
    for p in problems:
        print(p)
    print(f"check_docs: {len(docs)} files, {len(problems)} stale reference(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
