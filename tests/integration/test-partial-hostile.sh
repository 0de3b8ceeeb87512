#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-partial-hostile: hostile indexes (BUCKET.md section 3.1) against a
# partial subscriber ([subscriber] include).  An unsigned file:// bucket
# holds versions 1..3 (wsync publish, one anchor); a partial target
# (include = shard 1, config.json, tokenizer_config.json,
# trainer_state.json) at version 2.  Then version 3's manifest is
# rewritten, HEAD's size and xxh128 of it too (tests/integration/
# index-tamper.py), and `wsync pull` must refuse version 3 -- exit 65, the
# refusal (VERIFY_FAILED: "version 3 refused: ..."; the daemon's journal
# gets the MESSAGE_ID) -- with the target's files and marker those of
# version 2 and no temp left:
#  - shard 1's range holding shard 2's records (every piece's SHA-256 right,
#    the ranges in order, each later range shifted likewise): the record's
#    path does not match the index's (a node taking shard 1 and
#    config.json); the last taken range then holding the object's END
#    record (a node taking trainer_state.json too), or trainer_state.json's
#    alone: not the records of a file;
#  - the last file's range past the object's end: refused at parse;
#  - shard 1's range overlapping shard 2's: refused at parse;
#  - a byte flipped inside shard 1's range of the object: refused by the
#    piece's SHA-256, while a partial node not taking shard 1 applies
#    version 3 exactly;
# and a bucket of the same versions written without indexes
# (WSYNC_TEST_NO_INDEX) is still read by the partial subscriber.
. "$(dirname "$0")/lib.sh"

HERE=$(cd "$(dirname "$0")" && pwd)
CK=$TMP/ck
gen_ckpts "$CK" --params 1M --steps 3 --shards 3 --no-trainer-files
S1=model-00001-of-00003.safetensors
S2=model-00002-of-00003.safetensors
INC="$S1 config.json tokenizer_config.json trainer_state.json"

B=$TMP/bucket
mkdir -p "$B" "$TMP/pub/watch"
write_ini "$TMP/pub.ini" publisher "$TMP/pub" "url = file://$B" "[publisher]" \
	"watch_dir = $TMP/pub/watch" "anchor_every = 10"
for v in 1 2 3; do
	"$WSYNC" publish --config "$TMP/pub.ini" "$CK/checkpoint-$v" >/dev/null 2>>"$TMP/pub.log" ||
		{ echo "Bail out! publishing checkpoint-$v failed"; exit 1; }
	cp "$B/HEAD" "$TMP/head$v"
done
check "the manifests have indexes" grep -q '"index"' "$B/manifests/000000000003.json"

# sub NAME BUCKET INCLUDE: a subscriber's config for $TMP/NAME/target
sub() {
	mkdir -p "$TMP/$1/state" "$TMP/$1/run"
	write_ini "$TMP/$1/sub.ini" subscriber "$TMP/$1" "url = file://$2"$'\n'"retry_attempts = 1" \
		"[subscriber]" "target_dir = $TMP/$1/target" "poll_interval = 200ms" "include = $3"
}
no_temps() { ! find "$1" \( -name '.*.wsync-*' -o -name '*.part' \) | grep -q .; }
marker_version() {
	"$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' \
		"$1/.wsync/state.json" 2>/dev/null || echo none
}

# the partial targets at version 2: g2 takes $INC, g2s shard 1 and
# config.json only
cp "$TMP/head2" "$B/HEAD"
sub g2 "$B" "$INC"
"$WSYNC" pull --config "$TMP/g2/sub.ini" >/dev/null 2>"$TMP/g2.log"
check "a partial target pulls version 2" same_files "$CK/checkpoint-2" "$TMP/g2/target" $INC
check "... and nothing else" only_files "$TMP/g2/target" $INC
sub g2s "$B" "$S1 config.json"
"$WSYNC" pull --config "$TMP/g2s/sub.ini" >/dev/null 2>"$TMP/g2s.log"
check "a smaller partial target pulls version 2" same_files "$CK/checkpoint-2" "$TMP/g2s/target" $S1 config.json
cp "$TMP/head3" "$B/HEAD"

NCASE=0
# hostile WHAT TEXT TAMPER...: version 3 of a copy of the bucket damaged by
# TAMPER (a command; @B is the copy), then a pull from version 2 refused
# with TEXT in its error, version 2 kept whole.  The target is a copy of
# g2 ($INC), or with SMALL=1 of g2s (shard 1 and config.json).
hostile() {
	local what=$1 text=$2 c rc INC=$INC g=g2
	shift 2
	[ -z "${SMALL:-}" ] || { INC="$S1 config.json"; g=g2s; }
	NCASE=$((NCASE + 1))
	c=$TMP/case$NCASE
	mkdir -p "$c"
	cp -a "$B" "$c/bucket"
	"${@//@B/$c/bucket}" || { tap_result 1 "$what: tampering"; return; }
	sub "case$NCASE" "$c/bucket" "$INC"
	cp -a "$TMP/$g/target" "$c/target"
	local before
	before=$(cat "$c/target/.wsync/state.json")
	"$WSYNC" pull --config "$c/sub.ini" >"$c/out" 2>"$c/err"
	rc=$?
	echo "# $what: exit $rc: $(grep -m1 'wsync pull:' "$c/err" | cut -c1-220)"
	check "$what: refused (exit 65, \"version 3 refused\")" \
		bash -c "[ $rc = 65 ] && grep -q 'wsync pull: version 3 refused: ' '$c/err'"
	check "$what: the error says why ($text)" grep -q -- "$text" "$c/err"
	check "$what: the target keeps version 2's files" same_files "$CK/checkpoint-2" "$c/target" $INC
	check "$what: ... and nothing else, no temp" bash -c \
		"$(declare -f only_files no_temps); only_files '$c/target' $INC && no_temps '$c/target'"
	check "$what: the marker is unchanged" test "$(cat "$c/target/.wsync/state.json")" = "$before"
}
tamper() { "$PYTHON3" "$HERE/index-tamper.py" "$@"; }
SMALL=1 hostile "shard 1's range holds shard 2's records" "range of $S1 holds the records of $S2" \
	tamper @B 3 delta shift "$S1"
