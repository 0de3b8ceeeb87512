#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-store-conditional: `wsync store put --if-absent / --if-match ETAG`,
# the store's conditional put (wsync_store_put_buf_if, store.h), on each
# kind of store:
#   * file:// and an S3 that honours conditions (hostile-s3.py: 412 for
#     If-None-Match: * or If-Match that does not hold): --if-absent on a
#     new key lands and prints the object's ETag (the one head prints), on
#     an existing key exits 4 and changes nothing; --if-match with head's
#     ETag lands and prints another ETag, with a stale one or on a missing
#     key exits 4 and changes nothing; one condition at a time and only
#     with put (exit 2); file://'s lock never shows in a listing;
#   * on the wire (hostile-s3.py's log): If-None-Match: * and If-Match
#     with the ETag as head printed it, quotes included; a 412 is final
#     at once (one PUT); a 409 (a conditional write racing another) is
#     retried and the put lands; a 412 after a retried 503 says the first
#     attempt may have landed; a server refusing conditions (501
#     NotImplemented, as Swift) exits 5 naming the store, nothing
#     written, while a plain put there still works; a conditional put
#     larger than part_size is refused (exit 2) before any request;
#   * OpenStack Swift + s3api: its 501 to a conditional PUT, exit 5;
#   * s3rver ignores conditions: --if-absent over an existing object
#     lands (exit 0) -- a store that cannot fence, which store.h says
#     cannot be told apart.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"
s3servers_trap_exit
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN CREDENTIALS_DIRECTORY

for need in have_s3rver have_swift; do
	if ! $need; then
		echo "not ok 1 - $need: $S3S_WHY"
		echo "1..1"
		exit 1
	fi
done

read -r P_S3RVER P_SWIFT < <(free_ports 2 | tr '\n' ' ')
# Swift boots (~5-10 s) while the rest runs; swift_wait below.
swift_spawn "$TMP/swift" "$P_SWIFT"
SWIFT_SPAWNED=$?

printf 'first version\n' >"$TMP/v1"
printf 'the second version, longer\n' >"$TMP/v2"
printf 'third\n' >"$TMP/v3"

# etag CMD... URL: the ETag `wsync store head --json` prints
etag() {
	"$@" | "$PYTHON3" -c 'import json, sys; print(json.load(sys.stdin)["etag"])'
}

# conditions NAME URL CMD...: the conditions on the key URL/HEAD, CMD the
# `wsync store` to run (with its options)
conditions() {
	local name=$1 u=$2 e1 e2 e3 rc
	shift 2

	e1=$("$@" put --if-absent "$TMP/v1" "$u/HEAD" 2>"$TMP/err")
	rc=$?
	cat "$TMP/err" | sed 's/^/# /'
	tap_result $rc "$name: --if-absent on a new key lands"
	check "$name: and prints its ETag, the one head prints ($e1)" \
		test "$e1" = "$(etag "$@" head --json "$u/HEAD")"
	expect_exit 4 "$name: --if-absent on an existing key exits 4" \
		"$@" put --if-absent "$TMP/v2" "$u/HEAD"
	contains "$name: saying an object has the key" "$OUT" "HEAD"
	expect_exit 0 "$name: the object is unchanged" "$@" get "$u/HEAD" "$TMP/$name.got"
	check "$name: the first version's bytes" cmp "$TMP/v1" "$TMP/$name.got"

	e2=$("$@" put --if-match "$e1" "$TMP/v2" "$u/HEAD" 2>"$TMP/err")
	rc=$?
	cat "$TMP/err" | sed 's/^/# /'
	tap_result $rc "$name: --if-match with head's ETag lands"
	check "$name: and prints a new ETag ($e2)" test -n "$e2" -a "$e2" != "$e1"
	check "$name: the one head prints now" test "$e2" = "$(etag "$@" head --json "$u/HEAD")"
	expect_exit 4 "$name: --if-match with the stale ETag exits 4" \
		"$@" put --if-match "$e1" "$TMP/v3" "$u/HEAD"
	expect_exit 0 "$name: the object is unchanged" "$@" get "$u/HEAD" "$TMP/$name.got"
	check "$name: the second version's bytes" cmp "$TMP/v2" "$TMP/$name.got"
	expect_exit 4 "$name: --if-match on a missing key exits 4" \
		"$@" put --if-match "$e2" "$TMP/v3" "$u/nothing"
	expect_exit 1 "$name: and writes nothing" "$@" head "$u/nothing"
	e3=$("$@" put --if-match "$e2" - "$u/HEAD" <"$TMP/v3" 2>"$TMP/err")
	tap_result $? "$name: --if-match from stdin lands"
	check "$name: with a third ETag" test -n "$e3" -a "$e3" != "$e2" -a "$e3" != "$e1"
	expect_exit 0 "$name: ls" "$@" ls "$u/"
	contains "$name: ls shows the object" "$OUT" "HEAD"
	check "$name: and nothing else" test "$(printf '%s\n' "$OUT" | wc -l)" -eq 1
}

