#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-e2e-latency.py DIR SUBS STEPS PREFIX: per version "v published_s applied_s
# object_bytes manifest_bytes" (tab-separated), from the daemons' logs in DIR,
# the trainer's marker times and the bucket listing (keys under PREFIX).
import datetime, json, re, sys
d, subs, steps, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
marker = dict(l.split() for l in open(d + "/marker-times"))
def ts(line):
    t = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f")
    return t.replace(tzinfo=datetime.datetime.now().astimezone().tzinfo).timestamp()
applied = {}
for s in range(1, subs + 1):
    for line in open("%s/s%d.log" % (d, s)):
        m = re.search(r"info: version (\d+) \(step \d+\) applied", line)
        if m:
            v = int(m.group(1))
            applied[v] = max(applied.get(v, 0), ts(line))
published = {}
for line in open(d + "/pub.log"):
    m = re.search(r"info: published version (\d+) ", line)
    if m:
        published[int(m.group(1))] = ts(line)
listing = json.load(open(d + "/listing.json"))
size = {o["key"][len(prefix):] if o["key"].startswith(prefix) else o["key"]: o["size"] for o in listing}
for v in range(1, steps + 2):
    k = "%012d" % v
    obj = size.get("deltas/%s.wsd" % k, 0) + size.get("anchors/%s.wsa" % k, 0) if v == 1 else \
        size.get("deltas/%s.wsd" % k, 0)
    man = size.get("manifests/%s.json" % k, 0) + size.get("HEAD", 0)
    m0 = float(marker[str(v)])
    print("%d\t%.3f\t%.3f\t%d\t%d" % (v, published[v] - m0, applied[v] - m0, obj, man))
