#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-e2e-report.py WORK BACKEND SUBS CK_BYTES PARAMS: bench-e2e.sh's tables
# for one backend, from WORK/{e2e,comp,full,usage}-BACKEND.tsv.
import sys
work, b, subs, ck, params = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
def rows(name):
    return [l.split("\t") for l in open("%s/%s-%s.tsv" % (work, name, b)).read().splitlines()]
e2e = {int(r[0]): r for r in rows("e2e")}
comp = {int(r[0]): r for r in rows("comp")}
full = {int(r[0]): r for r in rows("full")}
print("\n%s bucket, %s params (%s bytes per checkpoint), %d subscribers\n" % (b, params, format(ck, ","), subs))
print("| step | e2e s (published) | delta bytes | full copy s (put + get) | encode s | transfer s | apply s | e2e ÷ (enc+xfer+apply) |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
a = e2e[1]
print("| 1 (anchor) | %s (%s) | %s | — | — | — | — | — |" % (a[2], a[1], format(int(a[3]), ",")))
rs = []
for v in sorted(comp):
    e, c, f = e2e[v], comp[v], full[v]
    parts = float(c[1]) + float(c[2]) + float(c[3])
    r = float(e[2]) / parts
    rs.append((float(e[2]), int(e[3]) + int(e[4]), float(f[1]) + float(f[2]), parts, r))
    print("| %d | %s (%s) | %s | %.2f (%s + %s) | %s | %s | %s | %.2f× |" % (
        v, e[2], e[1], format(int(e[3]), ","), float(f[1]) + float(f[2]), f[1], f[2],
        c[1], c[2], c[3], r))
n = len(rs)
print("| mean | %.2f | %s | %.2f | | | | %.2f× (goal ≤ 1.5×) |" % (
    sum(x[0] for x in rs) / n, format(sum(int(e2e[v][3]) for v in comp) // n, ","),
    sum(x[2] for x in rs) / n, sum(x[4] for x in rs) / n))
moved_w = sum(x[1] for x in rs) * (1 + subs)
moved_f = ck * n * (1 + subs)
print("\nbytes moved over %d delta steps (1 upload + %d downloads each; wsync's with manifests and HEAD): wsync %s, full copy %s (%.1f× less)"
      % (n, subs, format(moved_w, ","), format(moved_f, ","), moved_f / max(moved_w, 1)))
print("\n| daemon | CPU s | peak RSS MiB |")
print("|---|---:|---:|")
for line in open("%s/usage-%s.tsv" % (work, b)):
    n_, cpu, hwm = line.split()
    print("| %s | %s | %.0f%s |" % ("publisher" if n_ == "pub" else "subscriber " + n_, cpu,
                                   int(hwm) / 1024, "" if int(hwm) / 1024 < 256 else " (over 256)"))
