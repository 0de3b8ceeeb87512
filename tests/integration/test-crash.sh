#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-crash.sh [--long] -- crashes and power loss, with the LD_PRELOAD
# shim tests/shim/crashshim.c ($WSYNC_CRASHSHIM) logging every open for
# writing, fsync, rename, unlink, mkdir and link in order and SIGKILLing
# the process at a chosen call.  A file:// bucket holds versions 1..5 of a
# 3-shard checkpoint (anchors at 1 and 4; each version changes 4 files).
#
# Subscriber crash matrix (wsync pull and wsyncd, the same subscriber
# code): >= 20 kill points over every stage -- downloading, decoding and
# writing temps, between the renames of the changed files, after the
# renames before the state marker, during the marker write, after it --
# in five plans: one delta (2 -> 3), a catch-up over four deltas
# (1 -> 5), an anchor bootstrap (nothing -> 5, anchor 4 + delta 5), one
# delta with layout = symlink (the version directory built over
# hardlinks, then the link flipped), and one delta from a bucket on
# s3rver (curl writing the download; skipped without s3rver).  Plans P
# (2 -> 3) and PA (nothing -> 5): a partial subscriber (include = shards
# 1 and 3 and config.json; an operator's junk shard 2 in the target),
# killed while its ranged reads are written into downloads/, while
# applying, before and after the marker: its versions are those files of
# each checkpoint and the junk shard, untouched, so the checks below say
# its files hold whole versions and the junk is never written; PS3 (1 ->
# 2) the same on s3rver (its ranged GETs).
# At each: the process died by SIGKILL at that very call (exit 137, the
# shim's KILL line); right after the kill every target file holds a whole
# version OLD..NEW of itself (hashed against the published checkpoints),
# and the shim's log shows no file under target_dir opened for writing
# under its final name nor renamed in before its temp was fsynced; the
# restarted subscriber (no shim) converges within 60 s to the published
# bytes, with no temp file left and .wsync/state.json naming the version.
# Printed per point: stage, kill spec, recovery by delta or anchor (or
# "verified": an apply killed after its last rename, before its marker,
# leaves the target at the new version; the restart hashes it against the
# manifest and writes the marker, downloading nothing), time.
#
# A publisher part killed mid-announcement (parts/<V>/<K>.next.json):
# the version completes once it is back, the subscriber building ahead
# converges.
#
# A subscriber daemon killed while it builds a file ahead, piece by piece
# (a one-shard version streamed in chunks cut inside the shard): the
# target keeps the old version, whole; the restart removes the temp and
# converges.  The same for a partial subscriber (include = the shard)
# building its file ahead.
#
# Publisher (wsync publish, and wsyncd once): SIGKILL during encode,
# during an upload, between two objects, between the objects and the
# manifest, between the manifest and HEAD, during and after the HEAD write;
# streaming (objects in chunks, NEXT): during a chunk's upload, after NEXT
# is written, after the last chunk
# (test-publisher.sh covers the kill between HEAD and the base swap).
# After each, HEAD names a complete
# version a fresh subscriber reproduces byte for byte, the restarted
# publisher goes on at a higher version, and after its garbage collection
# nothing in the bucket is orphaned (BUCKET.md section 2 rule 3, temps
# included).
#
# Power-loss ordering, from the shim's logs of normal runs: subscriber
# (anchor bootstrap, one delta, a chain): every file renamed into
# target_dir was fsynced as a temp before its rename, its directory
# fsynced after, all before state.json's temp is renamed in (itself
# fsynced before, .wsync/ after); layout = symlink: a version directory,
# marker and own entry included, durable before the link is flipped to it.
# Publisher on file://: objects durable before their manifest, the
# manifest durable before HEAD.
#
# A file cut short while `wsync diff` reads it (the shim's
# WSYNC_SHRINK_AT): a clean failure naming it, no delta, no temp.
#
# Disk full mid-apply (the shim's WSYNC_FAIL_AT: the Nth write into a
# temp in target_dir and every later one fail with ENOSPC, past the
# free-space check): wsync pull fails cleanly naming ENOSPC, the old
# version and its marker intact, no temp left; the next pull applies.
#
# --long (scripts/stress.sh): also a sweep killing the subscriber at every
# logged call of the three plans ("any:N").
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"

LONG=0
[ "${1:-}" = --long ] && LONG=1
: "${WSYNC_CRASHSHIM:=$WSYNC_SOURCE_ROOT/build/tests/crashshim.so}"
[ -f "$WSYNC_CRASHSHIM" ] || { echo "Bail out! no crash shim at $WSYNC_CRASHSHIM"; exit 1; }
# an ASan build's runtime wants to be first; the shim only wraps libc
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0
HERE=$(cd "$(dirname "$0")" && pwd)
cpy() { "$PYTHON3" "$HERE/crash.py" "$@"; }

CK=$TMP/ck
B=$TMP/bucket
gen_ckpts "$CK" --params 1M --steps 17 --shards 3 --no-trainer-files

trap 'daemons_kill_all; s3servers_stop_all; [ -n "${KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT

# pub_ini DIR BUCKET KEEP_ANCHORS: a publisher's config and dirs under DIR
pub_ini() {
	mkdir -p "$1/state" "$1/run" "$1/watch"
	write_ini "$1/pub.ini" publisher "$1" "url = file://$2"$'\n'"retry_attempts = 1" \
		"[publisher]" "watch_dir = $1/watch" "anchor_every = 3" "keep_anchors = $3" \
		"gc_grace = 0" "rescan_interval = 1s"
}
# sub_ini DIR [LAYOUT]: a subscriber's config for target DIR/target on $B
sub_ini() {
	mkdir -p "$1/state" "$1/run"
	write_ini "$1/sub.ini" subscriber "$1" "${SUB_STORE:-url = file://$B}"$'\n'"retry_attempts = 1" \
		"[subscriber]" "target_dir = $1/target" "poll_interval = 200ms" \
		"layout = ${2:-inplace}" ${SUB_INCLUDE:+"include = $SUB_INCLUDE"}
}
shim() { # shim LOG SPEC COMMAND...: COMMAND under the shim, SIGKILLed at 60 s
	local log=$1 spec=$2
	shift 2
	timeout -s KILL 60 env WSYNC_CRASH_LOG="$log" WSYNC_CRASH_AT="$spec" \
		LD_PRELOAD="$WSYNC_CRASHSHIM" "$@"
}
set_head() { # set_head V: HEAD names version V (saved as it was published)
	cp "$TMP/heads/$1" "$B/.HEAD.new" && mv -f "$B/.HEAD.new" "$B/HEAD"
}
marker_version() {
	"$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' \
		"$1/.wsync/state.json" 2>/dev/null || echo none
}
# same DIR V: DIR holds exactly checkpoint-V's files, byte for byte
same() {
	same_tree "$CK/checkpoint-$2" "$1/" || { diff -rq -x .wsync "$CK/checkpoint-$2" "$1/"; return 1; }
}
no_temps() { # no_temps DIR...: no wsync temp file anywhere under DIR
	local t
	t=$(find -H "$@" \( -name '.*.wsync-*' ! -name '*.wsync-lock' -o -name '.wsync-tmp.*' -o -name 'state.json.tmp' \) 2>/dev/null)
	[ -z "$t" ] || { echo "temps left: $t"; return 1; }
}
now() { date +%s.%N; }
since() { "$PYTHON3" -c "import sys; print('%.2f' % ($(now) - $1))"; }

# ---- the bucket: versions 1..5, published with the shim logging ----------

P=$TMP/pub
mkdir -p "$B"
pub_ini "$P" "$B" 2	# all of 1..5 kept
mkdir -p "$TMP/heads"
for v in 1 2 3 4 5; do
	shim "$TMP/pub-$v.log" "" "$WSYNC" publish --config "$P/pub.ini" "$CK/checkpoint-$v" \
		>/dev/null 2>>"$P/log" || { echo "Bail out! publishing checkpoint-$v failed"; exit 1; }
	cp "$B/HEAD" "$TMP/heads/$v"
done
check "the bucket holds versions 1..5" test "$(cpy head "$B")" = "5 5"
for v in 1 2 4; do
	check "power loss, publisher v$v: objects durable before the manifest, the manifest before HEAD" \
		cpy puborder "$TMP/pub-$v.log" "$B"
done

# ---- golden targets (and the ordering of normal applies) ------------------

G=$TMP/golden
mkdir -p "$G"
set_head 1
sub_ini "$G/1"
shim "$G/1.log" "" "$WSYNC" pull --config "$G/1/sub.ini" >/dev/null 2>&1
check "a fresh target pulls version 1 (anchor)" same "$G/1/target" 1
check "power loss, subscriber anchor: data durable before the marker, the marker durable" \
	cpy order "$G/1.log" "$G/1/target"
set_head 2
sub_ini "$G/2"
cp -a "$G/1/target" "$G/2/target"
shim "$G/2.log" "" "$WSYNC" pull --config "$G/2/sub.ini" >/dev/null 2>&1
check "version 1 -> 2 by a delta" same "$G/2/target" 2
check "power loss, subscriber delta: data durable before the marker, the marker durable" \
	cpy order "$G/2.log" "$G/2/target"
set_head 5
sub_ini "$G/5"
cp -a "$G/1/target" "$G/5/target"
shim "$G/5.log" "" "$WSYNC" pull --config "$G/5/sub.ini" >/dev/null 2>&1
check "version 1 -> 5 by a chain of deltas" same "$G/5/target" 5
check "power loss, subscriber chain: each step durable before its marker" \
	cpy order "$G/5.log" "$G/5/target"
set_head 2
sub_ini "$G/s2" symlink
shim "$G/s2.log" "" "$WSYNC" pull --config "$G/s2/sub.ini" >/dev/null 2>&1
check "layout = symlink: a fresh target pulls version 2" same "$G/s2/target" 2
check "layout = symlink: target_dir is a link to target.v2" test "$(readlink "$G/s2/target")" = target.v2
check "power loss, layout = symlink: each version directory durable, marker included, before its flip" \
	cpy symorder "$G/s2.log" "$G/s2/target"
# A partial subscriber (include = shards 1 and 3, config.json): its
# versions are $PCK/checkpoint-V, those files of checkpoint-V and a junk
# shard 2 of the operator's (never touched: the same in every version).
PINC="model-00001-of-00003.safetensors model-00003-of-00003.safetensors config.json"
PCK=$TMP/ckP
head -c 3000 /dev/urandom >"$TMP/junk2"
for v in 1 2 3 4 5; do
	mkdir -p "$PCK/checkpoint-$v"
	for f in $PINC; do cp "$CK/checkpoint-$v/$f" "$PCK/checkpoint-$v/"; done
	cp "$TMP/junk2" "$PCK/checkpoint-$v/model-00002-of-00003.safetensors"
done
set_head 2
SUB_INCLUDE=$PINC sub_ini "$G/p2"
mkdir -p "$G/p2/target"
cp "$TMP/junk2" "$G/p2/target/model-00002-of-00003.safetensors"
shim "$G/p2.log" "" "$WSYNC" pull --config "$G/p2/sub.ini" >/dev/null 2>&1
psame() { local CK=$PCK; same "$@"; }
check "partial: a fresh target pulls its files of version 2, the junk shard untouched" \
	psame "$G/p2/target" 2
