#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tensor-costs.py -- the checkpoints and the independent check behind
test-inspect.sh's per-tensor part.

  make DIR STEP [--layout swapped] [--header-len N]
      DIR/model.safetensors: 26 tensors (BF16, F32, I32, one empty), a
      header padded to 4096 bytes; step 1 is the base, each later step
      changes the same base by the seeded amounts below (so any step
      names the tensors of any other).  --layout swapped: the same
      tensors and sizes with c.proj and f.head's places swapped (the
      header as long, the file as big, the bytes elsewhere).
      --header-len N: the header padded to N bytes instead (a delta
      from another length codes it without the base).

  check JSON PATH SOURCE [--changed NAME=N]... [--exact NAME]...
      JSON is `wsync inspect --json` of a delta; PATH a safetensors file
      of it.  Checks that its tensors are named from SOURCE ("delta" or
      a path) and their coded bytes agree with the pieces it lists,
      computed here on their own: every piece's payload and each
      segment's stream bytes (one FLOAT family per segment: the data is
      made so) spread over the tensors by the bytes each covers; a tensor
      that gets bytes from a unit over several tensors is estimated (to
      within a byte per such unit), any other exact; everything coded
      adds up to the segments' content, and with the framing to the
      file's bytes in the delta.  --changed: the tensor's changed
      elements are N; --exact: its bytes and count are not estimated.
