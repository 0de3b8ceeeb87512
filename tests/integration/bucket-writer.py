#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bucket-writer.py BUCKET VERSION CKPT [options] -- a small publisher for
subscriber tests: lays out a file:// bucket by hand as common/format/BUCKET.md
says (wsync diff for deltas and anchors, manifests and HEAD written and
Ed25519-signed with `openssl pkeyutl`), so a test can also write what a
real publisher never would.  Needs $WSYNC, $KEY (the signing key, PEM)
and $EMPTY (an empty directory).

  --prev DIR          a delta from DIR (the previous checkpoint)
  --anchor            an anchor too; the manifest is an anchor manifest
  --sign              sign the manifest and HEAD with $KEY
  --key PEM           sign with this key instead of $KEY
  --head-only V       write only HEAD, naming manifests/V.json
  --created TIME      HEAD's and the manifest's "created" (RFC 3339)
  --base V            the manifest's base_version (default VERSION - 1)
  --delta FILE        ship FILE as the delta instead of running wsync diff
  --file-size N      the first "files" entry claims N bytes
  --bad-path PATH     one more "files" entry with this path (JSON escapes
                      allowed: "\\u0000")
  --bad-sha256        the objects' "sha256" is not their SHA-256 (size and
                      xxh128 right)
  --no-sha256         objects without "sha256" (as a publisher before it)
Damage after the hashes went into the manifest or HEAD (the good object
is kept beside it as NAME.good):
  --flip              a flipped byte in the middle of the delta
  --flip-anchor       likewise in the anchor
  --flip-manifest     likewise in the manifest
  --flip-head         likewise in HEAD
  --truncate          the delta cut to half its size