check "power loss, partial subscriber: data durable before the marker, the marker durable" \
	cpy order "$G/p2.log" "$G/p2/target"
for l in 1 2 5; do
	case $l in 1) o=0 ;; *) o=1 ;; esac
	check "normal apply $l: nothing written in place, every rename from a temp fsynced after its last write" \
		cpy inplace "$G/$l.log" "$G/$l/target" "" "$CK" "$o" "$l"
done

# ---- subscriber crash matrix --------------------------------------------

# died_at DIR RC KIND: the crash run was SIGKILLed (137) by the shim at KIND
died_at() {
	[ "$2" = 137 ] || { echo "exit $2"; tail -5 "$1/crash.log"; return 1; }
	cpy killed "$1/shim.log" "$3"
}
# whole_files DIR OLD NEW: the sampler and the shim log's in-place check
whole_files() {
	cpy sample "$1/target" "$CK" "$2" "$3" && cpy inplace "$1/shim.log" "$1" "$1/run" "$CK" "$2" "$3"
}
# converged DIR RC NEW: the restart reached NEW, cleanly
converged() {
	[ "$2" = 0 ] || { echo "restart exit $2"; tail -5 "$1/restart.log"; return 1; }
	same "$1/target" "$3" && no_temps "$1" &&
		test "$(marker_version "$1/target")" = "$3"
}
NPOINT=0
FIG=()
# point STAGE PLAN SPEC [pull|daemon [RECOVERY]]: RECOVERY, when given, is
# how the restart must get there (delta, anchor, verified: the target
# already held the version, only the marker was missing, none); PLAN D (2 -> 3), C (1 -> 5) or A (none
# -> 5); SPEC as WSYNC_CRASH_AT
point() {
	local stage=$1 plan=$2 spec=$3 mode=${4:-pull} want=${5:-} old new d rc t0 how pid
	case $plan in
	D) old=2 new=3 ;;
	C) old=1 new=5 ;;
	A) old=0 new=5 ;;
	S) old=2 new=3 ;;	# layout = symlink
	S3) old=1 new=2 ;;	# the bucket on s3rver
	P) old=2 new=3 ;;	# partial: include = $PINC
	PA) old=0 new=5 ;;	# partial from nothing (anchor 4, delta 5)
	PS3) old=1 new=2 ;;	# partial, the bucket on s3rver
	esac
	# a partial target's versions: its files and the junk shard
	case $plan in P*) local CK=$PCK SUB_INCLUDE=$PINC ;; esac
	NPOINT=$((NPOINT + 1))
	d=$TMP/p$NPOINT
	rm -rf "$d"
	if [ "$plan" = S ]; then
		sub_ini "$d" symlink
		cp -a "$G/s2/target" "$G/s2"/target.v* "$d/"
	elif [ "$plan" = PS3 ]; then
		SUB_STORE=$S3STORE sub_ini "$d"
		cp -a "$G/ps3-1/target" "$d/target"
	elif [ "$plan" = P ]; then
		sub_ini "$d"
		cp -a "$G/p2/target" "$d/target"
	elif [ "$plan" = PA ]; then
		sub_ini "$d"
		mkdir -p "$d/target"
		cp "$TMP/junk2" "$d/target/model-00002-of-00003.safetensors"
	elif [ "$plan" = S3 ]; then
		SUB_STORE=$S3STORE sub_ini "$d"
		cp -a "$G/s3-1/target" "$d/target"
	else
		sub_ini "$d"
		[ "$old" = 0 ] || cp -a "$G/$old/target" "$d/target"
	fi
	case $plan in *S3) ;; *) set_head "$new" ;; esac
	if [ "$mode" = daemon ]; then
		shim "$d/shim.log" "$spec" "$WSYNCD" -c "$d/sub.ini" --log-target stderr >"$d/crash.log" 2>&1
	else
		shim "$d/shim.log" "$spec" "$WSYNC" pull -v --config "$d/sub.ini" >"$d/crash.log" 2>&1
	fi
	rc=$?
	check "[$NPOINT $plan $stage] $spec: killed by SIGKILL there" died_at "$d" "$rc" "${spec%%:*}"
	check "[$NPOINT] right after the kill every file holds a whole version $old..$new, none written in place" \
		whole_files "$d" "$old" "$new"
	t0=$(now)
	if [ "$mode" = daemon ]; then
		start -c "$d/sub.ini" -l "$d/restart.log" sub
		pid=${DPID[sub]}
		local ok=1
		for _ in $(seq 600); do
			if [ "$(marker_version "$d/target")" = "$new" ] &&
				grep -q '"state": "idle"' "$d/run/status.json" 2>/dev/null; then
				ok=0
				break
			fi
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		stop sub
		rc=$((ok ? 1 : $?))
	else
		timeout -s KILL 60 "$WSYNC" pull -v --config "$d/sub.ini" >"$d/restart.log" 2>&1
		rc=$?
	fi
	local took
	took=$(since "$t0")
	if grep -q -- "already holds version $new" "$d/restart.log"; then
		how=verified
	elif grep -q -- "-> $new: from the anchor" "$d/restart.log"; then
		how=anchor
	elif grep -q -- "applied from delta" "$d/restart.log"; then
		how=delta
	else
		how=none
	fi
	check "[$NPOINT] the restart converges: bytes of version $new, no temps, marker says $new" \
		converged "$d" "$rc" "$new"
	[ -z "$want" ] || check "[$NPOINT] ... by $want" test "$how" = "$want"
	FIG+=("$(printf '%2d  %-4s %-28s %-36s %-6s %-6s %5ss' "$NPOINT" "$plan" "$stage" "$spec" "$mode" "$how" "$took")")
}

