#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""test-layers.py BUILD_DIR SOURCE_DIR -- the build refuses an include that
points up the library's layers.

Each layer of common/ (base, format, codec, store) and config/ is a static
library whose include path holds its own folder and those of the layers
below it, nothing else (common/meson.build).  This proves it with the
compiler itself: for each layer, the very command meson compiles one of its
sources with (BUILD_DIR/compile_commands.json) preprocesses a one-line file
that includes one header of the tree, for every header of every layer --
one of the layer's own or below must be found, one of a layer above (or
beside, as the store for the codec) must not ("No such file").  And no
quoted #include in common/ or config/ names a path: "../codec/x.h" would
get past any include path.

Prints TAP: one line per (layer, layer it includes from), one for the scan.
"""
import glob
import json
import os
import re
import shlex
import subprocess
import sys

LAYERS = {            # folder, and the layers whose headers it may include
    "base": ("common/base", {"base"}),
    "format": ("common/format", {"base", "format"}),
    "codec": ("common/codec", {"base", "format", "codec"}),
    "store": ("common/store", {"base", "store"}),
    "config": ("config", {"base", "store", "config"}),
}

build, source = (os.path.abspath(a) for a in sys.argv[1:3])
results = []


def tap(ok, what, detail=""):
    results.append((ok, what, detail))


def layer_command(folder):
    """The compile command of the first source of folder, made to
    preprocess stdin: (argv, cwd)."""
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    for e in sorted(entries, key=lambda e: e["file"]):
        path = os.path.normpath(os.path.join(e["directory"], e["file"]))
        if os.path.dirname(path) != os.path.join(source, folder):
            continue
        argv = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        out, skip = [], False
        for a in argv:
            if skip:
                skip = False
            elif a in ("-o", "-MQ", "-MF", "-MT"):
                skip = True
            elif a in ("-c", "-MD", "-MMD") or a == e["file"]:
                pass
            else:
                out.append(a)
        return out + ["-E", "-x", "c", "-", "-o", os.devnull], e["directory"]
    return None, None


def found(argv, cwd, header):
    """True if the layer's command finds header, False if it reports it
    missing; anything else is an error of the probe itself."""
    p = subprocess.run(argv, cwd=cwd, input=f'#include "{header}"\n',
                       capture_output=True, text=True)
    if p.returncode == 0:
        return True
    if header in p.stderr and ("No such file" in p.stderr or "not found" in p.stderr):
        return False
    raise RuntimeError(f"probe of {header}: {p.stderr.strip()[:400]}")


headers = {name: sorted(os.path.basename(h) for h in
                        glob.glob(os.path.join(source, folder, "*.h")))
           for name, (folder, _) in LAYERS.items()}

for name, (folder, allowed) in LAYERS.items():
    argv, cwd = layer_command(folder)
    if argv is None:
        for other in LAYERS:
            tap(False, f"{name}: {other}", f"no compile command for {folder}/")
        continue
    for other in LAYERS:
        want = other in allowed
        wrong = []
        try:
            for h in headers[other]:
                if found(argv, cwd, h) != want:
                    wrong.append(h)
        except RuntimeError as ex:
            tap(False, f"{name}: {other}", str(ex))
            continue
        n = len(headers[other])
        if want:
            tap(not wrong, f"{name} includes {other}'s headers ({n})",
                "not found: " + " ".join(wrong))
        else:
            tap(not wrong, f"{name} cannot include {other}'s headers ({n} refused)",
                "found anyway: " + " ".join(wrong))

# No quoted include names a path: the include path alone decides.
pathed = []
for folder, _ in LAYERS.values():
    for f in sorted(glob.glob(os.path.join(source, folder, "*.[ch]"))):
        with open(f, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                m = re.match(r'\s*#\s*include\s*"([^"]*)"', line)
                if m and "/" in m.group(1):
                    pathed.append(f"{os.path.relpath(f, source)}:{i}: {m.group(1)}")
tap(not pathed, "no #include in common/ or config/ names a path", "; ".join(pathed))

print(f"1..{len(results)}")
for i, (ok, what, detail) in enumerate(results, 1):
    print(f"{'ok' if ok else 'not ok'} {i} - {what}")
    if not ok and detail:
        print(f"# {detail}")
sys.exit(0 if all(ok for ok, _, _ in results) else 1)
