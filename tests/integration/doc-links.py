#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""doc-links.py ROOT [FILE.md...] -- every relative link in the tree's
Markdown files resolves: the file or folder it names exists inside ROOT,
and a #fragment names a heading of the Markdown file it points into
(GitHub's anchors: lower case, punctuation dropped, spaces to hyphens,
"-1", "-2" for repeats).  Links with a scheme (https:, mailto:) are not
followed.  Links inside code (fenced blocks, `spans`) are not links.

Without FILE arguments every *.md under ROOT is checked, except in build
folders (build*/), .git/, node_modules/ and scratch corpora.  Prints one
line per Markdown file, "ok FILE (N links)" or "FAIL FILE", then each
broken link as FILE:LINE: TARGET: why; exits 1 when any is broken.
(tests/integration/test-doc-links.sh runs it as a TAP test.)
"""
import os
import re
import sys
import unicodedata

SKIP_DIRS = {".git", "node_modules", ".cache", "corpus-work", "__pycache__"}

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def md_files(root):
    for d, dirs, files in os.walk(root):
        rel = os.path.relpath(d, root)
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS and
                         not (rel == "." and x.startswith("build")))
        for f in sorted(files):
            if f.endswith(".md"):
                yield os.path.join(d, f)


def strip_code_spans(line):
    # `code` and ``code`` spans are not links
    return re.sub(r"(`+)(?:(?!\1).)+?\1", lambda m: " " * len(m.group(0)), line)


def lines_outside_code(text):
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if m:
            if fence is None:
                fence = m.group(1)
            elif line.strip().startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def slug(heading):
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # links: their text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in " -_" or cat[0] in "LN":
            out.append("-" if ch == " " else ch)
    return "".join(out)


_anchors = {}


def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        with open(path, encoding="utf-8") as f:
            for _, line in lines_outside_code(f.read()):
                m = HEADING.match(line)
                if not m:
                    continue
                s = slug(m.group(2))
                k = seen.get(s, 0)
                seen[s] = k + 1
                found.add(s if k == 0 else f"{s}-{k}")
        _anchors[path] = found
    return _anchors[path]


def check_file(root, path):
    """(number of links, [(line, target, why)])"""
    bad = []
    n = 0
    with open(path, encoding="utf-8") as f:
        text = f.read()
    for lineno, line in lines_outside_code(text):
        line = strip_code_spans(line)
        targets = [m.group(1) for m in LINK.finditer(line)]
        m = REFDEF.match(line)
        if m:
            targets.append(m.group(1))
        for t in targets:
            t = t[1:-1] if t.startswith("<") else t
            if SCHEME.match(t):
                continue
            n += 1
            target, _, frag = t.partition("#")
            if target:
                dest = os.path.normpath(os.path.join(os.path.dirname(path), target))
                if os.path.relpath(dest, root).startswith(".."):
                    bad.append((lineno, t, "points outside the tree"))
                    continue
                if not os.path.exists(dest):
                    bad.append((lineno, t, "no such file or folder"))
                    continue
            else:
                dest = path
            if frag:
                if not dest.endswith(".md") or os.path.isdir(dest):
                    continue   # an anchor into a non-Markdown file: not checked
                if frag.lower() not in anchors(dest):
                    bad.append((lineno, t, f"no heading #{frag} in {os.path.relpath(dest, root)}"))
    return n, bad


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = os.path.abspath(sys.argv[1])
    files = [os.path.abspath(f) for f in sys.argv[2:]] or list(md_files(root))
    broken = 0
    for path in files:
        rel = os.path.relpath(path, root)
        n, bad = check_file(root, path)
        print(("FAIL " if bad else "ok ") + f"{rel} ({n} links)")
        for lineno, t, why in bad:
            print(f"  {rel}:{lineno}: {t}: {why}")
        broken += len(bad)
    if broken:
        print(f"{broken} broken link(s)")
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