# downloading (the file:// store copies the object into state_dir)
point downloading D "open:1:downloads/"
point downloading D "write:1:downloads/"
point downloading D "fsync:1:downloads/"
point downloading D "rename:1:downloads/"
point downloading A "rename:1:downloads/:after"
# decoding and writing the temps in target_dir
point "writing temps" D "open:1:target/."
point "decoding a shard" D "write:5:.model-00002-of-00003.safetensors.wsync-"
point "writing temps" D "fsync:2:target/."
point "temps built" D "close:4:target/."
point "decoding (anchor)" A "write:1:.model-00002-of-00003.safetensors.wsync-"
# between the renames of the changed files
point "before the 1st rename" D "rename:1:target/."
point "between renames" D "rename:2:target/." pull anchor
point "between renames" D "rename:3:target/." daemon
point "between renames" D "rename:4:target/."
point "between renames (anchor)" A "rename:5:target/."
# after the renames, before the marker
# (the target already holds version 3: read and verified, not downloaded)
point "renames done, dir not synced" D "rename:4:target/.:after" pull verified
point "before the marker" D "open:1:.wsync/state.json.tmp" pull verified
# the marker
point "marker written, not synced" D "fsync:1:.wsync/state.json.tmp" pull verified
point "marker before its rename" D "rename:1:.wsync/state.json" daemon verified
point "marker renamed, dir not synced" D "rename:1:.wsync/state.json:after" daemon none
point "after the marker" D "unlink:1:downloads/"
# anchor bootstrap, then its delta
point "bootstrap: anchor's marker" A "rename:1:.wsync/state.json"
point "bootstrap: after the anchor" A "rename:1:.wsync/state.json:after"
point "bootstrap: the delta after" A "rename:12:target/."
# layout = symlink: the new version directory built over hardlinks, then
# the link flipped
point "symlink: hardlinking v3's dir" S "link:3:target.v3/"
point "symlink: renames in v3's dir" S "rename:2:target.v3/."
point "symlink: v3's marker" S "rename:1:target.v3/.wsync/state.json"
point "symlink: before the flip" S "symlink:1"
point "symlink: flipped, not synced" S "rename:1:.target.wsync-flip:after"
# a catch-up over four deltas
point "catch-up: 1st step's marker" C "rename:1:.wsync/state.json:after"
point "catch-up: 2nd step renames" C "rename:7:target/."
point "catch-up: 3rd step temps" C "write:2:.model-00003-of-00003.safetensors.wsync-"
point "catch-up: 4th step marker" C "open:4:.wsync/state.json.tmp" pull verified
point "catch-up: 3rd download" C "rename:3:downloads/"
# a partial subscriber (include = shards 1 and 3, config.json): ranged
# reads of the objects written into one file in downloads/ (head, then its
# files' ranges), its pieces checked, applied; the junk shard 2 untouched
point "partial: fetch opened" P "open:1:downloads/"
point "partial: writing the head" P "write:1:downloads/"
point "partial: writing a file's range" P "write:2:downloads/"
point "partial: fetch done" P "close:1:downloads/"
point "partial: writing temps" P "open:1:target/."
point "partial: a temp written" P "fsync:1:target/."
point "partial: between renames" P "rename:2:target/."
point "partial: renames done" P "rename:2:target/.:after" pull verified
point "partial: before the marker" P "open:1:.wsync/state.json.tmp" pull verified
point "partial: marker renamed" P "rename:1:.wsync/state.json:after" daemon none
point "partial: after the marker" P "unlink:1:downloads/"
point "partial anchor: per-file fetch" PA "write:3:downloads/"
point "partial anchor: between renames" PA "rename:2:target/."
point "partial anchor: the delta after" PA "rename:4:target/."

# ---- subscriber killed while building a file ahead -------------------------
# A publisher daemon streams each version of a one-shard checkpoint in
# many chunks cut between the shard's SEGMENT records (256 KiB segments,
# WSYNC_TEST_SEGMENT_KIB; a pause after each chunk).  Version 2: a
# subscriber daemon at version 1 builds the shard ahead piece by piece and
# dies by SIGKILL at its 3rd write into the shard's temp, before the
# commit.  Version 3: the same for a partial subscriber (include = the
# shard, most of the bytes: it builds ahead; config.json not taken) at
# version 2.  The target holds the old version whole; the restart (no
# shim) removes the temp and converges on the new one, byte-identical
# (the partial one: its shard, nothing else written in its target).
AK=$TMP/ckA
AB=$TMP/abucket
AD=$TMP/ahead
gen_ckpts "$AK" --params 4M --steps 3 --shards 1 --no-trainer-files
ashard=$(cd "$AK/checkpoint-1" && ls model*.safetensors)
mkdir -p "$AB" "$AD/pub/state" "$AD/pub/run" "$AD/pub/watch"
write_ini "$AD/pub.ini" publisher "$AD/pub" "url = file://$AB" \
	"[publisher]" "watch_dir = $AD/pub/watch" "settle_time = 200ms" "chunk_size = 64KiB" \
	"anchor_every = 1000"
