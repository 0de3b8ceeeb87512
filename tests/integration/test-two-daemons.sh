#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-two-daemons.sh -- daemons on one host cannot collide.  Run as a user
# who is not root (nobody, through setpriv, when the test runs as root),
# with HOME and XDG_RUNTIME_DIR inside the test's folder, so the defaults
# are the ones such a user gets and nothing is written outside $TMP.
#
#   - a publisher and a subscriber from minimal files (role, url,
#     watch_dir / target_dir: no state_dir, no runtime_dir) run side by
#     side, each with its own status.json; a version flows from one to the
#     other; `wsync status --config F` shows each its own daemon, `wsync
#     status` both; --check-config --dump-config says where the defaults
#     put them
#   - a second publisher from the same file is refused, naming the first
#     (pid, configuration); so is `wsync publish` on its state; the first
#     runs on untouched
#   - a second subscriber sharing the first's state_dir (another target),
#     and one sharing only its runtime_dir, are refused, naming it
#   - `wsync status --config F` whose runtime_dir holds the other role's
#     status says so (not running), instead of showing it
. "$(dirname "$0")/lib.sh"


chmod 755 "$TMP"
U=$TMP/u	# everything the user may write
mkdir -p "$U/home" "$U/xdg" "$U/watch" "$U/bucket" "$U/src"
gen_ckpts "$U/src" --params 1M --steps 2 --shards 1
as_user=()
if [ "$(id -u)" = 0 ]; then
	chown -R nobody:nogroup "$U"
	as_user=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
fi
chmod 700 "$U/xdg"
run() { # run PROGRAM ARGS...: as the user, in its environment
	env -i PATH="$PATH" HOME="$U/home" XDG_RUNTIME_DIR="$U/xdg" LANG=C.UTF-8 \
		"${as_user[@]}" "$@"
}
start_as() { # start_as NAME CONF: wsyncd as the user, pid in DPID[NAME]
	# one simple command: env, setpriv and wsyncd exec each other, so $!
	# is the daemon's pid
	env -i PATH="$PATH" HOME="$U/home" XDG_RUNTIME_DIR="$U/xdg" LANG=C.UTF-8 \
		"${as_user[@]}" "$WSYNCD" -c "$2" --log-target stderr >>"$TMP/$1.log" 2>&1 &
	DPID[$1]=$!
}

printf '[daemon]\nrole = publisher\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\n' \
	"$U/bucket" "$U/watch" >"$TMP/pub.ini"
printf '[daemon]\nrole = subscriber\n[store]\nurl = file://%s\n[subscriber]\ntarget_dir = %s\n' \
	"$U/bucket" "$U/target" >"$TMP/sub.ini"
STATE=$U/home/.local/state/wsync
PUBRUN=$U/xdg/wsync/publisher
SUBRUN=$U/xdg/wsync/subscriber

expect_exit 0 "a minimal publisher file is valid" run "$WSYNCD" --check-config --dump-config "$TMP/pub.ini"
contains "... its state_dir defaults under XDG_STATE_HOME (~/.local/state)" "$OUT" "state_dir = $STATE"
contains "... its runtime_dir under XDG_RUNTIME_DIR, per role" "$OUT" "runtime_dir = $PUBRUN"
expect_exit 0 "a minimal subscriber file is valid" run "$WSYNCD" --check-config --dump-config "$TMP/sub.ini"
contains "... its runtime_dir is the subscriber's" "$OUT" "runtime_dir = $SUBRUN"

start_as pub "$TMP/pub.ini"
start_as sub "$TMP/sub.ini"
check "both start and write their own status.json" wait_for 20 \
	test -s "$PUBRUN/status.json" -a -s "$SUBRUN/status.json"
check "... the publisher's says publisher" test "$(status_field "$PUBRUN/status.json" role)" = publisher
check "... the subscriber's says subscriber" test "$(status_field "$SUBRUN/status.json" role)" = subscriber
run cp -r "$U/src/checkpoint-1" "$U/watch/.tmp-1"
run mv "$U/watch/.tmp-1" "$U/watch/checkpoint-1"
check "a version flows from one to the other" \
	wait_converged 40 "$PUBRUN/status.json" "$SUBRUN/status.json" 1
