#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""faultproxy -- an HTTP/1.1 reverse proxy that injects scripted faults.

Sits between a client under test (wsyncd, curl, awscli) and a local S3
server (s3rver, Swift) on loopback:

    faultproxy.py --port 0 --redirect-port 0 --upstream-port 4568 \\
                  --log proxy.jsonl --ports-file ports.json

With no fault queued it is byte-transparent: request and response heads
and bodies go through verbatim (the Host header too, so SigV4 signatures
made for the proxy's address still verify upstream), over one upstream
connection per client connection, so keep-alive, pipelining, chunked
request bodies, Expect: 100-continue and HEAD behave as they would
against the server itself.  Bodies are streamed in 64 KiB pieces, never
held whole in memory.

Control protocol (on the main port; these requests are not forwarded and
not logged):

    POST   /__fault__   body: one rule object or a JSON list of rules;
                        appended to the queue.  Answers 200 {"queued": N}
                        or 400 {"error": "..."} for a malformed rule.
    PUT    /__fault__   same, but replaces the whole queue.
    DELETE /__fault__   empties the queue.
    GET    /__fault__   the queue as JSON (with what is left of each rule).

    --rules FILE loads a JSON list of rules at start.

A rule applies to the next `times` requests (default 1; 0 = forever) that
match it; the first rule in the queue that matches a request is used, and
is dropped when used up.  Matching keys:

    "method"   regex, full match, case-insensitive (default: any)
    "path"     regex searched in the request target, query included
               (default: any)
    "listener" "main" (default), "redirect" or "any"

Faults ("fault" key) and their parameters:

    reset     RST the client connection.  Without "after_bytes": right
              after reading the request head, nothing forwarded (with
              "forward": true the request is forwarded and its response
              dropped first).  With "after_bytes": K, the response head
              and K body bytes are relayed, then RST.
    status    answer "code" (required) without forwarding, with an
              S3-style XML error body (or "body"), "retry_after" as a
              Retry-After header, extra "headers" {name: value}; "close":
              true adds Connection: close and closes.
    stall     send nothing for "seconds" (required).  Without
              "after_bytes" the stall comes before anything is forwarded;
              with "after_bytes": K it comes after the response head and
              K body bytes.  Then "then": "close" (default, FIN) or
              "forward" (go on normally).
    truncate  forward; relay the response head as is (its Content-Length
              still the full size) but only "after_bytes" body bytes
              (default half the Content-Length), then close (FIN).
    redirect  answer "code" (default 302) with Location
              http://"host"(127.0.0.1):"port"(the --redirect-port) +
              the original target, or "location" verbatim.  The redirect
              listener forwards to the same upstream; the log says
              whether the redirected request carried Authorization.
    corrupt   forward, but XOR the body byte at "offset" (default: the
              middle of a Content-Length body, else 0) with "xor"
              (default 0xff).

Example:

    curl -s -X POST --data '{"fault":"status","code":503,"retry_after":1,
          "method":"GET","path":"^/bucket/key$","times":2}' \\
         http://127.0.0.1:$PORT/__fault__

Log (--log, JSON lines, compact separators so grep works):

    {"event":"request","conn":3,"seq":1,"listener":"main","method":"GET",
     "path":"/bucket/key","auth":true,"range":"bytes=0-9",
     "if_none_match":null,...,"fault":"status"}
    {"event":"response","conn":3,"seq":1,"listener":"main","status":503,
     "body_bytes":120,"outcome":"ok"}

A "request" line is written as soon as the request head is read (before
forwarding), a "response" line when the exchange ends; "outcome" is ok,
reset, truncated, closed, expect-rejected or an error message.

