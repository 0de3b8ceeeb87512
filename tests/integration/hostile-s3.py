#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""hostile-s3 -- a small S3 server on loopback that lies when told to.

    hostile-s3.py --bucket NAME=DIR [--bucket ...] --ports-file F
                  [--port 0] [--tls CERT KEY] [--log LOG.jsonl]

Serves each bucket NAME path-style from directory DIR (a file:// bucket:
key "a/b" is DIR/a/b), enough of S3 for wsync: HEAD and GET of objects
(Range, If-Match, If-None-Match), ListObjectsV2 (prefix, delimiter "/",
continuation tokens, pages of 1000), PUT and DELETE of objects.  A PUT
honours If-None-Match: * and If-Match: ETAG as S3 does (412
PreconditionFailed; the check and the write one step under a lock, so of
racing conditional PUTs one wins).  ETags are the MD5 of the file's
inode, size and mtime: a PUT makes a new inode, so each version's differs
from the one it replaced.  No signature is checked (any or no
Authorization is accepted; the log says whether one came).  stdlib only;
one thread per connection.

Rules make it lie.  PUT /__rules__ with a JSON list replaces them
(DELETE /__rules__ drops them); the first rule whose "method" (regex,
full match, default any) and "path" (regex searched in the request
target, query included, default any) match a request decides; "times"
(default 0 = forever) uses it up.  "do" is one of:

    head_size      a HEAD answers Content-Length "size" (the object's
                   own ETag and date)
    endless        a GET answers 200 (206 with Content-Range for a Range)
                   without Content-Length, the object's bytes and then
                   'x' without end (up to --endless-max bytes, then close)
    drip           a GET answers with the right Content-Length and sends
                   one byte every "interval" seconds (default 0.5)
    list_token     a listing answers IsTruncated with the continuation
                   token "again", every time
    list_wide      a listing answers 1000 new common prefixes below the
                   prefix asked for, every time
    list_deep      a listing answers the prefix asked for + "deeper/" as
                   its only common prefix
    status         answer "code" with an S3 XML error, "retry_after" as
                   Retry-After if given
    redirect       answer "code" (default 302) with Location "location"
                   ({key} is replaced by the object key, {port} by ours)
    no_conditions  a PUT with If-None-Match or If-Match answers 501
                   NotImplemented, as OpenStack Swift's s3api does; other
                   requests are served as usual

