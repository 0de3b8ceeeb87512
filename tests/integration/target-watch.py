#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""target-watch.py -- look at a subscriber's target folder as an inference
server would, as often as it can, and record every moment it was not a
whole model (tests/integration/test-write-order.sh).

    target-watch.py TARGET OUT --until FILE [--max SECONDS]

From the first moment TARGET holds a weight file on, each look checks
that it still holds one, that every *.safetensors file in it is whole by
its own header (size = 8 + header + the end of its last tensor), and that
every shard its model.safetensors.index.json names is there.  Runs until
FILE exists (or --max seconds, default 600, have passed), then writes to
OUT one line "looks N violations M" and the first violations, one per
line.  A look during which a listed file vanished is taken again (the
listing and the reading are two moments).
"""
import argparse
import json
import os
import struct
import sys
import time


def whole(path):
    """None when the safetensors file at path is whole, else why not."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) < 8:
                return "%s: %d bytes, no header" % (path, size)
            n = struct.unpack("<Q", head)[0]
            if n > 100 << 20 or 8 + n > size:
                return "%s: header of %d bytes in a file of %d" % (path, n, size)
            hdr = json.loads(f.read(n))
    except FileNotFoundError:
        return "%s vanished between listing and reading" % path
    except (OSError, ValueError) as e:
        return "%s: %s" % (path, e)
    end = max([v["data_offsets"][1] for k, v in hdr.items() if k != "__metadata__"] or [0])
    if size != 8 + n + end:
        return "%s: %d bytes, its header describes %d" % (path, size, 8 + n + end)
    return None


def look(target):
    """The problems of one look, or None before the first weight file."""
    try:
        names = os.listdir(target)
    except OSError:
        names = []
    weights = [n for n in names if n.endswith(".safetensors") and not n.startswith(".")]
    if not weights:
        return ["no weight file"]
    bad = [w for w in (whole(os.path.join(target, n)) for n in weights) if w]
    if "model.safetensors.index.json" in names:
        try:
            with open(os.path.join(target, "model.safetensors.index.json")) as f:
                shards = set(json.load(f)["weight_map"].values())
            bad += ["index names %s, which is not there" % s for s in sorted(shards)
                    if not os.path.exists(os.path.join(target, s))]
        except FileNotFoundError:
            bad.append("the index vanished between listing and reading")
        except (OSError, ValueError, KeyError) as e:
            bad.append("index: %s" % e)
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("target")
    ap.add_argument("out")
    ap.add_argument("--until", required=True)
    ap.add_argument("--max", type=float, default=600)
    a = ap.parse_args()
    end = time.monotonic() + a.max
    started = False
    looks = 0
    violations = []
    while not os.path.exists(a.until) and time.monotonic() < end:
        bad = look(a.target)
        # A file deleted between this look's listing and its reading was
        # there at one moment and legitimately gone at the next: look again.
        for _ in range(3):
            if not any("vanished" in b for b in bad):
                break
            bad = look(a.target)
        if not started:
            started = bad != ["no weight file"]
        if started:
            looks += 1
            if bad:
                violations.append("%.3f %s" % (time.time(), "; ".join(bad)))
        time.sleep(0.005)
    with open(a.out, "w") as f:
        f.write("looks %d violations %d\n" % (looks, len(violations)))
        for v in violations[:20]:
            f.write(v + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