"""
import base64, hashlib, json, os, shutil, subprocess, sys, time

args = sys.argv[1:]
bucket, version, ckpt = args[0], int(args[1]), args[2]
opt = args[3:]
def flag(n): return n in opt
def val(n): return opt[opt.index(n) + 1] if n in opt else None
W, EMPTY = os.environ["WSYNC"], os.environ["EMPTY"]
KEY = val("--key") or os.environ["KEY"]
def xxh(p):
    out = subprocess.run(["xxh128sum", p], capture_output=True, text=True, check=True).stdout
    return out.split()[0]
def ref(key):
    p = os.path.join(bucket, key)
    return {"key": key, "size": os.path.getsize(p), "xxh128": xxh(p)}
def objref(key):   # objects[] entries also carry the SHA-256 (BUCKET.md §3)
    r = ref(key)
    if flag("--no-sha256"):
        return r
    h = hashlib.sha256(open(os.path.join(bucket, key), "rb").read()).hexdigest()
    r["sha256"] = "0" * 64 if flag("--bad-sha256") else h
    return r
def sign(body):
    if not flag("--sign"):
        return body
    tmp = os.path.join(bucket, ".body")   # pkeyutl -rawin wants a file, not a pipe
    open(tmp, "wb").write(body)
    sig = subprocess.run(["openssl", "pkeyutl", "-sign", "-inkey", KEY, "-rawin", "-in", tmp],
                         capture_output=True, check=True).stdout
    os.unlink(tmp)
    der = subprocess.run(["openssl", "pkey", "-in", KEY, "-pubout", "-outform", "DER"],
                         capture_output=True, check=True).stdout
    kid = hashlib.sha256(der[-32:]).hexdigest()[:16]
    return body + b"wsync-signature ed25519 %s %s\n" % (kid.encode(), base64.b64encode(sig))
def damage(key, how):
    p = os.path.join(bucket, key)
    b = open(p, "rb").read()
    open(p + ".good", "wb").write(b)
    if how == "flip":
        b = bytearray(b); b[len(b) // 2] ^= 1
    else:
        b = b[:len(b) // 2]
    open(p + ".tmp", "wb").write(b)
    os.rename(p + ".tmp", p)
# Damage is done before HEAD names the version, never after: a reader must
# not see the good bytes in between.
now = val("--created") or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
V = "%012d" % version
state_path = os.path.join(bucket, ".anchors.json")   # the writer's own memory
anchors = json.load(open(state_path)) if os.path.exists(state_path) else []
def write_head(v, mref=None):
    head = {"format": "wsync-head", "format_version": 1, "version": v,
            "manifest": mref or ref("manifests/%012d.json" % v), "created": now}
    body = sign((json.dumps(head) + "\n").encode())
    if flag("--flip-head"):
        open(os.path.join(bucket, "HEAD.good"), "wb").write(body)
        body = bytearray(body); body[len(body) // 2] ^= 1
    # tmp + rename, as a real publisher: a poll never reads half a HEAD
    open(os.path.join(bucket, ".HEAD.tmp"), "wb").write(body)
    os.rename(os.path.join(bucket, ".HEAD.tmp"), os.path.join(bucket, "HEAD"))
if val("--head-only"):
    write_head(int(val("--head-only")))
    sys.exit(0)
for d in ("manifests", "deltas", "anchors"):
    os.makedirs(os.path.join(bucket, d), exist_ok=True)
objects = []
if val("--prev"):
    out = os.path.join(bucket, "deltas", V + ".wsd")
    if val("--delta"):
        shutil.copyfile(val("--delta"), out)
    else:
        subprocess.run([W, "diff", val("--prev"), ckpt, "-o", out],
                       check=True, stdout=subprocess.DEVNULL)
    objects.append(dict(role="delta", **objref("deltas/%s.wsd" % V)))
    if flag("--flip"):
        damage("deltas/%s.wsd" % V, "flip")
    if flag("--truncate"):
        damage("deltas/%s.wsd" % V, "truncate")
is_anchor = flag("--anchor")
if is_anchor:
    subprocess.run([W, "diff", EMPTY, ckpt, "-o", os.path.join(bucket, "anchors", V + ".wsa")],
                   check=True, stdout=subprocess.DEVNULL)
    objects.append(dict(role="anchor", **objref("anchors/%s.wsa" % V)))
    if flag("--flip-anchor"):
        damage("anchors/%s.wsa" % V, "flip")
files = []
for root, _, names in os.walk(ckpt):
    for n in names:
        p = os.path.join(root, n)
        files.append({"path": os.path.relpath(p, ckpt), "size": os.path.getsize(p), "xxh128": xxh(p)})
files.sort(key=lambda f: f["path"].encode())
if val("--file-size"):
    files[0]["size"] = int(val("--file-size"))
if val("--bad-path"):
    files.append({"path": "@BADPATH@", "size": 3, "xxh128": "0" * 32})
alist = list(anchors)
if is_anchor:   # an anchor manifest lists itself; it can't hold its own hash
    alist.append({"version": version, "manifest": {"key": "manifests/%s.json" % V, "size": 0,
                                                   "xxh128": "0" * 32}})
m = {"format": "wsync-manifest", "format_version": 1, "version": version, "step": version * 10,
     "created": now, "kind": "anchor" if is_anchor else "delta",
     "anchor_version": version if is_anchor else anchors[-1]["version"],
     "objects": objects, "files": files, "anchors": alist, "writer": "bucket-writer.py"}
if val("--prev"):
    m["base_version"] = int(val("--base") or version - 1)
text = json.dumps(m, indent=1) + "\n"
if val("--bad-path"):   # spliced in raw so that escapes like \u0000 stay as given
    text = text.replace('"@BADPATH@"', '"%s"' % val("--bad-path"))
open(os.path.join(bucket, "manifests", V + ".json"), "wb").write(sign(text.encode()))
mref = ref("manifests/%s.json" % V)
if is_anchor:
    anchors.append({"version": version, "manifest": mref})
    json.dump(anchors, open(state_path, "w"))
if flag("--flip-manifest"):
    damage("manifests/%s.json" % V, "flip")
write_head(version, mref)
