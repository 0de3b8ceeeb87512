#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""index-tamper.py BUCKET VERSION ROLE HOW [PATH] -- rewrite the index
(BUCKET.md section 3.1) of the ROLE object (delta, anchor) of an unsigned
file:// bucket's manifests/VERSION.json, then that manifest's size and
xxh128 in HEAD (which must name it), as a hostile publisher would:

  shift PATH    from PATH's entry on, each entry takes the range and the
                pieces of the next one, the last the bytes after it (the
                END record, one piece, its true SHA-256): every piece's
                SHA-256 matches the object, the ranges keep their order,
                but PATH's range holds another file's records
  past-end      the last entry's range (and its last piece) runs 100
                bytes past the object's end
  overlap PATH  PATH's range also covers the next entry's records (its
                pieces too), the next entry left as it was: two entries
                overlap
"""
import hashlib, json, os, subprocess, sys

bucket, version, role, how = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
path = sys.argv[5] if len(sys.argv) > 5 else None
mkey = "manifests/%012d.json" % version
mp = os.path.join(bucket, mkey)
text = open(mp, "rb").read().decode()
if "\nwsync-signature" in text:
    sys.exit("index-tamper.py: %s is signed" % mkey)
m = json.loads(text)
obj = [o for o in m["objects"] if o["role"] == role][0]
fs = obj["index"]["files"]
data = open(os.path.join(bucket, obj["key"]), "rb").read()
at = [f["path"] for f in fs].index(path) if path else None

if how == "shift":
    ranges = [(f["offset"], f["length"], f["pieces"]) for f in fs]
    end = fs[-1]["offset"] + fs[-1]["length"]
    tail = data[end:]
    ranges.append((end, len(tail), [[len(tail), hashlib.sha256(tail).hexdigest()]]))
    for i in range(at, len(fs)):
        fs[i]["offset"], fs[i]["length"], fs[i]["pieces"] = ranges[i + 1]
elif how == "past-end":
    fs[-1]["length"] += 100
    fs[-1]["pieces"][-1][0] += 100
elif how == "overlap":
    fs[at]["length"] += fs[at + 1]["length"]
    fs[at]["pieces"] = fs[at]["pieces"] + fs[at + 1]["pieces"]
else:
    sys.exit("index-tamper.py: unknown HOW %s" % how)
open(mp, "wb").write((json.dumps(m, indent=1) + "\n").encode())

hp = os.path.join(bucket, "HEAD")
head = json.loads(open(hp, "rb").read().decode())
if head["manifest"]["key"] != mkey:
    sys.exit("index-tamper.py: HEAD does not name %s" % mkey)
xxh = subprocess.run(["xxh128sum", mp], capture_output=True, text=True, check=True).stdout.split()[0]
head["manifest"]["size"] = os.path.getsize(mp)
head["manifest"]["xxh128"] = xxh
open(hp + ".new", "wb").write((json.dumps(head, indent=1) + "\n").encode())
os.rename(hp + ".new", hp)
