#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-notify: wsyncd speaks sd_notify as wsyncd@.service expects
# (Type=notify, WatchdogSec=, ExecReload=kill -HUP, NotifyAccess=main).
# notify-recv.py binds NOTIFY_SOCKET itself and runs the real daemon, a
# subscriber on an empty file:// bucket and a publisher on an empty watch
# folder (each once its role is built): READY=1, STATUS=,
# WATCHDOG=1 at half of WATCHDOG_USEC=1000000, RELOADING=1 with
# MONOTONIC_USEC on SIGHUP followed by READY=1, STOPPING=1 on SIGTERM and
# exit 0.  Every wait is bounded.
# Right after start-up each role settles in a state that STATUS= and
# status.json show without waiting for anything to happen (issue 25 §3):
# the subscriber on an empty bucket waits for a first version; the
# publisher on an empty bucket is idle at version 0, and once it has
# published a version and is restarted with nothing new, idle at that
# version -- not "reading HEAD", version 0, phase recovering until the
# next publication.
. "$(dirname "$0")/lib.sh"
recv=$WSYNC_SOURCE_ROOT/tests/integration/notify-recv.py
mkdir -p "$TMP/bucket" "$TMP/model" "$TMP/state" "$TMP/run" "$TMP/ckpt"
cat >"$TMP/subscriber.ini" <<INI
[daemon]
role = subscriber
state_dir = $TMP/state
runtime_dir = $TMP/run
[store]
url = file://$TMP/bucket
[subscriber]
target_dir = $TMP/model
poll_interval = 200ms
INI
cat >"$TMP/publisher.ini" <<INI
[daemon]
role = publisher
state_dir = $TMP/state
runtime_dir = $TMP/run
[store]
url = file://$TMP/bucket
[publisher]
watch_dir = $TMP/ckpt
INI

# recv NAME ROLE [notify-recv.py options]: one run of notify-recv.py on
# the ROLE's configuration, its PASS/FAIL lines as TAP; 1 when skipped.
recv() {
	local name=$1 role=$2 out line n0
	shift 2
	out=$(timeout 60 "$PYTHON3" "$recv" "$@" -- "$WSYNCD" --log-target stderr -c "$TMP/$role.ini" 2>&1)
	case "$out" in
	"SKIP "*)
		echo "# $name: ${out#SKIP }"
		return 1
		;;
	esac
	n0=$TAP_N
	while IFS= read -r line; do
		case "$line" in
		"PASS "*) tap_result 0 "$name: ${line#PASS }" ;;
		"FAIL "*) tap_result 1 "$name: ${line#FAIL }" ;;
		*) echo "$line" ;;
		esac
	done <<<"$out"
	check "$name: the checks ran to the end" test $((TAP_N - n0)) -ge 10
}

ran=""
recv subscriber subscriber --want-status 'waiting for a first version' \
	--status-json "$TMP/run/status.json" role=subscriber state=idle version=0 &&
	ran="$ran subscriber"
recv publisher publisher --want-status '^idle\b.*waiting' \
	--status-json "$TMP/run/status.json" role=publisher state=idle phase=idle version=0 &&
	ran="$ran publisher"

# The publisher publishes version 1, stops, and starts again with nothing
# new in the watch folder.
if [[ $ran == *publisher* ]]; then
	"$GEN" --params 1M --steps 1 --quiet --out "$TMP/src" >/dev/null || {
		echo "Bail out! gen-checkpoints failed"
		exit 1
	}
	mkdir -p "$TMP/ckpt/checkpoint-1"
	for f in "$TMP/src/checkpoint-1"/*; do
		[ "${f##*/}" = trainer_state.json ] || cp "$f" "$TMP/ckpt/checkpoint-1/"
	done
	cp "$TMP/src/checkpoint-1/trainer_state.json" "$TMP/ckpt/checkpoint-1/"
	"$WSYNCD" --log-target stderr -c "$TMP/publisher.ini" >"$TMP/pub.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	published() { # status.json of pid says version 1, idle: 60 s at most
		for _ in $(seq 600); do
			"$PYTHON3" -c 'import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(not (s["pid"] == int(sys.argv[2]) and s["version"] == 1 and s["state"] == "idle"))' \
				"$TMP/run/status.json" "$pid" 2>/dev/null && return 0
			sleep 0.1
		done
		tail -20 "$TMP/pub.log" | sed 's/^/# /'
		return 1
	}
	check "publisher: checkpoint-1 published as version 1" published
	kill -TERM "$pid"
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	wait "$pid"
	check "publisher: stopped with exit 0" test $? = 0
	recv "publisher restarted with nothing new" publisher --want-status '^idle at version 1\b' \
		--status-json "$TMP/run/status.json" role=publisher state=idle phase=idle version=1 step=1
fi
if [ -z "$ran" ]; then
	echo "ok 1 - # SKIP neither role is built yet"
	echo "1..1"
	exit 0
fi
tap_done
