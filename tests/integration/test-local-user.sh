#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-local-user.sh -- a local user who can write the subscriber's target
# folder or the publisher's watched folder cannot make wsync write, read
# or ship anything outside them, nor hang it (issue 26).  The races are
# made deterministic with the LD_PRELOAD shim tests/shim/swapshim.c
# ($WSYNC_SWAPSHIM): just before the chosen open/opendir/link it renames
# a folder away and puts a symbolic link to a folder outside in its place,
# which is what the user would do between wsync's check and its use.  Each
# race checks the shim's log: the swap did happen.
#
# Publisher (`wsync publish` of one checkpoint, file:// buckets):
#   - a subfolder swapped while the scan walks it: none of the outside
#     folder's files is in the manifest, and a pull of the version holds
#     none of their bytes;
#   - the same swap between the scan and the snapshot (a file of the same
#     size and mtime outside): the version holds the real file's bytes;
#   - trainer_state.json a link to an outside file naming another step
#     (a folder without digits in its name): that step is not used;
#     trainer_state.json a FIFO: the publish ends (bounded wait).
# Subscriber (`wsync pull`, a file:// bucket at version 1):
#   - .wsync swapped for a link between the subscriber's check and its
#     state.json write: nothing written outside (the state lands in the
#     real .wsync, moved aside), and the next pull refuses the link;
#   - state.json a link to an outside file, and to /etc/hostname: the log
#     says it is a link and quotes none of the file; the pull rebuilds the
#     target and puts a real state in the link's place;
#   - state.json a FIFO: the pull ends (bounded wait), saying so;
#   - state.json of 200 MB (sparse): refused for its size;
#   - .wsync of another user, or writable by others: refused;
#   - layout = symlink: a lock file hard-linked to a file elsewhere is
#     refused and that file left intact; an in-place target whose .wsync
#     is a link to a folder holding a state is refused before anything
#     is read or moved.
. "$(dirname "$0")/lib.sh"

: "${WSYNC_SWAPSHIM:=$WSYNC_SOURCE_ROOT/build/tests/swapshim.so}"
[ -f "$WSYNC_SWAPSHIM" ] || { echo "Bail out! no swap shim at $WSYNC_SWAPSHIM"; exit 1; }
# an ASan build's runtime wants to be first; the shim only wraps libc
export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0

CK=$TMP/ck
gen_ckpts "$CK" --params 1M --steps 1 --shards 1
# letters only, under 20: the word jansson quotes whole ("near '...'")
SECRET="wsyncsecret$(tr -dc a-z </dev/urandom | head -c 8)"

# swap LOG MATCH N DIR TARGET COMMAND...: COMMAND under the shim (see the
# top), SIGKILLed at 60 s
swap() {
	local log=$1 match=$2 n=$3 dir=$4 target=$5
	shift 5
	timeout -s KILL 60 env WSYNC_SWAP_LOG="$log" WSYNC_SWAP_MATCH="$match" \
		WSYNC_SWAP_N="$n" WSYNC_SWAP_DIR="$dir" WSYNC_SWAP_TARGET="$target" \
		LD_PRELOAD="$WSYNC_SWAPSHIM" "$@"
}
swapped() { grep -q '^SWAP ' "$1" 2>/dev/null || { echo "no swap in $1"; return 1; }; }
pub_ini() { # pub_ini DIR BUCKET [LINE...]: a publisher's config DIR/pub.ini
	local d=$1 b=$2
	shift 2
	mkdir -p "$d/watch" "$b"
	write_ini "$d/pub.ini" publisher "$d" "url = file://$b" "[publisher]" "watch_dir = $d/watch" \
		"$@"
}
sub_ini() { # sub_ini DIR BUCKET [LAYOUT]: a subscriber of BUCKET, target DIR/target
	mkdir -p "$1"
	write_ini "$1/sub.ini" subscriber "$1" "url = file://$2" "[subscriber]" \
		"target_dir = $1/target" "layout = ${3:-inplace}"
}
pull() { # pull DIR: wsync pull -v, output in DIR/pull.log, at most 60 s; its exit code
	timeout -s KILL 60 "$WSYNC" pull -v --config "$1/sub.ini" >"$1/pull.log" 2>&1
}
not_in_log() { # not_in_log DESC FILE TEXT
	if grep -qF -- "$3" "$2"; then
		grep -F -- "$3" "$2" | sed 's/^/# /' | head -5
		tap_result 1 "$1"
	else
		tap_result 0 "$1"
	fi
}
manifest_of() { cat "$1"/manifests/000000000001.json 2>/dev/null; }
state_version() {
	"$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' "$1" \
		2>/dev/null || echo none
}
no_secret_in() { # no_secret_in DIR: no file under DIR holds $SECRET
	! grep -rqF -- "$SECRET" "$1"
}

