#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-heal.sh -- a subscriber never stays stuck on a bucket whose history
# changed under it (issue 39): the real wsyncd, role subscriber, against a
# file:// bucket laid out by tests/integration/bucket-writer.py, its
# histories rewritten while it runs, as two publishers on one bucket or a
# bucket published again from scratch would:
#  - HEAD names the applied version with another manifest (the bucket
#    swapped for one published again): the target is rebuilt from HEAD's
#    anchor, byte-identical within 60 s, one HISTORY_REBUILT journal entry;
#    while it is behind, status.json says behind with lag_seconds > 0;
#    the rebuild's steps (older versions of another history) are built
#    out of sight in target/.wsync/rebuild: every file of the target,
#    sampled every 100 ms meanwhile, only ever holds its old content or
#    its final one, state.json goes from the old version straight to the
#    new, and no staging directory is left; the same for a subscriber with
#    layout = symlink (s2), whose link is flipped once, at the end;
#  - HEAD names a higher version of yet another history, and the anchor
#    the rebuild would take is deleted: it goes through an older anchor
#    HEAD's manifest lists (one more HISTORY_REBUILT);
#  - a HEAD below the highest version held is still refused (rollback);
#  - SIGKILL in the middle of a rebuild: the target still holds the old
#    version; restarted, the subscriber removes the staging directory and
#    converges;
#  - a version whose delta fails verification is refused and counted
#    (wsync_versions_refused_total, status.json's versions_refused) and
#    not downloaded again at every poll (the count stays small over 10 s
#    of 200 ms polls); a good version published later is applied.
# Every wait is bounded.
. "$(dirname "$0")/lib.sh"

gen_ckpts "$TMP/ck" --params 2M --steps 9 --shards 1 --no-trainer-files
mkdir -p "$TMP/empty"
openssl genpkey -algorithm ed25519 -out "$TMP/key.pem" 2>/dev/null
openssl pkey -in "$TMP/key.pem" -pubout -out "$TMP/key.pub" 2>/dev/null
export KEY="$TMP/key.pem" EMPTY="$TMP/empty" WSYNC

B="$TMP/bucket"
CK="$TMP/ck/checkpoint"
J="$TMP/s1/journal.jsonl"
REBUILT=$(mid HISTORY_REBUILT)

# history HIST_DIR CKPT...: a bucket published from scratch (version 1 an
# anchor, then deltas), the checkpoints in that order
history() {
	local dir=$1 v=0 prev= c
	shift
	for c in "$@"; do
		v=$((v + 1))
		if [ -z "$prev" ]; then
			pub "$dir" $v "$c" --anchor --sign
		else
			pub "$dir" $v "$c" --prev "$prev" --sign
		fi
		prev=$c
	done
}
# swap DIR: DIR becomes the bucket (the old one moved aside), as one rename
swap() { mv "$B" "$B.old.$RANDOM" && mv "$1" "$B"; }
rebuilt() { journal_count "$J" "$REBUILT"; }
refused() { field s1 versions_refused; }
metric() { grep -o "^$1{[^}]*} [0-9.]*" "$TMP/s1/run/wsync.prom" | awk '{ print $2 }'; }
# seconds since START (date +%s.%N)
since() { echo "$(date +%s.%N) - $1" | bc; }
T=$TMP/s1/target
STAGE=$T/.wsync/rebuild
# sample OUT [DIR]: every 100 ms (at most 90 s, until OUT.stop exists),
# each file's path and SHA-256 in DIR (the target) appended to OUT,
# distinct lines only
sample() {
	local out=$1 dir=${2:-$T} i
	: >"$out"
	for i in $(seq 900); do
		[ -e "$out.stop" ] && break
		(cd "$dir/" && find . -path ./.wsync -prune -o -type f -print0 |
			xargs -0r sha256sum 2>/dev/null) >>"$out"
		sort -u -o "$out" "$out"
		sleep 0.1
	done
}
# seen_only OUT OLD NEW: every (file, content) sampled is OLD's or NEW's
seen_only() {
	local out=$1 bad
	bad=$(comm -23 "$out" <( ( (cd "$2" && sha256sum $(find . -type f));
				   (cd "$3" && sha256sum $(find . -type f)) ) | sort -u))
	[ -z "$bad" ] || { echo "# seen neither old nor new:"; echo "$bad" | sed 's/^/#   /'; return 1; }
}
samples_of() { sort -u -o "$1" "$1"; wc -l <"$1"; }