start -c "$AD/pub.ini" -l "$AD/pub/log" apub WSYNC_TEST_SEGMENT_KIB=256
put_ckpt "$AK/checkpoint-1" "$AD/pub/watch/checkpoint-1"
check "ahead: the publisher commits version 1" wait_head "$AB" 1 60
stop apub
whole_tree() { same_tree "$AK/checkpoint-$2" "$1/target/"; }
shard_only() { cmp -s "$AK/checkpoint-$2/$ashard" "$1/target/$ashard" && [ "$(ls "$1/target")" = "$ashard" ]; }
# ahead_kill WHAT DIR NEW HOLDS: the subscriber of DIR/sub.ini pulled to
# NEW - 1, then its daemon killed building version NEW ahead, restarted;
# HOLDS DIR V: its target holds what it takes of checkpoint-V
ahead_kill() {
	local what=$1 d=$2 new=$3 holds=$4 old=$(($3 - 1)) rc hv spid
	start -c "$AD/pub.ini" -l "$AD/pub/log" apub WSYNC_TEST_SEGMENT_KIB=256 WSYNC_TEST_CHUNK_PAUSE_MS=1500
	timeout -s KILL 60 "$WSYNC" pull --config "$d/sub.ini" >"$d/pull1.log" 2>&1
	check "$what: the subscriber holds version $old" "$holds" "$d" "$old"
	shim "$d/shim.log" "write:3:.$ashard.wsync-" "$WSYNCD" -c "$d/sub.ini" \
		--log-target stderr >"$d/crash.log" 2>&1 &
	spid=$!
	sleep 2	# its first cycle reads HEAD's manifest (a partial one: its share of the bytes)
	put_ckpt "$AK/checkpoint-$new" "$AD/pub/watch/checkpoint-$new"
	wait "$spid"
	rc=$?
	hv=$(head_version "$AB")
	check "$what: the subscriber died by SIGKILL at its 3rd write into the shard's temp" \
		died_at "$d" "$rc" write
	check "... while building version $new ahead, before its commit (HEAD still names $old)" \
		sh -c "[ '$hv' = $old ] && grep -q 'version $new (step $new) announced: building it ahead' '$d/crash.log' && ! grep -q 'chunks fetched and' '$d/crash.log'"
	check "... the shard holds version $old whole, a temp beside it" \
		sh -c "cmp -s '$AK/checkpoint-$old/$ashard' '$d/target/$ashard' && [ -n \"\$(find '$d/target' -name '.$ashard.wsync-*')\" ]"
	check "$what: the publisher commits version $new" wait_head "$AB" "$new" 120
	stop apub
	timeout -s KILL 60 "$WSYNC" pull --config "$d/sub.ini" >"$d/restart.log" 2>&1
	rc=$?
	check "$what: the restart converges on version $new, no temp left" \
		sh -c "[ $rc = 0 ] && [ \"\$(find '$d' -name '.*.wsync-*' ! -name '*.wsync-lock')\" = '' ]"
	check "... byte-identical to what it takes of checkpoint-$new" "$holds" "$d" "$new"
	check "... marker says $new" test "$(marker_version "$d/target")" = "$new"
}
# (ahead_pace = off: built ahead whatever else loads the machine)
B=$AB sub_ini "$AD/sub"
echo "ahead_pace = off" >>"$AD/sub/sub.ini"
ahead_kill ahead "$AD/sub" 2 whole_tree
SUB_INCLUDE=$ashard B=$AB sub_ini "$AD/part"
echo "ahead_pace = off" >>"$AD/part/sub.ini"
ahead_kill "ahead, partial" "$AD/part" 3 shard_only

# ---- a publisher part killed mid-announcement ------------------------------
# Two parts (part = 1/2, 2/2, one key) publish version 2 of a 4-shard
# checkpoint, each file's records a chunk (a pause after each), part 2
# announcing its chunks in parts/<V>/2.next.json and part 1 merging them
# into NEXT; a subscriber daemon at version 1 builds ahead from it.  Part 2
# dies by SIGKILL just after its 2nd announcement is renamed into the
# bucket.  HEAD still names 1 and the target holds version 1 whole;
# restarted (no shim), part 2 uploads the version again (a new flight),
# part 1 commits it, and the subscriber converges byte-identical, no temp.
RK=$TMP/ckR
RB=$TMP/rbucket
RD=$TMP/rparts
gen_ckpts "$RK" --params 4M --steps 2 --shards 4 --no-trainer-files
mkdir -p "$RB" "$RD/watch"
"$WSYNC" keygen "$RD/wsync.key" >/dev/null
for k in 1 2; do
	mkdir -p "$RD/p$k/state" "$RD/p$k/run"
	write_ini "$RD/p$k/pub.ini" publisher "$RD/p$k" "url = file://$RB" \
		"[publisher]" "watch_dir = $RD/watch" "settle_time = 200ms" "watch_mode = poll" \
		"rescan_interval = 200ms" "anchor_every = 1000" "part = $k/2" \
		"signing_key = $RD/wsync.key"
done
start -c "$RD/p1/pub.ini" -l "$RD/p1/log" rp1 WSYNC_TEST_CHUNK_PAUSE_MS=700
start -c "$RD/p2/pub.ini" -l "$RD/p2/log" rp2
put_ckpt "$RK/checkpoint-1" "$RD/watch/checkpoint-1"
check "parts: version 1 committed" wait_head "$RB" 1 90
stop rp2
B=$RB sub_ini "$RD/sub"
start -c "$RD/sub/sub.ini" -l "$RD/sub/log" rsub
# (its chunks a pause apart too: two announcements at least, never one
# that already says "all")
shim "$RD/p2/shim.log" "rename:2:/2.next.json:after" env WSYNC_TEST_CHUNK_PAUSE_MS=700 \
	"$WSYNCD" -c "$RD/p2/pub.ini" --log-target stderr >"$RD/p2/crash.log" 2>&1 &
ppid=$!
put_ckpt "$RK/checkpoint-2" "$RD/watch/checkpoint-2"
wait "$ppid"
rc=$?
hv=$(head_version "$RB")
check "parts: part 2 died by SIGKILL after its 2nd announcement" died_at "$RD/p2" "$rc" rename
check "... before the commit (HEAD still names 1), the target holds version 1" \
	sh -c "[ '$hv' = 1 ] && diff -rq -x .wsync -x '.*.wsync-*' '$RK/checkpoint-1' '$RD/sub/target/' >/dev/null"