# ---- publisher ---------------------------------------------------------

W=$TMP/pub
OUT_P=$TMP/outside-pub
mkdir -p "$W/src" "$OUT_P"
SRC=$W/src/checkpoint-1
cp -a "$CK/checkpoint-1" "$SRC"
mkdir "$SRC/sub"
# the real file and an outside one of the same size and mtime (what the
# snapshot's stability check compares)
printf '{"note": "the real one, shipped"}\n' >"$SRC/sub/notes.json"
head -c "$(stat -c %s "$SRC/sub/notes.json")" <<<"$SECRET$SECRET$SECRET" >"$OUT_P/notes.json"
touch -r "$SRC/sub/notes.json" "$OUT_P/notes.json"
printf '%s\n' "$SECRET" >"$OUT_P/secret.txt"
restore_sub() { rm -f "$SRC/sub" && mv "$SRC/sub.swapped-away" "$SRC/sub"; }

# a subfolder swapped for a link while the scan walks it
pub_ini "$W/p1" "$TMP/b-p1"
swap "$W/p1/swap.log" "/checkpoint-1/sub" 1 "$SRC/sub" "$OUT_P" \
	"$WSYNC" publish --config "$W/p1/pub.ini" "$SRC" >"$W/p1/out.log" 2>&1
echo "# publish: exit $?"
check "scan: the subfolder was swapped for a link as the scan opened it" swapped "$W/p1/swap.log"
M=$(manifest_of "$TMP/b-p1")
contains "scan: a version was published" "$M" '"path": "model.safetensors"'
case "$M" in
*secret.txt* | *'sub/notes.json'*) tap_result 1 "scan: no file of the outside folder in the manifest" ;;
*) tap_result 0 "scan: no file of the outside folder in the manifest" ;;
esac
sub_ini "$W/p1/sub" "$TMP/b-p1"
pull "$W/p1/sub"
check "scan: a pull of that version holds none of the outside bytes" no_secret_in "$W/p1/sub/target"
restore_sub

# the same swap between the scan and the snapshot
pub_ini "$W/p2" "$TMP/b-p2"
swap "$W/p2/swap.log" "/checkpoint-1/sub/notes.json" 1 "$SRC/sub" "$OUT_P" \
	"$WSYNC" publish --config "$W/p2/pub.ini" "$SRC" >"$W/p2/out.log" 2>&1
echo "# publish: exit $?"
check "snapshot: the subfolder was swapped for a link as the snapshot took its file" \
	swapped "$W/p2/swap.log"
sub_ini "$W/p2/sub" "$TMP/b-p2"
pull "$W/p2/sub"
check "snapshot: the version holds the real file" \
	cmp "$W/p2/sub/target/sub/notes.json" "$SRC/sub.swapped-away/notes.json"
check "snapshot: and none of the outside bytes" no_secret_in "$W/p2/sub/target"
restore_sub

