#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""craft-delta.py OUT [options] -- write a one-file delta as common/codec/FORMAT.md
specifies (preamble, one FILE record WRITE without a base, one SEGMENT
with one piece, END), with the fields a hostile writer would choose.
Record checksums (XXH3-64) and the target hash (XXH3-128) are right unless
an option says otherwise, so a decoder gets past them to the field under
test.  Hashes come from the xxhsum / xxh128sum programs.

  --path TEXT        the FILE record's path (default model.bin)
  --path-hex HEX     the path as raw bytes (NUL and friends)
  --data FILE        the target bytes, as a LITERAL piece (default 4 bytes)
  --zstd FRAME LEN   a ZSTD piece: FRAME (a file holding one zstd frame)
                     claims to give LEN target bytes
  --hash-of FILE      the target size and hash fields: FILE's
  --size N           the target size field (default: the real size)
  --seg-len N        the segment's target length field (default: the size)
"""
import os, struct, subprocess, sys, tempfile

def opt(name, n=1):
    a = sys.argv
    if name not in a:
        return None
    i = a.index(name)
    return a[i + 1] if n == 1 else a[i + 1:i + 1 + n]

def xxh(data, prog):
    with tempfile.NamedTemporaryFile() as f:
        f.write(data)
        f.flush()
        out = subprocess.run(prog + [f.name], capture_output=True, text=True, check=True).stdout
    return out.split("=")[-1].strip() if "=" in out else out.split()[0]

def record(rtype, payload):
    h = int(xxh(payload, ["xxhsum", "-H3"]), 16)
    return struct.pack("<IIQQ", rtype, 0, len(payload), h) + payload

out = sys.argv[1]
path = bytes.fromhex(opt("--path-hex")) if opt("--path-hex") else (opt("--path") or "model.bin").encode()
if opt("--zstd", 2):
    frame_file, n = opt("--zstd", 2)
    payload, length, method = open(frame_file, "rb").read(), int(n), 2
    target_hash = bytes(16)     # never reached: nothing may decode that far
else:
    payload = open(opt("--data"), "rb").read() if opt("--data") else b"wsy\n"
    length, method = len(payload), 1
    target_hash = bytes.fromhex(xxh(payload, ["xxh128sum"]))
if opt("--hash-of"):
    target_hash = bytes.fromhex(xxh(open(opt("--hash-of"), "rb").read(), ["xxh128sum"]))
size = int(opt("--size") or (os.path.getsize(opt("--hash-of")) if opt("--hash-of") else length))
seg_len = int(opt("--seg-len") or length)
piece = struct.pack("<BBB5xQQQ", method, 0, 0, length, 0, len(payload))
segment = struct.pack("<QQII", 0, seg_len, 1, 0) + piece + payload
frec = (struct.pack("<H", len(path)) + path + struct.pack("<BBHI", 1, 0, 0, 0o644)
        + struct.pack("<Q", 0) + bytes(16) + struct.pack("<Q", size) + target_hash
        + struct.pack("<QQQ", 1, 0, 0))
with open(out, "wb") as f:
    f.write(b"WSYNCDLT" + struct.pack("<II", 1, 0))
    f.write(record(1, frec))
    f.write(record(2, segment))
    f.write(record(3, struct.pack("<QQ", 1, size)))