"""
import json, struct, sys

import numpy as np

HEADER_LEN = 4096  # padded to, unless --header-len


def tensors():
    """(name, dtype, shape) in file order."""
    t = [("a.embed", "BF16", [1536, 1024]),
         ("b.norm", "F32", [1024]),
         ("c.proj", "BF16", [1024, 1024]),
         ("d.ids", "I32", [4096]),
         ("e.empty", "F32", [0]),
         ("f.head", "F32", [768, 1024])]
    t += [("g.small.%02d" % i, "BF16", [64]) for i in range(20)]
    return t


NP = {"BF16": np.uint16, "F32": np.float32, "I32": np.int32}
SIZE = {"BF16": 2, "F32": 4, "I32": 4}


def base_data(name, dtype, shape, rng):
    n = int(np.prod(shape)) if shape else 1
    if dtype == "BF16":   # the top half of float32 normals: finite, small
        f = (rng.standard_normal(n) * 0.02).astype(np.float32)
        return (f.view(np.uint32) >> 16).astype(np.uint16)
    if dtype == "F32":
        return (rng.standard_normal(n) * 0.02).astype(np.float32)
    return rng.integers(0, 50000, n).astype(np.int32)


def make(out, step, layout, header_len):
    rng = np.random.default_rng(1)
    data = {n: base_data(n, d, s, rng) for n, d, s in tensors()}
    if step > 1:
        r = np.random.default_rng(100 + step)
        a = data["a.embed"]
        pos = r.choice(a.size, 1000, replace=False)
        a[pos] += 1                                   # one ULP each
        c = data["c.proj"]
        pos = r.choice(c.size, c.size * 2 // 5, replace=False)
        c[pos] += r.integers(1, 4, pos.size).astype(np.uint16)
        d = data["d.ids"]
        pos = r.choice(d.size, 100, replace=False)
        d[pos] += 7
    order = [n for n, _, _ in tensors()]
    if layout == "swapped":
        i, j = order.index("c.proj"), order.index("f.head")
        order[i], order[j] = order[j], order[i]
    kinds = {n: (d, s) for n, d, s in tensors()}
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for n in order:
        d, s = kinds[n]
        size = data[n].size * SIZE[d]
        hdr[n] = {"dtype": d, "shape": s, "data_offsets": [off, off + size]}
        off += size
    h = json.dumps(hdr).encode()
    assert len(h) <= header_len
    with open(out + "/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", header_len) + h + b" " * (header_len - len(h)))
        for n in order:
            f.write(data[n].tobytes())


def fail(msg):
    print(msg)
    sys.exit(1)


def check(js, path, source, changed, exact):
    doc = json.load(open(js))
    if "objects" in doc:
        doc = doc["objects"][0]["delta"]
    files = [f for f in doc["files"] if f["path"] == path]
    if len(files) != 1:
        fail("no file %s in the delta" % path)
    f = files[0]
    if f.get("tensor_names") != source:
        fail("names from %r, not %r (%s)" % (f.get("tensor_names"), source,
                                            f.get("tensors_unavailable")))
    ts = f["tensors"]
    rows = [(0, f["header"]["bytes"])] + [(t["offset"], t["offset"] + t["bytes"]) for t in ts]
    for (b0, e0), (b1, e1) in zip(rows, rows[1:]):
        if e0 != b1:
            fail("rows do not tile the file at %d" % e0)
    if rows[-1][1] != f["target_size"]:
        fail("rows end at %d, the file has %d" % (rows[-1][1], f["target_size"]))
    want = [0.0] * len(rows)
    est = [False] * len(rows)
    units_on = [0] * len(rows)
    content = framing_min = 0
    framing_min = 24 + 82 + len(path.encode())

    def spread(ranges, nbytes, literal):
        cover = sum(l for _, l in ranges)
        hit = set()
        for off, ln in ranges:
            for i, (b, e) in enumerate(rows):
                ov = min(off + ln, e) - max(off, b)
                if ov > 0:
                    want[i] += nbytes * ov / cover
                    hit.add(i)
        for i in hit:
            units_on[i] += 1
            est[i] = est[i] or (len(hit) > 1 and not literal)

    for s in f["segments"]:
        ps = s["pieces"]
        own = sum(p["payload_bytes"] for p in ps)
        streams = s["payload_bytes"] - 24 - 32 * (len(ps) + s["streams"]) - own
        content += own + streams
        framing_min += 24 + 24 + 32 * (len(ps) + s["streams"])
        fams = {p["family"] for p in ps if p["method"] == "FLOAT"}
        if len(fams) > 1:
            fail("a segment has FLOAT pieces of %s: the data was meant to have one" % fams)
        for p in ps:
            if p["method"] not in ("COPY", "FLOAT"):
                spread([(p["offset"], p["length"])], p["payload_bytes"],
                       p["method"] == "LITERAL")
        fl = [(p["offset"], p["length"]) for p in ps if p["method"] == "FLOAT"]
        if fl:
            spread(fl, streams, False)
        elif streams:
            fail("stream bytes without FLOAT pieces")
    got = [f["header"]["coded_bytes"]] + [t["coded_bytes"] for t in ts]
    flags = [f["header"]["coded_estimated"]] + [t["coded_estimated"] for t in ts]
    names = ["(header)"] + [t["name"] for t in ts]
    for i, n in enumerate(names):
        if flags[i] != est[i]:
            fail("%s: estimated %s, the pieces say %s" % (n, flags[i], est[i]))
        if not est[i] and got[i] != round(want[i]):
            fail("%s: %d bytes, its pieces hold %.1f" % (n, got[i], want[i]))
        if est[i] and abs(got[i] - want[i]) > units_on[i]:
            fail("%s: ~%d bytes, its shares of %d pieces come to %.1f" %
                 (n, got[i], units_on[i], want[i]))
    if sum(got) != content:
        fail("tensors and header hold %d bytes, the segments' content is %d" %
             (sum(got), content))
    if sum(got) + f["framing_bytes"] != f["delta_bytes"]:
        fail("tensors, header and framing: %d, the file's bytes in the delta: %d" %
             (sum(got) + f["framing_bytes"], f["delta_bytes"]))
    if f["framing_bytes"] < framing_min:
        fail("framing %d is less than its records and tables, %d" %
             (f["framing_bytes"], framing_min))
    by = {t["name"]: t for t in ts}
    for n, c in changed.items():
        if by[n]["changed"] != c:
            fail("%s: %r changed, not %d" % (n, by[n]["changed"], c))
    for n in exact:
        if by[n]["coded_estimated"] or by[n]["changed_estimated"]:
            fail("%s is estimated" % n)
    print("ok: %d tensors, %d bytes coded, framing %d" %
          (len(ts), sum(got), f["framing_bytes"]))


def main():
    a = sys.argv[1:]
    if a[0] == "make":
        opt = lambda o: a[a.index(o) + 1] if o in a else None
        make(a[1], int(a[2]), opt("--layout") or "", int(opt("--header-len") or HEADER_LEN))
    elif a[0] == "check":
        changed, exact, i = {}, [], 4
        while i < len(a):
            if a[i] == "--changed":
                n, c = a[i + 1].split("=")
                changed[n] = int(c)
            elif a[i] == "--exact":
                exact.append(a[i + 1])
            i += 2
        check(a[1], a[2], a[3], changed, exact)
    else:
        fail("usage: see the docstring")


main()
