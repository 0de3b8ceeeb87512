#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-partial: partial subscribers ([subscriber] include / exclude) on a
# file:// bucket.  A publisher (an anchor every 3 versions) publishes five
# checkpoints of four shards; a full subscriber and a partial one taking
# one shard and config.json follow from the start; a second partial one
# starts late and catches up from an anchor.  Then:
#  - each partial target holds exactly its files, byte for byte, and files
#    outside its set (a junk shard, a file of the operator's) untouched;
#  - its state lists only its files; status and metrics count bytes it
#    received, at most ~30% of what the full subscriber received;
#  - include widened between runs, and again by a reload, brings the new
#    shards in (from the anchor), leaves the junk alone;
#  - a bucket written without indexes (WSYNC_TEST_NO_INDEX) is read too:
#    whole objects, the files cut out of them;
#  - a byte flipped inside a taken file's range of a delta is refused
#    (VERIFY_FAILED), the target keeps its version; a flip outside its
#    files is not its business;
#  - an include taking no weight file is refused (--check-config, then
#    wsyncd at start: exit 78) with a clear error and
#    nothing written.
. "$(dirname "$0")/lib.sh"

CK=$TMP/ck
gen_ckpts "$CK" --params 4M --steps 5 --shards 4
SHARD1=model-00001-of-00004.safetensors
SHARD2=model-00002-of-00004.safetensors
SHARD4=model-00004-of-00004.safetensors

ini() { # ini NAME ROLE BUCKET [LINE...]: $TMP/NAME.ini, lines after the role's section
	local name=$1 role=$2 bucket=$3
	shift 3
	{
		echo "[daemon]"
		echo "role = $role"
		echo "state_dir = $TMP/$name/state"
		echo "runtime_dir = $TMP/$name/run"
		echo "threads = 1"
		echo "[store]"
		echo "url = file://$bucket"
		if [ "$role" = publisher ]; then
			echo "[publisher]"
			echo "watch_dir = $TMP/$name/train"
			echo "settle_time = 200ms"
			echo "anchor_every = 3"
		else
			echo "[subscriber]"
			echo "target_dir = $TMP/$name/model"
			echo "poll_interval = 200ms"
		fi
		for l in "$@"; do echo "$l"; done
	} >"$TMP/$name.ini"
	mkdir -p "$TMP/$name"
}
put() { # put PUBNAME STEP: checkpoint-STEP into its watch_dir, marker last
	put_ckpt "$CK/checkpoint-$2" "$TMP/$1/train/checkpoint-$2"
}
state_files() { # the paths the state lists
	"$PYTHON3" -c 'import json,sys; print("\n".join(sorted(f["path"] for f in json.load(open(sys.argv[1]))["files"])))' \
		"$TMP/$1/model/.wsync/state.json"
}

# ---- the indexed bucket --------------------------------------------------
B=$TMP/bucket
mkdir -p "$B"
ini pub publisher "$B"
mkdir -p "$TMP/pub/train"
ini full subscriber "$B"
ini part subscriber "$B" "include = $SHARD1 config.json"
# Files of the operator's and a junk shard outside the set: never touched.
mkdir -p "$TMP/part/model"
echo "the operator's notes" >"$TMP/part/model/NOTES.txt"
head -c 4096 /dev/urandom >"$TMP/part/model/$SHARD4"
cp "$TMP/part/model/$SHARD4" "$TMP/junk4"

start pub
start full
start part
for s in 1 2 3 4 5; do
	put pub $s
	check "checkpoint-$s: the full subscriber reaches it" wait_version full $s 60
	check "checkpoint-$s: the partial one too" wait_version part $s 60
done
C5=$CK/checkpoint-5
check "the partial target's files are the checkpoint's" same_files "$C5" "$TMP/part/model" "$SHARD1" config.json
check "it holds nothing else of the checkpoint" only_files "$TMP/part/model" "$SHARD1" config.json NOTES.txt "$SHARD4"
check "files outside its set are untouched" bash -c "cmp -s '$TMP/junk4' '$TMP/part/model/$SHARD4' && grep -q notes '$TMP/part/model/NOTES.txt'"
lists() { [ "$(state_files "$1" | tr '\n' ' ')" = "$2" ]; }
check "its state lists only its files" lists part "config.json $SHARD1 "
check "the full subscriber is byte-identical" bash -c \
	"diff -r -x .wsync -x 'optimizer*' -x scheduler.pt -x 'rng_state*' -x training_args.bin '$C5' '$TMP/full/model' >/dev/null"
FULL_B=$(field full bytes_downloaded)
PART_B=$(field part bytes_downloaded)
check "the partial subscriber downloaded at most 30% of the full one's bytes ($PART_B of $FULL_B)" \
	"$PYTHON3" -c "import sys; sys.exit(not (0 < $PART_B <= 0.30 * $FULL_B))"
check "its metrics say the same" bash -c \
	"grep -q '^wsync_bytes_downloaded_total{role=\"subscriber\",instance=\"part\"} $PART_B\$' '$TMP/part/run/wsync.prom'"

# A late partial subscriber catches up from the anchor (versions 1..5,
# anchors at 1 and 4).
ini late subscriber "$B" "include = $SHARD2 config.json"
start late
check "a late partial subscriber catches up" wait_version late 5 60
check "... from the anchor, exact on its files" same_files "$C5" "$TMP/late/model" "$SHARD2" config.json
check "... and nothing else" only_files "$TMP/late/model" "$SHARD2" config.json

# ---- include changed between runs --------------------------------------
stop part
ini part subscriber "$B" "include = $SHARD1 $SHARD2 config.json"
start part
check "include widened: the new shard comes in" wait_for 60 same_files "$C5" "$TMP/part/model" "$SHARD1" "$SHARD2" config.json
check "... the node stays at the version" wait_version part 5 60
check "... its state lists the new set" lists part "config.json $SHARD1 $SHARD2 "
check "... the junk shard is still untouched" cmp -s "$TMP/junk4" "$TMP/part/model/$SHARD4"

