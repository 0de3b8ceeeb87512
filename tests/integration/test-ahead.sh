#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-ahead: a version flows through as it is made, on a file:// bucket
# with signed documents.  The publisher uploads its objects in chunks
# while it codes (chunk_size 64KiB; WSYNC_TEST_CHUNK_PAUSE_MS makes the
# coder slow enough to watch) and announces them in NEXT; a full
# subscriber builds the files ahead of the commit.  Then:
#  - built ahead, nothing renamed in before HEAD names the version (temps
#    beside the old files, the old files intact), then byte-identical,
#    no temp left, the log saying how much came before the commit;
#  - the publisher killed mid-stream, the trainer's next checkpoint
#    published under the same version number: the subscriber drops what
#    it built and applies the version as committed;
#  - the subscriber stopped (SIGSTOP) while building ahead, two versions
#    committed meanwhile: it converges on the newest, byte-identical;
#  - a torn NEXT while the subscriber builds ahead: refused, and what was
#    built stays;
#  - the subscriber killed (SIGKILL) while building ahead: the target
#    keeps its version, and the restart leaves no temp and converges;
#  - a NEXT not signed by the key, or naming chunks that do not match:
#    refused, verification failures counted, the version kept, no temp;
#  - the bucket's objects really went in chunks (format_version 2), and
#    a subscriber with ahead_max = 0 follows the same series exactly;
#  - ahead_max bounds the temps built ahead as well as the bytes fetched:
#    with 1 MiB (each shard's file is larger) nothing is built before
#    the commit, and the version is exact after it;
#  - a partial subscriber (three shards of four and config.json: its files
#    are most of the bytes) builds its files ahead too, out of the whole
#    chunks, and nothing else; a layout = symlink subscriber builds the
#    next version's directory ahead (hardlinks and temps), the link not
#    flipped before the commit; both drop what they built for a flight
#    the publisher did not commit, and are exact after each commit;
#  - one big file whose delta goes up in many chunks (cut between its
#    SEGMENT records): the subscriber decodes part of it into its temp
#    before the commit (status ahead_piece_bytes, the log), renames
#    nothing before HEAD names the version, and is byte-identical after.
#  - a subscriber stopped by ahead_max after a few chunks checks only the
#    rest at the commit, chunk by chunk: one of them changed in the bucket
#    meanwhile is refused, the target kept;
#  - a subscriber left at ahead_pace = yield (the others have it off, so
#    that what they build ahead does not hang on the machine's other I/O)
#    follows version 2 exactly, and stops cleanly.
. "$(dirname "$0")/lib.sh"

CK=$TMP/ck
gen_ckpts "$CK" --params 20M --steps 7 --shards 4
BUCKET=$TMP/bucket
"$WSYNC" keygen "$TMP/wsync.key" >/dev/null

ini() { # ini NAME ROLE [LINE...]
	local name=$1 role=$2
	shift 2
	if [ "$role" = publisher ]; then
		write_ini "$TMP/$name.ini" publisher "$TMP/$name" "url = file://$BUCKET" \
			"[publisher]" "watch_dir = $TMP/train" "settle_time = 200ms" \
			"chunk_size = 64KiB" "anchor_every = 1000" "signing_key = $TMP/wsync.key" "$@"
	else
		write_ini "$TMP/$name.ini" subscriber "$TMP/$name" "url = file://$BUCKET" \
			"[subscriber]" "target_dir = $TMP/$name/model" "poll_interval = 200ms" \
			"verify_key = $TMP/wsync.key.pub" "$@"
	fi
	mkdir -p "$TMP/$name"
}
temps() { find "$TMP/$1/model/" -name '.*.wsync-*' | wc -l; }
# layout = symlink: temps in a version directory not named yet
vtemps() { find "$TMP/$1/" -path "$TMP/$1/model.v$2/*" -name '.*.wsync-*' | wc -l; }
has_temps() { [ "$(temps "$1")" -gt 0 ]; }
# the subscriber's target holds exactly checkpoint STEP's shipped files
same_as() { # same_as NAME STEP [CHECKPOINTS]
	local ref=${3:-$CK}/checkpoint-$2 t=$TMP/$1/model f n=0
	for f in "$ref"/*; do
		case ${f##*/} in optimizer* | scheduler.pt | rng_state*.pth | training_args.bin) continue ;; esac
		cmp -s "$f" "$t/${f##*/}" || { echo "# ${f##*/} differs from checkpoint-$2"; return 1; }
		n=$((n + 1))
	done
	# (temps built ahead aside: they are not the inference server's files)
	[ "$(find "$t/" -path "$t/.wsync" -prune -o -type f ! -name '.*.wsync-*' -print | wc -l)" = "$n" ] ||
		{ echo "# $t has other files"; return 1; }
}
verify_failures() { grep -o 'wsync_verification_failures_total{[^}]*} [0-9]*' "$TMP/$1/run/wsync.prom" | awk '{ print $2 }'; }
mkdir -p "$TMP/train" "$BUCKET"