# trainer_state.json a link out of the checkpoint, in a folder whose name
# has no step number (the step is taken from that file then)
FIN=$W/src/final
cp -a "$CK/checkpoint-1" "$FIN"
printf '{"global_step": 31337}\n' >"$OUT_P/trainer_state.json"
rm -f "$FIN/trainer_state.json"
ln -s "$OUT_P/trainer_state.json" "$FIN/trainer_state.json"
pub_ini "$W/p3" "$TMP/b-p3" "marker = config.json"	# (a link is no marker)
check "trainer_state.json a link: the publish succeeds" \
	timeout -s KILL 60 "$WSYNC" publish --config "$W/p3/pub.ini" "$FIN"
M=$(manifest_of "$TMP/b-p3")
contains "trainer_state.json a link: a version was published" "$M" '"step": '
case "$M" in
*'"step": 31337'*) tap_result 1 "trainer_state.json a link: the step it names outside is not used" ;;
*) tap_result 0 "trainer_state.json a link: the step it names outside is not used" ;;
esac

# trainer_state.json a FIFO: nothing opens it for reading (no writer would come)
FIN2=$W/src/latest
cp -a "$CK/checkpoint-1" "$FIN2"
rm -f "$FIN2/trainer_state.json"
mkfifo "$FIN2/trainer_state.json"
pub_ini "$W/p4" "$TMP/b-p4"
t0=$(date +%s)
timeout -s KILL 30 "$WSYNC" publish --config "$W/p4/pub.ini" "$FIN2" >"$W/p4/out.log" 2>&1
rc=$?
echo "# publish: exit $rc after $(($(date +%s) - t0)) s"
check "trainer_state.json a FIFO: the publish ends on its own (not killed at 30 s)" \
	test "$rc" -ne 137
check "trainer_state.json a FIFO: and publishes" test "$rc" -eq 0

# ---- subscriber --------------------------------------------------------

B=$TMP/bucket
pub_ini "$TMP/p0" "$B"
"$WSYNC" publish --config "$TMP/p0/pub.ini" "$CK/checkpoint-1" >/dev/null 2>&1 ||
	{ echo "Bail out! publishing checkpoint-1 failed"; exit 1; }
OUT_S=$TMP/outside-sub
mkdir -p "$OUT_S"

# .wsync swapped for a link between the check and the state write
S=$TMP/s1
sub_ini "$S" "$B"
swap "$S/swap.log" "/target/.wsync/state.json.tmp" 1 "$S/target/.wsync" "$OUT_S" \
	"$WSYNC" pull -v --config "$S/sub.ini" >"$S/pull.log" 2>&1
rc=$?
check ".wsync swap: .wsync was swapped for a link as the state was about to be written" \
	swapped "$S/swap.log"
check ".wsync swap: nothing was written in the folder the link names" \
	test -z "$(ls -A "$OUT_S")"
check ".wsync swap: the pull went on in the real .wsync (exit 0, state there)" \
	test "$rc" = 0 -a "$(state_version "$S/target/.wsync.swapped-away/state.json")" = 1
pull "$S"
rc=$?
check ".wsync swap: the next pull refuses the link" test "$rc" -ne 0
contains ".wsync swap: saying it is a symbolic link" "$(cat "$S/pull.log")" \
	".wsync is a symbolic link"
check ".wsync swap: and writes nothing there either" test -z "$(ls -A "$OUT_S")"

# a target at version 1 for the state.json cases
S=$TMP/s2
sub_ini "$S" "$B"
pull "$S" || { echo "Bail out! the first pull failed"; sed 's/^/# /' "$S/pull.log"; exit 1; }
ST=$S/target/.wsync/state.json
is_state() { [ -f "$ST" ] && [ ! -L "$ST" ] && [ "$(state_version "$ST")" = 1 ]; }

printf '%s is not JSON\n' "$SECRET" >"$OUT_S/secret.txt"
rm -f "$ST" && ln -s "$OUT_S/secret.txt" "$ST"
pull "$S"
check "state.json a link: the pull succeeds (the target rebuilt)" test $? = 0
contains "state.json a link: the log says it is a link" "$(cat "$S/pull.log")" \
	"state.json is a symbolic link"
