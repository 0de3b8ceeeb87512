#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-store-s3.sh -- the S3 backend (common/store/store_s3.c) through `wsync
# store`, against real servers on 127.0.0.1:
#   * s3rver: put/get/ls/head/rm, multipart upload and parallel ranged
#     download, the hf:// bucket mapping (path /NS/BUCKET/key), interop
#     with the AWS CLI both ways;
#   * the fault proxy in front of s3rver: 503 + Retry-After, resets mid-body,
#     truncated bodies, stalls past the timeout, a 302 to another host (no
#     Authorization follows it), a corrupted body (refused when the hash is
#     known), 403 and NoSuchBucket not retried, a 500 storm bounded by the
#     attempt limit, a failing multipart upload aborted;
#   * OpenStack Swift + s3api, which verifies SigV4: the same round trips,
#     multipart through slo, keys that need encoding, and a wrong secret
#     refused with a clear message.
# Every case ends with the right bytes or a clear error, never wrong bytes
# accepted.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"
s3servers_trap_exit

# The servers are test dependencies that scripts/setup.sh installs: missing
# ones are failures, not skips.
for need in have_s3rver have_swift have_awscli; do
	if ! $need; then
		echo "not ok 1 - $need: $S3S_WHY"
		echo "1..1"
		exit 1
	fi
done

read -r P_S3RVER P_SWIFT < <(free_ports 2 | tr '\n' ' ')
s3rver_start "$TMP/s3rver" "$P_S3RVER" bucket || { echo "Bail out! s3rver did not start"; exit 1; }

# s3conf NAME URL ENDPOINT ACCESS SECRET [EXTRA [store] LINES...]
s3conf() {
	local name=$1 url=$2 ep=$3 ak=$4 sk=$5
	shift 5
	printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$ak" "$sk" \
		>"$TMP/$name.cred"
	{
		printf '[daemon]\nrole = subscriber\n[store]\nurl = %s\nendpoint = %s\n' "$url" "$ep"
		printf 'credentials = %s\nretry_max_time = 30s\n' "$TMP/$name.cred"
		for l in "$@"; do printf '%s\n' "$l"; done
		printf '[subscriber]\ntarget_dir = %s/model\n' "$TMP"
	} >"$TMP/$name.ini"
}
xxh() { xxh128sum -q "$1" 2>/dev/null | cut -d' ' -f1; }
# proxy_count JQ-LIKE-FILTER: requests in the proxy log matching python expr on r
proxy_count() {
	"$PYTHON3" - "$FAULTPROXY_LOG" "$1" <<'PY'
import json, sys
n = 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("event") == "request" and eval(sys.argv[2], {}, {"r": r}):
        n += 1
print(n)
PY
}

head -c 300000 /dev/urandom >"$TMP/small.bin"
head -c $((17 * 1024 * 1024 + 12345)) /dev/urandom >"$TMP/big.bin"
head -c 0 /dev/urandom >"$TMP/empty.bin"

# --- s3rver ---------------------------------------------------------------
S=http://127.0.0.1:$P_S3RVER
s3conf s3 s3://bucket/runs/exp1 "$S" S3RVER S3RVER "part_size = 5MiB"
W=("$WSYNC" store --config "$TMP/s3.ini")

expect_exit 0 "put a file" "${W[@]}" put "$TMP/small.bin" s3://bucket/runs/exp1/v/1.delta
expect_exit 0 "the AWS CLI reads what wsync wrote" \
	aws_s3rver s3 cp s3://bucket/runs/exp1/v/1.delta "$TMP/aws1.bin"
check "same bytes through aws" cmp "$TMP/small.bin" "$TMP/aws1.bin"
expect_exit 0 "get it back" "${W[@]}" get s3://bucket/runs/exp1/v/1.delta "$TMP/back1.bin"
check "same bytes through wsync" cmp "$TMP/small.bin" "$TMP/back1.bin"
expect_exit 0 "get with the right size and hash" "${W[@]}" get --expect-size 300000 \
	--expect-xxh3 "$(xxh "$TMP/small.bin")" s3://bucket/runs/exp1/v/1.delta "$TMP/back1b.bin"
expect_exit 65 "get with a wrong hash is refused (65)" "${W[@]}" get \
	--expect-xxh3 00000000000000000000000000000000 s3://bucket/runs/exp1/v/1.delta "$TMP/no.bin"
check "and leaves no file behind" test ! -e "$TMP/no.bin"
check "nor a temp file" bash -c "! ls -a '$TMP' | grep -q wsync-tmp"

expect_exit 0 "multipart put (17 MiB in 5 MiB parts)" "${W[@]}" put "$TMP/big.bin" \
	s3://bucket/runs/exp1/anchors/1.wsa
