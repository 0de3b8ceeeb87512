#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""journal-recv.py SOCKET OUT.json [--until MESSAGE_ID] [--journal-stream] -- COMMAND...

A stand-in for journald in tests: bind a datagram socket at SOCKET, run
COMMAND with WSYNC_JOURNAL_SOCKET=SOCKET (common/base/log.c then sends its
journal entries there in the native protocol), and write every entry
received to OUT.json as a list of {field: value}, plus the exit status.
With --until, send SIGTERM to COMMAND once an entry with that MESSAGE_ID
has arrived.  With --journal-stream, COMMAND's stderr is connected as
systemd connects a service's: JOURNAL_STREAM names its device and inode
(what --log-target auto looks at); what COMMAND writes there is still
captured.  Every wait is bounded (10 s).

journal-recv.py SOCKET OUT.jsonl --serve SECONDS: no command; receive
until SIGTERM or SECONDS have passed, appending each entry to OUT.jsonl as
one JSON line as it arrives (for daemons the test starts itself with
WSYNC_JOURNAL_SOCKET=SOCKET; unparsable datagrams become {"_error": ...})."""
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time


def parse(d):
    """One native-protocol datagram -> dict; raises on malformed input."""
    fields, i = {}, 0
    while i < len(d):
        nl = d.index(b"\n", i)
        line = d[i:nl]
        if b"=" in line:
            k, v = line.split(b"=", 1)
            i = nl + 1
        else:  # binary-safe: KEY \n le64 length, value, \n
            k = line
            (n,) = struct.unpack("<Q", d[nl + 1:nl + 9])
            v = d[nl + 9:nl + 9 + n]
            if len(v) != n or d[nl + 9 + n:nl + 10 + n] != b"\n":
                raise ValueError("truncated binary field %r" % k)
            i = nl + 10 + n
        fields[k.decode()] = v.decode()
        fields.setdefault("_binary_safe", [])
        if b"=" not in line:
            fields["_binary_safe"].append(k.decode())
    return fields


def serve(sock_path, out, seconds):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.settimeout(0.2)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    deadline = time.monotonic() + seconds
    with open(out, "a") as f:
        while not stop and time.monotonic() < deadline:
            try:
                d = s.recv(1 << 20)
            except (socket.timeout, InterruptedError):
                continue
            try:
                e = parse(d)
            except Exception as ex:  # noqa: BLE001 -- reported, not fatal
                e = {"_error": "%s: %r" % (ex, d[:200])}
            f.write(json.dumps(e) + "\n")
            f.flush()


def main():
    args = sys.argv[1:]
    sock_path, out = args[0], args[1]
    if args[2] == "--serve":
        serve(sock_path, out, float(args[3]))
        return
    until, journal_stream = None, False
    rest = args[2:]
    while rest[0] != "--":
        if rest[0] == "--until":
            until, rest = rest[1], rest[2:]
        elif rest[0] == "--journal-stream":
            journal_stream, rest = True, rest[1:]
        else:
            sys.exit("journal-recv.py: unknown option %s" % rest[0])
    cmd = rest[1:]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind(sock_path)
    s.settimeout(0.2)
    env = dict(os.environ, WSYNC_JOURNAL_SOCKET=sock_path)
    env.pop("JOURNAL_STREAM", None)
    # stderr goes to a file, read once the command has exited (a pipe
    # could fill up while nobody reads it); its inode is the stream's.
    err_file = tempfile.TemporaryFile()
    if journal_stream:
        st = os.fstat(err_file.fileno())
        env["JOURNAL_STREAM"] = "%d:%d" % (st.st_dev, st.st_ino)
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL,
                         stderr=err_file)
    entries, errors = [], []
    deadline = time.monotonic() + 10
    signalled = False

    def drain():
        while True:
            try:
                d = s.recv(1 << 20)
            except socket.timeout:
                return
            try:
                e = parse(d)
            except Exception as ex:  # noqa: BLE001 -- reported, not fatal
                errors.append("%s: %r" % (ex, d[:200]))
                continue
            entries.append(e)

    while p.poll() is None and time.monotonic() < deadline:
        drain()
        if until and not signalled and any(e.get("MESSAGE_ID") == until for e in entries):
            p.send_signal(signal.SIGTERM)
            signalled = True
    if p.poll() is None:
        p.kill()
    rc = p.wait()
    drain()
    err_file.seek(0)
    stderr = err_file.read().decode(errors="replace")
    err_file.close()
    with open(out, "w") as f:
        json.dump({"exit": rc, "entries": entries, "errors": errors,
                   "stderr": stderr}, f, indent=1)


main()