# ---- include changed by a reload (SIGHUP): same process, from the next poll
SHARD3=model-00003-of-00004.safetensors
ini part subscriber "$B" "include = $SHARD1 $SHARD2 $SHARD3 config.json"
PARTPID=${DPID[part]}
kill -HUP "$PARTPID"
check "reload: the third shard comes in" wait_for 60 same_files "$C5" "$TMP/part/model" "$SHARD1" "$SHARD2" "$SHARD3" config.json
check "... by the same process" kill -0 "$PARTPID"
check "... which said so" grep -q "include and exclude from the next poll" "$TMP/part/log"
check "... its state lists the new set" lists part "config.json $SHARD1 $SHARD2 $SHARD3 "
check "... the junk shard still untouched" cmp -s "$TMP/junk4" "$TMP/part/model/$SHARD4"

# ---- hostile: a flipped byte inside a taken file's range ----------------
stop pub
# checkpoint-6: checkpoint-5's files with shards 1 and 4 changed a little
mkdir -p "$TMP/ck6src"
cp "$C5"/* "$TMP/ck6src/"
"$PYTHON3" - "$TMP/ck6src/$SHARD1" "$TMP/ck6src/$SHARD4" <<'PY'
import sys
for p in sys.argv[1:]:
    b = bytearray(open(p, "rb").read())
    for i in range(len(b) - 64, len(b) - 4096, -97):   # tensor bytes near the end
        b[i] ^= 1
    open(p, "wb").write(b)
PY
start pub
put_ckpt "$TMP/ck6src" "$TMP/pub/train/checkpoint-6"
check "checkpoint-6 reaches the full subscriber" wait_version full 6 60
check "and the partial ones" wait_version part 6 60
check "the late one too" wait_version late 6 60
check "the partial target has checkpoint-6's files" same_files "$TMP/ck6src" "$TMP/part/model" "$SHARD1" "$SHARD2" config.json
stop pub
stop part
# Tamper with version 7's delta: flip a byte inside shard 1's range.
mkdir -p "$TMP/ck7src"
cp "$TMP/ck6src"/* "$TMP/ck7src/"
"$PYTHON3" - "$TMP/ck7src/$SHARD1" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
for i in range(len(b) - 64, len(b) - 8192, -89):
    b[i] ^= 2
open(p, "wb").write(b)
PY
start pub
put_ckpt "$TMP/ck7src" "$TMP/pub/train/checkpoint-7"
check "checkpoint-7 published" wait_step pub 7 60
stop pub
stop late
"$PYTHON3" - "$B" "$SHARD1" <<'PY'
import json, re, sys
bucket, shard = sys.argv[1:3]
m = json.loads(open(bucket + "/manifests/000000000007.json").read().split("\nwsync-signature")[0])
obj = [o for o in m["objects"] if o["role"] == "delta"][0]
r = [f for f in obj["index"]["files"] if f["path"] == shard][0]
at = r["offset"] + r["length"] - 10      # inside its last piece
p = bucket + "/" + obj["key"]
b = bytearray(open(p, "rb").read())
b[at] ^= 0x40
open(p, "wb").write(b)
PY
start part
check "a flipped byte in a taken file's range is refused as it arrives" wait_for 30 grep -q "the piece at byte [0-9]* ([0-9]* bytes) does not match its SHA-256" "$TMP/part/log"
check "... the target stays at version 6" test "$(field part version)" = 6
check "... its files are checkpoint-6's" same_files "$TMP/ck6src" "$TMP/part/model" "$SHARD1" "$SHARD2"
start late
check "a node that does not take that file applies version 7" wait_version late 7 60
check "... exact on its files" same_files "$TMP/ck7src" "$TMP/late/model" "$SHARD2" config.json
stop part
stop late
stop full

# ---- a bucket written without indexes ----------------------------------
B2=$TMP/bucket2
mkdir -p "$B2"
ini pub2 publisher "$B2"
mkdir -p "$TMP/pub2/train"
ini old subscriber "$B2" "include = $SHARD1 config.json"
start pub2 WSYNC_TEST_NO_INDEX=1
start old
for s in 1 2; do
	put pub2 $s
	check "no index, checkpoint-$s: the partial subscriber reaches it" wait_version old $s 60
done
check "the manifests have no index" bash -c "! grep -q '\"index\"' '$B2'/manifests/*.json"
check "its files are the checkpoint's, cut from whole objects" same_files "$CK/checkpoint-2" "$TMP/old/model" "$SHARD1" config.json
check "... and nothing else" only_files "$TMP/old/model" "$SHARD1" config.json
stop old

# ---- an include that takes no weight file -------------------------------
ini noweights subscriber "$B2" "include = config.json"
expect_exit 78 "an include taking no weight file fails --check-config" \
	"$WSYNCD" --check-config "$TMP/noweights.ini"
contains "... saying so" "$OUT" '[subscriber] include: "config.json" takes no weight file'
start noweights
wait "${DPID[noweights]}"
rc=$?
unset 'DPID[noweights]'
check "... and wsyncd refuses it at start: exit 78 ($rc)" test "$rc" -eq 78
check "... saying so" grep -q 'takes no weight file' "$TMP/noweights/log"
check "... with nothing written" bash -c "[ ! -e '$TMP/noweights/model/config.json' ]"
stop pub2
check "no sanitizer or crash report in any log" bash -c \
	"! grep -l -E 'ERROR: AddressSanitizer|runtime error|Segmentation' '$TMP'/*/log"
tap_done