expect_exit 0 "wsync status --config pub.ini shows the publisher" run "$WSYNC" status --config "$TMP/pub.ini"
contains "... as a publisher at version 1" "$OUT" "publisher: idle"
expect_exit 0 "wsync status --config sub.ini shows the subscriber" run "$WSYNC" status --config "$TMP/sub.ini"
contains "... as a subscriber" "$OUT" "subscriber: "
contains "... at version 1" "$OUT" "version:        1"
expect_exit 0 "wsync status with no option shows both" run "$WSYNC" status
contains "... the publisher" "$OUT" "publisher: idle"
contains "... and the subscriber" "$OUT" "subscriber: "

# a second publisher on the same state: refused, naming the first
start_as pub2 "$TMP/pub.ini"
check "a second publisher from the same file exits" wait_for 10 sh -c "! kill -0 ${DPID[pub2]} 2>/dev/null"
wait "${DPID[pub2]}"
rc=$?
DPID[pub2]=
check "... with exit 1" test "$rc" = 1
check "... naming the first: its pid and configuration" grep -q \
	"in use by wsyncd (pid ${DPID[pub]}, $TMP/pub.ini)" "$TMP/pub2.log"
check "... and saying what to do" grep -q "give each daemon its own \[daemon\] state_dir" "$TMP/pub2.log"
check "the first runs on, its status its own" sh -c \
	"kill -0 ${DPID[pub]} && grep -q '\"pid\": ${DPID[pub]}' '$PUBRUN/status.json'"
expect_exit 1 "wsync publish on the running publisher's state is refused" \
	run "$WSYNC" publish --config "$TMP/pub.ini" "$U/src/checkpoint-2"
contains "... naming the daemon" "$OUT" "in use by wsyncd (pid ${DPID[pub]}, $TMP/pub.ini)"
check "... and nothing is published" test "$(status_field "$PUBRUN/status.json" version)" = 1

# a second subscriber sharing the first's state_dir, another target
printf '[daemon]\nrole = subscriber\nruntime_dir = %s\n[store]\nurl = file://%s\n[subscriber]\ntarget_dir = %s\n' \
	"$U/xdg/sub2" "$U/bucket" "$U/target2" >"$TMP/sub2.ini"
expect_exit 1 "a subscriber sharing another's state_dir is refused" \
	run timeout 20 "$WSYNCD" -c "$TMP/sub2.ini" --log-target stderr
contains "... naming the first" "$OUT" "state_dir $STATE: in use by wsyncd (pid ${DPID[sub]}, $TMP/sub.ini)"
check "... before touching its target" test ! -e "$U/target2/.wsync/state.json"

# a second subscriber with its own state and target, sharing only runtime_dir
printf '[daemon]\nrole = subscriber\nstate_dir = %s\n[store]\nurl = file://%s\n[subscriber]\ntarget_dir = %s\n' \
	"$U/state3" "$U/bucket" "$U/target3" >"$TMP/sub3.ini"
expect_exit 1 "a subscriber sharing only another's runtime_dir is refused" \
	run timeout 20 "$WSYNCD" -c "$TMP/sub3.ini" --log-target stderr
contains "... naming the first" "$OUT" "runtime_dir $SUBRUN: in use by wsyncd (pid ${DPID[sub]}, $TMP/sub.ini)"
contains "... and saying why it matters" "$OUT" "two daemons would write one status.json"
check "the first subscriber's status is still its own" \
	grep -q "\"pid\": ${DPID[sub]}" "$SUBRUN/status.json"

# wsync status of a file whose runtime_dir holds the other role's status
printf '[daemon]\nrole = publisher\nruntime_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\n' \
	"$SUBRUN" "$U/bucket" "$U/watch" >"$TMP/pub-shared.ini"
expect_exit 3 "wsync status --config F finding the other role's status: not running" \
	run "$WSYNC" status --config "$TMP/pub-shared.ini"
contains "... saying whose status it found" "$OUT" "is a subscriber's status, and the configuration is a publisher's"

stop pub
rc=$?
[ $rc = 0 ] || tail -5 "$TMP/pub.log" | sed 's/^/# /'
check "the publisher stops cleanly (exit 0)" test $rc = 0
stop sub
rc=$?
[ $rc = 0 ] || tail -5 "$TMP/sub.log" | sed 's/^/# /'
check "the subscriber stops cleanly (exit 0)" test $rc = 0
tap_done