ini pub publisher
ini sub subscriber "ahead_pace = off"
ini flat subscriber "ahead_max = 0"
ini small subscriber "ahead_max = 1MiB" "ahead_pace = off"
ini paced subscriber
PART_FILES="model-00001-of-00004.safetensors model-00002-of-00004.safetensors model-00003-of-00004.safetensors config.json"
ini part subscriber "include = $PART_FILES" "ahead_pace = off"
ini lnk subscriber "layout = symlink" "ahead_pace = off"
# shellcheck disable=SC2086 # the partial subscriber's files, one argument each
same_part() { # same_part STEP: the partial target holds its files of checkpoint STEP, only them
	# (temps built ahead aside: they are not the inference server's files)
	same_files "$CK/checkpoint-$1" "$TMP/part/model" $PART_FILES &&
		diff <(cd "$TMP/part/model" && find . -path ./.wsync -prune -o -type f ! -name '.*.wsync-*' -print |
			sed 's|^\./||' | sort) <(printf '%s\n' $PART_FILES | sort)
}
link_names() { [ "$(readlink "$TMP/lnk/model")" = "model.v$1" ]; }
ahead_of() { # ahead_of NAME V: status.json shows V being built ahead, some of it built
	[ "$(field "$1" ahead_version)" = "$2" ] &&
		{ [ "$(field "$1" ahead_files)" -gt 0 ] || [ "$(field "$1" ahead_piece_bytes)" -gt 0 ]; }
}
both_ahead() { ahead_of part "$1" && ahead_of lnk "$1"; }
start pub WSYNC_TEST_CHUNK_PAUSE_MS=3000
start sub
start flat
start small
start paced
start part
start lnk

# ---- 1. built ahead, renamed in only at the commit --------------------------
put_ckpt "$CK/checkpoint-1" "$TMP/train/checkpoint-1"
check "version 1 (the anchor) applied" wait_version sub 1 90
check "the anchor went up in chunks (format_version 2)" \
	grep -q '"format_version": 2' "$BUCKET/manifests/000000000001.json"
check "its chunks are objects of their own" test -e "$BUCKET/anchors/000000000001-00002.wsa"
put_ckpt "$CK/checkpoint-2" "$TMP/train/checkpoint-2"
check "the subscriber builds version 2 ahead (NEXT read)" \
	wait_for 60 in_log sub "version 2 (step 2) announced: building it ahead"
check "temps built beside the old files before the commit" wait_for 60 has_temps sub
check "... while HEAD still names version 1" test "$(head_version "$BUCKET")" = 1
ahead_shown() { [ "$(field sub ahead_version)" = 2 ] && [ "$(field sub ahead_files)" -gt 0 ]; }
check "... status.json says what is built ahead" wait_for 10 ahead_shown
check "... and the target still holds version 1, intact" same_as sub 1
check "the partial and the symlink subscribers build version 2 ahead too (status.json ahead_files, ahead_piece_bytes)" \
	wait_for 60 both_ahead 2
