#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""crash.py -- the checks of test-crash.sh over targets, buckets and the
logs of tests/shim/crashshim.c (one line per call: SEQ TAB KIND TAB RC TAB
PATH [TAB PATH2] [TAB w=N]; a last line KILL TAB KIND TAB N TAB PATH when the
shim killed the process).

  crash.py sample TARGET CKPT_DIR OLD NEW
      every file in TARGET (but .wsync/ and temps) holds, byte for byte, the
      content some version OLD..NEW gives it (CKPT_DIR/checkpoint-V is
      version V; OLD 0: no file before), no path is foreign, and every
      path of both OLD and NEW is there
  crash.py inplace LOG SCOPE [SKIP [CKPT_DIR OLD NEW]]
      nothing under SCOPE (but .wsync/ folders, SKIP and state_dir's
      downloads/, where a partial fetch writes its ranges) was opened for
      writing under its final name, renamed away or removed (but a file a
      step of OLD..NEW drops, and that only once every temp made so far
      is durable and before no temp of its step), and every rename into SCOPE moved a temp that had been
      fsynced after it was last opened and last written (or a symlink
      never opened)
  crash.py order LOG TARGET
      power-loss ordering of complete subscriber applies: each file renamed
      into TARGET fsynced before, its directory fsynced after, both before
      the next state.json rename; the marker's temp fsynced before its
      rename and .wsync/ fsynced after; a directory made in TARGET has its
      parent fsynced before that marker
  crash.py symorder LOG TARGET
      layout = symlink: before each flip of the link TARGET, the version
      directory's files and marker are durable as "order" says (within it),
      the directory's own entry fsynced in TARGET's parent; after the flip,
      the parent fsynced
  crash.py puborder LOG BUCKET
      the same for a publisher on a file:// bucket: each object durable
      (temp fsynced, directory fsynced after the rename) before the next
      manifest's rename, each manifest durable before the next HEAD rename,
      HEAD's temp fsynced before and BUCKET fsynced after
  crash.py killed LOG KIND
      the log has the shim's KILL line, for KIND (any: whatever kind)
  crash.py orphans BUCKET
      every file in BUCKET is HEAD (or NEXT), or a manifest from the oldest
      anchor HEAD's manifest lists up to HEAD, or an object (or chunk) one
      of those lists (BUCKET.md section 2 rule 3), temps included
  crash.py head BUCKET
      print HEAD's version, then its manifest's step
  crash.py headkey BUCKET
      print the key of HEAD's manifest
