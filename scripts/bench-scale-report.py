#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-scale-report.py BACKEND DIR PARAMS PREFIX SUBFS RATE MMAP DELAYACCT TSV [PROXIES]:
# bench-scale.sh's tables for one backend's run in DIR; rows appended to TSV
# (a TSV of another layout is moved aside to TSV.old first). PROXIES: the
# directory holding proxy-<daemon>/faultproxy.jsonl (throttled s3).
import datetime, json, os, re, sys
b, d, params, prefix, subfs = sys.argv[1:6]
rate, mmap, delayacct, tsv = int(sys.argv[6]), sys.argv[7] == "1", sys.argv[8] == "1", sys.argv[9]
proxies = sys.argv[10] if len(sys.argv) > 10 else None
tck = os.sysconf("SC_CLK_TCK")
tz = datetime.datetime.now().astimezone().tzinfo
def ts(line):
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=tz).timestamp()
marker = {int(k): float(v) for k, v in (l.split() for l in open(d + "/marker-times"))}
steps = sorted(marker)
ck = {i: json.load(open("%s/ck-%d.json" % (d, i))) for i in steps}
def lines(name, rx):
    out = {}
    for line in open("%s/%s.log" % (d, name), errors="replace"):
        m = re.search(rx, line)
        if m and int(m.group(1)) not in out:
            out[int(m.group(1))] = (ts(line), m)
    return out
announced = lines("pub", r"info: version (\d+) \(step -?\d+\) announced")
published = lines("pub", r"info: (?:published|committed the parts of) version (\d+) ")
# the apply's duration: duration_ms= of the line's fields, else its "N.NN s"
applied = {s: lines(s, r"info: version (\d+) \(step -?\d+\) applied from .*?"
                       r"(?:duration_ms=(\d+)|, ([0-9.]+) s$)")
           for s in ("s1", "s2")}
def apply_s(m):
    return int(m.group(2)) / 1000 if m.group(2) else float(m.group(3))
# built ahead: the applied line says how much of the apply ran before the commit
ahead = {s: lines(s, r"info: version (\d+) \(step -?\d+\) applied from .*\(([0-9.]+) s of it before the commit\)")
         for s in ("s1", "s2")}
def table(name):
    out = {}
    try:
        for l in open("%s/%s" % (d, name)):
            f = l.split()
            out[int(f[0])] = [float(x) if x != "-" else None for x in f[1:]]
    except OSError:
        pass
    return out
# step: [start, end] (epoch s): the trainer's start to all idle; then the
# PSI io and cpu "some" totals (µs) at the start and at the end
times = table("step-times")
window = {i: v[:2] for i, v in times.items()}
def pressure(i):
    v = times.get(i, [])
    if len(v) < 6 or None in v[2:6] or v[1] <= v[0]:
        return None
    span = (v[1] - v[0]) * 1e6
    return (v[4] - v[2]) / span, (v[5] - v[3]) / span
apart = table("apart.txt")     # step: [diff s, apply s, delta bytes]
# Each link's body bytes in each step's window, from its faultproxy's log:
# request bodies (up) and response bodies (down), a response counted at its
# request's time.
def link_bytes(name):
    up, down = {}, {}
    if not proxies:
        return None
    path = "%s/proxy-%s/faultproxy.jsonl" % (proxies, name)
    if not os.path.exists(path):
        return None
    when = {}
    for l in open(path, errors="replace"):
        try:
            e = json.loads(l)
        except ValueError:
            continue
        key = (e.get("listener"), e.get("conn"), e.get("seq"))
        if e.get("event") == "request":
            when[key] = e.get("time")
        elif e.get("event") == "response" and when.get(key) is not None:
            t = when.pop(key)
            for i, (t0, t1) in window.items():
                if t0 <= t <= t1:
                    up[i] = up.get(i, 0) + int(e.get("request_body_bytes") or 0)
                    down[i] = down.get(i, 0) + int(e.get("body_bytes") or 0)
                    break
    return up, down
