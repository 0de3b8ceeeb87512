#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test-no-circles.py SOURCE_DIR FOLDER... -- no two files of a folder call
each other both ways.

Within each FOLDER (relative to SOURCE_DIR, e.g. daemon/subscriber), a file
that calls into another file of the same folder is a layer above it; two
files that call into each other are one module cut in two, and neither can
be read or changed alone.  This lists, per folder, the non-static
functions each .c file defines, then which other files of the folder use
them (a call, or the name taken as a function pointer, as a job's work
function is), and fails for every pair of files that use each other.
Functions static inline in headers belong to no file and are not counted.

The check is textual (comments and string literals removed, definitions
found by the kernel-style shape "type name(args)" at the start of a line,
with its "{"), which is enough for the style of this tree.

Prints TAP: one line per folder; the "uses" lines come out as comments.
"""
import glob
import os
import re
import sys

DEF = re.compile(
    r"^(?!static\b|typedef\b|extern\b|struct\s+\w+\s*\{|#)"   # at column 0, not static
    r"[A-Za-z_][\w \t\*]*?"                                   # the return type
    r"\b([A-Za-z_]\w*)\s*\("                                  # the name
    r"[^;{}]*\)\s*"                                           # the arguments
    r"(?:__attribute__\s*\(\(.*?\)\)\s*)?\{",                 # then the body
    re.M | re.S)


def strip(text):
    """text without comments, string and character literals (kept as
    blanks so that line structure stays)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def check(source, folder):
    files = sorted(glob.glob(os.path.join(source, folder, "*.c")))
    texts = {}
    for f in files:
        with open(f, encoding="utf-8") as fh:
            texts[os.path.basename(f)] = strip(fh.read())
    defined = {}          # function -> the file that defines it
    for name, text in texts.items():
        for m in DEF.finditer(text):
            defined.setdefault(m.group(1), name)
    uses = {}             # (user, definer) -> functions
    for name, text in texts.items():
        for ident in set(re.findall(r"\b[A-Za-z_]\w*\b", text)):
            owner = defined.get(ident)
            if owner and owner != name:
                uses.setdefault((name, owner), set()).add(ident)
    lines = []
    for (a, b), fns in sorted(uses.items()):
        lines.append("# %s/%s uses %s: %s" % (folder, a, b, ", ".join(sorted(fns))))
    both = sorted((a, b) for (a, b) in uses if a < b and (b, a) in uses)
    problems = []
    for a, b in both:
        problems.append("# both ways: %s <-> %s (%s / %s)" % (
            a, b, ", ".join(sorted(uses[(a, b)])), ", ".join(sorted(uses[(b, a)]))))
    return files, lines, problems


def main():
    if len(sys.argv) < 3:
        sys.stderr.write("usage: test-no-circles.py SOURCE_DIR FOLDER...\n")
        return 2
    source, folders = sys.argv[1], sys.argv[2:]
    print("1..%d" % len(folders))
    failed = 0
    for i, folder in enumerate(folders, 1):
        files, lines, problems = check(source, folder)
        for l in lines:
            print(l)
        for p in problems:
            print(p)
        if not files:
            print("not ok %d - %s: no .c file found" % (i, folder))
            failed += 1
        elif problems:
            print("not ok %d - %s: %d pairs of files call each other both ways"
                  % (i, folder, len(problems)))
            failed += 1
        else:
            print("ok %d - %s: no two of its %d files call each other both ways"
                  % (i, folder, len(files)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