check "... the partial target still holds its files of version 1, only them" same_part 1
check "... the symlink target's link still names version 1's directory" link_names 1
check "... which holds version 1, intact" same_as lnk 1
check "... version 2's directory beside it, temps in it" test "$(vtemps lnk 2)" -gt 0
check "... HEAD still names version 1" test "$(head_version "$BUCKET")" = 1
check "version 2 applied" wait_version sub 2 90
check "byte-identical to checkpoint-2" same_as sub 2
check "no temp left" test "$(temps sub)" = 0
check "the log says what came before the commit" \
	grep -Eq 'version 2: [0-9]+ of [0-9]+ chunks fetched and [1-9][0-9]* files built before the commit' "$TMP/sub/log"
check "... and the applied line counts the building before it in the apply's time" \
	grep -Eq 'version 2 \(step 2\) applied from .*\((0\.0[1-9]|0\.[1-9][0-9]|[1-9][0-9.]*) s of it before the commit\)' "$TMP/sub/log"
check "the publisher announced version 2" grep -q "version 2 (step 2) announced" "$TMP/pub/log"
check "partial: version 2 applied" wait_version part 2 90
check "... its files of checkpoint-2, nothing else" same_part 2
check "... built before the commit" \
	grep -Eq 'version 2: [0-9]+ of [0-9]+ chunks fetched and [1-9][0-9]* files built before the commit' "$TMP/part/log"
check "... no temp left" test "$(temps part)" = 0
check "symlink: version 2 applied" wait_version lnk 2 90
check "... the link names model.v2" link_names 2
check "... byte-identical to checkpoint-2" same_as lnk 2
check "... built before the commit" \
	grep -Eq 'version 2: [0-9]+ of [0-9]+ chunks fetched and [1-9][0-9]* files built before the commit' "$TMP/lnk/log"
check "... no temp left" test "$(temps lnk)$(vtemps lnk 2)" = 00
check "ahead_max = 0: version 2 too, after the commit" wait_version flat 2 90
check "... byte-identical" same_as flat 2
check "... having built nothing ahead" sh -c "! grep -q 'building it ahead' '$TMP/flat/log'"
check "ahead_max = 1MiB: no file built ahead past it (each shard is larger)" \
	wait_for 60 in_log small "version 2: building ahead stops at ahead_max"
check "... version 2 after the commit" wait_version small 2 90
check "... byte-identical" same_as small 2
check "... no temp left" test "$(temps small)" = 0
stop small >/dev/null
check "ahead_pace = yield: version 2 too" wait_version paced 2 90
check "... byte-identical" same_as paced 2
check "... no temp left" test "$(temps paced)" = 0
rc=0
stop paced || rc=$?
check "... and it stops cleanly (exit $rc)" test "$rc" = 0
[ "$rc" = 0 ] || tail -8 "$TMP/paced/log" | sed "s/^/# /"

# ---- 2. the publisher killed mid-stream, the number reused ------------------
put_ckpt "$CK/checkpoint-3" "$TMP/train/checkpoint-3"
check "version 3 (checkpoint-3) being built ahead" \
	wait_for 60 in_log sub "version 3 (step 3) announced: building it ahead"
check "temps of version 3 there" wait_for 60 has_temps sub
check "the partial and the symlink subscribers build version 3 ahead too" wait_for 60 both_ahead 3
kill9 pub
check "the publisher died before committing version 3" test "$(head_version "$BUCKET")" = 2
rm -rf "$TMP/train/checkpoint-3"
put_ckpt "$CK/checkpoint-4" "$TMP/train/checkpoint-4"
start pub
check "version 3 committed again, from checkpoint-4" wait_version sub 3 90
check "the subscriber holds checkpoint-4 (step 4), byte-identical" same_as sub 4
check "... its state says step 4" test "$(field sub step)" = 4
check "... having dropped what it built for the first flight" \
	grep -Eq 'version 3: dropping what was built ahead .*(another flight|not the flight announced|chunks are not those)' "$TMP/sub/log"
