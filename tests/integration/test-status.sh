#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-status: the status.json of a publisher and of a subscriber (two
# wsyncd from minimal configurations on one file:// bucket) agree: the
# fields both write have one type in both (updated an RFC 3339 string,
# last_error a string, "" when there is none); `wsync status` prints no
# empty "last error:" line; and once stopped, the two read alike
# ("ROLE: stopped (not running)", "stopped at version N", exit 3).
# `wsync status` also reads hand-written files: a last_error of "" or
# null is no error, a publisher's older integer `updated` is shown as a
# date.
. "$(dirname "$0")/lib.sh"

mkdir -p "$TMP/bucket" "$TMP/train"
for role in publisher subscriber; do
	{
		echo "[daemon]"
		echo "role = $role"
		echo "state_dir = $TMP/$role/state"
		echo "runtime_dir = $TMP/$role/run"
		echo "[store]"
		echo "url = file://$TMP/bucket"
		if [ "$role" = publisher ]; then
			echo "[publisher]"
			echo "watch_dir = $TMP/train"
		else
			echo "[subscriber]"
			echo "target_dir = $TMP/model"
			echo "poll_interval = 200ms"
		fi
	} >"$TMP/$role.ini"
	mkdir -p "$TMP/$role"
done

start publisher
start subscriber
check "the publisher writes its status.json" wait_for 10 test -s "$TMP/publisher/run/status.json"
check "the subscriber writes its status.json" wait_for 10 test -s "$TMP/subscriber/run/status.json"

check "the fields both roles write have one type in both" "$PYTHON3" - \
	"$TMP/publisher/run/status.json" "$TMP/subscriber/run/status.json" <<'PY'
import json, re, sys
p, s = (json.load(open(f)) for f in sys.argv[1:3])
rfc3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
for name, o in (("publisher", p), ("subscriber", s)):
    assert o["role"] == name, o
    assert isinstance(o["updated"], str) and rfc3339.match(o["updated"]), (name, o["updated"])
    assert o["last_error"] == "", (name, o["last_error"])
    assert o["stopped"] is False, (name, o)
    assert isinstance(o["message"], str) and o["message"], (name, o)
    assert o["store_down_since"] is None, (name, o)
common = ["role", "state", "stopped", "version", "step", "last_error", "store_ok",
          "store_down_since", "message", "pid", "updated"]
for k in common:
    assert k in p and k in s, k
    assert type(p[k]) is type(s[k]), (k, p[k], s[k])
PY
for role in publisher subscriber; do
	expect_exit 0 "wsync status: the running $role is healthy" "$WSYNC" status --config "$TMP/$role.ini"
	contains "... and says so first" "$(printf '%s\n' "$OUT" | head -1)" "$role: "
	check "... with no empty \"last error:\" line" sh -c "! printf '%s\n' \"\$1\" | grep -q 'last error:'" - "$OUT"
	contains "... and when it was updated" "$OUT" "updated:        20"
done

stop publisher
tap_result $? "SIGTERM stops the publisher (exit 0)"
stop subscriber
tap_result $? "SIGTERM stops the subscriber (exit 0)"
for role in publisher subscriber; do
	expect_exit 3 "wsync status: the stopped $role is not running (exit 3)" \
		"$WSYNC" status --config "$TMP/$role.ini"
	printf '%s\n' "$OUT" | head -2 | sed "s/^$role:/ROLE:/" >"$TMP/$role.head"
	check "$role's status.json says state stopped, stopped true" "$PYTHON3" -c '
import json, sys
o = json.load(open(sys.argv[1]))
assert o["state"] == "stopped" and o["stopped"] is True, o' "$TMP/$role/run/status.json"
done
contains "a stopped publisher reads \"stopped (not running)\"" "$(cat "$TMP/publisher.head")" \
	"ROLE: stopped (not running)"
check "a stopped publisher and a stopped subscriber read alike" \
	diff "$TMP/publisher.head" "$TMP/subscriber.head"
contains "... both saying the version they stopped at" "$(cat "$TMP/subscriber.head")" \
	"stopped at version 0"
check "no sanitizer or crash report in the daemons' logs" \
	sh -c "! grep -q -E 'Sanitizer|runtime error|Segmentation' '$TMP/publisher/log' '$TMP/subscriber/log'"

# ---- hand-written files ----
mkdir -p "$TMP/hand"
cat >"$TMP/hand/status.json" <<JSON
{"role": "publisher", "state": "idle", "version": 3, "step": 30, "last_error": "",
 "store_ok": true, "pid": $$, "updated": 1764892800}
JSON
expect_exit 0 "a publisher's file with last_error \"\" is healthy" "$WSYNC" status --runtime-dir "$TMP/hand"
check "... and shows no \"last error:\" line" sh -c "! printf '%s\n' \"\$1\" | grep -q 'last error'" - "$OUT"
contains "... and its integer updated as a date" "$OUT" "updated:        2025-12-05T00:00:00Z"
cat >"$TMP/hand/status.json" <<JSON
{"role": "subscriber", "state": "idle", "version": 3, "last_error": "", "store_ok": true,
 "pid": $$, "updated": "2025-12-05T00:00:00Z"}
JSON
expect_exit 0 "a subscriber's file with last_error \"\" is healthy" "$WSYNC" status --runtime-dir "$TMP/hand"
cat >"$TMP/hand/status.json" <<JSON
{"role": "subscriber", "state": "idle", "version": 3, "last_error": "version 4 refused",
 "store_ok": true, "pid": $$}
JSON
expect_exit 1 "a subscriber's file with a last_error is unhealthy" "$WSYNC" status --runtime-dir "$TMP/hand"
contains "... and shows it" "$OUT" "last error:     version 4 refused"
cat >"$TMP/hand/status.json" <<JSON
{"role": "subscriber", "state": "idle", "stopped": true, "version": 3, "last_error": null,
 "store_ok": true, "message": "stopped at version 3", "pid": $$}
JSON
expect_exit 3 "a subscriber's older stopped file (state idle, stopped true): not running" \
	"$WSYNC" status --runtime-dir "$TMP/hand"
contains "... and reads as stopped" "$(printf '%s\n' "$OUT" | head -1)" "subscriber: stopped (not running)"
tap_done
