#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-inspect-bucket: `wsync inspect` on what a bucket holds.  Every key
# of two buckets -- one publisher's, objects in chunks; two publisher
# parts', with part records and writer leases -- is said for what it is,
# exit 0: a chunk as chunk N of which object of which version and where
# in it, an object by its manifest key (no such file: it is fetched chunk
# by chunk, checked, and listed exactly as the chunks put together by hand
# are), a manifest, HEAD, NEXT, a part record and its chunks, a writer
# lease.  A bucket URL and --version show the version's step, base, files
# with their sizes and each object's records, on file:// and on s3://
# (s3rver, when it is installed); HEAD's version without --version.  The
# delta's format reads as one ("format 4"), and a FLOAT piece costs its
# share of the segment's streams, never "0 bytes"; an anchor's tensors
# are named from its own headers, a delta's with --names DIR.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"
s3servers_trap_exit

gen_ckpts "$TMP/src" --params 2M --steps 3 --shards 2
B=$TMP/bucket
printf '[daemon]\nrole = publisher\nstate_dir = %s\nruntime_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\nchunk_size = 1MiB\n' \
	"$TMP/st" "$TMP/run" "$B" "$TMP/w" >"$TMP/pub.ini"
mkdir -p "$TMP/w"
for v in 1 2 3; do
	expect_exit 0 "version $v published" "$WSYNC" publish --config "$TMP/pub.ini" "$TMP/src/checkpoint-$v"
done
check "the anchor is stored in chunks" test -f "$B/anchors/000000000001-00002.wsa"
check "... and has no file of its own" test ! -e "$B/anchors/000000000001.wsa"

