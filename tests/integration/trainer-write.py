#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""trainer-write.py -- write a checkpoint folder the way trainers that do
not write trainer_state.json last do (tests/integration/test-write-order.sh).

    trainer-write.py SRC DEST --order ORDER [--slices N] [--pause S]
                     [--seed K] [--skip NAME ...] [--only NAME ...]

Copies the files of SRC into DEST (created if missing), in ORDER:

  marker-first  trainer_state.json first, then the small files, the index,
                and the weight files last, each in --slices writes with
                --pause seconds between them (the file grows in place)
  shuffle       every file in a random order (--seed), as a `cp -r` of a
                folder whose listing is in no particular order; each file
                in --slices writes, --pause between files and slices
  index-first   the index first, then the weight files in slices, the small
                files, trainer_state.json last
  rewrite       in place: each weight file truncated and rewritten in
                slices (as torch.save and safetensors' save_file do), the
                other files the same way, trainer_state.json last -- or not
                at all with --skip trainer_state.json

--skip NAME leaves a file out; --only NAME writes just the files named.  Every write is flushed (no fsync).
"""
import argparse
import os
import random
import sys
import time

WEIGHT_EXTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
MARKER = "trainer_state.json"


def is_weight(name):
    return name.endswith(WEIGHT_EXTS)


def write_sliced(src, dst, slices, pause):
    with open(src, "rb") as f:
        data = f.read()
    step = max(1, -(-len(data) // slices))
    with open(dst, "wb") as out:   # O_TRUNC: an in-place rewrite starts short
        for off in range(0, max(len(data), 1), step):
            out.write(data[off:off + step])
            out.flush()
            if off + step < len(data):
                time.sleep(pause)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("dest")
    ap.add_argument("--order", required=True,
                    choices=["marker-first", "shuffle", "index-first", "rewrite"])
    ap.add_argument("--slices", type=int, default=4)
    ap.add_argument("--pause", type=float, default=0.3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--skip", action="append", default=[])
    ap.add_argument("--only", action="append", default=[])
    a = ap.parse_args()

    names = sorted(n for n in os.listdir(a.src)
                   if n not in a.skip and (not a.only or n in a.only))
    weights = [n for n in names if is_weight(n)]
    index = [n for n in names if n.endswith(".index.json")]
    small = [n for n in names if n not in weights and n not in index and n != MARKER]
    marker = [MARKER] if MARKER in names else []
    if a.order == "marker-first":
        order = marker + small + index + weights
    elif a.order == "shuffle":
        order = list(names)
        random.Random(a.seed).shuffle(order)
    elif a.order == "index-first":
        order = index + weights + small + marker
    else:
        order = weights + index + small + marker
    os.makedirs(a.dest, exist_ok=True)
    for i, n in enumerate(order):
        slices = a.slices if (is_weight(n) or a.order == "shuffle") else 1
        write_sliced(os.path.join(a.src, n), os.path.join(a.dest, n), slices, a.pause)
        if i + 1 < len(order):
            time.sleep(a.pause)
    return 0


if __name__ == "__main__":
    sys.exit(main())
