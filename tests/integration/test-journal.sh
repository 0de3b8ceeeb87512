#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-journal: wsyncd's journal side without a running journald.
#  - The journal catalog (systemd/wsync.catalog) parses -- journalctl
#    --root builds its database in a scratch root -- and has an entry with
#    Subject, Defined-By, Documentation and a body for every MESSAGE_ID in
#    common/log-messages.h.
#  - The real wsyncd, with --log-target journal and WSYNC_JOURNAL_SOCKET
#    pointing at a datagram socket this test binds, sends native-protocol
#    entries carrying MESSAGE_ID, PRIORITY, SYSLOG_IDENTIFIER, CODE_*,
#    WSYNC_FILE; a value holding a newline arrives in the binary-safe form.
. "$(dirname "$0")/lib.sh"
src=$WSYNC_SOURCE_ROOT
catalog=$src/systemd/wsync.catalog
recv=$src/tests/integration/journal-recv.py

ids=$(sed -nE 's/^#define WSYNC_MID_[A-Z_]+ +"([0-9a-f]{32})".*/\1/p' "$src/common/log-messages.h")
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
mid_invalid=$(sed -nE 's/^#define WSYNC_MID_CONFIG_INVALID +"([0-9a-f]+)".*/\1/p' "$src/common/log-messages.h")
check "wsyncd on a bad file exits 78" test "$(q "$TMP/bad.json" 'd["exit"]')" = 78
check "every datagram parsed" test "$(q "$TMP/bad.json" 'len(d["errors"])')" = 0
ev() { q "$TMP/bad.json" "[e for e in d['entries'] if e.get('MESSAGE_ID') == '$mid_invalid'][0].get('$1')"; }
check "a CONFIG_INVALID entry arrived" test "$(q "$TMP/bad.json" "sum(e.get('MESSAGE_ID') == '$mid_invalid' for e in d['entries'])")" = 1
check "PRIORITY=3 (err)" test "$(ev PRIORITY)" = 3
check "SYSLOG_IDENTIFIER=wsyncd" test "$(ev SYSLOG_IDENTIFIER)" = wsyncd
check "CODE_FILE names wsyncd.c" bash -c '[[ "$1" == *daemon/wsyncd.c ]]' _ "$(ev CODE_FILE)"
check "CODE_LINE is a number" bash -c '[[ "$1" =~ ^[0-9]+$ ]]' _ "$(ev CODE_LINE)"
check "CODE_FUNC=load_config" test "$(ev CODE_FUNC)" = load_config
check "WSYNC_FILE is the path, newline included" test "$(ev WSYNC_FILE)" = "$bad"
contains "MESSAGE says the configuration is invalid" "$(ev MESSAGE)" "$bad: configuration is invalid"
check "multi-line MESSAGE and WSYNC_FILE came binary-safe" test \
	"$(q "$TMP/bad.json" "sorted([e for e in d['entries'] if e.get('MESSAGE_ID') == '$mid_invalid'][0]['_binary_safe'])")" = "['MESSAGE', 'WSYNC_FILE']"

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
mid() { sed -nE "s/^#define WSYNC_MID_$1 +\"([0-9a-f]+)\".*/\\1/p" "$src/common/log-messages.h"; }
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

tap_done
