#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-partkeys: publisher parts with a key per part ([publisher]
# part_keys, BUCKET.md §7, THREATS.md "Publisher parts"), two parts by the
# rule on a file:// bucket.  Part 2 is the attacker: it holds its own key
# and can write the bucket.  Proves:
#  - `wsyncd --check-config` takes a part_keys of N public keys, the
#    part's own its signing_key's half, and refuses a private key, N-1
#    keys, one key twice, and another part's entry as its own;
#  - honest parts commit, subscribers (verify_key: part 1's) exact;
#  - part 2's record signed with another key (part 1's): refused, the
#    version waits (status and wsync_parts_missing name the part and the
#    reason), counted as a verification failure, nothing committed;
#  - part 2's record naming a file of part 1's share, re-signed with part
#    2's own key: refused;
#  - part 2's record naming chunk keys that are not its own (part 1's K
#    under parts/<V>/, ../HEAD, anchors/...), re-signed with its own key:
#    refused;
#  - the honest record put back: committed, subscribers exact.
. "$(dirname "$0")/lib.sh"

CK=$TMP/ck
gen_ckpts "$CK" --params 8M --steps 3 --shards 4
for k in 1 2 3; do "$WSYNC" keygen "$TMP/part$k.key" >/dev/null; done
BUCKET=$TMP/bucket
TRAIN=$TMP/train
mkdir -p "$BUCKET" "$TRAIN"
KEYS="part_keys = $TMP/part1.key.pub $TMP/part2.key.pub"

pub_ini() { # pub_ini NAME K [LINE...]: part K of 2 signing with partK.key
	local name=$1 k=$2 dir=$TMP/$1
	shift 2
	mkdir -p "$dir"
	write_ini "$dir.ini" publisher "$dir" "url = file://$BUCKET" \
		"[publisher]" "watch_dir = $TRAIN" "settle_time = 200ms" \
		"watch_mode = poll" "rescan_interval = 200ms" "part = $k/2" \
		"signing_key = $TMP/part$k.key" "$@"
}
pub_ini p1 1 "$KEYS"
pub_ini p2 2 "$KEYS"
mkdir -p "$TMP/sub"
write_ini "$TMP/sub.ini" subscriber "$TMP/sub" "url = file://$BUCKET" \
	"[subscriber]" "target_dir = $TMP/sub/model" "poll_interval = 200ms" \
	"verify_key = $TMP/part1.key.pub"

shipped() {
	local f
	for f in "$CK/checkpoint-$1"/*; do
		case ${f##*/} in optimizer* | scheduler.pt | rng_state*.pth | training_args.bin) ;; *) echo "${f##*/}" ;; esac
	done
}
same_as() { # the subscriber holds exactly checkpoint STEP's shipped files
	local t=$TMP/sub/model f n=0
	for f in $(shipped "$1"); do
		cmp -s "$CK/checkpoint-$1/$f" "$t/$f" || { echo "# $f differs from checkpoint-$1"; return 1; }
		n=$((n + 1))
	done
	[ "$(find "$t" -path "$t/.wsync" -prune -o -type f -print | wc -l)" = "$n" ] ||
		{ echo "# $t has other files"; return 1; }
}
# sign IN OUT KEY: IN's JSON (its signature line dropped) signed with KEY (BUCKET.md §5)
sign() {
	local body=$TMP/sign-body.json id sig
	sed '/^wsync-signature/d' "$1" >"$body"
	id=$(openssl pkey -in "$3" -pubout -outform DER | tail -c 32 | sha256sum | cut -c1-16)
	sig=$(openssl pkeyutl -sign -inkey "$3" -rawin -in "$body" | base64 -w0)
	{ cat "$body"; printf 'wsync-signature ed25519 %s %s\n' "$id" "$sig"; } >"$2"
}
# edit IN OUT EXPR: IN's record with the Python statement EXPR run on it (r)
edit() {
	sed '/^wsync-signature/d' "$1" | "$PYTHON3" -c '
import json, sys
r = json.load(sys.stdin)
exec(sys.argv[1])
r["files"].sort(key=lambda f: f["path"].encode())
for o in r["objects"]:
    o["chunks"].sort(key=lambda c: c["path"].encode())
sys.stdout.write(json.dumps(r, separators=(",", ":")) + "\n")' "$3" >"$2"
}
put_record() { cp "$1" "$BUCKET/$REC.tmp" && mv "$BUCKET/$REC.tmp" "$BUCKET/$REC"; }
status_says() { grep -q -- "$2" "$TMP/$1/run/status.json"; }
metric() { grep -o "^$2{[^}]*} [0-9]*" "$TMP/$1/run/wsync.prom" | awk '{ print $2 }'; }
metric_is() { [ "$(metric "$1" "$2")" = "$3" ]; }
# refused WHY: part 1, started on the forged record, refuses it saying WHY
# (VERIFY_FAILED, counted), waits for part 2 saying so (status, metric),
# and commits nothing
refused() {
	start p1
	wait_for 30 in_log p1 "refusing the record of part 2: .*$1" || { echo "# not refused: $1"; return 1; }
	wait_for 10 status_says p1 "waits for part 2 (record refused: " || { echo "# status: $(cat "$TMP/p1/run/status.json")"; return 1; }
	wait_for 10 metric_is p1 wsync_parts_missing 1 || { echo "# wsync_parts_missing is not 1"; return 1; }
	wait_for 10 grep -q '^wsync_verification_failures_total{[^}]*} [1-9]' "$TMP/p1/run/wsync.prom" ||
		{ echo "# not counted in wsync_verification_failures_total"; return 1; }
	[ "$(field sub step)" = 1 ] || { echo "# the subscriber moved on"; return 1; }
	stop p1 >/dev/null
}