check "no temp left" test "$(temps sub)" = 0
check "partial: version 3 committed again, its files of checkpoint-4" wait_version part 3 90
check "... exact, nothing else" same_part 4
check "symlink: version 3, byte-identical to checkpoint-4" wait_version lnk 3 90
check "... exact" same_as lnk 4
check "... the link names model.v3" link_names 3
for n in part lnk; do
	check "$n: dropped what it built for the first flight" \
		grep -Eq 'version 3: dropping what was built ahead .*(another flight|not the flight announced|chunks are not those)' "$TMP/$n/log"
done
check "no temp left in either" test "$(temps part)$(temps lnk)$(vtemps lnk 3)" = 000
check "the flat subscriber: checkpoint-4 too" wait_version flat 3 90
check "... byte-identical" same_as flat 4
stop pub
start pub WSYNC_TEST_CHUNK_PAUSE_MS=3000

# ---- 3. stopped while building ahead, two versions committed meanwhile -------
put_ckpt "$CK/checkpoint-5" "$TMP/train/checkpoint-5"
check "version 4 being built ahead" wait_for 60 in_log sub "version 4 (step 5) announced: building it ahead"
kill -STOP "${DPID[sub]}"
check "version 4 committed while the subscriber sleeps" wait_version pub 4 60
put_ckpt "$CK/checkpoint-6" "$TMP/train/checkpoint-6"
check "version 5 committed while the subscriber sleeps" wait_version pub 5 90
kill -CONT "${DPID[sub]}"
check "the subscriber converges on version 5" wait_version sub 5 90
check "byte-identical to checkpoint-6" same_as sub 6
check "no temp left" test "$(temps sub)" = 0

# ---- 4. killed while building ahead ------------------------------------------
put_ckpt "$CK/checkpoint-7" "$TMP/train/checkpoint-7"
check "version 6 being built ahead" wait_for 60 in_log sub "version 6 (step 7) announced: building it ahead"
check "temps of version 6 there" wait_for 60 has_temps sub
# a torn NEXT (half old, half new, as a store that does not replace an
# object atomically can serve it), the publisher held meanwhile: refused,
# and what was built stays
kill -STOP "${DPID[pub]}"
cp "$BUCKET/NEXT" "$TMP/next.held"
n=$(grep -c "refused: NEXT" "$TMP/sub/log")
{ head -c 300 "$TMP/next.held"; tail -c +200 "$TMP/next.held"; } >"$BUCKET/NEXT.tmp"
mv "$BUCKET/NEXT.tmp" "$BUCKET/NEXT"
check "a torn NEXT while building ahead: refused" \
	wait_for 30 sh -c "[ \$(grep -c 'refused: NEXT' '$TMP/sub/log') -gt $n ]"
check "... what was built stays: temps there, nothing dropped" \
	sh -c "has() { [ \$(find '$TMP/sub/model/' -name '.*.wsync-*' | wc -l) -gt 0 ]; }; has &&
		! grep -q 'version 6: dropping' '$TMP/sub/log'"
mv "$TMP/next.held" "$BUCKET/NEXT"
kill -CONT "${DPID[pub]}"
kill9 sub
check "killed: the target still holds version 5 intact" same_as sub 6
start sub
check "restarted: version 6" wait_version sub 6 90
check "byte-identical to checkpoint-7" same_as sub 7
check "no temp left" test "$(temps sub)" = 0
check "the flat subscriber too" wait_version flat 6 90
check "... byte-identical" same_as flat 7
stop pub

# ---- 5. NEXT tampered with ----------------------------------------------------
check "the partial subscriber at version 6 too, its files of checkpoint-7" wait_version part 6 90
check "... exact" same_part 7
check "the symlink subscriber at version 6 too" wait_version lnk 6 90
check "... byte-identical to checkpoint-7" same_as lnk 7
part_failures=$(verify_failures part)
before=$(verify_failures sub)
n=$(grep -c "NEXT" "$TMP/sub/log")
good=$TMP/next.good
cp "$BUCKET/NEXT" "$good"
# the version after the subscriber's, signed by nobody the subscriber trusts
sed -e 's/"version": 6,/"version": 7,/' -e 's/"base_version": 5/"base_version": 6/' "$good" >"$BUCKET/NEXT.tmp"
mv "$BUCKET/NEXT.tmp" "$BUCKET/NEXT"
check "a NEXT whose signature does not verify is refused" \
	wait_for 30 sh -c "[ \$(grep -c NEXT '$TMP/sub/log') -gt $n ]"