history "$B" "$CK-1" "$CK-2" "$CK-3"
conf s1 "$B" verify
journal_start s1-journal "$TMP/s1/j.sock" "$J"
# each apply held 1.5 s, so that the rebuild's state is seen from outside
start s1 WSYNC_JOURNAL_SOCKET="$TMP/s1/j.sock" WSYNC_TEST_APPLY_PAUSE_MS=1500
conf s2 "$B" verify
echo "layout = symlink" >>"$DAEMONS/s2.ini"
start s2 WSYNC_TEST_APPLY_PAUSE_MS=1500
check "the subscriber reaches version 3" wait_version s1 3 30
check "the symlink-layout subscriber too" wait_version s2 3 30
check "target equals checkpoint 3" same_tree "$CK-3" "$TMP/s1/target"
check "not behind at HEAD" test "$(field s1 behind)" = false
check "lag 0 at HEAD" test "$(field s1 lag_seconds)" = 0

# 1. The bucket published again from scratch: HEAD names version 3, the
# applied version, with another manifest (another checkpoint).
history "$TMP/b2" "$CK-4" "$CK-5" "$CK-6"
old_state=$(cat "$T/.wsync/state.json")
sample "$TMP/seen1" & SAMPLER=$!
sample "$TMP/seen1s" "$TMP/s2/target" & SAMPLER2=$!
t0=$(date +%s.%N)
swap "$TMP/b2"
check "a rewritten history puts the status behind" wait_field s1 behind true 20
check "lag is above 0 while behind" wait_for 10 sh -c "[ \"\$(sed -n 's/.*\"lag_seconds\": *\([0-9]*\).*/\1/p' '$(status_json s1)')\" -gt 0 ]"
wait_converged_s2() {
	for _ in $(seq 600); do
		same_tree "$1" "$TMP/s2/target/" && at_version s2 "$2" && return 0
		sleep 0.1
	done
	said s2
	return 1
}
conv() {
	for _ in $(seq 600); do
		same_tree "$1" "$TMP/s1/target" && at_version s1 "$2" && return 0
		sleep 0.1
	done
	said s1
	return 1
}
check "mid-rebuild, the steps are built in target/.wsync/rebuild" wait_for 20 test -d "$STAGE"
check "mid-rebuild, the target still holds the old version 3" same_tree "$CK-3" "$T"
check "mid-rebuild, state.json is the old version's, unchanged" test "$(cat "$T/.wsync/state.json")" = "$old_state"
check "rebuilt byte-identical to the new version 3 within 60 s" conv "$CK-6" 3
touch "$TMP/seen1.stop"
wait $SAMPLER
echo "# $(samples_of "$TMP/seen1") distinct (file, content) pairs seen during the rebuild"
check "during the rebuild, each file held only its old or its new content" seen_only "$TMP/seen1" "$CK-3" "$CK-6"
check "the rebuild built version 1 and 2 out of sight" grep -q "version 2 built from delta.*out of sight" "$J"
check "no staging directory is left" test ! -e "$STAGE"
check "layout = symlink: rebuilt byte-identical too" wait_converged_s2 "$CK-6" 3
touch "$TMP/seen1s.stop"
wait $SAMPLER2
check "layout = symlink: each file held only its old or its new content" seen_only "$TMP/seen1s" "$CK-3" "$CK-6"
check "layout = symlink: the link names version 3's directory" test "$(readlink "$TMP/s2/target")" = "$TMP/s2/target.v3" -o "$(readlink "$TMP/s2/target")" = target.v3
check "layout = symlink: no build directory left" sh -c "! ls -a '$TMP/s2' | grep -q 'wsync-rebuild\|^target\.v[4-9]'"
echo "# converged in $(since "$t0") s (3 steps held 1.5 s each)"
check "one HISTORY_REBUILT entry" test "$(rebuilt)" = 1
check "it says why and from which anchor" grep -q "another manifest than the one applied.*from the anchor of version 1" "$J"
check "the rebuild went through the anchor" wait_for 5 grep -q "applied from anchor anchors/000000000001.wsa" "$J"
check "not behind any more" wait_field s1 behind false 10
check "lag 0 again" test "$(field s1 lag_seconds)" = 0
check "at HEAD, state.json has no floor above its version" sh -c "! grep -q floor '$TMP/s1/target/.wsync/state.json'"