expect_exit 0 "the AWS CLI reads the multipart object" \
	aws_s3rver s3 cp s3://bucket/runs/exp1/anchors/1.wsa "$TMP/aws-big.bin"
check "same bytes (multipart, aws)" cmp "$TMP/big.bin" "$TMP/aws-big.bin"
expect_exit 0 "parallel ranged get of the big object" "${W[@]}" get \
	--expect-xxh3 "$(xxh "$TMP/big.bin")" s3://bucket/runs/exp1/anchors/1.wsa "$TMP/back-big.bin"
check "same bytes (ranged get)" cmp "$TMP/big.bin" "$TMP/back-big.bin"
expect_exit 0 "empty object round trip" "${W[@]}" put "$TMP/empty.bin" s3://bucket/runs/exp1/empty
expect_exit 0 "get the empty object" "${W[@]}" get s3://bucket/runs/exp1/empty "$TMP/back-empty"
check "it is empty" test -f "$TMP/back-empty" -a ! -s "$TMP/back-empty"

expect_exit 0 "aws puts an object" aws_s3rver s3 cp "$TMP/big.bin" s3://bucket/runs/exp1/from-aws.bin
expect_exit 0 "wsync reads what aws wrote" "${W[@]}" get s3://bucket/runs/exp1/from-aws.bin "$TMP/fa.bin"
check "same bytes (aws -> wsync)" cmp "$TMP/big.bin" "$TMP/fa.bin"

expect_exit 0 "ls the prefix" "${W[@]}" ls s3://bucket/runs/exp1/
contains "ls shows the delta with its size" "$OUT" "300000"
contains "ls recurses into sub-prefixes" "$OUT" "anchors/1.wsa"
check "ls lists all four objects" test "$(printf '%s\n' "$OUT" | grep -c .)" -eq 4
expect_exit 0 "ls --json" "${W[@]}" ls --json s3://bucket/runs/exp1/
check "ls --json is JSON with the keys" "$PYTHON3" -c \
	'import json,sys; d=json.loads(sys.argv[1]); s=json.dumps(d); assert "v/1.delta" in s and "anchors/1.wsa" in s' "$OUT"
expect_exit 0 "head" "${W[@]}" head s3://bucket/runs/exp1/anchors/1.wsa
contains "head gives the size" "$OUT" "$(stat -c %s "$TMP/big.bin")"
ETAG=$(printf '%s\n' "$OUT" | sed -n 's/^etag: //p')
check "head gives an ETag" test -n "$ETAG"
rm -f "$TMP/cond.bin"
expect_exit 0 "conditional get with the current ETag" "${W[@]}" get --if-none-match "$ETAG" \
	s3://bucket/runs/exp1/anchors/1.wsa "$TMP/cond.bin"
contains "is not modified" "$OUT" "not modified"
check "and writes nothing" test ! -e "$TMP/cond.bin"
expect_exit 0 "conditional get with another ETag" "${W[@]}" get --if-none-match '"0123"' \
	s3://bucket/runs/exp1/anchors/1.wsa "$TMP/cond.bin"
check "gets the object" cmp "$TMP/big.bin" "$TMP/cond.bin"
expect_exit 1 "head of a missing key fails" "${W[@]}" head s3://bucket/runs/exp1/nope
contains "and says so" "$OUT" "no such object"
expect_exit 0 "rm" "${W[@]}" rm s3://bucket/runs/exp1/v/1.delta
expect_exit 1 "get after rm fails" "${W[@]}" get s3://bucket/runs/exp1/v/1.delta "$TMP/gone"
expect_exit 0 "rm of a missing key succeeds (as S3)" "${W[@]}" rm s3://bucket/runs/exp1/v/1.delta

# --- faults, through the proxy --------------------------------------------
faultproxy_start "$TMP/proxy" "$P_S3RVER" || { echo "Bail out! faultproxy did not start"; exit 1; }
F=http://127.0.0.1:$FAULTPROXY_PORT
s3conf fp s3://bucket/f "$F" S3RVER S3RVER "part_size = 5MiB" "timeout = 2s" "retry_attempts = 4"
WF=("$WSYNC" store --config "$TMP/fp.ini")
expect_exit 0 "put through the proxy" "${WF[@]}" put "$TMP/big.bin" s3://bucket/f/obj
expect_exit 0 "put a small one" "${WF[@]}" put "$TMP/small.bin" s3://bucket/f/small
SUM=$(xxh "$TMP/big.bin")

