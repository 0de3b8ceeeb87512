#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-journal: wsyncd's journal side without a running journald.
#  - The journal catalog (systemd/wsync.catalog) parses -- journalctl
#    --root builds its database in a scratch root -- and has an entry with
#    Subject, Defined-By, Documentation and a body for every MESSAGE_ID in
#    common/base/log-messages.h.
#  - The real wsyncd, with --log-target journal and WSYNC_JOURNAL_SOCKET
#    pointing at a datagram socket this test binds, sends native-protocol
#    entries carrying MESSAGE_ID, PRIORITY, SYSLOG_IDENTIFIER, CODE_*,
#    WSYNC_FILE; a value holding a newline arrives in the binary-safe form.
#  - A configuration error under systemd (issue 25 §3): `wsyncd --config F`
#    as the unit runs it, with stderr connected the way systemd connects it
#    (JOURNAL_STREAM, --log-target auto) and with --log-target journal,
#    sends every error of the file as a journal entry of its own with
#    MESSAGE_ID CONFIG_INVALID and WSYNC_FILE, its MESSAGE the bare
#    "FILE:LINE: [section] key: reason" that --check-config prints (no
#    stderr-style "wsyncd[PID] err:" prefix for the journal to double),
#    then the summary; nothing on stderr; exit 78, the status the unit's
#    RestartPreventExitStatus=78 does not restart.  The same for a missing
#    file, a directory given as the file, and a file that validates but
#    names a signing key that cannot be used, a verify_key or a [store]
#    credentials file that is not there; a watch_dir that does not
#    exist (yet) is a run-time failure instead: exit 1, no CONFIG_INVALID.
#    A reload (SIGHUP) of a file that became invalid is refused with each
#    error a CONFIG_INVALID entry too, and the daemon runs on.
. "$(dirname "$0")/lib.sh"
src=$WSYNC_SOURCE_ROOT
catalog=$src/systemd/wsync.catalog
recv=$src/tests/integration/journal-recv.py

ids=$(sed -nE 's/^#define WSYNC_MID_[A-Z_]+ +"([0-9a-f]{32})".*/\1/p' "$src/common/base/log-messages.h")
n_ids=$(printf '%s\n' "$ids" | grep -c .)
check "log-messages.h defines MESSAGE_IDs ($n_ids)" test "$n_ids" -ge 10
dups=$(printf '%s\n' "$ids" | sort | uniq -d)
tap_result $([ -z "$dups" ]; echo $?) "MESSAGE_IDs are unique"

# Catalog: each entry is "-- ID" then headers, a blank line, a body.
missing=""
for id in $ids; do
	entry=$(awk -v id="$id" '/^-- / { on = ($2 == id) ; next } on' "$catalog")
	head=$(printf '%s\n' "$entry" | sed '/^$/q')
	body=$(printf '%s\n' "$entry" | sed '1,/^$/d' | grep -c '[a-z]')
	for h in Subject: Defined-By: Documentation:; do
		printf '%s\n' "$head" | grep -q "^$h " || missing="$missing $id($h)"
	done
	[ "$body" -ge 2 ] || missing="$missing $id(body)"
done
[ -z "$missing" ] || echo "# missing:$missing"
tap_result $([ -z "$missing" ]; echo $?) "every MESSAGE_ID has a catalog entry with subject, documentation and an explanation"
unknown=$(comm -13 <(printf '%s\n' $ids | sort) <(sed -nE 's/^-- ([0-9a-f]+)$/\1/p' "$catalog" | sort))
tap_result $([ -z "$unknown" ]; echo $?) "the catalog has no entry for an ID log-messages.h lacks"

