#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-scale-verify.py CKPT_JSON TARGET [PATTERN...]: TARGET (.wsync/ aside) holds
# exactly the checkpoint's files that match a PATTERN (fnmatch on the name;
# none: every file), each of the size and SHA-256 the trainer wrote; nothing
# else. Each file read is dropped from the page cache after.
import concurrent.futures, fnmatch, hashlib, json, os, sys
ck, target, pats = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3:]
want = {n: v for n, v in ck["files"].items()
        if not pats or any(fnmatch.fnmatchcase(n, p) for p in pats)}
found, problems = set(), []
for d, dirs, names in os.walk(target):
    rel = os.path.relpath(d, target)
    if rel == ".":
        dirs[:] = [x for x in dirs if x != ".wsync"]
    for x in dirs:
        if os.path.islink(os.path.join(d, x)):
            problems.append("%s: a symbolic link" % os.path.normpath(os.path.join(rel, x)))
    for n in names:
        found.add(os.path.normpath(os.path.join(rel, n)))
for n in sorted(found - set(want)):
    problems.append("%s: not expected here" % n)
for n in sorted(set(want) - found):
    problems.append("%s: missing" % n)

def digest(n):
    p = os.path.join(target, n)
    fd = os.open(p, os.O_RDONLY)
    try:
        if os.path.islink(p) or not os.path.isfile(p):
            return n, -1, None
        h, size, buf = hashlib.sha256(), 0, bytearray(8 << 20)
        mv = memoryview(buf)
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                h.update(mv[:k])
                size += k
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return n, size, h.hexdigest()
    finally:
        os.close(fd)

with concurrent.futures.ThreadPoolExecutor(2) as pool:
    for n, size, sha in pool.map(digest, sorted(found & set(want))):
        if size != want[n][0]:
            problems.append("%s: %d bytes, the checkpoint's has %d" % (n, size, want[n][0]))
        elif sha != want[n][1]:
            problems.append("%s: content differs (SHA-256)" % n)
if problems:
    print("MISMATCH: " + "; ".join(problems[:20]) + (" ..." if len(problems) > 20 else ""))
    sys.exit(1)
print("ok: %d files, %d bytes identical, nothing else" % (len(want), sum(v[0] for v in want.values())))
