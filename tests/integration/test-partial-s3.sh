#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-partial-s3: partial subscribers ([subscriber] include) on an S3
# bucket (s3rver, tests/s3rver).  A publisher (an anchor every 3 versions)
# publishes four checkpoints of two ~14 MB shards into s3rver; a full
# subscriber reads s3rver directly, a partial one taking shard 1 and
# config.json reads it through tests/integration/faultproxy.py, which logs
# every request (its Range header, the bytes of the reply).  Then:
#  - the partial target holds exactly its files, byte for byte, and a junk
#    shard outside its set untouched;
#  - every GET of an object (anchors/, deltas/) by the partial subscriber
#    was a ranged GET of at most 8 MiB, shard 1's range in the anchor (over
#    8 MiB) in several GETs of whole pieces, and the bytes of their replies are what its
#    status counts: well below the objects' sizes (<= 60%, the objects
#    hold two shards of about the same size) and below the full one's;
#  - a late partial subscriber catches up from the anchor (version 4),
#    exact on its files.
# No s3rver (node, tests/s3rver/node_modules): the test says so and SKIPs.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"

s3servers_trap_exit
have_s3rver || { echo "1..0 # SKIP $S3S_WHY"; exit 0; }

CK=$TMP/ck
gen_ckpts "$CK" --params 14M --steps 4 --shards 2
SHARD1=model-00001-of-00002.safetensors
SHARD2=model-00002-of-00002.safetensors

read -r port < <(free_ports 1)
s3rver_start "$TMP/s3rver" "$port" wsync-part || { tap_result 1 "s3rver started"; tap_done; exit 1; }
tap_result 0 "s3rver started"
faultproxy_start "$TMP/proxy" "$S3RVER_PORT" || { tap_result 1 "faultproxy started"; tap_done; exit 1; }
tap_result 0 "faultproxy started"
DIRECT=$(s3rver_store s3://wsync-part/m)
PROXIED=$(STORE_ENDPOINT=$FAULTPROXY_URL s3rver_store s3://wsync-part/m)

mkdir -p "$TMP/pub/train"
write_ini "$TMP/pub.ini" publisher "$TMP/pub" "$DIRECT" "[publisher]" \
	"watch_dir = $TMP/pub/train" "settle_time = 200ms" "anchor_every = 3"
sub() { # sub NAME STORE [LINE...]
	local n=$1 st=$2
	shift 2
	mkdir -p "$TMP/$n"
	write_ini "$TMP/$n.ini" subscriber "$TMP/$n" "$st" "[subscriber]" \
		"target_dir = $TMP/$n/model" "poll_interval = 200ms" "$@"
}
sub full "$DIRECT"
sub part "$PROXIED" "include = $SHARD1 config.json"
mkdir -p "$TMP/part/model"
head -c 5000 /dev/urandom >"$TMP/part/model/$SHARD2"
cp "$TMP/part/model/$SHARD2" "$TMP/junk2"

start pub
start full
start part
for s in 1 2 3 4; do
	put_ckpt "$CK/checkpoint-$s" "$TMP/pub/train/checkpoint-$s"
	check "checkpoint-$s: the full subscriber reaches it" wait_version full $s 90
	check "checkpoint-$s: the partial one too" wait_version part $s 90
done
C4=$CK/checkpoint-4
check "the partial target's files are the checkpoint's" same_files "$C4" "$TMP/part/model" "$SHARD1" config.json
check "it holds nothing else of the checkpoint" only_files "$TMP/part/model" "$SHARD1" config.json "$SHARD2"
check "the junk shard outside its set is untouched" cmp -s "$TMP/junk2" "$TMP/part/model/$SHARD2"
check "the full subscriber is byte-identical" bash -c \
	"diff -r -x .wsync -x 'optimizer*' -x scheduler.pt -x 'rng_state*' -x training_args.bin '$C4' '$TMP/full/model' >/dev/null"

# The full subscriber downloaded the same objects (anchor 1, deltas 2..4)
# whole: its count is their sizes' sum.
PART_B=$(field part bytes_downloaded)
FULL_B=$(field full bytes_downloaded)
# ranges REPORT: from the proxy's log, the partial subscriber's GETs of
# objects: each with a Range of at most 8 MiB; the sum of reply bytes; how
# the longest range asked
"$PYTHON3" - "$FAULTPROXY_LOG" "$TMP/ranges" <<'PY'
import json, re, sys
req, resp = {}, {}
for l in open(sys.argv[1]):
    e = json.loads(l)
    k = (e["conn"], e["seq"])
    (req if e["event"] == "request" else resp)[k] = e
bad, total, n, per, anchor_gets = [], 0, 0, {}, 0
for k, e in req.items():
    if e["method"] != "GET" or not re.search(r"/(anchors|deltas)/", e["path"]):
        continue
    n += 1
    anchor_gets += "/anchors/" in e["path"]
    r = resp.get(k, {})
    total += r.get("body_bytes", 0)
    m = re.fullmatch(r"bytes=(\d+)-(\d+)", e["range"] or "")
    if not m:
        bad.append("no range: %s %s" % (e["path"], e["range"]))
    elif int(m.group(2)) - int(m.group(1)) + 1 > 8 << 20:
        bad.append("range over 8 MiB: %s %s" % (e["path"], e["range"]))
    else:
        per[e["path"]] = max(per.get(e["path"], 0), int(m.group(2)) - int(m.group(1)) + 1)
with open(sys.argv[2], "w") as f:
    f.write("%d %d %d %d\n" % (n, total, max(per.values()) if per else 0, anchor_gets))
    for b in bad:
        f.write("# %s\n" % b)
PY
read -r NGET GOT LONGEST NANCHOR <"$TMP/ranges"
sed -n '2,$p' "$TMP/ranges"
echo "# partial: $NGET object GETs, $GOT bytes in their replies, the longest range $LONGEST bytes; status: $PART_B bytes; full: $FULL_B"
check "the partial subscriber's object GETs were all ranged, of at most 8 MiB each" \
	test "$(wc -l <"$TMP/ranges")" = 1 -a "$NGET" -gt 0
check "shard 1's range in the anchor (> 8 MiB) took several GETs ($NANCHOR)" test "$NANCHOR" -ge 2 -a "$LONGEST" -le $((8 << 20))
check "its status counts the bytes of those replies" test "$PART_B" = "$GOT"
check "it downloaded at most 60% of the objects' bytes (the full subscriber's: $PART_B of $FULL_B)" \
	"$PYTHON3" -c "import sys; sys.exit(not (0 < $PART_B <= 0.60 * $FULL_B))"

# A late partial subscriber catches up from the anchor (anchors at 1, 4).
sub late "$PROXIED" "include = $SHARD2 config.json"
start late
check "a late partial subscriber catches up" wait_version late 4 90
check "... from the anchor" grep -q -- "-> 4: from the anchor" "$TMP/late/log"
check "... exact on its files" same_files "$C4" "$TMP/late/model" "$SHARD2" config.json
check "... and nothing else" only_files "$TMP/late/model" "$SHARD2" config.json
LATE_B=$(field late bytes_downloaded)
check "... downloading about half the anchor ($LATE_B bytes of $FULL_B for the full chain)" \
	"$PYTHON3" -c "import sys; sys.exit(not (0 < $LATE_B <= 0.60 * $FULL_B))"
for n in late part full pub; do stop $n; done
check "no sanitizer or crash report in any log" bash -c \
	"! grep -l -E 'ERROR: AddressSanitizer|runtime error|Segmentation' '$TMP'/*/log"
tap_done