links = {n: link_bytes(n) for n in ("pub", "s1", "s2")} if rate else {}
# publisher parts each on a link of their own (proxy-pub2, ...)
part_links = [links.get("pub")] + [link_bytes("pub%d" % q) for q in range(2, 65)] if rate else []
part_links = [l for l in part_links if l]
def proc(i):
    out = {}
    try:
        for l in open("%s/proc-%d.tsv" % (d, i)):
            f = l.split()
            out[f[0]] = [float(f[1])] + [int(x) for x in f[2:]]
    except OSError:
        pass
    return out
P = {i: proc(i) for i in [0] + steps}
def prom(s, i, name):
    try:
        for l in open("%s/prom-%s-%d.prom" % (d, s, i)):
            m = re.match(r"%s(\{[^}]*\})? (\S+)$" % re.escape(name), l)
            if m:
                return float(m.group(2))
    except OSError:
        pass
    return None
listing = json.load(open(d + "/listing.json"))
if os.path.exists(d + "/listing-parts.json"):
    have = {o["key"] for o in listing}
    listing += [o for o in json.load(open(d + "/listing-parts.json")) if o["key"] not in have]
size = {(o["key"][len(prefix):] if o["key"].startswith(prefix) else o["key"]): o["size"] for o in listing}
verified = {}
for l in open(d + "/verify.txt"):
    i, s, text = l.rstrip("\n").split("\t", 2)
    verified[(int(i), s)] = text
done = [i for i in steps if i in P and P[i] and all(i in applied[s] for s in ("s1", "s2"))]

def mb(x):
    return "{:,.1f}".format(x / 1e6)
def sec(x):
    return "-" if x is None else "%.2f" % x
rows, goals, notes = [], [], []
# goal(text, figure, limit, ok): one line of the run's goals
# The work dir's disk alone (bench-scale.sh's disk_probe): bytes/s written,
# read, around the page cache; None when not measured.
try:
    disk = [float(x) for x in open(d + "/../disk-rates").read().split()]
except (OSError, ValueError):
    disk = None
floors = []

def floor(i):
    """The least time step i's work takes on this machine, every daemon
    on it counted: (its CPU seconds over the cores, its disk bytes over
    the disk's rates alone -- reads and writes one after the other, as
    they share it), with the figures behind them; None without them."""
    prior = steps.index(i)
    p0 = P[steps[prior - 1] if prior else 0]
    names = [n for n in P[i] if n in p0]
    if not disk or not names:
        return None
    cpu = sum(P[i][n][0] - p0[n][0] for n in names)
    rb = sum(P[i][n][3] - p0[n][3] for n in names)
    wb = sum(P[i][n][4] - p0[n][4] for n in names)
    cores = os.cpu_count() or 1
    return (cpu / cores, wb / disk[0] + rb / disk[1], cpu, cores, wb, rb)

def goal(text, figure, ok):
    goals.append((text, figure, ok))
print()
print("Latency from the checkpoint's marker (trainer_state.json's mtime), s; object: what the step put in the bucket;")
print("ratio: the last apply over the slower stage of this run (publish, apply), contended; apart: `wsync diff` and")
print("`wsync apply` of the same pair run one after the other once the step is over, and marker → applied over the slower;")
print("the trainer writes the marker last, so the publisher reads the step at once (settle_time is for a marker not last):")
print()
hdr = ("| step | object bytes | → announced | → HEAD (publish) | → applied full | → applied partial | apply s full / partial "
       "| ratio (contended) | diff / apply s apart | → applied ÷ apart full / partial |")
sep = "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
if rate:
    hdr += " moved MB pub↑ / full↓ / partial↓ | transfer s full / partial | latency ÷ transfer full / partial |"
    sep += "---:|---:|---:|"
