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

ran=""
for role in subscriber publisher; do
	out=$(timeout 60 "$PYTHON3" "$recv" -- "$WSYNCD" --log-target stderr -c "$TMP/$role.ini" 2>&1)
	case "$out" in
	"SKIP "*)
		echo "# $role: ${out#SKIP }"
		continue
		;;
	esac
	ran="$ran $role"
	n0=$TAP_N
	while IFS= read -r line; do
		case "$line" in
		"PASS "*) tap_result 0 "$role: ${line#PASS }" ;;
		"FAIL "*) tap_result 1 "$role: ${line#FAIL }" ;;
		*) echo "$line" ;;
		esac
	done <<<"$out"
	check "$role: the checks ran to the end" test $((TAP_N - n0)) -ge 10
done
if [ -z "$ran" ]; then
	echo "ok 1 - # SKIP neither role is built yet"
	echo "1..1"
	exit 0
fi
tap_done