Bandwidth (--rate BYTES, suffixes k, M, G for 10^3, 10^6, 10^9): at most
BYTES a second go to the clients, and at most BYTES a second to upstream,
over all connections together, as through one full-duplex link of that
speed (heads and bodies alike; each send waits for its turn, in order).
Without --rate nothing is held back.
"""

import argparse
import json
import os
import re
import select
import signal
import socket
import socketserver
import struct
import sys
import threading
import time

CHUNK = 64 * 1024
MAX_LINE = 65536
MAX_HEADERS = 200
UPSTREAM_TIMEOUT = 120.0
CLIENT_IDLE_TIMEOUT = 120.0
EXPECT_WAIT = 1.0  # how long to wait for upstream's 100 Continue

FAULTS = {
    "reset": {"after_bytes", "forward"},
    "status": {"code", "retry_after", "body", "headers", "close"},
    "stall": {"seconds", "after_bytes", "then"},
    "truncate": {"after_bytes"},
    "redirect": {"code", "host", "port", "location"},
    "corrupt": {"offset", "xor"},
}
COMMON_KEYS = {"fault", "method", "path", "times", "listener"}

REASONS = {
    200: "OK", 204: "No Content", 206: "Partial Content",
    301: "Moved Permanently", 302: "Found", 303: "See Other",
    307: "Temporary Redirect", 308: "Permanent Redirect",
    400: "Bad Request", 403: "Forbidden", 404: "Not Found",
    408: "Request Timeout", 409: "Conflict", 412: "Precondition Failed",
    416: "Range Not Satisfiable", 429: "Too Many Requests",
    500: "Internal Server Error", 501: "Not Implemented",
    502: "Bad Gateway", 503: "Service Unavailable", 504: "Gateway Timeout",
}
S3_CODES = {
    400: "BadRequest", 403: "AccessDenied", 404: "NoSuchKey",
    408: "RequestTimeout", 409: "Conflict", 412: "PreconditionFailed",
    416: "InvalidRange", 429: "TooManyRequests", 500: "InternalError",
    501: "NotImplemented", 502: "BadGateway", 503: "SlowDown",
    504: "GatewayTimeout",
}


class RuleError(ValueError):
    pass


class Rule:
    def __init__(self, obj):
        if not isinstance(obj, dict):
            raise RuleError("a rule is a JSON object")
        fault = obj.get("fault")
        if fault not in FAULTS:
            raise RuleError("fault must be one of %s" % ", ".join(sorted(FAULTS)))
        unknown = set(obj) - COMMON_KEYS - FAULTS[fault]
        if unknown:
            raise RuleError("unknown key(s) for %s: %s" % (fault, ", ".join(sorted(unknown))))
        self.obj = dict(obj)
        self.fault = fault
        try:
            self.method = re.compile(obj.get("method", ".*"), re.IGNORECASE)
            self.path = re.compile(obj.get("path", ""))
        except re.error as e:
            raise RuleError("bad regex: %s" % e)
        times = obj.get("times", 1)
        if not isinstance(times, int) or times < 0:
            raise RuleError("times must be an integer >= 0")
        self.left = times if times > 0 else None  # None: forever
        self.listener = obj.get("listener", "main")
        if self.listener not in ("main", "redirect", "any"):
            raise RuleError("listener must be main, redirect or any")
        for k in ("after_bytes", "offset", "port", "code", "xor"):
            if k in obj and (not isinstance(obj[k], int) or obj[k] < 0):
                raise RuleError("%s must be a non-negative integer" % k)
        if fault == "status" and "code" not in obj:
            raise RuleError("status needs code")
        if fault == "stall":
            s = obj.get("seconds")
            if not isinstance(s, (int, float)) or s < 0:
                raise RuleError("stall needs seconds >= 0")
            if obj.get("then", "close") not in ("close", "forward"):
                raise RuleError("then must be close or forward")
        if "headers" in obj and not isinstance(obj["headers"], dict):
            raise RuleError("headers must be an object")

    def matches(self, listener, method, target):
        if self.listener != "any" and self.listener != listener:
            return False
        return bool(self.method.fullmatch(method) and self.path.search(target))

    def describe(self):
        d = dict(self.obj)
        d["left"] = self.left if self.left is not None else "forever"
        return d


class Rules:
    def __init__(self):
        self.lock = threading.Lock()
        self.queue = []

    @staticmethod
    def parse(data):
        if isinstance(data, dict):
            data = [data]
        if not isinstance(data, list):
            raise RuleError("expected a rule object or a list of rules")
        return [Rule(o) for o in data]

    def add(self, rules, replace=False):
        with self.lock:
            if replace:
                self.queue = []
            self.queue.extend(rules)
            return len(self.queue)

    def clear(self):
        with self.lock:
            self.queue = []

    def snapshot(self):
        with self.lock:
            return [r.describe() for r in self.queue]

    def take(self, listener, method, target):
        with self.lock:
            for i, r in enumerate(self.queue):
                if r.matches(listener, method, target):
                    if r.left is not None:
                        r.left -= 1
                        if r.left == 0:
                            del self.queue[i]
                    return r.fault, r.obj
        return None, None


class Log:
    def __init__(self, path):
        self.lock = threading.Lock()
        self.f = open(path, "a", buffering=1) if path else None

    def write(self, rec):
        if not self.f:
            return
        line = json.dumps(rec, separators=(",", ":"))
        with self.lock:
            self.f.write(line + "\n")
            self.f.flush()


class Malformed(Exception):
    pass


class Reader:
    """A socket reader with its own buffer, so the handler can tell
    whether a pipelined request is already waiting (has_buffered)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = bytearray()

    def has_buffered(self):
        return bool(self.buf)

    def _fill(self):
        data = self.sock.recv(CHUNK)
        if not data:
            return False
        self.buf += data
        return True

    def readline(self, limit):
        start = 0
        while True:
            i = self.buf.find(b"\n", start, limit)
            if i >= 0:
                return self._take(i + 1)
            if len(self.buf) >= limit:
                return self._take(limit)
            start = len(self.buf)
            if not self._fill():
                return self._take(len(self.buf))

    def read1(self, n):
        if not self.buf:
            return self.sock.recv(n)
        return self._take(min(n, len(self.buf)))

    def _take(self, n):
        data = bytes(self.buf[:n])
        del self.buf[:n]
        return data


