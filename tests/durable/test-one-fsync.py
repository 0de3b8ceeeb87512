#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test-one-fsync.py SOURCE_DIR -- nothing in common/ or daemon/ calls
fsync or fdatasync but the durable-write module (common/base/durable.c).

One fsync policy (a file system that refuses fsync is reported once, not
failed on here and ignored there) holds only while there is one caller;
and the crash tests' power-loss checks see only what goes through libc's
fsync, so the module must call that one, not a system call of its own.
Comments and string literals are left out of the scan.

Prints TAP: one line per rule, the offending places as diagnostics.
"""
import os
import re
import sys

source = os.path.abspath(sys.argv[1])
MODULE = "common/base/durable.c"
CALL = re.compile(r"(?<![A-Za-z0-9_])(fsync|fdatasync)\s*\(|SYS_(fsync|fdatasync)\b")
# a comment, a string or a character literal: replaced by blanks (newlines
# kept, so line numbers stay right)
NOISE = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                   re.S)


def code_of(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return NOISE.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


def calls(rel):
    code = code_of(os.path.join(source, rel))
    return [(code.count("\n", 0, m.start()) + 1, m.group(0).rstrip("( "))
            for m in CALL.finditer(code)]


files = []
for top in ("common", "daemon"):
    for root, dirs, names in os.walk(os.path.join(source, top)):
        dirs.sort()
        for n in sorted(names):
            if n.endswith((".c", ".h")):
                files.append(os.path.relpath(os.path.join(root, n), source))

bad = [(rel, line, what) for rel in files if rel != MODULE for line, what in calls(rel)]
results = [
    (not bad and len(files) > 50,
     "no fsync or fdatasync in common/ or daemon/ outside %s (%d files)" % (MODULE, len(files)),
     ["%s:%d: %s" % b for b in bad] or ([] if len(files) > 50 else ["too few files found"])),
    (any(what == "fsync" for _, what in calls(MODULE)),
     "%s calls libc's fsync (what the crash tests' shim intercepts)" % MODULE, []),
]
print("1..%d" % len(results))
for i, (ok, what, detail) in enumerate(results, 1):
    print("%s %d - %s" % ("ok" if ok else "not ok", i, what))
    for d in detail:
        print("# " + d)
sys.exit(0 if all(r[0] for r in results) else 1)