not_in_log "state.json a link: the log quotes nothing of the file it names" \
	"$S/pull.log" "$SECRET"
check "state.json a link: replaced by a real state" is_state
check "state.json a link: the file it named is untouched" \
	grep -qF -- "$SECRET is not JSON" "$OUT_S/secret.txt"

if [ -s /etc/hostname ]; then
	rm -f "$ST" && ln -s /etc/hostname "$ST"
	pull "$S"
	check "state.json a link to /etc/hostname: the pull succeeds" test $? = 0
	not_in_log "state.json a link to /etc/hostname: no parse error quoting it" \
		"$S/pull.log" "expected near"
	not_in_log "state.json a link to /etc/hostname: its first word is not in the log" \
		"$S/pull.log" "'$(head -c 64 /etc/hostname | head -1 | cut -c1-20)'"
	check "state.json a link to /etc/hostname: replaced by a real state" is_state
fi

rm -f "$ST" && mkfifo "$ST"
t0=$(date +%s)
pull "$S"
rc=$?
echo "# pull: exit $rc after $(($(date +%s) - t0)) s"
check "state.json a FIFO: the pull ends on its own (not killed at 60 s) and succeeds" \
	test "$rc" = 0
contains "state.json a FIFO: the log says it is not a regular file" "$(cat "$S/pull.log")" \
	"state.json: not a regular file"
check "state.json a FIFO: replaced by a real state" is_state

rm -f "$ST" && truncate -s 200M "$ST"
pull "$S"
check "state.json of 200 MB: the pull succeeds" test $? = 0
contains "state.json of 200 MB: refused for its size" "$(cat "$S/pull.log")" \
	"209715200 bytes, more than the"
check "state.json of 200 MB: replaced by a real state" is_state

if [ "$(id -u)" = 0 ]; then
	chown nobody "$S/target/.wsync"
	pull "$S"
	check ".wsync of another user: refused" test $? -ne 0
	contains ".wsync of another user: saying so" "$(cat "$S/pull.log")" \
		".wsync belongs to another user"
	chown root "$S/target/.wsync"
else
	tap_result 0 "# SKIP .wsync of another user: not root"
	tap_result 0 "# SKIP .wsync of another user: not root"
fi
chmod 777 "$S/target/.wsync"
pull "$S"
check ".wsync writable by others: refused" test $? -ne 0
contains ".wsync writable by others: saying so" "$(cat "$S/pull.log")" \
	".wsync is writable by other users"
chmod 755 "$S/target/.wsync"
pull "$S"
check "back to a .wsync of ours: the pull succeeds" test $? = 0

# layout = symlink: the lock beside the target, hard-linked to a file elsewhere
S=$TMP/s3
sub_ini "$S" "$B" symlink
printf 'precious\n' >"$TMP/precious"
ln "$TMP/precious" "$S/.target.wsync-lock"
pull "$S"
check "a hard-linked lock file: refused" test $? -ne 0
contains "a hard-linked lock file: saying so" "$(cat "$S/pull.log")" "has other hard links"
check "a hard-linked lock file: the file it shares is untouched" \
	test "$(cat "$TMP/precious")" = precious

# layout = symlink over an in-place target whose .wsync is a link to a
# folder holding a state: refused before it is read (the target would be
# moved to the version that state names)
S=$TMP/s4
sub_ini "$S" "$B"
pull "$S" || { echo "Bail out! the in-place pull failed"; exit 1; }
mv "$S/target/.wsync" "$OUT_S/meta"
ln -s "$OUT_S/meta" "$S/target/.wsync"
sub_ini "$S" "$B" symlink
pull "$S"
check "take-over through a .wsync link: refused" test $? -ne 0
contains "take-over through a .wsync link: saying it is a symbolic link" \
	"$(cat "$S/pull.log")" ".wsync is a symbolic link"
check "take-over through a .wsync link: the target is left where it is" \
	test -d "$S/target" -a ! -L "$S/target" -a ! -e "$S/target.v1"

tap_done