# hf://buckets/NS/B/prefix is bucket B at ENDPOINT/NS: requests go to
# /NS/B/prefix/key, path style.  (s3rver reads /NS/B/.. as bucket NS, key
# B/..: objects land where the shape says, and the listing's shape is
# checked in the proxy log, since s3rver can't serve it.)
expect_exit 0 "a bucket named like the HF namespace" aws_s3rver s3 mb s3://myorg
# (s3rver knows only its own key pair; the HF gateway's keys start with HFAK)
s3conf hf hf://buckets/myorg/weights/qwen "$F" S3RVER S3RVER
: >"$FAULTPROXY_LOG"
expect_exit 0 "put through an hf:// URL" "$WSYNC" store --config "$TMP/hf.ini" put "$TMP/small.bin" \
	hf://buckets/myorg/weights/qwen/HEAD
check "the request went to /myorg/weights/qwen/HEAD" \
	test "$(proxy_count 'r["method"]=="PUT" and r["path"]=="/myorg/weights/qwen/HEAD"')" -eq 1
expect_exit 0 "the object is there" aws_s3rver s3 cp s3://myorg/weights/qwen/HEAD "$TMP/hf-back"
check "same bytes (hf mapping)" cmp "$TMP/small.bin" "$TMP/hf-back"
: >"$FAULTPROXY_LOG"
"$WSYNC" store --config "$TMP/hf.ini" ls hf://buckets/myorg/weights/qwen/ >/dev/null 2>&1
check "an hf:// listing is ListObjectsV2 on /myorg/weights with delimiter /" \
	test "$(proxy_count 'r["method"]=="GET" and r["path"]=="/myorg/weights" and "list-type=2" in r["query"] and "delimiter=%2F" in r["query"] and "prefix=qwen%2F" in r["query"]')" -eq 1


fault_get() { # fault_get DESC RULE [KEY FILE]
	local desc=$1 rule=$2 key=${3:-obj} ref=${4:-$TMP/big.bin}
	rm -f "$TMP/fg.bin"
	faultproxy_clear >/dev/null
	faultproxy_rule "$rule" >/dev/null
	expect_exit 0 "$desc: get succeeds" "${WF[@]}" get --expect-xxh3 "$(xxh "$ref")" \
		"s3://bucket/f/$key" "$TMP/fg.bin"
	check "$desc: right bytes" cmp "$ref" "$TMP/fg.bin"
}
: >"$FAULTPROXY_LOG"
fault_get "503 SlowDown twice with Retry-After" \
	'{"fault":"status","code":503,"retry_after":1,"method":"GET","times":2}' small "$TMP/small.bin"
check "three requests were made (2 refused + 1)" test "$(proxy_count 'r["method"]=="GET"')" -eq 3
fault_get "connection reset mid-body" '{"fault":"reset","after_bytes":100000,"method":"GET"}'
fault_get "truncated body" '{"fault":"truncate","after_bytes":70000,"method":"GET"}'
t0=$(date +%s)
fault_get "stall past the timeout" '{"fault":"stall","seconds":30,"method":"GET"}' small "$TMP/small.bin"
check "the stall cost about the timeout, not the stall" test $(($(date +%s) - t0)) -lt 15
: >"$FAULTPROXY_LOG"
fault_get "302 to another host" '{"fault":"redirect","method":"GET"}' small "$TMP/small.bin"
check "the redirected request went to the other listener" \
	test "$(proxy_count 'r["listener"]=="redirect"')" -eq 1
check "and carried no Authorization" \
	test "$(proxy_count 'r["listener"]=="redirect" and not r["auth"]')" -eq 1
check "the first request did" test "$(proxy_count 'r["listener"]=="main" and r["auth"]')" -ge 1

faultproxy_clear >/dev/null
faultproxy_rule '{"fault":"corrupt","method":"GET","times":0}' >/dev/null
expect_exit 65 "a corrupted body is refused when the hash is known" "${WF[@]}" get \
	--expect-xxh3 "$SUM" s3://bucket/f/obj "$TMP/corrupt.bin"
check "nothing written" test ! -e "$TMP/corrupt.bin"

: >"$FAULTPROXY_LOG"
faultproxy_clear >/dev/null
faultproxy_rule '{"fault":"status","code":403,"body":"<Error><Code>InvalidAccessKeyId</Code><Message>The AWS Access Key Id you provided does not exist</Message></Error>","times":0}' >/dev/null
# (a HEAD answer carries no error document: get asks again with a GET)
expect_exit 1 "403 fails" "${WF[@]}" get s3://bucket/f/small "$TMP/x403"
contains "with a message about credentials" "$OUT" "access denied (InvalidAccessKeyId"
check "403 is not retried" test "$(proxy_count 'r["method"]=="GET"')" -eq 1