start -c "$RD/p2/pub.ini" -l "$RD/p2/log" rp2
check "parts: restarted, part 2 lets part 1 commit version 2" wait_head "$RB" 2 120
sub_at2() { [ "$(marker_version "$RD/sub/target")" = 2 ]; }
check "parts: the subscriber converges on version 2" wait_for 60 sub_at2
check "... byte-identical to checkpoint-2" same_tree "$RK/checkpoint-2" "$RD/sub/target/"
check "... no temp left" no_temps "$RD/sub/target"
stop rsub
stop rp1
stop rp2

# ---- disk full mid-apply: the shim fails the Nth write into a temp in
# target_dir, and every later one, with ENOSPC (past the free-space check)
# enospc PLAN N: wsync pull fails cleanly (an exit code, not a signal,
# naming ENOSPC), the fault was reached, the old version is intact with its
# marker, no temp is left; then a pull without the fault applies NEW
NFULL=0
enospc() {
	local plan=$1 n=$2 old new d rc before
	case $plan in D) old=2 new=3 ;; A) old=0 new=5 ;; esac
	NFULL=$((NFULL + 1))
	d=$TMP/full$NFULL
	sub_ini "$d"
	[ "$old" = 0 ] || cp -a "$G/$old/target" "$d/target"
	set_head "$new"
	before=$(cat "$d/target/.wsync/state.json" 2>/dev/null)
	timeout -s KILL 60 env WSYNC_CRASH_LOG="$d/shim.log" WSYNC_FAIL_AT="write:$n:target/.:ENOSPC" \
		LD_PRELOAD="$WSYNC_CRASHSHIM" "$WSYNC" pull -v --config "$d/sub.ini" >"$d/crash.log" 2>&1
	rc=$?
	echo "# disk full [$plan write $n]: exit $rc: $(grep -m1 'No space' "$d/crash.log" | cut -c1-160)"
	check "disk full [$plan write $n]: the fault was reached" grep -qP "^FAIL\twrite\t$n\t" "$d/shim.log"
	check "disk full [$plan write $n]: a clean failure (exit $rc: not 0, not a signal) naming ENOSPC" \
		sh -c '[ "$1" -gt 0 ] && [ "$1" -lt 124 ] && grep -q "No space left on device" "$2"' _ "$rc" "$d/crash.log"
	if [ "$old" = 0 ]; then
		check "disk full [$plan write $n]: no model file in the target" \
			test -z "$(ls -A "$d/target" 2>/dev/null | grep -vx .wsync)"
	else
		check "disk full [$plan write $n]: version $old intact (cmp)" same "$d/target" "$old"
	fi
	check "disk full [$plan write $n]: marker unchanged" test "$(cat "$d/target/.wsync/state.json" 2>/dev/null)" = "$before"
	check "disk full [$plan write $n]: no temp file left" no_temps "$d"
	timeout -s KILL 60 "$WSYNC" pull -v --config "$d/sub.ini" >"$d/restart.log" 2>&1
	check "disk full [$plan write $n]: space back, the next pull applies version $new" \
		converged "$d" "$?" "$new"
}
enospc D 1
enospc D 6
enospc A 3

# ---- a file cut short while `wsync diff` reads it (the shim's
# WSYNC_SHRINK_AT: the new shard is truncated to half just before the Nth
# pread of it -- the first reads its header; a later one is the coder's,
# whose error names the segment): a clean failure naming the file, no
# delta and no temp left.  Past its last read nothing is cut and the delta
# is the one made without the shim.
cut_short() {
	local n=$1 d=$TMP/cut$1 rc
	mkdir -p "$d"
	cp -a "$CK/checkpoint-2" "$d/new"
	timeout -s KILL 60 env WSYNC_CRASH_LOG="$d/shim.log" WSYNC_SHRINK_AT="pread:$n:new/model-00002" \
		LD_PRELOAD="$WSYNC_CRASHSHIM" "$WSYNC" diff "$CK/checkpoint-1" "$d/new" \
		-o "$d/out.wsd" --threads 2 >"$d/diff.log" 2>&1
	rc=$?
	echo "# diff, shard cut at its pread $n: exit $rc: $(tail -1 "$d/diff.log" | cut -c1-160)"
	if [ "$2" = reached ]; then
		check "diff, shard cut at its pread $n: the cut was made" \
			grep -qP "^SHRINK\tpread\t$n\t.*new/model-00002" "$d/shim.log"
		check "diff, shard cut at its pread $n: exit 1 naming the file" \
			sh -c '[ "$1" = 1 ] && grep -q "new/model-00002-of-00003.safetensors.*changed size while being read" "$2"' \
			_ "$rc" "$d/diff.log"
		check "diff, shard cut at its pread $n: no delta, no temp" \
			test -z "$(ls -A "$d" | grep -v -x -e new -e shim.log -e diff.log)"
	else
		check "diff, shard not cut (pread $n never came): exit 0" test "$rc" = 0
		"$WSYNC" diff "$CK/checkpoint-1" "$CK/checkpoint-2" -o "$d/plain.wsd" >/dev/null 2>&1
		check "diff, shard not cut: the same delta as without the shim" cmp "$d/out.wsd" "$d/plain.wsd"
	fi
}
cut_short 1 reached
CODER_CUT=
for n in 2 3 4 5 6 7 8; do
	cut_short "$n" reached
	if grep -q "segment at 0: .*changed size while being read" "$TMP/cut$n/diff.log"; then
		CODER_CUT=$n
		break
	fi
done
check "diff: a cut while the coder reads the shard was among its first 8 preads (pread ${CODER_CUT:-none})" \
	test -n "$CODER_CUT"
cut_short 1000 not-reached