# ---- 1. --check-config ------------------------------------------------------
check "--check-config: part_keys of both parts is valid (part 1)" "$WSYNCD" --check-config "$TMP/p1.ini"
check "--check-config: ... and on part 2" "$WSYNCD" --check-config "$TMP/p2.ini"
bad_conf() { # bad_conf WHY LINE: p1's configuration with LINE refused saying WHY
	pub_ini bad 1 "$2"
	! "$WSYNCD" --check-config "$TMP/bad.ini" >"$TMP/bad.out" 2>&1 &&
		grep -q -- "$1" "$TMP/bad.out" || { cat "$TMP/bad.out"; return 1; }
}
check "--check-config refuses a private key in part_keys" \
	bad_conf "part 2's key.*private key" "part_keys = $TMP/part1.key.pub $TMP/part2.key"
check "--check-config refuses N-1 keys" \
	bad_conf "1 public keys for 2 parts" "part_keys = $TMP/part2.key.pub"
check "--check-config refuses one key for two parts" \
	bad_conf "the same key" "part_keys = $TMP/part1.key.pub $TMP/part1.key.pub"
check "--check-config refuses a list whose own entry is another key" \
	bad_conf "part 1's key is .*, but signing_key is" "part_keys = $TMP/part3.key.pub $TMP/part2.key.pub"
check "--check-config refuses an unreadable key" \
	bad_conf "part 2's key" "part_keys = $TMP/part1.key.pub $TMP/nope.pub"

# ---- 2. honest parts ------------------------------------------------------------
put_ckpt "$CK/checkpoint-1" "$TRAIN/checkpoint-1"
start p1
start p2
start sub
check "step 1 committed by the parts, each with its own key" wait_step sub 1 90
check "subscriber byte-identical (verifying part 1's key only)" same_as 1
check "no shared-key warning with part_keys" bash -c "! grep -q 'share one signing_key' '$TMP/p1/log'"

# ---- 3. part 2 forges ------------------------------------------------------------
stop p1 >/dev/null
put_ckpt "$CK/checkpoint-2" "$TRAIN/checkpoint-2"
uploaded() { grep -q "part 2 of 2 uploaded step 2 " "$TMP/p2/log"; }
check "part 2 uploaded step 2" wait_for 60 uploaded
stop p2 >/dev/null
REC=$(cd "$BUCKET" && ls parts/*/2.json | tail -1)
cp "$BUCKET/$REC" "$TMP/honest.json"

sign "$TMP/honest.json" "$TMP/f1.json" "$TMP/part1.key"
put_record "$TMP/f1.json"
check "a record signed with another part's key: refused, the version waits" \
	refused "signed by key"

# a shard of part 1's, claimed by part 2 (its own chunk renamed to it)
mine=$("$PYTHON3" -c 'import json,sys; print(" ".join(f["path"] for f in json.loads(open(sys.argv[1]).read().split("\nwsync-signature")[0])["files"]))' "$TMP/honest.json")
other=
for f in $(shipped 2); do
	case " $mine " in *" $f "*) ;; *) case $f in *.safetensors) other=$f ;; esac ;; esac
done
edit "$TMP/honest.json" "$TMP/f2.body" "
old = r['files'][0]['path']
r['files'][0]['path'] = '$other'
for o in r['objects']:
    for c in o['chunks']:
        if c['path'] == old: c['path'] = '$other'"
sign "$TMP/f2.body" "$TMP/f2.json" "$TMP/part2.key"
put_record "$TMP/f2.json"
check "a record naming part 1's $other, signed by part 2: refused" \
	refused "$other is not part 2's (by the rule it is part 1's"

edit "$TMP/honest.json" "$TMP/f3.body" "
c = r['objects'][0]['chunks'][0]
c['key'] = c['key'].replace('/2-', '/1-')"
sign "$TMP/f3.body" "$TMP/f3.json" "$TMP/part2.key"
put_record "$TMP/f3.json"
check "a chunk key of part 1's under parts/<V>/, signed by part 2: refused" \
	refused "is not one of part 2's own for its flight"

edit "$TMP/honest.json" "$TMP/f4.body" "r['objects'][0]['chunks'][0]['key'] = 'anchors/000000000001.wsa'"
sign "$TMP/f4.body" "$TMP/f4.json" "$TMP/part2.key"
put_record "$TMP/f4.json"
check "a chunk key anchors/000000000001.wsa: refused" refused "anchors/000000000001.wsa"

edit "$TMP/honest.json" "$TMP/f5.body" "r['objects'][0]['chunks'][0]['key'] = '../HEAD'"
sign "$TMP/f5.body" "$TMP/f5.json" "$TMP/part2.key"
put_record "$TMP/f5.json"
check "a chunk key ../HEAD: refused" refused "../HEAD"
check "HEAD is still step 1" test "$(field sub step)" = 1

# ---- 4. the honest record back -----------------------------------------------------
put_record "$TMP/honest.json"
start p1
start p2
check "the honest record: step 2 committed" wait_step sub 2 90
check "subscriber byte-identical" same_as 2
check "part 1 waits for no part" wait_for 10 metric_is p1 wsync_parts_missing 0
# part 2 checks HEAD with part 1's key, not its own: HEAD is trusted
check "part 2 takes HEAD (signed by part 1's key) as trusted" \
	bash -c "! grep -q 'not signed by this publisher.s key' '$TMP/p2/log'"
stop p2 >/dev/null
start p2
check "... also after a restart with a version of its own in state.json" \
	wait_for 30 in_log p2 "publisher watching"
sleep 2
check "... no warning then either" bash -c "! grep -q 'not signed by this publisher.s key' '$TMP/p2/log'"

tap_done