: >"$FAULTPROXY_LOG"
faultproxy_clear >/dev/null
faultproxy_rule '{"fault":"status","code":500,"times":0}' >/dev/null
t0=$(date +%s)
expect_exit 1 "a 500 storm ends in an error" "${WF[@]}" head s3://bucket/f/small
contains "that says how many attempts" "$OUT" "after 4 attempts"
check "exactly retry_attempts requests" test "$(proxy_count 'True')" -eq 4
check "bounded in time" test $(($(date +%s) - t0)) -lt 30

faultproxy_clear >/dev/null
faultproxy_rule '{"fault":"status","code":404,"body":"<Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>","times":0}' >/dev/null
expect_exit 1 "no such bucket" "${WF[@]}" get s3://bucket/f/small "$TMP/nsb"
contains "is named" "$OUT" "no such bucket"

# Multipart: a 500 on one part is retried; a 400 on one part aborts.
: >"$FAULTPROXY_LOG"
faultproxy_clear >/dev/null
faultproxy_rule '{"fault":"status","code":500,"method":"PUT","path":"partNumber=2"}' >/dev/null
expect_exit 0 "multipart put with a failing part retried" "${WF[@]}" put "$TMP/big.bin" s3://bucket/f/mp
check "part 2 was sent twice" test "$(proxy_count '"partNumber=2" in r["query"]')" -eq 2
expect_exit 0 "the object is whole" "${WF[@]}" get --expect-xxh3 "$SUM" s3://bucket/f/mp "$TMP/mp.bin"
: >"$FAULTPROXY_LOG"
faultproxy_clear >/dev/null
faultproxy_rule '{"fault":"status","code":400,"method":"PUT","path":"partNumber=3","times":0}' >/dev/null
expect_exit 1 "multipart put with a refused part fails" "${WF[@]}" put "$TMP/big.bin" s3://bucket/f/mp2
check "and aborts the upload (DELETE ?uploadId)" \
	test "$(proxy_count 'r["method"]=="DELETE" and "uploadId=" in r["query"]')" -eq 1
faultproxy_clear >/dev/null
expect_exit 1 "no object was left" "${WF[@]}" head s3://bucket/f/mp2
faultproxy_stop

# --- Swift: SigV4 verified --------------------------------------------------
swift_start "$TMP/swift" "$P_SWIFT" || { echo "Bail out! swift did not start"; exit 1; }
swift_make_bucket wsync >/dev/null || { echo "Bail out! no bucket in swift"; exit 1; }
s3conf sw s3://wsync/p "$SWIFT_ENDPOINT" "$SWIFT_ACCESS_KEY" "$SWIFT_SECRET_KEY" "part_size = 5MiB"
WS=("$WSYNC" store --config "$TMP/sw.ini")
KEY='steps/a b+c~d(1).bin'
expect_exit 0 "swift: put (signature verified)" "${WS[@]}" put "$TMP/small.bin" "s3://wsync/p/$KEY"
expect_exit 0 "swift: get" "${WS[@]}" get "s3://wsync/p/$KEY" "$TMP/sw1.bin"
check "swift: same bytes" cmp "$TMP/small.bin" "$TMP/sw1.bin"
expect_exit 0 "swift: multipart put (slo)" "${WS[@]}" put "$TMP/big.bin" s3://wsync/p/big
expect_exit 0 "swift: ranged get of it" "${WS[@]}" get --expect-xxh3 "$SUM" s3://wsync/p/big "$TMP/sw2.bin"
check "swift: same bytes (multipart)" cmp "$TMP/big.bin" "$TMP/sw2.bin"
expect_exit 0 "swift: aws reads the multipart object" aws_swift s3 cp s3://wsync/p/big "$TMP/sw3.bin"
check "swift: same bytes (aws)" cmp "$TMP/big.bin" "$TMP/sw3.bin"
expect_exit 0 "swift: ls" "${WS[@]}" ls s3://wsync/p/
contains "swift: ls shows the encoded key" "$OUT" "$KEY"
expect_exit 0 "swift: rm" "${WS[@]}" rm "s3://wsync/p/$KEY"
expect_exit 1 "swift: gone" "${WS[@]}" head "s3://wsync/p/$KEY"
s3conf bad s3://wsync/p "$SWIFT_ENDPOINT" "$SWIFT_ACCESS_KEY" wrong-secret
expect_exit 1 "swift: a wrong secret is refused" "$WSYNC" store --config "$TMP/bad.ini" head s3://wsync/p/big
contains "swift: with a clear reason" "$OUT" "access denied"
check "swift: and the secret is not printed" bash -c "! grep -q wrong-secret <<<\"\$1\"" _ "$OUT"

tap_done
