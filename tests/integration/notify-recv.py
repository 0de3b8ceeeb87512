#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""notify-recv.py [--want-status REGEX] [--status-json PATH KEY=VALUE...] -- COMMAND...:
play systemd's part for sd_notify.

Binds a NOTIFY_SOCKET (datagram, SO_PASSCRED), runs COMMAND with it and
WATCHDOG_USEC=1000000 / WATCHDOG_PID set to the daemon's own pid, then:
waits for READY=1, collects WATCHDOG=1 for 2.5 s, sends SIGHUP and waits
for RELOADING=1 (+ MONOTONIC_USEC) and READY=1, sends SIGTERM and waits
for STOPPING=1 and the exit.  Prints one "PASS description" or "FAIL
description" line per check ("# ..." lines are diagnostics).  Every wait
is bounded.

After READY=1, and before the watchdog: with --want-status, the latest
STATUS= must match REGEX (re.search) within 10 s; with --status-json, the
status file PATH must within 10 s be one this daemon wrote (its "pid")
holding every KEY=VALUE (values compared as text, JSON's true/false/null
as such), so that a status left behind by a previous run never passes."""
import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

WATCHDOG_USEC = 1000000
results = []


def check(ok, desc, detail=""):
    print(("PASS " if ok else "FAIL ") + desc)
    if not ok and detail:
        for line in str(detail).splitlines():
            print("# " + line)


def as_text(v):
    """A JSON value as the text --status-json compares."""
    return json.dumps(v) if v is None or isinstance(v, bool) else str(v)


def main():
    sep = sys.argv.index("--")
    cmd = sys.argv[sep + 1:]
    opts = sys.argv[1:sep]
    want_status, status_json, want_json = None, None, {}
    while opts:
        if opts[0] == "--want-status" and len(opts) >= 2:
            want_status, opts = opts[1], opts[2:]
        elif opts[0] == "--status-json" and len(opts) >= 2:
            status_json, opts = opts[1], opts[2:]
            while opts and not opts[0].startswith("--"):
                k, v = opts[0].split("=", 1)
                want_json[k], opts = v, opts[1:]
        else:
            sys.exit("notify-recv.py: unknown option %s" % opts[0])
    tmp = tempfile.mkdtemp(prefix="wsync-notify-")
    path = os.path.join(tmp, "notify.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    s.bind(path)
    env = dict(os.environ, NOTIFY_SOCKET=path, WATCHDOG_USEC=str(WATCHDOG_USEC))
    # exec keeps the pid, so $$ is the daemon's pid: WATCHDOG_PID must match
    p = subprocess.Popen(["/bin/sh", "-c", 'WATCHDOG_PID=$$ exec "$@"', "sh"] + cmd,
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    msgs = []  # (monotonic seconds, pid, {key: value})

    def pump(timeout):
        s.settimeout(max(timeout, 0.001))
        try:
            data, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            return None
        pid = None
        for level, typ, cdata in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
                pid = struct.unpack("iii", cdata[:12])[0]
        fields = dict(line.split("=", 1) for line in data.decode().split("\n") if "=" in line)
        m = (time.monotonic(), pid, fields)
        msgs.append(m)
        return m

    def wait_for(key, value=None, timeout=10.0, after=0):
        deadline = time.monotonic() + timeout
        for m in msgs[after:]:
            if key in m[2] and (value is None or m[2][key] == value):
                return m
        while time.monotonic() < deadline and p.poll() is None:
            m = pump(deadline - time.monotonic())
            if m and key in m[2] and (value is None or m[2][key] == value):
                return m
        # the daemon may have exited with datagrams still queued
        while True:
            m = pump(0.05)
            if m is None:
                return None
            if key in m[2] and (value is None or m[2][key] == value):
                return m

    def finish(reason):
        if p.poll() is None:
            p.kill()
        p.wait()
        err = p.stderr.read().decode(errors="replace")
        check(False, reason, err[-3000:])
        sys.exit(0)

    ready = wait_for("READY", "1")
    if ready is None:
        err = p.stderr.read().decode(errors="replace") if p.poll() is not None else ""
        if "not built yet" in err:
            print("SKIP the role is not built yet")
            p.wait()
            return
        finish("READY=1 within 10 s")
    check(True, "READY=1 within 10 s")
    st = wait_for("STATUS", timeout=3.0)
    check(st is not None and st[2]["STATUS"] != "", "STATUS= with text",
          st and st[2])
    if st:
        print("# STATUS=" + st[2]["STATUS"])

    # The state the daemon settles in after starting is shown (the last
    # STATUS=, status.json) without waiting for anything else to happen.
    def latest_status():
        sts = [m[2]["STATUS"] for m in msgs if "STATUS" in m[2]]
        return sts[-1] if sts else ""

    if want_status is not None:
        deadline = time.monotonic() + 10
        while (not re.search(want_status, latest_status()) and
               time.monotonic() < deadline and p.poll() is None):
            pump(min(0.2, max(deadline - time.monotonic(), 0.001)))
        check(re.search(want_status, latest_status()) is not None,
              "the latest STATUS= matches /%s/ within 10 s" % want_status,
              "latest STATUS=" + latest_status())
    if status_json is not None:
        want = dict(want_json, pid=str(p.pid))
        deadline = time.monotonic() + 10
        while True:
            try:
                with open(status_json) as f:
                    d = json.load(f)
            except (OSError, ValueError):
                d = {}
            got = {k: as_text(d.get(k)) for k in want}
            if got == want or time.monotonic() >= deadline or p.poll() is not None:
                break
            pump(0.1)   # also a bounded sleep
        check(got == want, "status.json says %s within 10 s" %
              " ".join("%s=%s" % kv for kv in sorted(want_json.items())),
              "status.json: " + json.dumps(d, sort_keys=True))

    # Watchdog: half of WATCHDOG_USEC, i.e. every 0.5 s.
    t0 = time.monotonic()
    n0 = len(msgs)
    while time.monotonic() - t0 < 2.5 and p.poll() is None:
        pump(2.5 - (time.monotonic() - t0))
    wd = [m[0] for m in msgs[n0:] if m[2].get("WATCHDOG") == "1"]
    gaps = [b - a for a, b in zip(wd, wd[1:])]
    print("# WATCHDOG=1 gaps: " + " ".join("%.3f" % g for g in gaps))
    # bounds leave room for a loaded test machine; a timer at the full
    # WATCHDOG_USEC (1 s) or far faster fails either check
    check(3 <= len(wd) <= 6, "WATCHDOG=1 3..6 times in 2.5 s (%d)" % len(wd))
    gaps.sort()
    check(len(gaps) >= 2 and 0.4 <= gaps[len(gaps) // 2] <= 0.65 and gaps[0] >= 0.3,
          "WATCHDOG=1 every ~0.5 s, half of WATCHDOG_USEC")

    # SIGHUP: RELOADING=1 with MONOTONIC_USEC, then READY=1.
    n0 = len(msgs)
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    p.send_signal(signal.SIGHUP)
    rl = wait_for("RELOADING", "1", after=n0)
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    if rl is None:
        finish("RELOADING=1 after SIGHUP")
    check(True, "RELOADING=1 after SIGHUP")
    mono = rl[2].get("MONOTONIC_USEC", "")
    check(mono.isdigit() and before <= int(mono) <= after,
          "MONOTONIC_USEC in the same datagram, CLOCK_MONOTONIC at the reload",
          "%s not in [%d, %d]" % (mono, before, after))
    n_rl = msgs.index(rl)
    rd = wait_for("READY", "1", after=n_rl + 1)
    check(rd is not None, "READY=1 after the reload")

    # SIGTERM: STOPPING=1, exit 0.
    n0 = len(msgs)
    p.send_signal(signal.SIGTERM)
    stp = wait_for("STOPPING", "1", after=n0)
    check(stp is not None, "STOPPING=1 after SIGTERM")
    try:
        rc = p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        finish("exit within 10 s of SIGTERM")
    err = p.stderr.read().decode(errors="replace")
    check(rc == 0, "exit status 0 after SIGTERM (%s)" % rc, err[-2000:])
    while pump(0.05):
        pass
    pids = {m[1] for m in msgs}
    check(pids == {p.pid}, "every notification came from the main pid (NotifyAccess=main)",
          "pids %s, main %d" % (pids, p.pid))
    s.close()
    os.unlink(path)
    os.rmdir(tmp)


main()