# the bucket on s3rver: objects downloaded by curl into state_dir
if have_s3rver; then
	read -r port < <(free_ports 1)
	s3rver_start "$TMP/s3rver" "$port" wsync-crash
	tap_result $? "s3rver started"
	S3STORE=$(s3rver_store s3://wsync-crash/b)
	mkdir -p "$TMP/s3pub/watch"
	write_ini "$TMP/s3pub/pub.ini" publisher "$TMP/s3pub" "$S3STORE" "[publisher]" \
		"watch_dir = $TMP/s3pub/watch" "anchor_every = 3" "keep_anchors = 2"
	"$WSYNC" publish --config "$TMP/s3pub/pub.ini" "$CK/checkpoint-1" >/dev/null 2>>"$TMP/s3pub/log"
	SUB_STORE=$S3STORE sub_ini "$G/s3-1"
	timeout -s KILL 60 "$WSYNC" pull --config "$G/s3-1/sub.ini" >/dev/null 2>&1
	check "s3: a fresh target pulls version 1" same "$G/s3-1/target" 1
	SUB_STORE=$S3STORE SUB_INCLUDE=$PINC sub_ini "$G/ps3-1"
	mkdir -p "$G/ps3-1/target"
	cp "$TMP/junk2" "$G/ps3-1/target/model-00002-of-00003.safetensors"
	timeout -s KILL 60 "$WSYNC" pull --config "$G/ps3-1/sub.ini" >/dev/null 2>&1
	check "s3: a fresh partial target pulls its files of version 1" psame "$G/ps3-1/target" 1
	"$WSYNC" publish --config "$TMP/s3pub/pub.ini" "$CK/checkpoint-2" >/dev/null 2>>"$TMP/s3pub/log"
	point "s3: before the download" S3 "open:1:downloads/"
	point "s3: mid download" S3 "write:2:downloads/"
	point "s3: download done" S3 "rename:1:downloads/"
	point "s3: between renames" S3 "rename:2:target/."
	# a partial subscriber on s3rver: ranged GETs, written into downloads/
	point "s3 partial: mid ranged writes" PS3 "write:2:downloads/"
	point "s3 partial: between renames" PS3 "rename:2:target/."
else
	echo "# s3 kill points skipped: $S3S_WHY"
fi

if [ "$LONG" = 1 ]; then
	# every logged call of each plan: counted from a run without a kill
	for plan in D C A; do
		case $plan in D) o=2 n=3 ;; C) o=1 n=5 ;; A) o=0 n=5 ;; esac
		d=$TMP/count-$plan
		sub_ini "$d"
		[ "$o" = 0 ] || cp -a "$G/$o/target" "$d/target"
		set_head "$n"
		shim "$d/shim.log" "" "$WSYNC" pull --config "$d/sub.ini" >/dev/null 2>&1
		total=$(grep -c . "$d/shim.log")
		echo "# --long: plan $plan makes $total logged calls; killing at each"
		for k in $(seq 1 "$total"); do
			point "sweep" "$plan" "any:$k"
		done
	done
fi

# ---- publisher crashes ----------------------------------------------------

PB=$TMP/pbucket
PP=$TMP/ppub
mkdir -p "$PB"
pub_ini "$PP" "$PB" 1
publish() { # publish CKPT_STEP: wsync publish, no shim
	timeout -s KILL 60 "$WSYNC" publish --config "${PPCONF:-$PP/pub.ini}" "$CK/checkpoint-$1" >>"$PP/out" 2>>"$PP/log"
}
# head_ok: HEAD names a complete version: a fresh subscriber verifies and
# reproduces it byte for byte; manifests 1..HEAD have no gap
NHEAD=0
head_ok() {
	local hv step d
	read -r hv step <<<"$(cpy head "$PB")" || return 1
	NHEAD=$((NHEAD + 1))
	d=$TMP/pv$NHEAD
	mkdir -p "$d/state" "$d/run"
	sed -e "s|$B|$PB|" -e "s|$TMP/p[0-9]*/|$d/|" "$TMP/p1/sub.ini" >"$d/sub.ini"
	timeout -s KILL 60 "$WSYNC" pull --config "$d/sub.ini" >"$d/out" 2>&1 || { cat "$d/out"; return 1; }
	same "$d/target" "$step" || return 1
	ls "$PB/manifests" | "$PYTHON3" -c '
import sys
vs = sorted(int(l[:12]) for l in sys.stdin if l[0].isdigit())
sys.exit(0 if vs == list(range(vs[0], vs[-1] + 1)) else "gap in %s" % vs)'
}
publish 1 && publish 2 || { echo "Bail out! publisher setup failed"; exit 1; }
PFIG=()
STEP=2
# ppoint STAGE SPEC [NOBJ]: publish the next checkpoint under the shim,
# killed at SPEC; then HEAD is whole, and the same checkpoint published
# again comes out at a version above HEAD's (whose manifest lists NOBJ
# objects, when given)
n_objects() { # n_objects: how many objects HEAD's manifest lists
	"$PYTHON3" -c 'import json, sys
d = lambda p: json.loads(open(p, "rb").read().decode().split("\nwsync-signature")[0])
h = d(sys.argv[1] + "/HEAD")
print(len(d(sys.argv[1] + "/" + h["manifest"]["key"])["objects"]))' "$PB"
}
ppoint() {
	local stage=$1 spec=$2 nobj=${3:-} before after rc d
	STEP=$((STEP + 1))
	d=$TMP/pk$STEP
	mkdir -p "$d"
	read -r before _ <<<"$(cpy head "$PB")"
	shim "$d/shim.log" "$spec" "$WSYNC" publish --config "${PPCONF:-$PP/pub.ini}" "$CK/checkpoint-$STEP" >"$d/crash.log" 2>&1
	rc=$?
	check "publisher [$stage] $spec: killed by SIGKILL there" died_at "$d" "$rc" "${spec%%:*}"
	check "publisher [$stage]: HEAD names a complete version a fresh subscriber reproduces" head_ok
	publish "$STEP"
	rc=$?
	read -r after astep <<<"$(cpy head "$PB")"
	check "publisher [$stage]: the restart publishes checkpoint-$STEP above version $before" \
		test "$rc:$astep" = "0:$STEP" -a "$after" -gt "$before"
	check "publisher [$stage]: ... and HEAD is whole again" head_ok
	[ -z "$nobj" ] || check "publisher [$stage]: ... its manifest lists $nobj objects" \
		test "$(n_objects)" = "$nobj"
	PFIG+=("$(printf '%-34s %-34s HEAD %s -> %s' "$stage" "$spec" "$before" "$after")")
}
ppoint "encoding the delta" "write:1:/out/"
ppoint "between two objects (anchor+delta)" "rename:1:/pbucket/:after" 2
ppoint "uploading an object" "fsync:1:/pbucket/deltas/.wsync-tmp."
ppoint "objects done, manifest not" "open:1:/pbucket/manifests/"
ppoint "manifest written, HEAD not" "rename:1:/pbucket/manifests/:after"
ppoint "writing HEAD" "fsync:1:/pbucket/.wsync-tmp."
ppoint "HEAD renamed, not synced" "rename:1:/pbucket/HEAD:after"
ppoint "writer lease taken, nothing else" "rename:1:/pbucket/writers/:after"
# Streaming: objects in 64 KiB chunks, uploaded while the rest is coded,
# announced in NEXT (every version an anchor, so there are chunks to cut)
sed -e 's/^anchor_every = .*/anchor_every = 1/' -e '/^\[publisher\]/a chunk_size = 64KiB' \
	"$PP/pub.ini" >"$PP/pub-chunks.ini"
