#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-read-once: `wsync diff` reads each byte of OLD and NEW once (rchar,
# /proc/PID/io) with two threads on one file -- a segment coded ahead of
# its file's hashing turn is hashed from what the worker held, not read
# again -- for a delta and for an anchor; and `wsync diff --anchor` codes
# the delta and the anchor from one read of NEW: both rebuild NEW (the
# anchor from nothing), the delta is byte for byte the one made alone,
# and NEW is not read twice (only files the delta keeps are read again,
# for the anchor) -- with threads, alone and through mappings.
. "$(dirname "$0")/lib.sh"

export LC_ALL=C
cd "$TMP" || exit 1

# One 100 MB shard (several 32 MiB segments: two workers share it), two
# steps apart.
"$PYTHON3" "$GEN" -o ck --params 50M --steps 2 --shards 1 --threads 1 -q ||
	{ echo "Bail out! gen-checkpoints failed"; exit 1; }
OLD=ck/checkpoint-1 NEW=ck/checkpoint-2
SHARD=model.safetensors
[ -f "$OLD/$SHARD" ] || SHARD=$(cd "$OLD" && ls ./*.safetensors | head -1)

# Every other kind of path beside it: new, deleted, unchanged (big: kept
# after the comparison; small: kept by hash), mode changed, changed bytes
# of the same size, empty.
head -c 3000000 /dev/urandom >"$NEW/new.bin"
head -c 5000 /dev/urandom >"$OLD/gone.bin"
head -c 4000000 /dev/urandom >"$OLD/same-big.bin"
cp "$OLD/same-big.bin" "$NEW/same-big.bin"
echo small >"$OLD/same-small.txt"
cp "$OLD/same-small.txt" "$NEW/same-small.txt"
head -c 70000 /dev/urandom >"$OLD/mode.bin"
cp "$OLD/mode.bin" "$NEW/mode.bin"
chmod 0600 "$NEW/mode.bin"
head -c 2500000 /dev/urandom >"$OLD/bytes.bin"
{ head -c 1000000 "$OLD/bytes.bin"; head -c 1500000 /dev/urandom; } >"$NEW/bytes.bin"
: >"$NEW/empty"

size() { du -sb --apparent-size "$@" | awk '{s += $1} END {print s}'; }

# rchar of a command (and its children), on stdout
rchar() {
	sh -c '"$@" >/dev/null || exit 1; grep "^rchar" /proc/$$/io' sh "$@" |
		awk '{print $2}'
}

# within DESCRIPTION READ BYTES: READ <= 1.05 x BYTES (what the walk, the
# small files' hashes and the delta's own reads add is far below that)
within() {
	local ok
	ok=$(awk -v r="$2" -v b="$3" 'BEGIN {print (r != "" && r <= 1.05 * b) ? 0 : 1}')
	[ "$ok" = 0 ] || echo "# read $2 bytes for $3 ($(awk -v r="$2" -v b="$3" \
		'BEGIN {printf "%.2f", r / b}')x)"
	tap_result "$ok" "$1 ($(awk -v r="$2" -v b="$3" 'BEGIN {printf "%.3f", r / b}')x)"
}

# ---- one file, two workers ----
o=$(size "$OLD/$SHARD") n=$(size "$NEW/$SHARD")
r=$(rchar "$WSYNC" diff "$OLD/$SHARD" "$NEW/$SHARD" -o one.wsd --threads 2)
within "a delta of one file on two threads reads old + new once" "$r" $((o + n))
cp "$OLD/$SHARD" one.target
check "... and it rebuilds the file" "$WSYNC" apply one.target one.wsd
check "... byte for byte" cmp one.target "$NEW/$SHARD"

mkdir empty one-new
cp "$NEW/$SHARD" one-new/
r=$(rchar "$WSYNC" diff empty one-new -o one-anchor.wsa --threads 2)
within "an anchor of one file on two threads reads it once" "$r" "$n"

# ---- a delta and its anchor from one read ----
old_b=$(size "$OLD") new_b=$(size "$NEW")
kept=$(size "$NEW/same-big.bin" "$NEW/same-small.txt")
"$WSYNC" diff "$OLD" "$NEW" -o alone.wsd --threads 2 >/dev/null

for mode in threads alone mapped; do
	case $mode in
	threads) args=(--threads 2) env=() ;;
	alone) args=(--threads 1) env=() ;;
	mapped) args=(--threads 2) env=(WSYNC_MMAP=1) ;;
	esac
	# memory for the holds: each byte read once whatever the timing
	r=$(env "${env[@]}" sh -c '"$@" >/dev/null || exit 1; grep "^rchar" /proc/$$/io' sh \
		"$WSYNC" diff "$OLD" "$NEW" -o pair.wsd --anchor pair.wsa "${args[@]}" \
		--memory 512MiB | awk '{print $2}')
	if [ "$mode" != mapped ]; then	# (rchar does not count mapped reads)
		within "$mode: a delta and its anchor read old + new once, and the kept files again" \
			"$r" $((old_b + new_b + kept))
	fi
	check "$mode: the delta is the one made alone" cmp pair.wsd alone.wsd
	rm -rf t-delta t-anchor
	cp -a "$OLD" t-delta
	mkdir t-anchor
	check "$mode: the delta applies" "$WSYNC" apply t-delta pair.wsd
	check "$mode: ... and rebuilds NEW" diff -r t-delta "$NEW"
	check "$mode: the anchor applies to nothing" "$WSYNC" apply t-anchor pair.wsa
	check "$mode: ... and rebuilds NEW" diff -r t-anchor "$NEW"
	check "$mode: ... with its modes" test "$(stat -c %a t-anchor/mode.bin)" = 600
done

# The anchor's FILE records: every file of NEW, written, none based.
out=$("$WSYNC" inspect pair.wsa 2>&1)
contains "the anchor lists a file the delta keeps" "$out" "same-big.bin"
contains "the anchor lists an empty file" "$out" "empty"
expect_exit 0 "the anchor names no deleted file" sh -c "! printf '%s' \"\$1\" | grep -q gone.bin" sh "$out"

# ---- a publisher's version that is a delta and an anchor ----
# (anchor_every = 1: every version after the first is both)
B=$TMP/bucket
write_ini pub.ini publisher "$TMP/pub" "url = file://$B" "[publisher]" \
	"watch_dir = $TMP/watch" "anchor_every = 1"
mkdir -p watch
conf sub "$B"
expect_exit 0 "version 1 published" "$WSYNC" publish --config pub.ini "$OLD"
expect_exit 0 "a subscriber pulls version 1" "$WSYNC" pull --config "$DAEMONS/sub.ini"
r=$(rchar "$WSYNC" publish --config pub.ini "$NEW")
within "version 2, a delta and an anchor, reads old + new once, and the kept files again" \
	"$r" $((old_b + new_b + kept))
check "... its delta is in the bucket" test -e "$B/deltas/000000000002.wsd"
check "... and its anchor" sh -c 'ls "$1"/anchors/000000000002*.wsa >/dev/null' sh "$B"
expect_exit 0 "the subscriber at version 1 pulls version 2" \
	"$WSYNC" pull --config "$DAEMONS/sub.ini"
# (the trainer's own state is not published: [publisher] exclude)
same_weights() {
	diff -r -x .wsync -x 'optimizer*' -x scheduler.pt -x 'rng_state*' \
		-x training_args.bin "$1" "$NEW"
}
check "... and holds NEW" same_weights "$DAEMONS/sub/target"
conf fresh "$B"
rm -f "$B"/anchors/000000000001*	# version 2's anchor the only way in
expect_exit 0 "a subscriber with nothing pulls version 2 (from its anchor)" \
	"$WSYNC" pull --config "$DAEMONS/fresh.ini"
check "... and holds NEW" same_weights "$DAEMONS/fresh/target"

# The summary names both.
expect_exit 0 "the summary gives the anchor's figures" \
	"$WSYNC" diff "$OLD" "$NEW" -o s.wsd --anchor s.wsa --json
contains "... in the JSON" "$OUT" '"anchor":{"files":17,'
expect_exit 2 "an empty --anchor path is a usage error" \
	"$WSYNC" diff "$OLD" "$NEW" -o s.wsd --anchor ""

tap_done
