#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-parts-ahead: publisher parts announce their chunks as they go up
# (parts/<V>/<K>.next.json, BUCKET.md §7), part 1 merges them into a NEXT
# it signs (§4.1), and a full subscriber builds a version of parts ahead
# of its commit, on a file:// bucket.  WSYNC_TEST_CHUNK_PAUSE_MS makes
# every part's coder slow enough to watch.  Proves:
#  - two parts sharing a key: the subscriber builds files of both parts
#    ahead (status ahead_files > 0) while HEAD names the old version, the
#    target intact; then byte-identical, no temp left, the log saying
#    what came before the commit;
#  - part 2's announcement unsigned, signed by another key, or naming
#    chunks of another flight than its own: refused by part 1 (journal,
#    verification failures counted), none of it in NEXT; the version
#    still commits once part 2 is back, the subscriber exact;
#  - part 2 killed mid-announcement and restarted: the version completes
#    (what was built from its first flight dropped, or never claimed),
#    the subscriber byte-identical, no temp left;
#  - three parts with a key each (part_keys; the subscriber holds part
#    1's public key only): built ahead and exact; part 2's announcement
#    signed with part 1's key (not part 2's): refused, none of it in NEXT.
. "$(dirname "$0")/lib.sh"

CK=$TMP/ck
gen_ckpts "$CK" --params 20M --steps 6 --shards 4
BUCKET=$TMP/bucket
"$WSYNC" keygen "$TMP/wsync.key" >/dev/null
"$WSYNC" keygen "$TMP/other.key" >/dev/null
for k in 1 2 3; do "$WSYNC" keygen "$TMP/part$k.key" >/dev/null; done
WRITER=$("$WSYNC" -V | awk '{ print $1 " " $2; exit }')
TRAIN=$TMP/train
mkdir -p "$BUCKET" "$TRAIN"

# pub_ini NAME K N [LINE...]: part K of N, signing with the shared key
pub_ini() {
	local name=$1 k=$2 n=$3
	shift 3
	mkdir -p "$TMP/$name"
	write_ini "$TMP/$name.ini" publisher "$TMP/$name" "url = file://$BUCKET" \
		"[publisher]" "watch_dir = $TRAIN" "settle_time = 200ms" \
		"watch_mode = poll" "rescan_interval = 200ms" "anchor_every = 1000" \
		"part = $k/$n" "${SIGNING:-signing_key = $TMP/wsync.key}" "$@"
}
sub_ini() { # sub_ini NAME [LINE...]
	local name=$1
	shift
	mkdir -p "$TMP/$name"
	write_ini "$TMP/$name.ini" subscriber "$TMP/$name" "url = file://$BUCKET" \
		"[subscriber]" "target_dir = $TMP/$name/model" "poll_interval = 200ms" \
		"verify_key = ${VERIFY:-$TMP/wsync.key.pub}" "ahead_pace = off" "$@"
}
temps() { find "$TMP/$1/model" -name '.*.wsync-*' | wc -l; }
has_temps() { [ "$(temps "$1")" -gt 0 ]; }
same_as() { # same_as NAME STEP: exactly checkpoint STEP's shipped files
	local ref=$CK/checkpoint-$2 t=$TMP/$1/model f n=0
	for f in "$ref"/*; do
		case ${f##*/} in optimizer* | scheduler.pt | rng_state*.pth | training_args.bin) continue ;; esac
		cmp -s "$f" "$t/${f##*/}" || { echo "# ${f##*/} differs from checkpoint-$2"; return 1; }
		n=$((n + 1))
	done
	[ "$(find "$t" -path "$t/.wsync" -prune -o -type f ! -name '.*.wsync-*' -print | wc -l)" = "$n" ] ||
		{ echo "# $t has other files"; return 1; }
}
verify_failures() { grep -o '^wsync_verification_failures_total{[^}]*} [0-9]*' "$TMP/$1/run/wsync.prom" | awk '{ s += $NF } END { print s + 0 }'; }
failures_at_least() { # NAME N: NAME counted N verification failures or more
	local n
	n=$(verify_failures "$1")
	[ "$n" -ge "$2" ] || { echo "# $1 counted $n verification failures, not $2 or more"; return 1; }
}
next_json() { sed '/^wsync-signature/d' "$BUCKET/NEXT"; }
# NEXT lists chunks of part K (parts/<V>/<K>-...) for version V
next_lists_part() {
	[ -e "$BUCKET/NEXT" ] && next_json | "$PYTHON3" -c '
import json, sys
n = json.load(sys.stdin)
pre = "parts/%012d/%s-" % (int(sys.argv[1]), sys.argv[2])
sys.exit(0 if n["version"] == int(sys.argv[1]) and
         any(c["key"].startswith(pre) for o in n["objects"] for c in o["chunks"]) else 1)' "$1" "$2"
}
built_ahead() { # NAME V: status says files of V are built ahead, HEAD older
	[ "$(field "$1" ahead_version)" = "$2" ] && [ "$(field "$1" ahead_files)" -gt 0 ] &&
		[ "$(head_version "$BUCKET")" -lt "$2" ]
}
# sign IN OUT KEY: IN's JSON (its signature line dropped) signed with KEY (BUCKET.md §5)
sign() {
	local body=$TMP/sign-body.json id sig
	sed '/^wsync-signature/d' "$1" >"$body"
	id=$(openssl pkey -in "$3" -pubout -outform DER | tail -c 32 | sha256sum | cut -c1-16)
	sig=$(openssl pkeyutl -sign -inkey "$3" -rawin -in "$body" | base64 -w0)
	{ cat "$body"; printf 'wsync-signature ed25519 %s %s\n' "$id" "$sig"; } >"$2"
}
# forged V STEP FLIGHT CHUNK_FLIGHT: an announcement of part 2 of 2 for
# version V at STEP, its one chunk's key under CHUNK_FLIGHT
forged() {
	printf '{"format":"wsync-part","format_version":1,"version":%d,"part":2,"parts":2,' "$1"
	printf '"run":0,"step":%d,"created":%d,"base_version":%d,"flight":"%s",' "$2" "$(date +%s)" $(($1 - 1)) "$3"
	printf '"writer":"%s","assign":"rule","listing":"0000000000000000","files":[],' "$WRITER"
	printf '"objects":[{"role":"delta","write_bytes":0,"chunks":[{"key":"parts/%012d/2-%s-00002.wsd",' "$1" "$4"
	printf '"size":100,"sha256":"%064d","path":"model-00002-of-00004.safetensors","pieces":[]}]}],' 0
	printf '"announce":"some"}\n'
}
put_ann() { # put_ann FILE V: as part 2's announcement of version V
	local key
	key=$(printf 'parts/%012d/2.next.json' "$2")
	mkdir -p "$BUCKET/${key%/*}"
	cp "$1" "$BUCKET/$key.tmp" && mv "$BUCKET/$key.tmp" "$BUCKET/$key"
}