print(hdr)
print(sep)
def pair(a, b, fmt):
    return "%s / %s" % ("-" if a is None else fmt % a, "-" if b is None else fmt % b)
for i in done:
    k = "%012d" % i
    # an object stored whole, or in chunks (BUCKET.md 3.2: deltas/<V>-<N>.wsd)
    # ... or, made by parts, their chunks (BUCKET.md 7: parts/<V>/<K>-<F>-<N>.ws[da])
    obj = sum(n for key, n in size.items()
              if re.fullmatch(r"(deltas/%s(-\d{5})?\.wsd|anchors/%s(-\d{5})?\.wsa|"
                              r"parts/%s/\d+-[0-9a-f]{32}-\d{5}\.ws[da])" % (k, k, k), key))
    m0 = marker[i]
    ann = announced[i][0] - m0 if i in announced else None
    head = published[i][0] - m0 if i in published else None
    app = {s: applied[s][i][0] - m0 for s in ("s1", "s2")}
    dur = {s: apply_s(applied[s][i][1]) for s in ("s1", "s2")}
    last = max(app.values())
    stage = max(head or 0, max(dur.values()))
    ratio = last / stage if stage > 0 else None
    kind = "anchor" if i == steps[0] else "delta"
    # the row's own consistency: announced <= HEAD <= each apply
    if ann is not None and head is not None and ann > head:
        notes.append("step %d: INCONSISTENT: announced %.2f s after HEAD" % (i, ann - head))
    for s, who in (("s1", "full"), ("s2", "partial")):
        if head is not None and app[s] < head:
            notes.append("step %d: INCONSISTENT: the %s subscriber's applied line is %.2f s before the publisher's HEAD line" %
                         (i, who, head - app[s]))
        if i in ahead[s] and float(ahead[s][i][1].group(2)) > 0:
            notes.append("step %d: the %s subscriber built it ahead: %.2f s of its apply before the commit, "
                         "renamed in after HEAD" % (i, who, float(ahead[s][i][1].group(2))))
    if head is None:
        notes.append("step %d: no HEAD line in the publisher's log" % i)
    ap = apart.get(i)
    slow_apart = max(ap[0], ap[1]) if ap else None
    aratio = {s: (app[s] / slow_apart if slow_apart else None) for s in ("s1", "s2")}
    line = "| %d (%s) | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        i, kind, format(obj, ","), sec(ann), sec(head), sec(app["s1"]), sec(app["s2"]),
        pair(dur["s1"], dur["s2"], "%.2f"), "-" if ratio is None else "%.2f×" % ratio,
        pair(ap[0], ap[1], "%.2f") if ap else "-",
        pair(aratio["s1"], aratio["s2"], "%.2f×") if ap else "-")
    moved = {}
    xfer = {"s1": None, "s2": None}
    xratio = {"s1": None, "s2": None}
    if rate:
        have = all(links.get(n) for n in ("pub", "s1", "s2"))
        if have:
            ups = [l[0].get(i, 0) for l in part_links]
            moved = {"pub": sum(ups), "s1": links["s1"][1].get(i, 0),
                     "s2": links["s2"][1].get(i, 0)}
            for s in ("s1", "s2"):
                # the data crosses the publishers' links up (each part's
                # its own), then this subscriber's down: at best all at
                # once, as long as the busiest
                xfer[s] = max(max(ups), moved[s]) / rate
                xratio[s] = app[s] / xfer[s] if xfer[s] > 0 else None
        line += " %s | %s | %s |" % (
            "%s / %s / %s" % (mb(moved["pub"]), mb(moved["s1"]), mb(moved["s2"])) if moved else "-",
            pair(xfer["s1"], xfer["s2"], "%.2f"), pair(xratio["s1"], xratio["s2"], "%.2f×"))
        for s, who in (("s1", "full"), ("s2", "partial")):
            if xratio[s] is not None:
                fig = "%.2f s ÷ %.2f s = %.2f×" % (app[s], xfer[s], xratio[s])
                if xratio[s] > 1.3 and slow_apart and slow_apart > 1.3 * xfer[s]:
                    # a small delta: its transfer is shorter than the
                    # coding or the apply alone, which no overlap removes
                    fig += " (out of reach: the slower stage alone, run apart, takes %.2f s = %.1f× the transfer)" % (
                        slow_apart, slow_apart / xfer[s])
                goal("step %d (%s), %s subscriber: marker → applied ≤ 1.3× its transfer" % (i, kind, who),
                     fig, xratio[s] <= 1.3)
            else:
                goal("step %d (%s), %s subscriber: marker → applied ≤ 1.3× its transfer" % (i, kind, who),
                     "no bytes counted on its links (no faultproxy log?)", False)
    if kind == "delta" and ratio is not None:
        goal("step %d (delta): last apply ≤ 1.5× the slowest stage of the run" % i,
             "%.2f s ÷ %.2f s = %.2f×" % (last, stage, ratio), ratio <= 1.5)
    if b == "file" and aratio["s1"] is not None:
        fig = "%.2f s ÷ max(diff %.2f s, apply %.2f s) = %.2f×" % (app["s1"], ap[0], ap[1], aratio["s1"])
        fl = floor(i)
        if fl:
            floors.append((i, fl, 1.5 * slow_apart))
            if aratio["s1"] > 1.5 and max(fl[0], fl[1]) > 1.5 * slow_apart:
                fig += " (out of reach on this machine: its floor, %.1f s, is above the 1.5× line, %.1f s)" % (
                    max(fl[0], fl[1]), 1.5 * slow_apart)
        goal("step %d (%s), one host: marker → applied (full) ≤ 1.5× the slower stage run apart" % (i, kind),
             fig, aratio["s1"] <= 1.5)
    print(line)
    rows.append(dict(step=i, kind=kind, ckpt=ck[i]["bytes"], obj=obj, ann=ann, head=head,
                     app_s1=app["s1"], app_s2=app["s2"], dur_s1=dur["s1"], dur_s2=dur["s2"],
                     ratio=ratio, diff_apart=ap[0] if ap else None, apply_apart=ap[1] if ap else None,
                     apart_s1=aratio["s1"], apart_s2=aratio["s2"],
                     moved_pub=moved.get("pub"), moved_s1=moved.get("s1"), moved_s2=moved.get("s2"),
                     xfer_s1=xfer["s1"], xfer_s2=xfer["s2"], xratio_s1=xratio["s1"], xratio_s2=xratio["s2"]))