# ---- every key ----
keys=$(cd "$B" && find . -type f ! -name .wsync-lock | sed 's|^\./||' | sort)
for k in $keys; do
	expect_exit 0 "inspect $k: exit 0" "$WSYNC" inspect "$B/$k"
	case $k in
	anchors/*-0000[0-9].wsa) want="of anchors/000000000001.wsa, the anchor of version 1 (of" ;;
	deltas/*.wsd) want="wsync delta, format " ;;
	manifests/*) want=": the manifest of version " ;;
	HEAD) want="HEAD, the newest complete version: 3" ;;
	NEXT) want="NEXT, the version being uploaded (not committed)" ;;
	esac
	contains "... it says what it is" "$OUT" "$want"
done
expect_exit 0 "chunk 2 of the anchor" "$WSYNC" inspect "$B/anchors/000000000001-00002.wsa"
contains "... names chunk, object and version" "$OUT" "chunk 2 of anchors/000000000001.wsa, the anchor of version 1"
contains "... points at the whole object" "$OUT" "inspect the whole object by its key, anchors/000000000001.wsa"
expect_exit 0 "chunk 1 --json" "$WSYNC" inspect --json "$B/anchors/000000000001-00001.wsa"
check "... its offset is 0 and its size the file's" "$PYTHON3" -c '
import json, os, sys
d = json.loads(sys.argv[1])
assert d["what"] == "chunk" and d["chunk"] == 1 and d["version"] == 1, d
assert d["offset"] == 0 and d["size"] == os.path.getsize(sys.argv[2]), d
assert d["chunks"] >= 2, d' "$OUT" "$B/anchors/000000000001-00001.wsa"

# ---- an object by its manifest key ----
expect_exit 0 "the anchor by its manifest key (no such file)" "$WSYNC" inspect "$B/anchors/000000000001.wsa"
contains "... assembled from its chunks" "$OUT" "the anchor of version 1 (step 1), assembled from"
contains "... the format spelled as a format" "$OUT" "anchors/000000000001.wsa: wsync delta, format 4:"
"$WSYNC" inspect --json "$B/anchors/000000000001.wsa" >"$TMP/by-key.json"
cat "$B"/anchors/000000000001-0000?.wsa >"$TMP/by-hand.wsa"
"$WSYNC" inspect --json "$TMP/by-hand.wsa" >"$TMP/by-hand.json"
check "... listed as its chunks put together by hand" "$PYTHON3" -c '
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
del a["path"], b["path"]
assert a == b and len(a["files"]) >= 9, "differ"' "$TMP/by-key.json" "$TMP/by-hand.json"
cp "$B/anchors/000000000001-00002.wsa" "$TMP/chunk2"
printf 'x' | dd of="$B/anchors/000000000001-00002.wsa" bs=1 seek=100 conv=notrunc 2>/dev/null
expect_exit 65 "a chunk that does not match its manifest: exit 65" "$WSYNC" inspect "$B/anchors/000000000001.wsa"
contains "... naming it" "$OUT" "anchors/000000000001-00002.wsa: its bytes do not match the SHA-256"
cp "$TMP/chunk2" "$B/anchors/000000000001-00002.wsa"
expect_exit 1 "an object no manifest names" "$WSYNC" inspect "$B/anchors/000000000002.wsa"

# ---- a version by bucket URL ----
expect_exit 0 "file:// URL --version 2" "$WSYNC" inspect "file://$B" --version 2
contains "... the version and step" "$OUT" "the manifest of version 2 (step 2): a delta"
contains "... its base" "$OUT" "base: version 1"
contains "... its files and sizes" "$OUT" "model-00001-of-00002.safetensors"
contains "... then the delta's records" "$OUT" "deltas/000000000002.wsd: wsync delta, format 4"
case "$OUT" in *"FLOAT   BF16       0 bytes"* | *"FLOAT   BF16     0 bytes"*) r=1 ;; *) r=0 ;; esac
tap_result $r "... no FLOAT piece of 0 bytes"
expect_exit 0 "file:// URL --version 1: the anchor per tensor" "$WSYNC" inspect "file://$B" --version 1
check "... each shard named from the anchor's own headers" \
	test "$(grep -c "tensors, names from the delta's own header" <<<"$OUT")" = 2
expect_exit 0 "file:// URL --version 2 --names: the delta per tensor" \
	"$WSYNC" inspect "file://$B" --version 2 --names "$TMP/src/checkpoint-3"
contains "... named from the folder given (another step)" "$OUT" \
	"names from $TMP/src/checkpoint-3/model-00001-of-00002.safetensors"
contains "... changed elements counted" "$OUT" "CHANGED"
expect_exit 0 "file:// URL without --version: HEAD's" "$WSYNC" inspect "file://$B"
contains "... version 3" "$OUT" "the manifest of version 3 (step 3)"
expect_exit 0 "file:// URL --json" "$WSYNC" inspect --json "file://$B" --version 2
check "... version, files with sizes, per segment the FLOAT pieces' shares of the streams" "$PYTHON3" -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["version"] == 2 and d["base_version"] == 1 and d["step"] == 2, d["version"]
assert all(f["size"] > 0 for f in d["files"])
delta = d["objects"][0]["delta"]
n = 0
for f in delta["files"]:
    for s in f["segments"]:
        shares = [p["stream_share_bytes"] for p in s["pieces"] if p["method"] == "FLOAT"]
        if shares:
            n += 1
            assert all(x > 0 for x in shares), shares
            own = sum(p["payload_bytes"] for p in s["pieces"])
            assert abs(sum(shares) + own - s["payload_bytes"]) < s["payload_bytes"] * 0.2 + 64, (sum(shares), own, s["payload_bytes"])
assert n > 0, "no FLOAT piece"' "$OUT"
expect_exit 1 "a version not in the bucket" "$WSYNC" inspect "file://$B" --version 9
contains "... said so" "$OUT" "no such version in this bucket"
expect_exit 2 "--version with a path is a usage error" "$WSYNC" inspect "$B/HEAD" --version 2

# ---- publisher parts: part records, their chunks, writer leases ----
P=$TMP/pbucket
mkdir -p "$TMP/pw"
for k in 1 2; do
	printf '[daemon]\nrole = publisher\nstate_dir = %s\nruntime_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\npart = %s/2\nsettle_time = 0\n' \
		"$TMP/p$k/st" "$TMP/p$k/run" "$P" "$TMP/pw" "$k" >"$TMP/p$k.ini"
	mkdir -p "$DAEMONS/p$k"
done
# part 2 alone: its record waits in the bucket for the committer
start -c "$TMP/p2.ini" p2
put_ckpt "$TMP/src/checkpoint-1" "$TMP/pw/checkpoint-1"
if wait_for 60 test -f "$P/parts/000000000001/2.json"; then
	expect_exit 0 "a part record: exit 0" "$WSYNC" inspect "$P/parts/000000000001/2.json"
	contains "... says whose share of which version" "$OUT" "publisher part 2 of 2's record of its share of version 1 (step 1"
	expect_exit 0 "its announcement: exit 0" "$WSYNC" inspect "$P/parts/000000000001/2.next.json"
	contains "... says it is one, all chunks up" "$OUT" "publisher part 2 of 2's announcement (every chunk up) of its share of version 1"
	expect_exit 0 "a part record --json" "$WSYNC" inspect --json "$P/parts/000000000001/2.json"
	check "... with its files" "$PYTHON3" -c '
import json, sys
d = json.loads(sys.argv[1])
assert d["what"] == "part record" and d["part"] == 2 and d["version"] == 1 and d["files"], d' "$OUT"
else
	tap_result 1 "part 2 wrote its record"
fi
start -c "$TMP/p1.ini" p1
if wait_head "$P" 1 60; then
	tap_result 0 "two parts published version 1"
	# the parts keep writing (lease renewals, the committer's clean-up of
	# part records): frozen while their keys are listed and inspected;
	# the file store's own temps are not keys
	kill -STOP "${DPID[p1]}" "${DPID[p2]}"
	pkeys=$(cd "$P" && find . -type f ! -name .wsync-lock ! -name '.wsync-tmp.*' | sed 's|^\./||' | sort)
	for k in $pkeys; do
		expect_exit 0 "parts: inspect $k: exit 0" "$WSYNC" inspect "$P/$k"
		case $k in
		parts/*/[0-9].json) want="of 2's record of its share of version 1" ;;
		parts/*/[0-9].next.json) want="of 2's announcement (every chunk up) of its share of version 1" ;;
		parts/*) want="records publisher part" ;;
		writers/*) want="the writer lease of publisher part" ;;
		manifests/*) want="made by 2 publisher parts" ;;
		*) want=$k ;;
		esac
		contains "... it says what it is" "$OUT" "$want"
	done
	case "$pkeys" in *writers/2.json*) r=0 ;; *) r=1 ;; esac
	tap_result $r "... the leases were among them"
	expect_exit 0 "parts: the version by URL" "$WSYNC" inspect "file://$P" --version 1
	contains "... its anchor, assembled from the parts' chunks" "$OUT" "== the anchor of version 1"
	kill -CONT "${DPID[p1]}" "${DPID[p2]}"
else
	tap_result 1 "two parts published version 1"
	sed 's/^/# p1: /' "$DAEMONS/p1/log" | tail -20
fi
stop_all

# ---- s3:// ----
if have_s3rver; then
	read -r port < <(free_ports 1)
	if s3rver_start "$TMP/s3rver" "$port" wsync-insp; then
		s3rver_store s3://wsync-insp/run >/dev/null	# writes $TMP/s3.cred
		printf '[daemon]\nrole = subscriber\n[store]\n%s\n[subscriber]\ntarget_dir = %s\n' \
			"$(s3rver_store s3://wsync-insp/run)" "$TMP/t" >"$TMP/s3.ini"
		for k in $keys; do
			"$WSYNC" store put --config "$TMP/s3.ini" "$B/$k" "s3://wsync-insp/run/$k" >/dev/null 2>&1 ||
				echo "# put $k failed"
		done
		expect_exit 0 "s3:// URL --version 2" "$WSYNC" inspect s3://wsync-insp/run --version 2 --config "$TMP/s3.ini"
		contains "... the version" "$OUT" "the manifest of version 2 (step 2)"
		contains "... the delta's records" "$OUT" "deltas/000000000002.wsd: wsync delta, format 4"
		expect_exit 0 "s3:// URL, version 1: the anchor fetched chunk by chunk" \
			"$WSYNC" inspect s3://wsync-insp/run --version 1 --config "$TMP/s3.ini"
		contains "... its records" "$OUT" "anchors/000000000001.wsa: wsync delta, format 4"
	else
		tap_result 1 "s3rver started"
	fi
else
	echo "# no s3:// part: $S3S_WHY"
fi
tap_done