check "... counted as a verification failure" \
	wait_for 10 sh -c "[ \"\$(grep -o 'wsync_verification_failures_total{[^}]*} [0-9]*' '$TMP/sub/run/wsync.prom' | awk '{ print \$2 }')\" -gt '${before:-0}' ]"
check "... nothing built: no temp" test "$(temps sub)" = 0
check "... the version kept" test "$(field sub version)" = 6
check "... byte-identical still" same_as sub 7
# unsigned: the signature line dropped (counted before the swap: the
# subscriber may refuse it at once)
n=$(grep -c "NEXT" "$TMP/sub/log")
head -n -1 "$BUCKET/NEXT" >"$BUCKET/NEXT.tmp"
mv "$BUCKET/NEXT.tmp" "$BUCKET/NEXT"
check "an unsigned NEXT is refused too" \
	wait_for 30 sh -c "[ \$(grep -c NEXT '$TMP/sub/log') -gt $n ]"
check "... no temp, the version kept" sh -c "[ $(temps sub) = 0 ] && [ $(field sub version) = 6 ]"
forged_refused() { # NAME: refused a NEXT (counted), nothing built, version 6 kept
	[ "$(verify_failures "$1")" -gt "${2:-0}" ] && [ "$(temps "$1")" = 0 ] &&
		[ "$(field "$1" version)" = 6 ] && [ "$(field "$1" ahead_version)" = 0 ]
}
check "the partial subscriber refused the forged NEXTs too: counted, nothing built, version 6 kept" \
	wait_for 30 forged_refused part "${part_failures:-0}"
check "... exact still" same_part 7
check "the symlink subscriber too: nothing built, no version 7 directory, the link on version 6" \
	sh -c "[ $(field lnk ahead_version) = 0 ] && [ ! -e '$TMP/lnk/model.v7' ] && [ \"\$(readlink '$TMP/lnk/model')\" = model.v6 ]"

stop sub
stop flat
stop part
stop lnk

# ---- 6. one big file in many chunks: built piece by piece --------------------
# One shard, coded in 256 KiB segments (WSYNC_TEST_SEGMENT_KIB): the
# delta of version 2 is one FILE record and dozens of SEGMENT records,
# cut into chunks between them (delta format 4).  The subscriber decodes
# each SEGMENT into the shard's temp as its chunk arrives.
CK1=$TMP/ck1
gen_ckpts "$CK1" --params 8M --steps 2 --shards 1
BUCKET=$TMP/bucket1
mkdir -p "$BUCKET" "$TMP/train1"
write_ini "$TMP/pub1.ini" publisher "$TMP/pub1" "url = file://$BUCKET" \
	"[publisher]" "watch_dir = $TMP/train1" "settle_time = 200ms" \
	"chunk_size = 64KiB" "anchor_every = 1000" "signing_key = $TMP/wsync.key"
write_ini "$TMP/one.ini" subscriber "$TMP/one" "url = file://$BUCKET" \
	"[subscriber]" "target_dir = $TMP/one/model" "poll_interval = 200ms" \
	"verify_key = $TMP/wsync.key.pub" "ahead_pace = off"
mkdir -p "$TMP/pub1" "$TMP/one"
shard=$(cd "$CK1/checkpoint-1" && ls model*.safetensors)
start pub1 WSYNC_TEST_SEGMENT_KIB=256
start one
put_ckpt "$CK1/checkpoint-1" "$TMP/train1/checkpoint-1"
check "one shard: version 1 applied" wait_version one 1 90
stop pub1
start pub1 WSYNC_TEST_SEGMENT_KIB=256 WSYNC_TEST_CHUNK_PAUSE_MS=1500
put_ckpt "$CK1/checkpoint-2" "$TMP/train1/checkpoint-2"
check "one shard: version 2 announced, built ahead" \
	wait_for 60 in_log one "version 2 (step 2) announced: building it ahead"
