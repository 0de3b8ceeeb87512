#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench-judge.py -- how long a publisher's event loop stalls while it first
judges a large checkpoint (checkpoint_complete.h: every safetensors header
and index read and checked).

    scripts/bench-judge.py [--tensors N] [--shards K] [--dir DIR] [--wsyncd PATH]

DIR (default a temp dir under /var/tmp, removed after) holds the watched
folder, the bucket, the daemon's state and its log.

It writes a checkpoint of N tensors (default 300,000) in K shards (default
8), each tensor one bf16 value, with its model.safetensors.index.json: the
headers and the index are as large as a real model's with that many
tensors, the data is tiny.  The marker (trainer_state.json) is left out,
so the judgement ends in "not written yet" and nothing is published: the
loop has nothing else to do in the window measured.  A wsyncd publisher
(file:// bucket, everything under DIR) is started first, the checkpoint
moved into its watched folder in one rename, and the daemon's loop thread
(the main thread, /proc/PID/task/PID) sampled every millisecond until the
log says what the checkpoint waits for, plus half a second.

Printed:
  judged in          checkpoint renamed in -> the daemon's "not complete
                     yet" line
  loop thread CPU s  the loop thread's utime + stime over that window
  longest loop stall the longest run of samples in which the loop thread
                     was running or waiting to run or on disk (state R or
                     D), not sleeping in epoll_wait: a timer, a store
                     reply or a signal waits at least that long; on a busy
                     machine R includes waiting for a core
Run it against two builds (--wsyncd) to compare; one run each, same
machine.  A figure, not a test: it asserts nothing.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time


def write_shard(path, names):
    header = {}
    for i, name in enumerate(names):
        header[name] = {"dtype": "BF16", "shape": [1], "data_offsets": [2 * i, 2 * i + 2]}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        f.write(b"\0\0" * len(names))


def make_checkpoint(dst, n, k):
    os.makedirs(dst)
    weight_map = {}
    per = (n + k - 1) // k
    for s in range(k):
        shard = "model-%05d-of-%05d.safetensors" % (s + 1, k)
        names = ["model.layers.%d.t%d.weight" % (s, i) for i in range(min(per, n - s * per))]
        write_shard(os.path.join(dst, shard), names)
        for name in names:
            weight_map[name] = shard
    with open(os.path.join(dst, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)
    with open(os.path.join(dst, "config.json"), "w") as f:
        f.write("{}\n")


def thread_sample(pid):
    """(state, utime + stime ticks) of the main thread."""
    with open("/proc/%d/task/%d/stat" % (pid, pid)) as f:
        s = f.read()
    rest = s[s.rindex(")") + 2:].split()
    return rest[0], int(rest[11]) + int(rest[12])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tensors", type=int, default=300000)
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--dir")
    ap.add_argument("--wsyncd", default=os.environ.get("WSYNCD") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "daemon", "wsyncd"),
        help="the daemon to measure (default: $WSYNCD, else build/daemon/wsyncd)")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()

    top = a.dir or tempfile.mkdtemp(prefix="bench-judge.", dir="/var/tmp")
    os.makedirs(top, exist_ok=True)
    watch, build = os.path.join(top, "watch"), os.path.join(top, "build")
    for d in ("watch", "bucket", "state", "run"):
        os.makedirs(os.path.join(top, d), exist_ok=True)
    conf = os.path.join(top, "pub.ini")
    with open(conf, "w") as f:
        f.write("[daemon]\nrole = publisher\nstate_dir = %s/state\nruntime_dir = %s/run\n"
                "log_level = info\n[store]\nurl = file://%s/bucket\n[publisher]\n"
                "watch_dir = %s\nrescan_interval = 60s\n" % (top, top, top, watch))
    t0 = time.monotonic()
    make_checkpoint(build, a.tensors, a.shards)
    made = time.monotonic() - t0
    logpath = os.path.join(top, "log")
    log = open(logpath, "w")
    d = subprocess.Popen([a.wsyncd, "-c", conf, "--log-target", "stderr"], stdout=log,
                         stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while "publisher watching" not in open(logpath).read():
            if d.poll() is not None or time.monotonic() > deadline:
                sys.exit("bench-judge: wsyncd did not start (see %s)" % logpath)
            time.sleep(0.05)
        time.sleep(1.0)  # its first scans are over
        _, cpu0 = thread_sample(d.pid)
        start = time.monotonic()
        os.rename(build, os.path.join(watch, "checkpoint-1"))
        run = longest = 0.0
        run_d = longest_d = 0.0  # of which on disk (D)
        last = start
        judged = None
        while True:
            now = time.monotonic()
            state, cpu = thread_sample(d.pid)
            if state in "RD":
                run += now - last
                run_d += now - last if state == "D" else 0.0
                if run > longest:
                    longest, longest_d = run, run_d
            else:
                run = run_d = 0.0
            last = now
            if judged is None and "is not complete yet" in open(logpath).read():
                judged = now - start
                cpu_judged = cpu
                stop_at = now + 0.5
            if judged is not None and now >= stop_at:
                break
            if now - start > a.timeout:
                sys.exit("bench-judge: no judgement within %.0f s (see %s)" % (a.timeout, logpath))
            time.sleep(0.001)
        hz = os.sysconf("SC_CLK_TCK")
        print("# bench-judge: %d tensors in %d shards (headers and index %.1f MB, made in "
              "%.1f s); wsyncd %s" % (a.tensors, a.shards,
                                    sum(os.path.getsize(os.path.join(watch, "checkpoint-1", x))
                                        for x in os.listdir(os.path.join(watch, "checkpoint-1")))
                                    / 1e6, made, a.wsyncd))
        print("judged in %.2f s" % judged)
        print("loop thread CPU s %.2f" % ((cpu_judged - cpu0) / hz))
        print("longest loop stall %.3f s (%.3f s of it on disk, D)" % (longest, longest_d))
    finally:
        d.terminate()
        try:
            d.wait(timeout=20)
        except subprocess.TimeoutExpired:
            d.kill()
            d.wait()
        log.close()
        if not a.dir:
            shutil.rmtree(top, ignore_errors=True)


if __name__ == "__main__":
    main()