# ---- 1. two parts, one key: built ahead of part 1's commit -------------------
pub_ini p1 1 2
pub_ini p2 2 2
sub_ini sub
start p1 WSYNC_TEST_CHUNK_PAUSE_MS=1500
start p2 WSYNC_TEST_CHUNK_PAUSE_MS=1500
start sub
put_ckpt "$CK/checkpoint-1" "$TRAIN/checkpoint-1"
check "version 1 (the anchor) applied" wait_version sub 1 120
check "byte-identical to checkpoint-1" same_as sub 1
put_ckpt "$CK/checkpoint-2" "$TRAIN/checkpoint-2"
check "part 1's NEXT lists part 2's chunks of version 2 before the commit" \
	wait_for 90 next_lists_part 2 2
check "the subscriber builds version 2 ahead (NEXT read)" \
	wait_for 60 in_log sub "version 2 (step 2) announced: building it ahead"
check "files built ahead while HEAD names version 1 (status ahead_files)" \
	wait_for 60 built_ahead sub 2
check "... the target still holds version 1, intact" same_as sub 1
check "version 2 applied" wait_version sub 2 120
check "byte-identical to checkpoint-2" same_as sub 2
check "no temp left" test "$(temps sub)" = 0
check "the log says what came before the commit" \
	grep -Eq 'version 2: [0-9]+ of [0-9]+ chunks fetched and [1-9][0-9]* files built before the commit' "$TMP/sub/log"
check "part 1 announced version 2 for both parts" \
	grep -q "version 2 (step 2) announced: [0-9]* chunks of 2 parts" "$TMP/p1/log"
check "the announcements are collected with the version's records" \
	wait_for 20 sh -c "! ls '$BUCKET/parts/000000000002/'*.next.json 2>/dev/null"

# ---- 2. part 2's announcement forged ----------------------------------------
stop p2 >/dev/null
fails0=$(verify_failures p1)
put_ckpt "$CK/checkpoint-3" "$TRAIN/checkpoint-3"
F1=$(printf '%032x' 1)
F2=$(printf '%032x' 2)
forged 3 3 "$F1" "$F1" >"$TMP/ann.json"
put_ann "$TMP/ann.json" 3
check "an unsigned announcement: refused by part 1" \
	wait_for 60 in_log p1 "refusing the announcement of part 2: .*not signed"
sign "$TMP/ann.json" "$TMP/ann.other" "$TMP/other.key"
put_ann "$TMP/ann.other" 3
check "one signed by another key: refused" \
	wait_for 30 in_log p1 "refusing the announcement of part 2: .*signed by key [0-9a-f]*, not by"