"""
import hashlib
import json
import os
import re
import sys


def doc(path):
    return json.loads(open(path, "rb").read().decode().split("\nwsync-signature")[0])


def files(d):
    out = {}
    for root, dirs, names in os.walk(d):
        dirs[:] = [x for x in dirs if x != ".wsync"]
        for n in names:
            p = os.path.join(root, n)
            out[os.path.relpath(p, d)] = p
    return out


def is_temp(rel):
    n = os.path.basename(rel)
    return n.startswith(".") and ".wsync-" in n


def digest(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def read_log(path):
    ev = []
    for line in open(path, encoding="utf-8", errors="replace"):
        f = line.rstrip("\n").split("\t")
        if f[0] in ("KILL", "FAIL"):
            ev.append({"seq": None, "kind": f[0], "what": f[1], "p1": f[3] if len(f) > 3 else ""})
            continue
        e = {"seq": int(f[0]), "kind": f[1], "rc": int(f[2]), "p1": f[3], "p2": None, "lw": -1}
        for x in f[4:]:
            if x.startswith("lw="):
                e["lw"] = int(x[3:])
            elif not x.startswith("w="):
                e["p2"] = x
        ev.append(e)
    return ev


def under(p, d):
    return p == d or p.startswith(d.rstrip("/") + "/")


def sample(target, ck, old, new):
    allowed = {}
    for v in range(max(old, 1), new + 1):
        for rel, p in files(os.path.join(ck, "checkpoint-%d" % v)).items():
            allowed.setdefault(rel, set()).add(digest(p))
    bad = []
    have = files(target) if os.path.isdir(target) else {}
    if old:
        # a path of both versions is there at every moment: never deleted
        # and renamed in again
        both = set(files(os.path.join(ck, "checkpoint-%d" % old))) & \
            set(files(os.path.join(ck, "checkpoint-%d" % new)))
        for rel in sorted(both - set(have)):
            bad.append("%s: missing, though versions %d and %d both have it" % (rel, old, new))
    if have:
        for rel, p in sorted(have.items()):
            if is_temp(rel):
                continue
            if rel not in allowed:
                bad.append("%s: not a file of versions %d..%d" % (rel, old, new))
            elif digest(p) not in allowed[rel]:
                bad.append("%s: holds none of the versions %d..%d" % (rel, old, new))
    for b in bad:
        print(b)
    return not bad


def wrote(e, last_write):
    """Track the last write to each path: fsync lines carry the fd's last
    write so far, close lines its last (lw=, -1: none)."""
    if e["kind"] in ("fsync", "close") and e["lw"] >= 0:
        last_write[e["p1"]] = max(last_write.get(e["p1"], -1), e["lw"])


def unsynced(p, last_open, last_write, synced):
    """p was opened or written after its last fsync"""
    last = max(last_open.get(p, -1), last_write.get(p, -1))
    return last >= 0 and synced.get(p, -1) < last


def inplace(log, scope, skip=None, drops=frozenset()):
    ev = read_log(log)
    scope = os.path.realpath(scope)
    # the daemon's lock files (daemon/instance_lock.h) are written in place
    # by design: they say who holds them, and the kernel drops the lock
    is_lock = lambda p: re.search(r"/(state/(subscriber|publisher)|run)/lock$", p)
    # a partial subscriber's fetch writes its ranges straight into its file
    # in state_dir's downloads/ (emptied at each start, every piece checked
    # against the manifest's SHA-256 before use): not a file of the target
    is_fetch = lambda p: "/state/subscriber/downloads/" in p
    meta = lambda p: "/.wsync/" in p or p.endswith("/.wsync") or is_lock(p) or is_fetch(p) or \
        (skip is not None and under(p, os.path.realpath(skip)))
    bad, last_open, last_write, synced = [], {}, {}, {}
    removed = []	# dropped files removed in the step not yet marked
    mine = lambda p: under(p, scope) and not meta(p)

    link = os.path.join(scope, "target")
    current = os.readlink(link) if os.path.islink(link) else None

    def model_rel(p):
        """p's path in its target (SCOPE, or SCOPE/target or a version
        directory SCOPE/target.vN), None for state_dir's files and for a
        version directory target_dir's link does not name (layout =
        symlink prunes those, or removes one not flipped to)"""
        parts = os.path.relpath(p, scope).split("/")
        if len(parts) > 1 and re.fullmatch(r"target(\.v\d+)?", parts[0]):
            if current and parts[0] not in ("target", current):
                return None
            return "/".join(parts[1:])
        return None if parts[0] == "state" else "/".join(parts)
    for e in ev:
        if e["kind"] in ("KILL", "FAIL"):
            continue
        wrote(e, last_write)
        if e["kind"] == "open" and e["rc"] >= 0:
            last_open[e["p1"]] = e["seq"]
            if mine(e["p1"]) and not is_temp(e["p1"]):
                bad.append("opened for writing in place: %s" % e["p1"])
            if mine(e["p1"]) and is_temp(e["p1"]) and model_rel(e["p1"]) is not None:
                for r in removed:
                    bad.append("removed %s before the step's temp %s was built" % (r, e["p1"]))
                removed = []
        elif e["kind"] == "fsync" and e["rc"] == 0:
            synced[e["p1"]] = e["seq"]
        elif e["kind"] == "unlink" and mine(e["p1"]) and not is_temp(e["p1"]) \
                and model_rel(e["p1"]) is not None:
            # only a file the new version drops, once every temp made so
            # far is durable and no temp of the step is built after it
            # (apply.c commit: deletes among the renames, after all temps
            # were built, fsynced and verified; subscriber_apply.c: an
            # anchor's dropped files after apply)
            if model_rel(e["p1"]) not in drops:
                bad.append("removed a file no version drops: %s" % e["p1"])
            removed.append(e["p1"])
            for t in sorted(last_open):
                if mine(t) and is_temp(t) and unsynced(t, last_open, last_write, synced):
                    bad.append("removed %s while the temp %s was not durable" % (e["p1"], t))
        elif e["kind"] == "rename" and e["rc"] == 0 and mine(e["p1"]) \
                and not is_temp(e["p1"]) and model_rel(e["p1"]) is not None:
            bad.append("renamed a file away: %s -> %s" % (e["p1"], e["p2"]))
        elif e["kind"] == "rename" and e["rc"] == 0 and e["p2"].endswith("/.wsync/state.json"):
            removed = []	# the step is marked: the next one builds anew
        elif e["kind"] == "rename" and e["rc"] == 0 and mine(e["p2"]):
            src = e["p1"]
            if not is_temp(src):
                bad.append("renamed from a non-temp: %s -> %s" % (src, e["p2"]))
            elif unsynced(src, last_open, last_write, synced):
                # (a temp never opened is a symlink: layout = symlink's flip)
                bad.append("renamed before its fsync after its last write: %s -> %s"
                           % (src, e["p2"]))
    for b in bad:
        print(b)
    return not bad


def check_order(ev, is_data, is_marker, scope):
    """Generic: every data rename (is_data(to)) is preceded by an fsync of
    its source after its last open and followed by an fsync of the target's
    directory, both before the next marker rename (is_marker(to)); the
    marker's temp fsynced before, its directory after; a directory made
    under scope has its parent fsynced before the next marker."""
    bad = []
    last_open, last_write, synced = {}, {}, {}
    pending = []	# data renames whose directory still needs a sync
    made = []	# directories made, whose parent still needs a sync
    markers = 0
    for i, e in enumerate(ev):
        k = e["kind"]
        if k in ("KILL", "FAIL"):
            continue
        wrote(e, last_write)
        if k == "open" and e["rc"] >= 0:
            last_open[e["p1"]] = e["seq"]
        elif k == "mkdir" and e["rc"] == 0 and under(e["p1"], scope):
            made.append(e["p1"])
        elif k == "fsync" and e["rc"] == 0:
            synced[e["p1"]] = e["seq"]
            pending = [r for r in pending if os.path.dirname(r["p2"]) != e["p1"]]
            made = [m for m in made if os.path.dirname(m) != e["p1"]]
        elif k == "rename" and e["rc"] == 0 and (is_data(e["p2"]) or is_marker(e["p2"])):
            if synced.get(e["p1"], -1) < max(last_open.get(e["p1"], 0),
                                             last_write.get(e["p1"], -1)):
                bad.append("%s renamed to %s before its fsync after its last write"
                           % (e["p1"], e["p2"]))
            if is_marker(e["p2"]):
                markers += 1
                for r in pending:
                    bad.append("%s: its directory not fsynced before the marker %s"
                               % (r["p2"], e["p2"]))
                for m in made:
                    bad.append("made directory %s: its parent not fsynced before the marker %s"
                               % (m, e["p2"]))
                pending, made = [], []
                # the marker's own directory: synced before anything else
                # that depends on it (the next data rename or the end)
                d = os.path.dirname(e["p2"])
                ok = False
                for f in ev[i + 1:]:
                    if f["kind"] == "fsync" and f["p1"] == d and f["rc"] == 0:
                        ok = True
                        break
                    if f["kind"] == "rename" and (is_data(f["p2"]) or is_marker(f["p2"])):
                        break
                if not ok:
                    bad.append("marker %s: its directory not fsynced after the rename" % e["p2"])
            else:
                pending.append(e)
    if not markers:
        bad.append("no marker rename in the log")
    for r in pending:
        bad.append("%s renamed after the last marker" % r["p2"])
    return bad


def order(log, target):
    tgt = os.path.realpath(target)
    meta = os.path.join(tgt, ".wsync")
    bad = check_order(read_log(log),
                      lambda p: under(p, tgt) and not under(p, meta),
                      lambda p: p == os.path.join(meta, "state.json"), tgt)
    for b in bad:
        print(b)
    return not bad


def symorder(log, target):
    ev = read_log(log)
    target = os.path.abspath(target)
    parent = os.path.dirname(target)
    bad, flips = [], 0
    for i, e in enumerate(ev):
        if not (e["kind"] == "rename" and e["rc"] == 0 and e["p2"] == target):
            continue
        flips += 1
        links = [f for f in ev[:i] if f["kind"] == "symlink" and f["rc"] == 0]
        vdir = os.path.join(parent, links[-1]["p1"]) if links else "?"
        made = [j for j, f in enumerate(ev[:i])
                if f["kind"] == "mkdir" and f["rc"] == 0 and f["p1"] == vdir]
        if not made:
            bad.append("flip to %s: the directory was not made in this run" % vdir)
            continue
        seg = ev[made[-1]:i]
        meta = os.path.join(vdir, ".wsync")
        bad += check_order(seg, lambda p: under(p, vdir) and not under(p, meta),
                           lambda p: p == os.path.join(meta, "state.json"), vdir)
        if not any(f["kind"] == "fsync" and f["p1"] == parent for f in seg):
            bad.append("flip to %s: %s not fsynced after the mkdir, before the flip"
                       % (vdir, parent))
        after = [f for f in ev[i + 1:] if f["kind"] == "fsync" and f["p1"] == parent]
        if not after:
            bad.append("flip to %s: %s not fsynced after the flip" % (vdir, parent))
    if not flips:
        bad.append("no flip of %s in the log" % target)
    for b in bad:
        print(b)
    return not bad


def puborder(log, bucket):
    b = os.path.realpath(bucket)
    ev = read_log(log)
    obj = lambda p: under(p, b + "/anchors") or under(p, b + "/deltas")
    man = lambda p: under(p, b + "/manifests")
    head = lambda p: p == b + "/HEAD"
    # objects before their manifest, then the manifest before HEAD
    bad = check_order(ev, obj, man, b) + check_order(ev, man, head, b)
    for x in bad:
        print(x)
    return not bad


def killed(log, kind):
    # other threads may log a call or two while the signal lands
    k = [e for e in read_log(log) if e["kind"] == "KILL"]
    if len(k) != 1:
        print("%d KILL lines in the log" % len(k))
        return False
    if kind != "any" and k[0]["what"] != kind:
        print("killed at %s, not %s" % (k[0]["what"], kind))
        return False
    return True


def orphans(bucket):
    h = doc(os.path.join(bucket, "HEAD"))
    hm = doc(os.path.join(bucket, h["manifest"]["key"]))
    want = {"HEAD"}
    for v in range(min(a["version"] for a in hm["anchors"]), h["version"] + 1):
        key = "manifests/%012d.json" % v
        want.add(key)
        for o in doc(os.path.join(bucket, key))["objects"]:
            if "chunks" in o:   # stored in chunks: they are the objects (BUCKET.md 3.2)
                want.update(c["key"] for c in o["chunks"])
            else:
                want.add(o["key"])
    have = set(files(bucket))
    if "NEXT" in have:          # the version in flight (BUCKET.md 4.1): overwritten
        want.add("NEXT")
    # the writer lease of a publisher killed or running, and the file
    # store's lock of conditional writes (BUCKET.md 8)
    want.update(k for k in have if k in ("writers/1.json", ".wsync-lock"))
    for k in sorted(have - want):
        print("orphan: %s" % k)
    for k in sorted(want - have):
        print("missing: %s" % k)
    return have == want


def drops(ck, old, new):
    """the paths a step of OLD..NEW deletes: in version V, not in V+1"""
    out = set()
    for v in range(max(old, 1), new):
        a = set(files(os.path.join(ck, "checkpoint-%d" % v)))
        b = set(files(os.path.join(ck, "checkpoint-%d" % (v + 1))))
        out |= a - b
    return out


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "sample":
        return sample(a[0], a[1], int(a[2]), int(a[3]))
    if cmd == "inplace":
        return inplace(a[0], a[1], a[2] if len(a) > 2 and a[2] else None,
                       drops(a[3], int(a[4]), int(a[5])) if len(a) > 5 else frozenset())
    if cmd == "order":
        return order(a[0], a[1])
    if cmd == "symorder":
        return symorder(a[0], a[1])
    if cmd == "puborder":
        return puborder(a[0], a[1])
    if cmd == "headkey":
        print(doc(os.path.join(a[0], "HEAD"))["manifest"]["key"])
        return True
    if cmd == "killed":
        return killed(a[0], a[1])
    if cmd == "orphans":
        return orphans(a[0])
    if cmd == "head":
        h = doc(os.path.join(a[0], "HEAD"))
        print(h["version"], doc(os.path.join(a[0], h["manifest"]["key"]))["step"])
        return True
    print("unknown command %s" % cmd)
    return False


sys.exit(0 if main() else 1)