if rate:
    print("\n(moved: the bodies each link carried over the step, counted by its faultproxy: the publisher's requests up, "
          "each subscriber's responses down; transfer: the busiest of a subscriber's link and the publisher's (each part's), at the throttled rate)")
if apart:
    print("(apart: the daemons idle; the apply reads the old checkpoint dropped from the page cache, writes on the "
          "subscribers' file system)")
for i, fl, line15 in floors:
    print("(step %d, one host: the daemons used %.1f s of CPU, %.1f s on %d cores, and wrote %s MB and read %s MB "
          "of the disk, %.1f s at its rates alone (write %.2f GB/s, read %.2f GB/s): so the step needs at least "
          "%.1f s here; the 1.5× line is %.1f s)" % (i, fl[2], fl[0], fl[3], mb(fl[4]), mb(fl[5]), fl[1],
                                                    disk[0] / 1e9, disk[1] / 1e9, max(fl[0], fl[1]), line15))
p = {i: pressure(i) for i in done}
if any(p.values()):
    print("(the machine over each step, everything on it counted: %s)" % "; ".join(
        "step %d: I/O stalled %.0f%%, a task waiting for a CPU %.0f%% of the time" % (i, 100 * v[0], 100 * v[1])
        for i, v in p.items() if v))
print()
for n in notes:
    print(n)