# --- file:// -----------------------------------------------------------------
mkdir -p "$TMP/bucket"
conditions file "file://$TMP/bucket" "$WSYNC" store
check "file: the lock is in the bucket directory" test -f "$TMP/bucket/.wsync-lock"
expect_exit 0 "file: ls of the whole bucket" "$WSYNC" store ls "file://$TMP/bucket"
check "file: does not show the lock" bash -c '! grep -q wsync-lock <<<"$1"' _ "$OUT"
expect_exit 2 "one condition at a time (exit 2)" \
	"$WSYNC" store put --if-absent --if-match '"x"' "$TMP/v1" "file://$TMP/bucket/HEAD"
expect_exit 2 "conditions go with put only (exit 2)" \
	"$WSYNC" store get --if-absent "file://$TMP/bucket/HEAD" "$TMP/x"
expect_exit 2 "an ETag with a control character is refused (exit 2)" \
	"$WSYNC" store put --if-match "$(printf '"a\tb"')" "$TMP/v1" "file://$TMP/bucket/HEAD"

# --- an S3 that honours conditions ------------------------------------------------
# rules JSON: replace the lies of the server
rules() {
	"$PYTHON3" - "$HS_PORT" "$1" <<'PY'
import sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:%s/__rules__" % sys.argv[1],
                             data=sys.argv[2].encode(), method="PUT")
urllib.request.urlopen(req, timeout=10).read()
PY
}
# logq FROM EXPR: EXPR over the server's log from line FROM on, `L` its
# request events
logq() {
	"$PYTHON3" - "$TMP/hs.jsonl" "$1" "$2" <<'PY'
import json, sys
E = [json.loads(l) for l in open(sys.argv[1]).readlines()[int(sys.argv[2]) - 1:]]
L = [e for e in E if e["event"] == "request"]
print(eval(sys.argv[3]))
PY
}
mark() { echo $(($(wc -l <"$TMP/hs.jsonl") + 1)); }

mkdir -p "$TMP/hs-bucket"
hs_start hs --bucket "cond=$TMP/hs-bucket" || { echo "Bail out! hostile-s3 did not start"; exit 1; }
cat >"$TMP/hs.ini" <<EOF
[daemon]
role = subscriber
[store]
url = s3://cond/runs
endpoint = http://127.0.0.1:$HS_PORT
retry_max_time = 20s
part_size = 5MiB
[subscriber]
target_dir = $TMP/model
EOF
H=("$WSYNC" store --config "$TMP/hs.ini")
m=$(mark)
conditions s3 s3://cond/runs "${H[@]}"
check "s3: --if-absent sent If-None-Match: *" \
	test "$(logq "$m" "sum(1 for r in L if r['cond'] == 'If-None-Match: *')")" -eq 2
E1=$(logq "$m" "[r['cond'] for r in L if (r['cond'] or '').startswith('If-Match')][0]")
check "s3: --if-match sent If-Match with the ETag's quotes ($E1)" \
	bash -c '[[ $1 =~ ^If-Match:\ \"[0-9a-f]{32}\"$ ]]' _ "$E1"
check "s3: each 412 was final at once (6 conditional PUTs, 6 requests)" \
	test "$(logq "$m" "sum(1 for r in L if r['method'] == 'PUT')")" -eq 6