PPCONF=$PP/pub-chunks.ini ppoint "streaming: uploading chunk 2" "fsync:2:/pbucket/anchors/.wsync-tmp."
PPCONF=$PP/pub-chunks.ini ppoint "streaming: NEXT written, manifest not" "rename:1:/pbucket/NEXT:after"
PPCONF=$PP/pub-chunks.ini ppoint "streaming: last chunk, then killed" "open:1:/pbucket/manifests/"
check "streaming: the manifests of the chunked versions list chunks" \
	grep -q '"chunks"' "$PB/$(cpy headkey "$PB")"
# The daemon too: wsyncd killed between its objects and the manifest of a
# checkpoint it saw in watch_dir; restarted, it publishes it
STEP=$((STEP + 1))
d=$TMP/pk$STEP
mkdir -p "$d"
read -r before _ <<<"$(cpy head "$PB")"
shim "$d/shim.log" "open:1:/pbucket/manifests/" "$WSYNCD" -c "$PP/pub.ini" --log-target stderr \
	>"$d/crash.log" 2>&1 &
pid=$!
DPID[crash]=$pid
cp -r "$CK/checkpoint-$STEP" "$PP/checkpoint-$STEP"
mv "$PP/checkpoint-$STEP" "$PP/watch/"	# whole at once
wait "$pid"
rc=$?
DPID[crash]=
check "publisher wsyncd [objects done, manifest not]: killed by SIGKILL there" \
	died_at "$d" "$rc" open
check "publisher wsyncd: HEAD names a complete version a fresh subscriber reproduces" head_ok
start -c "$PP/pub.ini" -l "$d/restart.log" pub
t0=$(now)
for _ in $(seq 600); do
	[ "$(cpy head "$PB" | cut -d' ' -f2)" = "$STEP" ] && break
	sleep 0.1
done
took=$(since "$t0")
read -r after astep <<<"$(cpy head "$PB")"
stop pub
check "publisher wsyncd: restarted, it publishes checkpoint-$STEP above version $before, stops cleanly" \
	test "$?:$astep" = "0:$STEP" -a "$after" -gt "$before"
check "publisher wsyncd: ... and HEAD is whole again" head_ok
PFIG+=("$(printf '%-34s %-34s HEAD %s -> %s (wsyncd, %ss)' "objects done, manifest not" "open:1:/pbucket/manifests/" "$before" "$after" "$took")")

# The killed puts left temps, which listings (and so GC) skip: the next
# puts in their directories remove them once an hour old (aged here by
# hand), and leave a younger one (a put in progress) alone.
temps=$(find "$PB" -name '.wsync-tmp.*')
check "publisher: the killed uploads left temps in the bucket" test -n "$temps"
touch -d '2 hours ago' $temps
echo young >"$PB/deltas/.wsync-tmp.young1"
# three more versions, so that every object folder (anchors/ too) gets a put
publish $((STEP + 1)) && publish $((STEP + 2)) && publish $((STEP + 3))
check "publisher: the next checkpoints after the crashes are published" \
	test "$(cpy head "$PB" | cut -d' ' -f2)" = $((STEP + 3))
check "publisher: a temp younger than an hour is left alone" test -f "$PB/deltas/.wsync-tmp.young1"
rm -f "$PB/deltas/.wsync-tmp.young1"
check "publisher: after its garbage collection nothing in the bucket is orphaned, temps included" \
	cpy orphans "$PB"
echo "# publisher kill points: ${#PFIG[@]}"
for f in "${PFIG[@]}"; do echo "# $f"; done

echo "# subscriber crash matrix: $NPOINT kill points"
echo "#  n  plan stage                        kill at (WSYNC_CRASH_AT)             via    recovery  converged in"
for f in "${FIG[@]}"; do echo "# $f"; done
check "at least 20 kill points" test "$NPOINT" -ge 20
check "no sanitizer report in any log" sh -c "! grep -l -E 'ERROR: AddressSanitizer|runtime error|LeakSanitizer' $TMP/p*/*.log $TMP/pk*/*.log $PP/log $P/log"

tap_done