hostile "shard 1's range holds shard 2's records, the last taken range the END record" \
	"not a FILE, SEGMENT or FILE_END record" tamper @B 3 delta shift "$S1"
hostile "trainer_state.json's range holds the END record" "not a FILE, SEGMENT or FILE_END record" \
	tamper @B 3 delta shift trainer_state.json
hostile "a range past the object's end" "is not inside the object's" \
	tamper @B 3 delta past-end
hostile "two files' ranges overlap" "inside what comes before it" \
	tamper @B 3 delta overlap "$S1"
flip() { # flip BUCKET: a byte inside shard 1's range of version 3's delta
	"$PYTHON3" - "$1" "$S1" <<'PY'
import json, sys
bucket, shard = sys.argv[1:3]
m = json.loads(open(bucket + "/manifests/000000000003.json").read().split("\nwsync-signature")[0])
obj = [o for o in m["objects"] if o["role"] == "delta"][0]
r = [f for f in obj["index"]["files"] if f["path"] == shard][0]
p = bucket + "/" + obj["key"]
b = bytearray(open(p, "rb").read())
b[r["offset"] + r["length"] // 2] ^= 0x10
open(p, "wb").write(b)
PY
}
hostile "a flipped byte in shard 1's range" "does not match its SHA-256" flip @B
# a node not taking shard 1 applies that same damaged version 3
sub other "$TMP/case$NCASE/bucket" "$S2 config.json"
"$WSYNC" pull --config "$TMP/other/sub.ini" >/dev/null 2>"$TMP/other.log"
check "a node not taking shard 1 applies the damaged bucket's version 3" \
	test "$?:$(marker_version "$TMP/other/target")" = 0:3
check "... exact on its files, nothing else" bash -c \
	"$(declare -f same_files only_files); same_files '$CK/checkpoint-3' '$TMP/other/target' $S2 config.json && only_files '$TMP/other/target' $S2 config.json"

# the daemon: the refusal is a VERIFY_FAILED journal entry, and retried
VF=$(mid VERIFY_FAILED)
sub hd "$TMP/case1/bucket" "$S1 config.json"
cp -a "$TMP/g2s/target" "$TMP/hd/target"
journal_start hdj "$TMP/hd/j.sock" "$TMP/hd/journal.jsonl"
start -c "$TMP/hd/sub.ini" -l "$TMP/hd/log" hd WSYNC_JOURNAL_SOCKET="$TMP/hd/j.sock"
has_vf() {
	"$PYTHON3" -c 'import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    if e.get("MESSAGE_ID") == sys.argv[2] and "version 3 refused" in e.get("MESSAGE", "") \
            and "holds the records of" in e.get("MESSAGE", ""):
        sys.exit(0)
sys.exit(1)' "$TMP/hd/journal.jsonl" "$VF" 2>/dev/null
}
check "wsyncd: the shifted index is a VERIFY_FAILED entry in the journal" wait_for 20 has_vf
stop hd
check "wsyncd: the target keeps version 2" bash -c \
	"$(declare -f same_files); same_files '$CK/checkpoint-2' '$TMP/hd/target' $S1 config.json && [ \"\$(cat '$TMP/hd/target/.wsync/state.json')\" = \"\$(cat '$TMP/g2s/target/.wsync/state.json')\" ]"

# ---- a bucket written without indexes, read by the partial subscriber ---
B2=$TMP/bucket2
mkdir -p "$B2" "$TMP/pub2/watch"
write_ini "$TMP/pub2.ini" publisher "$TMP/pub2" "url = file://$B2" "[publisher]" \
	"watch_dir = $TMP/pub2/watch" "anchor_every = 10"
for v in 1 2 3; do
	WSYNC_TEST_NO_INDEX=1 "$WSYNC" publish --config "$TMP/pub2.ini" "$CK/checkpoint-$v" \
		>/dev/null 2>>"$TMP/pub2.log"
	if [ "$v" = 2 ]; then
		sub old "$B2" "$INC"
		"$WSYNC" pull --config "$TMP/old/sub.ini" >/dev/null 2>"$TMP/old.log"
		check "no index: the partial subscriber pulls version 2" \
			test "$?:$(marker_version "$TMP/old/target")" = 0:2
	fi
done
check "no index: the manifests have none" bash -c "! grep -q '\"index\"' '$B2'/manifests/*.json"
"$WSYNC" pull --config "$TMP/old/sub.ini" >/dev/null 2>>"$TMP/old.log"
check "no index: version 3 by a delta cut to its files" \
	test "$?:$(marker_version "$TMP/old/target")" = 0:3
check "no index: exact on its files, nothing else" bash -c \
	"$(declare -f same_files only_files); same_files '$CK/checkpoint-3' '$TMP/old/target' $INC && only_files '$TMP/old/target' $INC"
check "no sanitizer report in any log" bash -c \
	"! grep -l -E 'ERROR: AddressSanitizer|runtime error' '$TMP'/*.log '$TMP'/*/err '$TMP'/*/log 2>/dev/null"
tap_done