def parse_rate(text):
    """'20M' -> 20000000 (bytes a second); k, M, G are powers of 1000."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kKmMgG]?)\s*", text)
    if not m or float(m.group(1)) <= 0:
        raise argparse.ArgumentTypeError("expected bytes a second, e.g. 500k or 20M, not %r" % text)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]


class Throttle:
    """One direction of a link of `rate` bytes a second, shared by every
    connection: each send books the next slot of the link (its length the
    send's size over the rate) and waits until its slot has passed."""

    def __init__(self, rate):
        self.rate = rate
        self.lock = threading.Lock()
        self.free_at = time.monotonic()  # when the link is next idle

    def take(self, n):
        with self.lock:
            now = time.monotonic()
            self.free_at = max(self.free_at, now) + n / self.rate
            until = self.free_at
        sleep(until - time.monotonic())


class ThrottledSocket:
    """A socket whose sendall goes through a Throttle; the rest is the
    socket's own."""

    def __init__(self, sock, throttle):
        self._sock = sock
        self._throttle = throttle

    def sendall(self, data):
        view = memoryview(data)
        for i in range(0, len(view), CHUNK):
            piece = view[i:i + CHUNK]
            self._throttle.take(len(piece))
            self._sock.sendall(piece)

    def __getattr__(self, name):
        return getattr(self._sock, name)


class Cut(Exception):
    """Stop relaying and end the client connection (how: .how)."""

    def __init__(self, how):
        super().__init__(how)
        self.how = how


class Head:
    """A parsed HTTP message head; .raw keeps the bytes as received."""

    def __init__(self, raw, first, headers):
        self.raw = raw
        self.first = first
        self.headers = headers  # list of (name, value) as str, latin-1

    def get(self, name):
        name = name.lower()
        vals = [v for k, v in self.headers if k.lower() == name]
        return ", ".join(vals) if vals else None

    def tokens(self, name):
        v = self.get(name)
        return [t.strip().lower() for t in v.split(",")] if v else []


def read_head(r):
    """Read a message head from buffered reader r; None on clean EOF."""
    raw = bytearray()
    line = r.readline(MAX_LINE)
    while line in (b"\r\n", b"\n"):  # stray CRLF between messages
        line = r.readline(MAX_LINE)
    if not line:
        return None
    if not line.endswith(b"\n"):
        raise Malformed("start line too long or cut")
    raw += line
    first = line.decode("latin-1").rstrip("\r\n")
    headers = []
    while True:
        line = r.readline(MAX_LINE)
        if not line.endswith(b"\n"):
            raise Malformed("header cut or too long")
        raw += line
        if line in (b"\r\n", b"\n"):
            break
        if len(headers) >= MAX_HEADERS:
            raise Malformed("too many headers")
        s = line.decode("latin-1").rstrip("\r\n")
        if s[:1] in (" ", "\t") and headers:  # obsolete folding
            k, v = headers[-1]
            headers[-1] = (k, v + " " + s.strip())
            continue
        k, sep, v = s.partition(":")
        if not sep:
            raise Malformed("header without colon")
        headers.append((k.strip(), v.strip()))
    return Head(bytes(raw), first, headers)


def copy_exact(r, n, out):
    """Copy exactly n bytes from reader r to callable out."""
    while n > 0:
        data = r.read1(min(CHUNK, n))
        if not data:
            raise Malformed("body cut short (%d bytes missing)" % n)
        out(data)
        n -= len(data)


def copy_chunked(r, framing, payload):
    """Relay a chunked body verbatim: framing bytes to framing(), chunk
    data to payload().  Returns the payload size."""
    total = 0
    while True:
        line = r.readline(MAX_LINE)
        if not line.endswith(b"\n"):
            raise Malformed("chunk size line cut")
        framing(line)
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise Malformed("bad chunk size %r" % line[:40])
        if size == 0:
            while True:  # trailers, then the final CRLF
                t = r.readline(MAX_LINE)
                if not t.endswith(b"\n"):
                    raise Malformed("trailer cut")
                framing(t)
                if t in (b"\r\n", b"\n"):
                    return total
        copy_exact(r, size, payload)
        total += size
        crlf = r.readline(MAX_LINE)
        if crlf not in (b"\r\n", b"\n"):
            raise Malformed("chunk not followed by CRLF")
        framing(crlf)


def content_length(head):
    v = head.get("content-length")
    if v is None:
        return None
    try:
        n = int(v.split(",")[0].strip())
    except ValueError:
        raise Malformed("bad Content-Length %r" % v)
    if n < 0:
        raise Malformed("negative Content-Length")
    return n


class BodyOut:
    """Sends response payload to the client, applying the fault's cut,
    stall or corruption at payload offsets (chunk framing excluded)."""

    def __init__(self, sock, fault, params, total):
        self.sock = sock
        self.fault = fault
        self.params = params or {}
        self.off = 0
        self.cut = None
        self.corrupt_at = None
        if fault == "reset" and "after_bytes" in self.params:
            self.cut = self.params["after_bytes"]
        elif fault == "truncate":
            self.cut = self.params.get("after_bytes", (total or 0) // 2)
        elif fault == "stall" and "after_bytes" in self.params:
            self.cut = self.params["after_bytes"]
        elif fault == "corrupt":
            self.corrupt_at = self.params.get("offset", (total or 0) // 2)
            self.xor = self.params.get("xor", 0xFF) & 0xFF or 0xFF
        self.corrupted = False

    def framing(self, data):
        self.sock.sendall(data)

    def payload(self, data):
        if self.corrupt_at is not None and self.off <= self.corrupt_at < self.off + len(data):
            b = bytearray(data)
            b[self.corrupt_at - self.off] ^= self.xor
            data = bytes(b)
            self.corrupted = True
        if self.cut is not None and self.off + len(data) >= self.cut:
            keep = self.cut - self.off
            if keep > 0:
                self.sock.sendall(data[:keep])
            self.off += keep
            self._at_cut()
            data = data[keep:]
            if not data:
                return
        self.sock.sendall(data)
        self.off += len(data)

    def finish(self):
        """The body ended: a cut at or past its end still happens."""
        if self.cut is not None:
            self._at_cut()

    def _at_cut(self):
        self.cut = None
        if self.fault == "reset":
            raise Cut("reset")
        if self.fault == "truncate":
            raise Cut("truncated")
        if self.fault == "stall":
            sleep(self.params["seconds"])
            if self.params.get("then", "close") == "close":
                raise Cut("closed")


def sleep(seconds):
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.5))


def rst_close(sock):
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def fin_close(sock):
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


def auth_key(value):
    """The access key id named by an Authorization header, if any."""
    if not value:
        return None
    m = re.search(r"Credential=([^/,\s]+)", value)
    if m:
        return m.group(1)
    m = re.match(r"AWS ([^:]+):", value)
    return m.group(1) if m else None


class Handler(socketserver.BaseRequestHandler):
    """One client connection: a loop of request/response exchanges."""

    def setup(self):
        self.ctx = self.server.ctx
        self.listener = self.server.listener
        with self.ctx.lock:
            self.ctx.conns += 1
            self.conn_id = self.ctx.conns
        self.seq = 0
        self.csock = self.request
        self.csock.settimeout(CLIENT_IDLE_TIMEOUT)
        self.csock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.ctx.down is not None:
            self.csock = ThrottledSocket(self.csock, self.ctx.down)
        self.cr = Reader(self.csock)
        self.usock = None
        self.ur = None

    def finish(self):
        self.close_upstream()

    # -- upstream connection -------------------------------------------
    def connect_upstream(self):
        if self.usock is not None:
            return
        s = socket.create_connection((self.ctx.uhost, self.ctx.uport), timeout=10)
        s.settimeout(UPSTREAM_TIMEOUT)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.usock = s if self.ctx.up is None else ThrottledSocket(s, self.ctx.up)
        self.ur = Reader(s)

    def close_upstream(self):
        if self.usock is not None:
            fin_close(self.usock)
        self.usock = None
        self.ur = None

    # -- main loop -------------------------------------------------------
    def handle(self):
        try:
            while True:
                if not self.idle_wait():
                    return
                try:
                    req = read_head(self.cr)
                except (socket.timeout, ConnectionError):
                    return
                if req is None:
                    return
                if not self.exchange(req):
                    return
        except Malformed as e:
            self.ctx.log.write({"event": "error", "conn": self.conn_id,
                                "listener": self.listener, "error": str(e)})
        except (ConnectionError, socket.timeout, OSError):
            pass
        finally:
            fin_close(self.csock)

    def idle_wait(self):
        """Between requests: wait for the client's next one.  If upstream
        closes its side meanwhile (node closes idle keep-alive connections
        after 5 s), close the client's too, as the server itself would
        have: reusing it would lose the next request."""
        if self.cr.has_buffered():
            return True
        socks = [self.csock] + ([self.usock] if self.usock is not None else [])
        ready, _, _ = select.select(socks, [], [], CLIENT_IDLE_TIMEOUT)
        if not ready:
            return False
        if self.usock is not None and self.usock in ready:
            self.close_upstream()  # a fresh one is made for the next request
            return self.csock in ready
        return True

    def exchange(self, req):
        """Handle one request; True to keep the client connection."""
        parts = req.first.split(" ")
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            raise Malformed("bad request line %r" % req.first[:80])
        method, target, version = parts
        if self.listener == "main" and target.split("?", 1)[0] == "/__fault__":
            return self.control(req, method)
        self.seq += 1
        fault, params = self.ctx.rules.take(self.listener, method, target)
        auth = req.get("authorization")
        rec = {
            "event": "request", "conn": self.conn_id, "seq": self.seq,
            "listener": self.listener, "method": method,
            "path": target.split("?", 1)[0],
            "query": target.split("?", 1)[1] if "?" in target else "",
            "auth": auth is not None, "auth_key": auth_key(auth),
            "range": req.get("range"),
            "if_none_match": req.get("if-none-match"),
            "if_match": req.get("if-match"),
            "content_length": req.get("content-length"),
            "transfer_encoding": req.get("transfer-encoding"),
            "expect": req.get("expect"),
            "content_sha256": req.get("x-amz-content-sha256"),
            "fault": fault, "time": round(time.time(), 3),
        }
        self.ctx.log.write(rec)
        self.resp = {"event": "response", "conn": self.conn_id, "seq": self.seq,
                     "listener": self.listener, "status": None,
                     "body_bytes": 0, "outcome": "ok"}
        self.out = None
        try:
            keep = self.serve(req, method, target, version, fault, params or {})
        except Cut as c:
            self.resp["outcome"] = c.how
            self.close_upstream()
            if c.how == "reset":
                rst_close(self.csock)
            else:
                fin_close(self.csock)
            keep = False
        except Malformed as e:
            self.resp["outcome"] = "malformed: %s" % e
            keep = False
        except (ConnectionError, socket.timeout, OSError) as e:
            self.resp["outcome"] = "error: %s" % (e.__class__.__name__,)
            keep = False
        finally:
            if self.out is not None:
                self.resp["body_bytes"] = self.out.off
            self.ctx.log.write(self.resp)
        return keep

    def request_body_kind(self, req):
        te = req.tokens("transfer-encoding")
        if te:
            if te[-1] != "chunked":
                raise Malformed("request Transfer-Encoding without chunked")
            return "chunked", None
        n = content_length(req)
        return ("length", n) if n else ("none", 0)

    def discard_request_body(self, req):
        kind, n = self.request_body_kind(req)
        if kind == "chunked":
            copy_chunked(self.cr, lambda d: None, lambda d: None)
        elif kind == "length":
            copy_exact(self.cr, n, lambda d: None)

    def serve(self, req, method, target, version, fault, params):
        wants_close = "close" in req.tokens("connection") or (
            version == "HTTP/1.0" and "keep-alive" not in req.tokens("connection"))
        expects = "100-continue" in req.tokens("expect")
        kind, _ = self.request_body_kind(req)

        if fault == "reset" and "after_bytes" not in params and not params.get("forward"):
            raise Cut("reset")
        if fault == "stall" and "after_bytes" not in params:
            sleep(params["seconds"])
            if params.get("then", "close") == "close":
                raise Cut("closed")
            fault = None
        if fault in ("status", "redirect"):
            return self.answer_locally(req, method, target, fault, params,
                                       wants_close, expects and kind != "none")
        # forward
        try:
            self.connect_upstream()
        except OSError as e:
            self.resp["outcome"] = "upstream connect failed: %s" % e
            self.discard_or_close(req, expects and kind != "none")
            self.send_simple(502, method, b"", close=True)
            return False
        return self.forward(req, method, fault, params, wants_close, expects, kind)

    def discard_or_close(self, req, expecting):
        if not expecting:
            self.discard_request_body(req)

    def answer_locally(self, req, method, target, fault, params, wants_close, expecting):
        # Without Expect: 100-continue the body follows the head: read it
        # so the connection stays in step.  With it, the client waits for
        # our answer; we answer and close.
        if not expecting:
            self.discard_request_body(req)
        close = wants_close or expecting or bool(params.get("close"))
        extra = []
        if fault == "status":
            code = params["code"]
            if "body" in params:
                body = params["body"].encode()
                ctype = "application/xml"
            else:
                body = (
                    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code>'
                    "<Message>injected by faultproxy</Message>"
                    "<RequestId>faultproxy</RequestId></Error>"
                    % S3_CODES.get(code, "Injected")).encode()
                ctype = "application/xml"
            if "retry_after" in params:
                extra.append(("Retry-After", str(params["retry_after"])))
            for k, v in (params.get("headers") or {}).items():
                extra.append((k, str(v)))
            extra.append(("Content-Type", ctype))
        else:
            code = params.get("code", 302)
            loc = params.get("location")
            if not loc:
                port = params.get("port", self.ctx.redirect_port)
                if not port:
                    raise Malformed("redirect without --redirect-port or port")
                loc = "http://%s:%d%s" % (params.get("host", "127.0.0.1"), port, target)
            extra.append(("Location", loc))
            body = b""
        self.send_simple(code, method, body, close=close, extra=extra)
        return not close

    def send_simple(self, code, method, body, close=False, extra=()):
        lines = ["HTTP/1.1 %d %s" % (code, REASONS.get(code, "Injected"))]
        lines += ["%s: %s" % kv for kv in extra]
        lines.append("Content-Length: %d" % len(body))
        lines.append("x-amz-request-id: faultproxy")
        if close:
            lines.append("Connection: close")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        self.csock.sendall(head if method == "HEAD" else head + body)
        self.resp["status"] = code
        self.resp["body_bytes"] = 0 if method == "HEAD" else len(body)

    def forward(self, req, method, fault, params, wants_close, expects, kind):
        up = self.usock
        up.sendall(req.raw)
        sent_body = kind == "none"
        body_withheld = False
        if not sent_body and expects:
            # Let upstream decide on 100-continue; a server that ignores
            # Expect gets the body after EXPECT_WAIT, as a client would do.
            ready, _, _ = select.select([up], [], [], EXPECT_WAIT)
            if ready:
                body_withheld = True
        if not sent_body and not body_withheld:
            self.send_request_body(req, kind)
            sent_body = True

        while True:
            try:
                resp = read_head(self.ur)
            except (ConnectionError, socket.timeout):
                resp = None
            if resp is None:
                raise Malformed("upstream closed without a response")
            status = self.parse_status(resp)
            if 100 <= status < 200 and status != 101:
                self.csock.sendall(resp.raw)
                if status == 100 and body_withheld and not sent_body:
                    self.send_request_body(req, kind)
                    sent_body = True
                continue
            break
        self.resp["status"] = status
        close_after = wants_close or not sent_body
        if not sent_body:
            self.resp["outcome"] = "expect-rejected"
        up_close = "close" in resp.tokens("connection") or resp.first.startswith("HTTP/1.0")

        if fault == "reset" and "after_bytes" not in params:
            raise Cut("reset")  # "forward": true -- the response is lost

        # response framing
        te = resp.tokens("transfer-encoding")
        if method == "HEAD" or status in (204, 304) or status == 101:
            framing, total = "none", 0
        elif te:
            framing, total = "chunked", None
        else:
            total = content_length(resp)
            framing = "length" if total is not None else "eof"
        out = self.out = BodyOut(self.csock, fault, params, total)
        self.csock.sendall(resp.raw)
        if framing == "length":
            copy_exact(self.ur, total, out.payload)
        elif framing == "chunked":
            copy_chunked(self.ur, out.framing, out.payload)
        elif framing == "eof":
            while True:
                data = self.ur.read1(CHUNK)
                if not data:
                    break
                out.payload(data)
            up_close = close_after = True
        if fault == "corrupt":
            self.resp["outcome"] = "corrupted" if out.corrupted else "ok (body shorter than offset)"
        out.finish()
        if up_close or not sent_body:
            self.close_upstream()
            close_after = close_after or up_close
        return not close_after

    def send_request_body(self, req, kind):
        n = [0]

        def up(data):
            self.usock.sendall(data)

        def counted(data):
            n[0] += len(data)
            self.usock.sendall(data)

        if kind == "chunked":
            copy_chunked(self.cr, up, counted)
        elif kind == "length":
            copy_exact(self.cr, content_length(req), counted)
        self.resp["request_body_bytes"] = n[0]

    @staticmethod
    def parse_status(resp):
        parts = resp.first.split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/"):
            raise Malformed("bad status line %r" % resp.first[:80])
        try:
            return int(parts[1])
        except ValueError:
            raise Malformed("bad status %r" % parts[1])

    # -- control endpoint --------------------------------------------------
    def control(self, req, method):
        kind, n = self.request_body_kind(req)
        if "100-continue" in req.tokens("expect") and kind != "none":
            self.csock.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
        chunks = []
        if kind == "chunked":
            copy_chunked(self.cr, lambda d: None, chunks.append)
        elif kind == "length":
            copy_exact(self.cr, n, chunks.append)
        body = b"".join(chunks)
        rules = self.ctx.rules
        code, reply = 200, {}
        try:
            if method in ("POST", "PUT"):
                parsed = Rules.parse(json.loads(body.decode() or "null"))
                reply = {"queued": rules.add(parsed, replace=(method == "PUT"))}
            elif method == "DELETE":
                rules.clear()
                reply = {"queued": 0}
            elif method in ("GET", "HEAD"):
                reply = {"rules": rules.snapshot()}
            else:
                code, reply = 405, {"error": "use GET, POST, PUT or DELETE"}
        except (ValueError, RuleError) as e:
            code, reply = 400, {"error": str(e)}
        data = (json.dumps(reply) + "\n").encode()
        head = ("HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % (code, REASONS.get(code, "Error"), len(data)))
        self.csock.sendall(head.encode() + (b"" if method == "HEAD" else data))
        return True


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, addr, ctx, listener):
        self.ctx = ctx
        self.listener = listener
        super().__init__(addr, Handler)


class Context:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.conns = 0
        self.uhost = args.upstream_host
        self.uport = args.upstream_port
        self.rules = Rules()
        self.log = Log(args.log)
        self.redirect_port = None
        self.up = Throttle(args.rate) if args.rate else None
        self.down = Throttle(args.rate) if args.rate else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    ap.add_argument("--port", type=int, required=True, help="main port (0: pick a free one)")
    ap.add_argument("--redirect-port", type=int, default=None,
                    help="second listener for redirect targets (0: pick a free one)")
    ap.add_argument("--upstream-host", default="127.0.0.1")
    ap.add_argument("--upstream-port", type=int, required=True)
    ap.add_argument("--log", help="JSON-lines request log (appended)")
    ap.add_argument("--rules", help="JSON list of rules queued at start")
    ap.add_argument("--ports-file", help='written once listening: {"port":P,"redirect_port":R}')
    ap.add_argument("--rate", type=parse_rate, default=None,
                    help="bytes a second each way, all connections together (k, M, G: "
                         "10^3, 10^6, 10^9); default: unlimited")
    args = ap.parse_args()

    ctx = Context(args)
    if args.rules:
        with open(args.rules) as f:
            ctx.rules.add(Rules.parse(json.load(f)))
    main_srv = Server((args.listen, args.port), ctx, "main")
    red_srv = None
    if args.redirect_port is not None:
        red_srv = Server((args.listen, args.redirect_port), ctx, "redirect")
        ctx.redirect_port = red_srv.server_address[1]
        threading.Thread(target=red_srv.serve_forever, daemon=True).start()
    ports = {"port": main_srv.server_address[1], "redirect_port": ctx.redirect_port}
    if args.ports_file:
        tmp = args.ports_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(ports, f)
        os.rename(tmp, args.ports_file)
    print("faultproxy: listening %s -> %s:%d" % (json.dumps(ports), args.upstream_host,
                                                 args.upstream_port), file=sys.stderr, flush=True)

    def stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        main_srv.serve_forever(poll_interval=0.2)
    finally:
        main_srv.server_close()
        if red_srv:
            red_srv.server_close()


if __name__ == "__main__":
    main()