Log (--log): JSON lines, a "request" event as soon as a request is read
(before it is answered) {"event","seq","method","path","host","auth",
"rule","cond"} (cond: the If-None-Match / If-Match header of a PUT, as
"If-Match: VALUE", or null), and a "response" event when its answer is over {"event","seq",
"method","path","status","bytes"} (bytes: of the body sent).
--ports-file gets {"port": N} once the server listens.
"""

import argparse
import email.utils
import hashlib
import json
import os
import re
import socket
import ssl
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
PUT_LOCK = threading.Lock()   # a conditional PUT's check and write, one step
RULES = []            # [{"rule": dict, "left": n or None}]
BUCKETS = {}
LOG = None
ENDLESS_MAX = 1 << 30


def log(rec):
    if LOG:
        with LOCK:
            LOG.write(json.dumps(rec, separators=(",", ":")) + "\n")
            LOG.flush()


def take_rule(method, target):
    with LOCK:
        for r in RULES:
            rule = r["rule"]
            if "method" in rule and not re.fullmatch(rule["method"], method, re.I):
                continue
            if "path" in rule and not re.search(rule["path"], target):
                continue
            if r["left"] is not None:
                r["left"] -= 1
                if r["left"] == 0:
                    RULES.remove(r)
            return rule
    return None


def etag_of(path):
    st = os.stat(path)
    return '"%s"' % hashlib.md5(("%d-%d-%d" % (st.st_ino, st.st_size, st.st_mtime_ns))
                                .encode()).hexdigest()


def xml_escape(s):
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "hostile-s3"

    def log_message(self, fmt, *args):
        pass

    def setup(self):
        super().setup()
        # a head and its body in separate writes would wait on Nagle and
        # delayed ACKs (40 ms a page)
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    # --- plumbing ----------------------------------------------------------

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def answer(self, code, body=b"", headers=(), length=True):
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        if length:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body and self.command != "HEAD":
            self.wfile.write(body)
            self.sent += len(body)

    def error(self, code, s3code, msg="", headers=()):
        body = ("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>%s</Code>"
                "<Message>%s</Message><RequestId>hostile</RequestId></Error>"
                % (s3code, xml_escape(msg))).encode()
        self.answer(code, body, [("Content-Type", "application/xml")] + list(headers))

    def split(self):
        u = urllib.parse.urlsplit(self.path)
        parts = urllib.parse.unquote(u.path).lstrip("/").split("/", 1)
        q = dict(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
        return parts[0], parts[1] if len(parts) > 1 else "", q

    def handle_one_request(self):
        self.sent = 0
        self.rule = None
        self.status = 0
        super().handle_one_request()

    def send_response(self, code, message=None):
        self.status = code
        super().send_response(code, message)

    def run(self):
        if self.path.startswith("/__rules__"):
            return self.control()
        self.rule = take_rule(self.command, self.path)
        with LOCK:
            Handler.seq = getattr(Handler, "seq", 0) + 1
            seq = Handler.seq
        cond = None
        if self.command == "PUT":
            for h in ("If-None-Match", "If-Match"):
                if self.headers.get(h) is not None:
                    cond = "%s: %s" % (h, self.headers.get(h))
        log({"event": "request", "seq": seq, "method": self.command, "path": self.path,
             "host": self.headers.get("Host"), "auth": "Authorization" in self.headers,
             "rule": self.rule.get("do") if self.rule else None, "cond": cond})
        try:
            self.dispatch()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            self.close_connection = True
        log({"event": "response", "seq": seq, "method": self.command, "path": self.path,
             "status": self.status, "bytes": self.sent})

    do_GET = do_HEAD = do_PUT = do_DELETE = do_POST = run

    def control(self):
        global RULES
        if self.command == "PUT":
            rules = json.loads(self.body() or b"[]")
            if isinstance(rules, dict):
                rules = [rules]
            with LOCK:
                RULES = [{"rule": r, "left": r.get("times") or None} for r in rules]
            return self.answer(200, b'{"ok":true}')
        if self.command == "DELETE":
            with LOCK:
                RULES = []
            return self.answer(200, b'{"ok":true}')
        with LOCK:
            body = json.dumps([r["rule"] for r in RULES]).encode()
        return self.answer(200, body)

    # --- S3 ----------------------------------------------------------------

    def dispatch(self):
        rule = self.rule or {}
        do = rule.get("do")
        bucket, key, q = self.split()
        if do == "status":
            # the body is read first: left on a kept-alive connection it
            # would be taken for the next request
            self.body()
            hdr = [("Retry-After", str(rule["retry_after"]))] if "retry_after" in rule else []
            return self.error(int(rule.get("code", 503)), "SlowDown", "hostile", hdr)
        if do == "redirect":
            loc = rule["location"].replace("{key}", key).replace(
                "{port}", str(self.server.server_address[1]))
            return self.answer(int(rule.get("code", 302)), b"", [("Location", loc)])
        root = BUCKETS.get(bucket)
        if root is None:
            return self.error(404, "NoSuchBucket", bucket)
        if not key:
            if self.command == "GET" and q.get("list-type") == "2":
                return self.list(root, q, do)
            return self.error(400, "InvalidRequest", "not supported here")
        path = os.path.join(root, key)
        if self.command == "PUT":
            return self.put(path, self.body(), do)
        if self.command == "DELETE":
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            return self.answer(204, b"", length=False)
        if self.command not in ("GET", "HEAD"):
            return self.error(501, "NotImplemented")
        if not os.path.isfile(path):
            return self.error(404, "NoSuchKey", key)
        return self.get(path, do, rule)

    def put(self, path, data, do):
        inm = self.headers.get("If-None-Match")
        im = self.headers.get("If-Match")
        if do == "no_conditions" and (inm is not None or im is not None):
            return self.error(501, "NotImplemented", "A header you provided implies "
                              "functionality that is not implemented")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = "%s.%d.hostile-tmp" % (path, threading.get_ident())
        with open(tmp, "wb") as f:
            f.write(data)
        with PUT_LOCK:
            there = os.path.isfile(path)
            if (inm == "*" and there) or (im is not None and (not there or etag_of(path) != im)):
                failed = True
            else:
                failed = False
                os.replace(tmp, path)
                etag = etag_of(path)
        if failed:
            os.unlink(tmp)
            return self.error(412, "PreconditionFailed", "At least one of the pre-conditions "
                              "you specified did not hold")
        return self.answer(200, b"", [("ETag", etag)])

    def get(self, path, do, rule):
        size = os.path.getsize(path)
        etag = etag_of(path)
        date = email.utils.formatdate(os.path.getmtime(path), usegmt=True)
        hdr = [("ETag", etag), ("Last-Modified", date), ("Accept-Ranges", "bytes")]
        if self.headers.get("If-None-Match") == etag:
            return self.answer(304, b"", hdr, length=False)
        im = self.headers.get("If-Match")
        if im and im != etag:
            return self.error(412, "PreconditionFailed")
        if self.command == "HEAD":
            claimed = int(rule["size"]) if do == "head_size" else size
            self.send_response(200)
            for k, v in hdr:
                self.send_header(k, v)
            self.send_header("Content-Length", str(claimed))
            self.end_headers()
            return
        first, last, code = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng:
            m = re.fullmatch(r"bytes=(\d+)-(\d*)", rng)
            if not m or int(m.group(1)) >= size:
                return self.error(416, "InvalidRange")
            first = int(m.group(1))
            last = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            code = 206
            hdr.append(("Content-Range", "bytes %d-%d/%d" % (first, last, size)))
        with open(path, "rb") as f:
            f.seek(first)
            data = f.read(last - first + 1)
        if do == "endless":
            self.close_connection = True
            self.send_response(code)
            for k, v in hdr:
                self.send_header(k, v)
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)
            self.sent += len(data)
            junk = b"x" * 65536
            while self.sent < ENDLESS_MAX:
                self.wfile.write(junk)
                self.sent += len(junk)
            return
        if do == "drip":
            self.send_response(code)
            for k, v in hdr:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            for i in range(len(data)):
                self.wfile.write(data[i:i + 1])
                self.wfile.flush()
                self.sent += 1
                time.sleep(float(rule.get("interval", 0.5)))
            return
        self.answer(code, data, hdr)

    def list(self, root, q, do):
        prefix = q.get("prefix", "")
        delim = q.get("delimiter", "")
        token = q.get("continuation-token")
        keys, prefixes, truncated, nxt = [], [], False, None
        if do == "list_token":
            truncated, nxt = True, "again"
        elif do == "list_wide":
            with LOCK:
                Handler.wide = getattr(Handler, "wide", 0) + 1000
                base = Handler.wide
            prefixes = ["%sw%07d/" % (prefix, base + i) for i in range(1000)]
        elif do == "list_deep":
            prefixes = [prefix + "deeper/"]
        else:
            allk = []
            for d, _, files in os.walk(root):
                for n in files:
                    if n.endswith(".hostile-tmp") or n.startswith(".wsync-tmp"):
                        continue
                    k = os.path.relpath(os.path.join(d, n), root)
                    if k.startswith(prefix):
                        allk.append(k)
            items = set()
            for k in allk:
                rest = k[len(prefix):]
                if delim and delim in rest:
                    items.add(("p", prefix + rest.split(delim, 1)[0] + delim))
                else:
                    items.add(("k", k))
            items = sorted(items, key=lambda x: x[1])
            if token:
                items = [i for i in items if i[1] > token]
            page, rest = items[:1000], items[1000:]
            if rest:
                truncated, nxt = True, page[-1][1]
            for kind, name in page:
                (prefixes if kind == "p" else keys).append(name)
        out = ['<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult>'
               '<Name>b</Name><Prefix>%s</Prefix><MaxKeys>1000</MaxKeys>' % xml_escape(prefix)]
        for k in keys:
            p = os.path.join(root, k)
            st = os.stat(p)
            out.append("<Contents><Key>%s</Key><LastModified>%s</LastModified><ETag>%s</ETag>"
                       "<Size>%d</Size></Contents>" % (
                           xml_escape(k),
                           time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(st.st_mtime)),
                           xml_escape(etag_of(p)), st.st_size))
        for p in prefixes:
            out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % xml_escape(p))
        out.append("<IsTruncated>%s</IsTruncated>" % ("true" if truncated else "false"))
        if nxt:
            out.append("<NextContinuationToken>%s</NextContinuationToken>" % xml_escape(nxt))
        out.append("</ListBucketResult>")
        self.answer(200, "".join(out).encode(), [("Content-Type", "application/xml")])


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    global LOG, ENDLESS_MAX
    ap = argparse.ArgumentParser()
    ap.add_argument("--bucket", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--ports-file", required=True)
    ap.add_argument("--tls", nargs=2, metavar=("CERT", "KEY"))
    ap.add_argument("--log")
    ap.add_argument("--endless-max", type=int, default=ENDLESS_MAX)
    a = ap.parse_args()
    for b in a.bucket:
        name, _, d = b.partition("=")
        BUCKETS[name] = d
    ENDLESS_MAX = a.endless_max
    if a.log:
        LOG = open(a.log, "a")
    srv = Server(("127.0.0.1", a.port), Handler)
    if a.tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(a.tls[0], a.tls[1])
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    tmp = a.ports_file + ".tmp"
    with open(tmp, "w") as f:
        json.dump({"port": srv.server_address[1]}, f)
    os.replace(tmp, a.ports_file)
    try:
        srv.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