if not any("INCONSISTENT" in n for n in notes):
    print("every row consistent: announced ≤ HEAD ≤ each subscriber's applied")
print()
print("Bytes per step (MB = 10^6 bytes); the publisher's reads over the checkpoint bytes it had to read (a delta: old + new; the anchor: new):")
print()
col = "read_bytes" if mmap else "rchar"
print("| step | checkpoint MB | downloaded full MB | downloaded partial MB (share) | publisher rchar ÷ ckpt bytes (goal ≤ 1.1) |%s" %
      (" publisher read_bytes ÷ ckpt bytes |" if mmap else ""))
print("|---|---:|---:|---:|---:|%s" % ("---:|" if mmap else ""))
for r in rows:
    i = r["step"]
    dl = {}
    for s in ("s1", "s2"):
        v = prom(s, i, "wsync_bytes_downloaded_total")
        dl[s] = None if v is None else int(v - (prom(s, i - 1, "wsync_bytes_downloaded_total") or 0))
    prior = steps.index(i)
    base = ck[i]["bytes"] + (ck[steps[prior - 1]]["bytes"] if prior else 0)
    # every publisher part's reads together (one publisher: its own)
    pubs = sorted(n for n in P[i] if n.startswith("pub"))
    p0 = P[steps[prior - 1] if prior else 0]
    pr = sum(P[i][n][1] - p0[n][1] for n in pubs)
    pb = sum(P[i][n][3] - p0[n][3] for n in pubs)
    r.update(dl_s1=dl["s1"], dl_s2=dl["s2"], pub_rchar_ratio=pr / base, pub_rb_ratio=pb / base)
    share = "" if not dl["s1"] or dl["s2"] is None else " (%.0f%%)" % (100 * dl["s2"] / dl["s1"])
    print("| %d | %s | %s | %s%s | %.2f |%s" % (
        i, mb(ck[i]["bytes"]), "-" if dl["s1"] is None else mb(dl["s1"]),
        "-" if dl["s2"] is None else mb(dl["s2"]), share, pr / base,
        (" %.2f |" % (pb / base)) if mmap else ""))
    if prior and not mmap:
        goal("step %d (delta): the publisher reads ≤ 1.1× old + new" % i, "rchar ÷ (old + new) %.2f" % (pr / base),
             pr / base <= 1.1)
    if not prior and not mmap and b == "file":
        goal("step %d (anchor): the publisher reads ≤ 1.2× its new bytes" % i, "rchar ÷ new %.2f" % (pr / base),
             pr / base <= 1.2)
if mmap:
    print("\n(--mmap: the encoder reads through mappings, which rchar does not count: rchar undercounts; "
          "read_bytes counts only what came from the disk. The read-once goal is not checked.)")
print()
print("Per daemon and step: CPU s, /proc/PID/io in MB, block-I/O delay s%s:" %
      ("" if delayacct else " (0: kernel.task_delayacct is off, no delay accounting)"))
