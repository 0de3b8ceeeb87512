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
# date.  And it refuses what is not the daemon's (run as root): a
# status.json or metrics file that is a symlink, a hard link, a FIFO,
# /dev/zero, 100 MiB, or owned by another user than the daemon's --
# promptly, and without quoting a byte of it.  A publisher part's status
# says which part it is (K of N), a partial subscriber's which files it
# takes (include, exclude), in text and in --json.
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

# The part of a publisher part, the file set of a partial subscriber.
check "one publisher: part 1 of 1; a full subscriber: not partial" "$PYTHON3" -c '
import json, sys
p, s = (json.load(open(f)) for f in sys.argv[1:3])
assert (p["part"], p["parts"]) == (1, 1), p
assert s["partial"] is False and s["include"] == "*" and s["exclude"] == "", s' \
	"$TMP/publisher/run/status.json" "$TMP/subscriber/run/status.json"
sed -e "s|$TMP/publisher/|$TMP/part2/|g" -e "s|^watch_dir = .*|&\npart = 2/3|" \
	"$TMP/publisher.ini" >"$TMP/part2.ini"
sed -e "s|$TMP/subscriber/|$TMP/partial/|g" -e "s|$TMP/model|$TMP/model2|" \
	-e "s|^poll_interval = .*|&\ninclude = model-0000[12]*.safetensors config.json\nexclude = *.bin|" \
	"$TMP/subscriber.ini" >"$TMP/partial.ini"
mkdir -p "$TMP/part2" "$TMP/partial"
start part2
start partial
check "a part and a partial subscriber write their status" wait_for 10 \
	test -s "$TMP/part2/run/status.json" -a -s "$TMP/partial/run/status.json"
expect_exit 0 "wsync status of publisher part 2 of 3" "$WSYNC" status --config "$TMP/part2.ini"
contains "... says which part" "$OUT" "part:           2 of 3"
expect_exit 0 "wsync status of a partial subscriber" "$WSYNC" status --config "$TMP/partial.ini"
contains "... says which files it takes" "$OUT" \
	'files:          include "model-0000[12]*.safetensors config.json", exclude "*.bin" (only these)'
check "... and --json says both" "$PYTHON3" -c '
import json, subprocess, sys
w = sys.argv[1]
p = json.loads(subprocess.check_output([w, "status", "--json", "--config", sys.argv[2]]))
s = json.loads(subprocess.check_output([w, "status", "--json", "--config", sys.argv[3]]))
assert (p["part"], p["parts"]) == (2, 3), p
assert s["partial"] is True and s["include"] == "model-0000[12]*.safetensors config.json", s
assert s["exclude"] == "*.bin", s' "$WSYNC" "$TMP/part2.ini" "$TMP/partial.ini"
stop part2
stop partial

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

# ---- what root's `wsync status` refuses to open ----
# Root runs it (a scrape job); the daemon's user writes what it reads.
# Neither status.json nor the metrics file it names may make root read,
# block on, or quote what is not the daemon's own regular file.
NOBODY=65534
printf 'rootsecret\n# HELP wsync_x y\nrootsecret2\n' >"$TMP/secret"
chmod 600 "$TMP/secret"
no_secret() { # no_secret DESC: $OUT does not hold the secret file's text
	check "$1" sh -c "! printf '%s\n' \"\$1\" | grep -q rootsecret" - "$OUT"
}
mkdir -p "$TMP/link"
ln -s "$TMP/secret" "$TMP/link/status.json"
for mode in "" --json --prometheus; do
	expect_exit 1 "status.json a symlink to a root-only file: refused (${mode:-human})" \
		"$WSYNC" status $mode --runtime-dir "$TMP/link"
	contains "... saying it is a symbolic link" "$OUT" "a symbolic link: refused"
	no_secret "... and quoting nothing of the file"
done
rm "$TMP/link/status.json"
ln "$TMP/secret" "$TMP/link/status.json"
expect_exit 1 "status.json a hard link to a root-only file: refused" \
	"$WSYNC" status --runtime-dir "$TMP/link"