forged 3 3 "$F1" "$F2" >"$TMP/ann2.json"
sign "$TMP/ann2.json" "$TMP/ann.flight" "$TMP/wsync.key"
put_ann "$TMP/ann.flight" 3
check "one naming chunks of another flight than its own: refused" \
	wait_for 30 in_log p1 "refusing the announcement of part 2: .*not one of part 2's own for its flight"
check "... each counted as a verification failure" \
	wait_for 10 failures_at_least p1 $((${fails0:-0} + 3))
check "... and NEXT lists none of part 2's chunks for version 3" \
	sh -c "! grep -q 'parts/000000000003/2-' '$BUCKET/NEXT'"
check "nothing committed without part 2" test "$(head_version "$BUCKET")" = 2
start p2 WSYNC_TEST_CHUNK_PAUSE_MS=1500
check "part 2 back: version 3 applied" wait_version sub 3 120
check "byte-identical to checkpoint-3" same_as sub 3
check "no temp left" test "$(temps sub)" = 0
check "the subscriber refused nothing" test "$(verify_failures sub)" = 0

# ---- 3. part 2 killed mid-announcement ---------------------------------------
put_ckpt "$CK/checkpoint-4" "$TRAIN/checkpoint-4"
check "part 2's chunks of version 4 in NEXT" wait_for 90 next_lists_part 4 2
kill9 p2
check "killed before the commit" test "$(head_version "$BUCKET")" = 3
start p2 WSYNC_TEST_CHUNK_PAUSE_MS=500
check "restarted: version 4 applied" wait_version sub 4 150
check "byte-identical to checkpoint-4" same_as sub 4
check "no temp left" test "$(temps sub)" = 0
stop sub >/dev/null
stop p1 >/dev/null
stop p2 >/dev/null

# ---- 4. three parts, a key each ----------------------------------------------
BUCKET=$TMP/bucket3
TRAIN=$TMP/train3
mkdir -p "$BUCKET" "$TRAIN"
KEYS="part_keys = $TMP/part1.key.pub $TMP/part2.key.pub $TMP/part3.key.pub"
for k in 1 2 3; do SIGNING="signing_key = $TMP/part$k.key" pub_ini q$k $k 3 "$KEYS"; done
VERIFY=$TMP/part1.key.pub sub_ini sub3
for k in 1 2 3; do start q$k WSYNC_TEST_CHUNK_PAUSE_MS=1000; done
start sub3
put_ckpt "$CK/checkpoint-1" "$TRAIN/checkpoint-1"
check "part_keys: version 1 applied" wait_version sub3 1 120
put_ckpt "$CK/checkpoint-5" "$TRAIN/checkpoint-5"
check "part_keys: NEXT lists part 3's chunks (checked with part 3's key)" \
	wait_for 90 next_lists_part 2 3
check "part_keys: files built ahead while HEAD names version 1" \
	wait_for 60 built_ahead sub3 2
check "part_keys: version 2 applied" wait_version sub3 2 120
check "byte-identical to checkpoint-5" same_as sub3 5
check "the log says what came before the commit" \
	grep -Eq 'version 2: [0-9]+ of [0-9]+ chunks fetched and [1-9][0-9]* files built before the commit' "$TMP/sub3/log"
check "no temp left" test "$(temps sub3)" = 0
# part 2's announcement signed with part 1's key: with a key per part, not part 2's
stop q2 >/dev/null
put_ckpt "$CK/checkpoint-6" "$TRAIN/checkpoint-6"
forged 3 6 "$F1" "$F1" | sed 's/"parts":2/"parts":3/' >"$TMP/ann3.json"
sign "$TMP/ann3.json" "$TMP/ann3.signed" "$TMP/part1.key"
put_ann "$TMP/ann3.signed" 3
check "part_keys: part 2's announcement signed with part 1's key: refused" \
	wait_for 60 in_log q1 "refusing the announcement of part 2: .*signed by key [0-9a-f]*, not by"
check "... and NEXT lists none of part 2's chunks for version 3" \
	sh -c "! grep -q 'parts/000000000003/2-' '$BUCKET/NEXT'"
start q2 WSYNC_TEST_CHUNK_PAUSE_MS=1000
check "part_keys: part 2 back: version 3 applied" wait_version sub3 3 120
check "byte-identical to checkpoint-6" same_as sub3 6
check "no temp left" test "$(temps sub3)" = 0
stop_all
check "no sanitizer report in any daemon's log" \
	sh -c "! grep -l -E 'ERROR: AddressSanitizer|runtime error|LeakSanitizer' '$TMP'/*/log"
tap_done