print()
print("| step | daemon | CPU s | rchar | wchar | read_bytes | write_bytes | blkio delay s |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
names = {"pub": "publisher", "s1": "full s1", "s2": "partial s2"}
pubs = sorted((n for n in P[0] if n.startswith("pub")), key=lambda n: int(n[3:] or 1))
if len(pubs) > 1:
    names.update({n: "part %s" % (n[3:] or "1") for n in pubs})
for r in rows:
    i = r["step"]
    prior = steps.index(i)
    p0 = P[steps[prior - 1] if prior else 0]
    for n in pubs + ["s1", "s2"]:
        a, z = p0[n], P[i][n]
        dv = [z[j] - a[j] for j in range(len(z))]
        r.update({"%s_cpu" % n: dv[0], "%s_rchar" % n: dv[1], "%s_wchar" % n: dv[2],
                  "%s_read_bytes" % n: dv[3], "%s_write_bytes" % n: dv[4],
                  "%s_blkio" % n: dv[5] / tck})
        print("| %d | %s | %.2f | %s | %s | %s | %s | %.2f |" % (
            i, names[n], dv[0], mb(dv[1]), mb(dv[2]), mb(dv[3]), mb(dv[4]), dv[5] / tck))
print()
final = P[done[-1]] if done else {}
print("| daemon | CPU s (whole run) | peak RSS MiB (goal ≤ 256) |")
print("|---|---:|---:|")
for n in pubs + ["s1", "s2"]:
    if n in final:
        hwm = final[n][6] / 1024
        print("| %s | %.2f | %.0f |" % (names[n], final[n][0], hwm))
        goal("peak RSS ≤ 256 MiB: %s" % names[n], "%.0f MiB" % hwm, hwm <= 256)
print()
for i in steps:
    for s in ("s1", "s2"):
        if (i, s) in verified:
            print("step %d %s: %s" % (i, "full s1" if s == "s1" else "partial s2", verified[(i, s)]))
print()
print("Goals (issue 41's, those that apply to this run):")
for text, figure, ok in goals:
    print("%-6s %s: %s" % ("ok" if ok else "MISSED", text, figure))
print("goals (%s): %d ok, %d MISSED" % (b, sum(1 for g in goals if g[2]), sum(1 for g in goals if not g[2])))

cols = ["backend", "params", "subfs", "mmap", "rate_bytes_s", "step", "kind", "ckpt_bytes", "object_bytes", "marker_announced_s",
        "marker_head_s", "marker_applied_full_s", "marker_applied_partial_s", "apply_full_s",
        "apply_partial_s", "ratio", "diff_apart_s", "apply_apart_s", "applied_over_apart_full",
        "applied_over_apart_partial", "moved_pub_up", "moved_full_down", "moved_partial_down",
        "transfer_full_s", "transfer_partial_s", "latency_over_transfer_full",
        "latency_over_transfer_partial", "downloaded_full",
        "downloaded_partial", "pub_rchar_over_ckpt", "pub_read_bytes_over_ckpt"]
cols += ["%s_%s" % (n, f) for n in ("pub", "full", "partial")
         for f in ("cpu_s", "rchar", "wchar", "read_bytes", "write_bytes", "blkio_s")]
header = "\t".join(cols) + "\n"
if os.path.exists(tsv) and os.path.getsize(tsv) > 0:
    with open(tsv) as f:
        if f.readline() != header:
            os.replace(tsv, tsv + ".old")   # another layout: never mix the columns
new = not os.path.exists(tsv) or os.path.getsize(tsv) == 0
with open(tsv, "a") as f:
    if new:
        f.write(header)
    for r in rows:
        # never an empty field: readers that split on runs of whitespace
        # (awk, read) would shift every column after it
        def v(x):
            return "-" if x is None else ("%.3f" % x if isinstance(x, float) else str(x))
        vals = [b, params, "loop" if subfs.startswith("ext4") else "plain", int(mmap), rate, r["step"], r["kind"], r["ckpt"], r["obj"], r["ann"], r["head"],
                r["app_s1"], r["app_s2"], r["dur_s1"], r["dur_s2"], r["ratio"], r["diff_apart"],
                r["apply_apart"], r["apart_s1"], r["apart_s2"], r["moved_pub"], r["moved_s1"],
                r["moved_s2"], r["xfer_s1"], r["xfer_s2"], r["xratio_s1"], r["xratio_s2"],
                r.get("dl_s1"), r.get("dl_s2"), r.get("pub_rchar_ratio"),
                r.get("pub_rb_ratio")]
        for n in ("pub", "s1", "s2"):
            vals += [r["%s_cpu" % n], r["%s_rchar" % n], r["%s_wchar" % n],
                     r["%s_read_bytes" % n], r["%s_write_bytes" % n], r["%s_blkio" % n]]
        f.write("\t".join(v(x) for x in vals) + "\n")
