#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-log-once: one line per event.  A subscriber at version 1 whose way
# to HEAD (version 4) by deltas is broken -- version 2 is gone from the bucket --
# says "the chain of deltas from version 1 to 4 is broken" once, goes
# through the anchor of version 3, and says nothing more of it in the
# polls after, which find it at HEAD.  The same from 4 to a version 5
# published as an anchor alone.
. "$(dirname "$0")/lib.sh"

gen_ckpts "$TMP/src" --params 1M --steps 4 --shards 1
B=$TMP/bucket
printf '[daemon]\nrole = publisher\nstate_dir = %s\nruntime_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\nanchor_every = 2\nchunk_size = 0\n' \
	"$TMP/pst" "$TMP/prun" "$B" "$TMP/w" >"$TMP/pub.ini"
mkdir -p "$TMP/w"
conf sub "$B"
expect_exit 0 "version 1 published" "$WSYNC" publish --config "$TMP/pub.ini" "$TMP/src/checkpoint-1"
start sub
check "the subscriber reaches version 1" wait_version sub 1
stop sub
for v in 2 3 4; do
	expect_exit 0 "version $v published" "$WSYNC" publish --config "$TMP/pub.ini" "$TMP/src/checkpoint-$v"
done
check "version 3 has an anchor" test -f "$B/anchors/000000000003.wsa"
rm -f "$B/deltas/000000000002.wsd" "$B/manifests/000000000002.json"
start sub
check "the subscriber reaches version 4 through the anchor" wait_version sub 4 60
sleep 2	# ten more polls (poll_interval 200ms)
n=$(grep -c "the chain of deltas from version 1 to 4 is broken" "$DAEMONS/sub/log")
check "the broken chain is said once (said $n times)" test "$n" -eq 1
check "... and the files are the trainer's" same_files "$TMP/src/checkpoint-4" "$DAEMONS/sub/target" \
	model.safetensors config.json
stop sub

# A version published as an anchor alone (the publisher lost its state):
# from 4 to 5 there is no delta at all.
conf sub2 "$B"
start sub2
check "a second subscriber reaches version 4" wait_version sub2 4 60
stop sub2
rm -rf "$TMP/pst"
gen_ckpts "$TMP/src5" --params 1M --steps 1 --shards 1 --start-step 5
expect_exit 0 "version 5 published as an anchor alone" "$WSYNC" publish --config "$TMP/pub.ini" "$TMP/src5/checkpoint-5"
check "... no delta for it" test ! -e "$B/deltas/000000000005.wsd"
start sub2
check "the subscriber reaches version 5" wait_version sub2 5 60
sleep 2
n=$(grep -c "the chain of deltas from version 4 to 5 is broken" "$DAEMONS/sub2/log")
check "the broken chain from 4 to 5 is said once (said $n times)" test "$n" -eq 1
stop sub2
tap_done