# 409: a conditional write racing another; S3 says retry.
e=$(etag "${H[@]}" head --json s3://cond/runs/HEAD)
rules '[{"method": "PUT", "do": "status", "code": 409, "times": 1}]'
m=$(mark)
expect_exit 0 "s3: a 409 to a conditional put is retried, and it lands" \
	"${H[@]}" put --if-match "$e" "$TMP/v1" s3://cond/runs/HEAD
check "s3: in two PUTs" test "$(logq "$m" "sum(1 for r in L if r['method'] == 'PUT')")" -eq 2
check "s3: the object is the new one" cmp "$TMP/v1" "$TMP/hs-bucket/runs/HEAD"

# A 503 first, then the object there: the 412 names the retry (the first
# attempt may have landed unanswered, store.h).
rules '[{"method": "PUT", "do": "status", "code": 503, "times": 1}]'
expect_exit 4 "s3: a 412 after a retried 503 exits 4" \
	"${H[@]}" put --if-absent "$TMP/v2" s3://cond/runs/HEAD
contains "s3: saying the first attempt may have been this put's" "$OUT" "after a retry"
check "s3: the object is unchanged" cmp "$TMP/v1" "$TMP/hs-bucket/runs/HEAD"

# 501: a store that refuses conditions.
rules '[{"do": "no_conditions"}]'
m=$(mark)
expect_exit 5 "s3: a store answering 501 to a conditional put: exit 5" \
	"${H[@]}" put --if-absent "$TMP/v2" s3://cond/runs/other
contains "s3: saying the store does not support conditional writes" "$OUT" \
	"does not support conditional writes"
contains "s3: naming the store" "$OUT" "s3://cond at http://127.0.0.1:$HS_PORT"
check "s3: one request, not retried" \
	test "$(logq "$m" "sum(1 for r in L if r['method'] == 'PUT')")" -eq 1
check "s3: nothing written" test ! -e "$TMP/hs-bucket/runs/other"
expect_exit 5 "s3: --if-match too" "${H[@]}" put --if-match '"x"' "$TMP/v2" s3://cond/runs/HEAD
check "s3: HEAD unchanged" cmp "$TMP/v1" "$TMP/hs-bucket/runs/HEAD"
expect_exit 0 "s3: a plain put to that store still works" \
	"${H[@]}" put "$TMP/v2" s3://cond/runs/other
rules '[]'

# Larger than part_size: refused before any request.
head -c $((5 * 1024 * 1024 + 1)) /dev/zero >"$TMP/big"
m=$(mark)
expect_exit 2 "s3: a conditional put over part_size is refused (exit 2)" \
	"${H[@]}" put --if-absent "$TMP/big" s3://cond/runs/big
contains "s3: saying why" "$OUT" "part_size"
check "s3: no request was made" test "$(logq "$m" "len(L)")" -eq 0

# --- s3rver: ignores conditions -------------------------------------------------
s3rver_start "$TMP/s3rver" "$P_S3RVER" bucket
tap_result $? "s3rver started"
cat >"$TMP/s3rver.ini" <<EOF
[daemon]
role = subscriber
[store]
url = s3://bucket
endpoint = http://127.0.0.1:$P_S3RVER
credentials = $TMP/s3rver.cred
retry_max_time = 20s
[subscriber]
target_dir = $TMP/model
EOF
printf '[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n' \
	>"$TMP/s3rver.cred"
R=("$WSYNC" store --config "$TMP/s3rver.ini")
expect_exit 0 "s3rver: --if-absent on a new key" "${R[@]}" put --if-absent "$TMP/v1" s3://bucket/HEAD
check "s3rver: prints an ETag" bash -c '[[ $1 == \"*\" ]]' _ "$(printf '%s' "$OUT" | tail -1)"
expect_exit 0 "s3rver: --if-absent on an existing key lands too (s3rver ignores it)" \
	"${R[@]}" put --if-absent "$TMP/v2" s3://bucket/HEAD
expect_exit 0 "s3rver: --if-match with a made-up ETag lands too" \
	"${R[@]}" put --if-match '"0123456789abcdef0123456789abcdef"' "$TMP/v3" s3://bucket/HEAD
expect_exit 0 "s3rver: get" "${R[@]}" get s3://bucket/HEAD "$TMP/s3rver.got"
check "s3rver: the last put's bytes" cmp "$TMP/v3" "$TMP/s3rver.got"

# --- OpenStack Swift + s3api: refuses conditions ---------------------------------
if [ "$SWIFT_SPAWNED" -eq 0 ] && swift_wait && swift_make_bucket wsync >/dev/null; then
	tap_result 0 "swift started"
	cat >"$TMP/swift.ini" <<EOF
[daemon]
role = subscriber
[store]
url = s3://wsync/c
endpoint = $SWIFT_ENDPOINT
credentials = $TMP/swift.cred
retry_max_time = 20s
[subscriber]
target_dir = $TMP/model
EOF
	printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
		"$SWIFT_ACCESS_KEY" "$SWIFT_SECRET_KEY" >"$TMP/swift.cred"
	S=("$WSYNC" store --config "$TMP/swift.ini")
	expect_exit 5 "swift: --if-absent exits 5" "${S[@]}" put --if-absent "$TMP/v1" s3://wsync/c/HEAD
	contains "swift: the store does not support conditional writes" "$OUT" \
		"does not support conditional writes"
	printf '%s\n' "$OUT" | sed 's/^/# swift said: /'
	expect_exit 1 "swift: nothing written" "${S[@]}" head s3://wsync/c/HEAD
	expect_exit 0 "swift: a plain put" "${S[@]}" put "$TMP/v1" s3://wsync/c/HEAD
	e=$(etag "${S[@]}" head --json s3://wsync/c/HEAD)
	expect_exit 5 "swift: --if-match with head's ETag exits 5" \
		"${S[@]}" put --if-match "$e" "$TMP/v2" s3://wsync/c/HEAD
	expect_exit 0 "swift: the object is unchanged" "${S[@]}" get s3://wsync/c/HEAD "$TMP/swift.got"
	check "swift: the plain put's bytes" cmp "$TMP/v1" "$TMP/swift.got"
else
	tap_result 1 "swift started"
fi

tap_done