# 2. Yet another history, HEAD higher than the applied version, and the
# anchor the rebuild would take (version 3's) deleted.
history "$TMP/b3" "$CK-2" "$CK-3"
pub "$TMP/b3" 3 "$CK-4" --prev "$CK-3" --anchor --sign
pub "$TMP/b3" 4 "$CK-5" --prev "$CK-4" --sign
pub "$TMP/b3" 5 "$CK-7" --prev "$CK-5" --sign
rm "$TMP/b3/anchors/000000000003.wsa"
sample "$TMP/seen2" & SAMPLER=$!
sample "$TMP/seen2s" "$TMP/s2/target" & SAMPLER2=$!
t0=$(date +%s.%N)
swap "$TMP/b3"
check "another history, its newest anchor gone: byte-identical at version 5 within 60 s" conv "$CK-7" 5
touch "$TMP/seen2.stop"
wait $SAMPLER
check "through versions 1 to 4 of that history, each file held only its old or new content" seen_only "$TMP/seen2" "$CK-6" "$CK-7"
check "layout = symlink: byte-identical at version 5" wait_converged_s2 "$CK-7" 5
touch "$TMP/seen2s.stop"
wait $SAMPLER2
check "layout = symlink: through versions 1 to 4, only old or new content" seen_only "$TMP/seen2s" "$CK-6" "$CK-7"
check "no staging directory is left" test ! -e "$STAGE"
echo "# converged in $(since "$t0") s"
check "a second HISTORY_REBUILT entry" test "$(rebuilt)" = 2
check "the manifest of the applied version was named as the reason" grep -q "manifest of version 3, the applied one, is not the one applied" "$J"
check "it went round the deleted anchor (version 1's)" grep -q "going through the anchor of version 1" "$J"

# 3. Rollback protection stays: a HEAD below the applied version.
pub "$B" 4 "$CK-5" --head-only 4 --sign
check "a lower HEAD is refused as a rollback" wait_error s1 "rollback" 20
check "the target still holds version 5" same_tree "$CK-7" "$TMP/s1/target"
pub "$B" 5 "$CK-7" --head-only 5 --sign

# 4. A delta that fails verification: refused, counted, backed off.
r0=$(refused)
pub "$B" 6 "$CK-8" --prev "$CK-7" --sign --flip
check "a flipped byte is refused" wait_error s1 "version 6 refused" 20
sleep 10
r1=$(refused)
echo "# refusals of version 6 in 10 s of 200 ms polls: $((r1 - r0))"
check "refused and counted, a few times, not at every poll" test $((r1 - r0)) -ge 1 -a $((r1 - r0)) -le 6
check "the metric counts them" test "$(metric wsync_versions_refused_total)" = "$r1"
check "the target still holds version 5" same_tree "$CK-7" "$TMP/s1/target"
pub "$B" 7 "$CK-9" --prev "$CK-8" --anchor --sign
check "a good version published later is applied" conv "$CK-9" 7
check "still two HISTORY_REBUILT entries" test "$(rebuilt)" = 2

# 5. SIGKILL in the middle of a rebuild (HEAD names version 7, the applied
# one, with another manifest; its only anchor is version 1's).
history "$TMP/b5" "$CK-2" "$CK-3" "$CK-4" "$CK-5" "$CK-6" "$CK-7" "$CK-8"
swap "$TMP/b5"
check "a rebuild through 7 steps starts in the staging directory" wait_for 30 test -d "$STAGE"
check "a step was built out of sight" wait_for 20 grep -q "version [2-6] built from delta.*target keeps version 7" "$J"
kill -KILL "${DPID[s1]}"
wait "${DPID[s1]}" 2>/dev/null
check "killed mid-rebuild: the target still holds the old version 7" same_tree "$CK-9" "$T"
check "killed mid-rebuild: state.json still names version 7 of the old history" grep -Eq '"version": ?7' "$T/.wsync/state.json"
start s1 WSYNC_JOURNAL_SOCKET="$TMP/s1/j.sock"
check "restarted: byte-identical to the new version 7" conv "$CK-8" 7
check "restarted: the staging directory is gone" test ! -e "$STAGE"

stop s2
tap_result $? "SIGTERM stops the symlink-layout subscriber with exit 0"
stop s1
tap_result $? "SIGTERM stops the subscriber with exit 0"
tap_done
