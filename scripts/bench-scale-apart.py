#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-scale-apart.py WSYNC OLD NEW DELTA OUT THREADS: the two stages of a
# step run apart, one after the other, with nothing of wsync's own running
# alongside (the daemons idle): `wsync diff OLD NEW -o DELTA`, then `wsync
# apply OLD DELTA -o OUT` (OLD left as it is, the result written in OUT).
# OLD is an empty directory for an anchor. Before the apply, OLD's files are
# dropped from the page cache, as a subscriber's target is cold (the check
# after each step drops what it read). DELTA and OUT are removed after.
# Prints "diff_s apply_s delta_bytes"; exit 1 if a stage failed.
import os, shutil, subprocess, sys, time
wsync, old, new, delta, out, threads = sys.argv[1:7]

def run(args):
    t0 = time.monotonic()
    r = subprocess.run(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    dt = time.monotonic() - t0
    if r.returncode != 0:
        sys.exit("bench-scale-apart.py: %s exited %d: %s" % (
            " ".join(args[:2]), r.returncode, r.stderr.decode(errors="replace").strip()[-400:]))
    return dt

def drop(top):
    for d, _, names in os.walk(top):
        for n in names:
            p = os.path.join(d, n)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            fd = os.open(p, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

shutil.rmtree(out, ignore_errors=True)
try:
    diff_s = run([wsync, "diff", old, new, "-o", delta, "--threads", threads])
    size = os.path.getsize(delta)
    drop(old)
    apply_s = run([wsync, "apply", old, delta, "-o", out, "--threads", threads])
finally:
    shutil.rmtree(out, ignore_errors=True)
    try:
        os.unlink(delta)
    except FileNotFoundError:
        pass
print("%.3f %.3f %d" % (diff_s, apply_s, size))
