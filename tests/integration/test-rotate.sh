#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-rotate.sh -- recovery from a forged version by rotating the signing
# key (issue 40), with the real wsyncd as publisher and as subscribers on
# a file:// bucket:
#  - versions 1..3 published with key A; then, with A leaked, a forged
#    anchor at version 999,999,999,999 and a HEAD naming it, signed with A
#    (tests/integration/bucket-writer.py): both subscribers apply it, as
#    any subscriber verifying with A must;
#  - s2 gets verify_key B (restarted) before the publisher rotates: a new
#    trust epoch (one TRUST_EPOCH journal entry naming A and B), the A-signed
#    HEAD refused ("not by the configured key"), the target kept;
#  - the publisher restarted with signing_key B: it does not number from
#    the forged HEAD; its next checkpoint is version 4 (its own last + 1),
#    a full anchor signed by B, written over the forged HEAD;
#  - s1 gets verify_key B (restarted) after that: both subscribers reach
#    version 4, byte-identical to the checkpoint, within 60 s, with no file
#    deleted by hand; one TRUST_EPOCH entry each; state.json records B;
#  - restarted once more, nothing is logged again;
#  - a HEAD signed with A afterwards is refused, the targets stay at 4.
# Every wait is bounded.
. "$(dirname "$0")/lib.sh"

gen_ckpts "$TMP/ck" --params 2M --steps 5 --shards 1 --no-trainer-files
mkdir -p "$TMP/empty" "$TMP/watch" "$TMP/bucket"
B=$TMP/bucket
W=$TMP/watch
CK=$TMP/ck
J=$TMP/journal.jsonl
EPOCH=$(mid TRUST_EPOCH)
check "log-messages.h defines TRUST_EPOCH" test -n "$EPOCH"
"$WSYNC" keygen "$TMP/A.key" >/dev/null
"$WSYNC" keygen "$TMP/B.key" >/dev/null
kid() { openssl pkey -pubin -in "$1" -outform DER | tail -c 32 | sha256sum | cut -c1-16; }
KA=$(kid "$TMP/A.key.pub")
KB=$(kid "$TMP/B.key.pub")
export KEY="$TMP/A.key" EMPTY="$TMP/empty" WSYNC

pubconf() {
	mkdir -p "$TMP/pub"
	cat >"$TMP/pub.ini" <<EOT
[daemon]
role = publisher
state_dir = $TMP/pub/state
runtime_dir = $TMP/pub/run
threads = 2
log_level = debug
[store]
url = file://$B
[publisher]
watch_dir = $W
rescan_interval = 1s
signing_key = $1
EOT
}
# subconf NAME KEY: a subscriber of the bucket verifying with KEY
subconf() {
	conf "$1" "$B"
	echo "verify_key = $2" >>"$TMP/$1.ini"
}
state_key() {
	"$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("key_id", ""))' \
		"$TMP/$1/target/.wsync/state.json"
}
epochs() { journal_count "$J" "$EPOCH"; }
epochs_are() { [ "$(epochs)" = "$1" ]; }

journal_start journal "$TMP/j.sock" "$J"
pubconf "$TMP/A.key"
start -c "$TMP/pub.ini" pub
for n in s1 s2; do
	subconf $n "$TMP/A.key.pub"
	start $n WSYNC_JOURNAL_SOCKET="$TMP/j.sock"
done

# 1. versions 1..3 signed with A
for i in 1 2 3; do
	put_ckpt "$CK/checkpoint-$i" "$W/checkpoint-$i"
	check "version $i published with key A" wait_head "$B" $i
done
check "s1 at version 3" wait_version s1 3 30
check "s2 at version 3" wait_version s2 3 30
check "state.json records key A" test "$(state_key s1)" = "$KA"

# 2. key A leaks: a forged anchor at 999999999999 and its HEAD, signed with A
pub "$B" 999999999999 "$CK/checkpoint-5" --anchor --sign --key "$TMP/A.key"
check "s1 applies the forged version (it verifies with A)" wait_version s1 999999999999 30
check "s2 too" wait_version s2 999999999999 30

# 3. s2 rotates first: new trust epoch, the A-signed HEAD refused, waits
stop s2
subconf s2 "$TMP/B.key.pub"
start s2 WSYNC_JOURNAL_SOCKET="$TMP/j.sock"
check "s2: one TRUST_EPOCH entry" wait_for 20 epochs_are 1
check "s2: the entry names key A and key B" \
	sh -c "grep '\"MESSAGE_ID\": \"$EPOCH\"' '$J' | grep -q 'from key $KA to key $KB'"
check "s2 refuses the HEAD signed with A (status says so)" \
	wait_for 20 sh -c "grep -q 'not by the configured key' '$(status_json s2)'"
check "s2 keeps its files meanwhile" same_tree "$CK/checkpoint-5" "$TMP/s2/target"

# 4. the publisher rotates: B, restarted; its next checkpoint is version 4
stop pub
pubconf "$TMP/B.key"
start -c "$TMP/pub.ini" pub
check "publisher: the forged HEAD is not trusted" wait_log pub "not signed by this publisher's key $KB" 20
put_ckpt "$CK/checkpoint-4" "$W/checkpoint-4"
check "publisher: version 4 published over the forged HEAD" wait_head "$B" 4 60
check "version 4 is an anchor" grep -q '"kind": *"anchor"' "$B/manifests/000000000004.json"
check "version 4 is signed by key B" sh -c "tail -n 1 '$B/manifests/000000000004.json' | grep -q ' $KB '"
check "s2 (rotated before) converges to version 4" wait_version s2 4 60
check "s2's target is checkpoint-4, byte for byte" same_tree "$CK/checkpoint-4" "$TMP/s2/target"

# 5. s1 rotates after the publisher
stop s1
subconf s1 "$TMP/B.key.pub"
start s1 WSYNC_JOURNAL_SOCKET="$TMP/j.sock"
check "s1 (rotated after) converges to version 4" wait_version s1 4 60
check "s1's target is checkpoint-4, byte for byte" same_tree "$CK/checkpoint-4" "$TMP/s1/target"
check "one TRUST_EPOCH entry per subscriber" test "$(epochs)" = 2
check "state.json records key B" test "$(state_key s1)" = "$KB"
check "no staging directory left" test ! -e "$TMP/s1/target/.wsync/rebuild"

# 6. restarts: the epoch is not started again
stop s1
start s1 WSYNC_JOURNAL_SOCKET="$TMP/j.sock"
check "s1 restarted: still at version 4" wait_version s1 4 30
sleep 1
check "no TRUST_EPOCH entry at a restart in the same epoch" test "$(epochs)" = 2

# 7. the old key is refused from now on
stop pub
tap_result $? "the publisher stops cleanly (exit 0)"
pub "$B" 999999999999 "$CK/checkpoint-5" --head-only 999999999999 --sign --key "$TMP/A.key"
check "a HEAD signed with A is refused" \
	wait_for 20 sh -c "grep -q 'not by the configured key' '$(status_json s1)'"
sleep 1
check "s1 stays at version 4" test "$(field s1 version)" = 4
check "s2 stays at version 4" test "$(field s2 version)" = 4
check "s1's target is still checkpoint-4" same_tree "$CK/checkpoint-4" "$TMP/s1/target"

stop s1
tap_result $? "s1 stops cleanly (exit 0)"
stop s2
tap_result $? "s2 stops cleanly (exit 0)"
stop_all
tap_done