contains "... by its link count" "$OUT" "2 links: refused"
no_secret "... quoting nothing"
rm "$TMP/link/status.json"
cp "$TMP/secret" "$TMP/link/status.json"
expect_exit 3 "a status.json that is not JSON: not running" "$WSYNC" status --runtime-dir "$TMP/link"
contains "... by line and column" "$OUT" "not valid JSON (line 1, column"
no_secret "... quoting nothing of it"
chown "$NOBODY" "$TMP/link/status.json"
chown 12345 "$TMP/link"
expect_exit 1 "status.json owned by another uid than its directory's: refused" \
	"$WSYNC" status --runtime-dir "$TMP/link"
contains "... saying whose" "$OUT" "owned by uid $NOBODY, not by its directory's owner (uid 12345"
chown 0 "$TMP/link"
rm "$TMP/link/status.json"
mkfifo "$TMP/link/status.json"
expect_exit 1 "status.json a FIFO: refused at once" timeout 10 "$WSYNC" status --runtime-dir "$TMP/link"
contains "... as not a regular file" "$OUT" "not a regular file"
rm "$TMP/link/status.json"
truncate -s 100M "$TMP/link/status.json"
expect_exit 1 "status.json of 100 MiB (sparse): refused at once" \
	timeout 10 "$WSYNC" status --runtime-dir "$TMP/link"
contains "... as too large" "$OUT" "more than the 1048576"

# The metrics file: status.json (a running daemon's: pid $$) names it.
mkdir -p "$TMP/m"
hand_metrics() { # hand_metrics FILE: status.json naming FILE as the metrics
	cat >"$TMP/m/status.json" <<JSON
{"role": "subscriber", "state": "idle", "version": 3, "last_error": "", "store_ok": true,
 "pid": $$, "instance": "m", "metrics_file": "$1"}
JSON
}
printf '# HELP wsync_version v\n# TYPE wsync_version gauge\nwsync_version{role="subscriber",instance="m"} 3\n' \
	>"$TMP/m/wsync.prom"
hand_metrics "$TMP/m/wsync.prom"
expect_exit 0 "--prometheus: the daemon's own metrics file is printed" \
	"$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... its series" "$OUT" 'wsync_version{role="subscriber",instance="m"} 3'
mkfifo "$TMP/m/fifo.prom"
hand_metrics "$TMP/m/fifo.prom"
expect_exit 1 "--prometheus: a FIFO as the metrics file returns at once (no timeout)" \
	timeout 10 "$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... saying it is not a regular file" "$OUT" "not a regular file"
hand_metrics /dev/zero
expect_exit 1 "--prometheus: /dev/zero as the metrics file is refused at once" \
	timeout 10 "$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... as not a regular file" "$OUT" "not a regular file"
truncate -s 100M "$TMP/m/big.prom"
hand_metrics "$TMP/m/big.prom"
expect_exit 1 "--prometheus: a 100 MiB sparse metrics file is refused at once" \
	timeout 10 "$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... as larger than 16 MiB" "$OUT" "more than the 16777216"
ln -s "$TMP/m/wsync.prom" "$TMP/m/link.prom"
hand_metrics "$TMP/m/link.prom"
expect_exit 1 "--prometheus: a metrics file that is a symlink is refused" \
	"$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... as one" "$OUT" "a symbolic link: refused"
cp "$TMP/m/wsync.prom" "$TMP/m/other.prom"
chown "$NOBODY" "$TMP/m/other.prom"
hand_metrics "$TMP/m/other.prom"
expect_exit 1 "--prometheus: a metrics file of another uid than status.json's is refused" \
	"$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... saying whose" "$OUT" "owned by uid $NOBODY, not by the daemon's user (uid 0"
# A daemon run as nobody naming a root-only file: refused, nothing printed.
chown "$NOBODY" "$TMP/m" "$TMP/m/other.prom"
hand_metrics "$TMP/secret"
chown "$NOBODY" "$TMP/m/status.json"
expect_exit 1 "--prometheus: a nobody daemon's status naming a root-only file is refused" \
	"$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... as not the daemon's" "$OUT" "owned by uid 0, not by the daemon's user (uid $NOBODY"
no_secret "... and prints none of it"
hand_metrics "$TMP/m/other.prom"
chown "$NOBODY" "$TMP/m/status.json"
expect_exit 0 "--prometheus: that daemon's own metrics file (nobody's) is printed" \
	"$WSYNC" status --prometheus --runtime-dir "$TMP/m"
contains "... its series" "$OUT" 'wsync_version{role="subscriber",instance="m"} 3'
tap_done