piece_shown() { [ "$(field one ahead_version)" = 2 ] && [ "$(field one ahead_piece_bytes)" -gt 0 ]; }
check "part of the shard decoded into its temp before the commit (ahead_piece_bytes)" \
	wait_for 60 piece_shown
check "... while HEAD still names version 1" test "$(head_version "$BUCKET")" = 1
check "... the shard itself still version 1's" cmp -s "$CK1/checkpoint-1/$shard" "$TMP/one/model/$shard"
check "... its temp beside it" test -n "$(find "$TMP/one/model" -name ".$shard.wsync-*")"
check "version 2 applied" wait_version one 2 120
check "... byte-identical to checkpoint-2" same_as one 2 "$CK1"
check "... no temp left" test "$(find "$TMP/one/model" -name '.*.wsync-*' | wc -l)" = 0
check "the delta went up in several chunks inside the one file" \
	test -e "$BUCKET/deltas/000000000002-00003.wsd"
check "the log says part of the shard was built before the commit" \
	grep -Eq 'version 2: [0-9]+ of [0-9]+ chunks fetched and [0-9]+ files built before the commit \([1-9][0-9]* bytes decoded piece by piece' "$TMP/one/log"
stop one

# ---- 7. a chunk changed in the bucket after the fetching ahead stopped --------
# ahead_max stops a subscriber after a few chunks of version 3; those were
# checked as they came, so the commit checks only the rest, chunk by chunk
# (not the whole object again).  One of the rest, changed in the bucket
# before the commit (same size), is refused there: the target keeps
# version 2, no temp left.  (Version 3 is another run's checkpoint, at a
# higher learning rate: a delta of some twenty chunks.)
CK3=$TMP/ck3
gen_ckpts "$CK3" --params 8M --steps 3 --shards 1 --lr 2e-5
write_ini "$TMP/cap.ini" subscriber "$TMP/cap" "url = file://$BUCKET" \
	"[subscriber]" "target_dir = $TMP/cap/model" "poll_interval = 200ms" \
	"verify_key = $TMP/wsync.key.pub" "ahead_pace = off" "ahead_max = 256KiB"
mkdir -p "$TMP/cap"
start cap
check "capped: version 2 applied" wait_version cap 2 90
stop pub1
start pub1 WSYNC_TEST_SEGMENT_KIB=256 WSYNC_TEST_CHUNK_PAUSE_MS=500
put_ckpt "$CK3/checkpoint-3" "$TMP/train1/checkpoint-3"
check "capped: version 3 fetched ahead up to ahead_max" \
	wait_for 60 in_log cap "version 3: [0-9]* bytes fetched ahead, ahead_max"
late=$BUCKET/deltas/000000000003-00008.wsd
check "a chunk past it is in the bucket" wait_for 60 test -s "$late"
flip() { # flip FILE OFFSET: one byte changed in place, the size kept
	"$PYTHON3" -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2])); b = f.read(1); f.seek(int(sys.argv[2])); f.write(bytes([b[0] ^ 0x5a]))' "$1" "$2"
}
flip "$late" 40
check "version 3 committed" wait_for 90 in_log pub1 "published version 3"
check "the subscriber took the chunks it had fetched ahead" \
	wait_for 60 in_log cap "version 3: [1-9][0-9]* of [0-9]* chunks fetched"
check "... and refused the chunk changed after: its SHA-256 is not the manifest's" \
	wait_for 60 in_log cap "000000000003-00008.wsd: SHA-256 is not the manifest's"
counted() { [ "$(verify_failures cap)" -ge 1 ] 2>/dev/null; }
check "... counted as a verification failure" wait_for 10 counted
check "... the target still holds version 2, byte-identical" same_as cap 2 "$CK1"
check "... no temp left" test "$(find "$TMP/cap/model" -name '.*.wsync-*' | wc -l)" = 0
stop pub1
stop cap
tap_done