root=$TMP/root
mkdir -p "$root/usr/lib/systemd/catalog"
cp "$catalog" "$root/usr/lib/systemd/catalog/"
out=$(journalctl --root="$root" --update-catalog 2>&1)
rc=$?
[ $rc -eq 0 ] && [ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $([ $rc -eq 0 ] && [ -z "$out" ]; echo $?) "journalctl --update-catalog parses the catalog cleanly"
listed=$(journalctl --root="$root" --list-catalog 2>&1)
missing=$(for id in $ids; do printf '%s\n' "$listed" | grep -q "^$id wsync: " || echo "$id"; done)
[ -z "$missing" ] || echo "# not in the database: $missing"
tap_result $([ -z "$missing" ]; echo $?) "journalctl --list-catalog lists every MESSAGE_ID"

# The native protocol, from the real daemon.  A configuration whose name
# holds a newline makes MESSAGE and WSYNC_FILE multi-line values.
bad="$TMP/bad
name.ini"
printf '[daemon]\nrole = subscriber\nthreads = lots\n' >"$bad"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/bad.json" -- "$WSYNCD" --log-target journal -c "$bad"
q() { # q FILE EXPR: evaluate EXPR on the JSON document d
	"$PYTHON3" -c 'import json, sys; d = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"
}
mid_invalid=$(sed -nE 's/^#define WSYNC_MID_CONFIG_INVALID +"([0-9a-f]+)".*/\1/p' "$src/common/base/log-messages.h")
check "wsyncd on a bad file exits 78" test "$(q "$TMP/bad.json" 'd["exit"]')" = 78
check "every datagram parsed" test "$(q "$TMP/bad.json" 'len(d["errors"])')" = 0
summary="[e for e in d['entries'] if e.get('MESSAGE_ID') == '$mid_invalid' and 'configuration is invalid' in e['MESSAGE']][0]"
ev() { q "$TMP/bad.json" "$summary.get('$1')"; }
check "CONFIG_INVALID entries arrived for the 3 errors (threads; url, target_dir missing) and the summary" test \
	"$(q "$TMP/bad.json" "sum(e.get('MESSAGE_ID') == '$mid_invalid' for e in d['entries'])")" = 4
check "PRIORITY=3 (err)" test "$(ev PRIORITY)" = 3
check "SYSLOG_IDENTIFIER=wsyncd" test "$(ev SYSLOG_IDENTIFIER)" = wsyncd
check "CODE_FILE names wsyncd.c" bash -c '[[ "$1" == *daemon/wsyncd.c ]]' _ "$(ev CODE_FILE)"
check "CODE_LINE is a number" bash -c '[[ "$1" =~ ^[0-9]+$ ]]' _ "$(ev CODE_LINE)"
check "CODE_FUNC=load_config" test "$(ev CODE_FUNC)" = load_config
check "WSYNC_FILE is the path, newline included" test "$(ev WSYNC_FILE)" = "$bad"
contains "MESSAGE says the configuration is invalid" "$(ev MESSAGE)" "$bad: configuration is invalid"
check "multi-line MESSAGE and WSYNC_FILE came binary-safe" test \
	"$(q "$TMP/bad.json" "sorted($summary['_binary_safe'])")" = "['MESSAGE', 'WSYNC_FILE']"

# A configuration error as the unit meets it.  --check-config (on a
# terminal: stderr) gives the errors the journal must receive, one each.
cat >"$TMP/bad4.ini" <<'INI'
[daemon]
role = publisher
threads = lots

[store]
url = ftp://example.com/x

[publisher]
watch_dir = /srv/ckpt
anchor_every = 0
colour = blue
INI
"$WSYNCD" --check-config "$TMP/bad4.ini" >/dev/null 2>"$TMP/bad4.txt"
grep "^$TMP/bad4.ini:[0-9]*: " "$TMP/bad4.txt" >"$TMP/bad4.want"
check "--check-config lists 4 errors as FILE:LINE: (the reference)" test "$(wc -l <"$TMP/bad4.want")" = 4
# config_failed NAME OUT CODE N_ERRORS [FILE]: OUT (journal-recv.py's) holds
# an exit CODE, nothing on stderr, and only CONFIG_INVALID entries at
# PRIORITY=3 with WSYNC_FILE, no stderr-style prefix: N_ERRORS of them the
# lines of FILE in order, then the summary.
config_failed() {
	local name=$1 out=$2 code=$3 n=$4 want=${5:-/dev/null}
	check "$name: exit $code" test "$(q "$out" 'd["exit"]')" = "$code"
	check "$name: nothing on stderr" test "$(q "$out" 'repr(d["stderr"])')" = "''"
	check "$name: every entry is CONFIG_INVALID, PRIORITY=3, with WSYNC_FILE" test \
		"$(q "$out" "[(e.get('MESSAGE_ID'), e.get('PRIORITY'), bool(e.get('WSYNC_FILE'))) for e in d['entries']] == [('$mid_invalid', '3', True)] * $((n + 1))")" = True
	check "$name: no stderr-style prefix in a MESSAGE" test \
		"$(q "$out" "[e['MESSAGE'] for e in d['entries'] if 'wsyncd[' in e['MESSAGE'] or ' err: ' in e['MESSAGE']]")" = "[]"
	if [ "$n" -gt 0 ]; then
		check "$name: the $n errors, one entry each, as --check-config prints them" \
			test "$(q "$out" "'\\n'.join(e['MESSAGE'] for e in d['entries'][:-1])")" = "$(cat "$want")"
	fi
}
for how in journal-stream log-target; do
	rm -f "$TMP/j.sock"
	if [ $how = journal-stream ]; then
		"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/$how.json" --journal-stream -- "$WSYNCD" --config "$TMP/bad4.ini"
	else
		"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/$how.json" -- "$WSYNCD" --log-target journal --config "$TMP/bad4.ini"
	fi
	config_failed "bad file, $how" "$TMP/$how.json" 78 4 "$TMP/bad4.want"
	contains "bad file, $how: the summary last" "$(q "$TMP/$how.json" "d['entries'][-1]['MESSAGE']")" \
		"$TMP/bad4.ini: configuration is invalid (4 errors)"
done

rm -f "$TMP/j.sock"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/nofile.json" --journal-stream -- "$WSYNCD" --config "$TMP/nope.ini"
config_failed "missing file" "$TMP/nofile.json" 78 1 <(echo "$TMP/nope.ini: cannot open: No such file or directory")
mkdir -p "$TMP/dir.ini"
rm -f "$TMP/j.sock"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/dir.json" --journal-stream -- "$WSYNCD" --config "$TMP/dir.ini"
config_failed "a directory as the file" "$TMP/dir.json" 78 1 <(echo "$TMP/dir.ini: cannot read: Is a directory")

# Valid files that cannot start.
mkdir -p "$TMP/ckpt" "$TMP/pubbucket"
printf 'not a key\n' >"$TMP/garbage.pem"
pubini() { # pubini FILE WATCH_DIR [LINE]
	printf '[daemon]\nrole = publisher\nstate_dir = %s\nruntime_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\n%s\n' \
		"$TMP/pubstate" "$TMP/pubrun" "$TMP/pubbucket" "$2" "${3:-}" >"$1"
}
pubini "$TMP/badkey.ini" "$TMP/ckpt" "signing_key = $TMP/garbage.pem"
expect_exit 78 "a file naming an unusable signing key fails --check-config" "$WSYNCD" --check-config "$TMP/badkey.ini"
# the lines --check-config prints, which start-up's entries must repeat
want() { "$WSYNCD" --check-config "$1" 2>&1 | grep "^$1:[0-9]*: " >"$2"; }
want "$TMP/badkey.ini" "$TMP/badkey.want"
rm -f "$TMP/j.sock"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/badkey.json" --journal-stream -- "$WSYNCD" --config "$TMP/badkey.ini"
config_failed "unusable signing_key" "$TMP/badkey.json" 78 1 "$TMP/badkey.want"
contains "unusable signing_key: the entry names the file, the line, the key and why" \
	"$(q "$TMP/badkey.json" "d['entries'][0]['MESSAGE']")" "$TMP/badkey.ini:9: [publisher] signing_key: $TMP/garbage.pem"
printf '[daemon]\nrole = subscriber\nstate_dir = %s/substate\nruntime_dir = %s/subrun\n[store]\nurl = file://%s/pubbucket\n[subscriber]\ntarget_dir = %s/subtarget\nverify_key = %s/no-such.pub\n' \
	"$TMP" "$TMP" "$TMP" "$TMP" "$TMP" >"$TMP/nokey.ini"
want "$TMP/nokey.ini" "$TMP/nokey.want"
rm -f "$TMP/j.sock"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/nokey.json" --journal-stream -- "$WSYNCD" --config "$TMP/nokey.ini"
config_failed "verify_key missing" "$TMP/nokey.json" 78 1 "$TMP/nokey.want"
printf '[daemon]\nrole = subscriber\nstate_dir = %s/substate\nruntime_dir = %s/subrun\n[store]\nurl = s3://bucket\ncredentials = %s/no-such.cred\n[subscriber]\ntarget_dir = %s/subtarget\n' \
	"$TMP" "$TMP" "$TMP" "$TMP" >"$TMP/nocred.ini"
want "$TMP/nocred.ini" "$TMP/nocred.want"
rm -f "$TMP/j.sock"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/nocred.json" --journal-stream -- "$WSYNCD" --config "$TMP/nocred.ini"
config_failed "[store] credentials missing" "$TMP/nocred.json" 78 1 "$TMP/nocred.want"
pubini "$TMP/nowatch.ini" "$TMP/not-yet"
rm -f "$TMP/j.sock"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/nowatch.json" --journal-stream -- "$WSYNCD" --config "$TMP/nowatch.ini"
check "watch_dir not there (yet): exit 1, restarted by the unit" test "$(q "$TMP/nowatch.json" 'd["exit"]')" = 1
check "watch_dir not there (yet): an error entry naming it, not CONFIG_INVALID" test \
	"$(q "$TMP/nowatch.json" "[(e.get('MESSAGE_ID'), e['PRIORITY']) for e in d['entries'] if 'not-yet' in e['MESSAGE']]")" = "[(None, '3')]"

# A short run of a subscriber on an empty file:// bucket: STARTED, then
# STOPPING on SIGTERM.
mkdir -p "$TMP/bucket" "$TMP/model" "$TMP/state" "$TMP/run"
cat >"$TMP/sub.ini" <<INI
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
started=$(mid STARTED)
stopping=$(mid STOPPING)
rm -f "$TMP/j.sock"
"$PYTHON3" "$recv" "$TMP/j.sock" "$TMP/run.json" --until "$started" -- \
	"$WSYNCD" --log-target journal -c "$TMP/sub.ini"
if grep -q "not built yet" "$TMP/run.json"; then
	echo "ok $((TAP_N + 1)) - # SKIP the subscriber role is not built yet"
	TAP_N=$((TAP_N + 1))
else
	check "the subscriber ran and exited 0 on SIGTERM" test "$(q "$TMP/run.json" 'd["exit"]')" = 0
	for m in STARTED STOPPING; do
		check "$m entry arrived with PRIORITY=6" test \
			"$(q "$TMP/run.json" "[e['PRIORITY'] for e in d['entries'] if e.get('MESSAGE_ID') == '$(mid $m)']")" = "['6']"
	done
	contains "STARTED names the role and the bucket" \
		"$(q "$TMP/run.json" "[e['MESSAGE'] for e in d['entries'] if e.get('MESSAGE_ID') == '$started'][0]")" \
		"role subscriber, bucket file://$TMP/bucket"
	check "single-line values came as KEY=value" test \
		"$(q "$TMP/run.json" "all(not e['_binary_safe'] for e in d['entries'])")" = True
	check "nothing went to stderr while the journal took it" test \
		"$(q "$TMP/run.json" 'len(d["stderr"])')" = 0
fi

# A reload of a file that became invalid.
cp "$TMP/sub.ini" "$TMP/reload.ini"
journal_start reload-journal "$TMP/j.sock" "$TMP/reload.jsonl"
# (its stdout and stderr in reload.err)
start -c "$TMP/reload.ini" -l "$TMP/reload.err" reload WSYNC_JOURNAL_SOCKET="$TMP/j.sock"
check "reload: the subscriber started" wait_grep "$TMP/reload.jsonl" "$started" 10
sed -i 's/^poll_interval = 200ms$/poll_interval = soon/' "$TMP/reload.ini"
kill -HUP "${DPID[reload]}"
check "reload: refused" wait_grep "$TMP/reload.jsonl" "reload refused" 10
check "reload: the error is a CONFIG_INVALID entry, FILE:LINE first, with WSYNC_FILE" test "$("$PYTHON3" -c '
import json, sys
es = [json.loads(l) for l in open(sys.argv[1])]
print([(e.get("MESSAGE_ID"), e.get("WSYNC_FILE"), e["MESSAGE"].startswith(sys.argv[2] + ":9: [subscriber] poll_interval"))
       for e in es if "poll_interval" in e.get("MESSAGE", "")])' "$TMP/reload.jsonl" "$TMP/reload.ini")" = \
	"[('$mid_invalid', '$TMP/reload.ini', True)]"
stop reload
check "reload: the daemon ran on with its previous configuration and exited 0 on SIGTERM" test $? = 0
check "reload: nothing on stderr" test ! -s "$TMP/reload.err"
stop reload-journal

tap_done
