#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-faultproxy: tests/integration/faultproxy.py in front of s3rver is
# byte-transparent without faults (curl: plain, chunked and 100-continue
# uploads, HEAD, ranges, keep-alive, pipelining; awscli: a multipart put
# and a get), and each scripted fault -- status, reset, stall, truncate,
# redirect, corrupt -- does what the S3 backend tests will rely on, as
# curl (the CLI) sees it and as the proxy's JSON log records it; with
# --rate it passes the bytes, unchanged, no faster than that each way.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"
s3servers_trap_exit

for need in have_s3rver have_curl have_awscli; do
	if ! $need; then
		tap_result 1 "requirements: $S3S_WHY"
		tap_done
		exit 1
	fi
done

read -r port < <(free_ports 1)
# (not through `check`: that runs its command in a subshell, and the
# servers would die with it)
s3rver_start "$TMP/s3rver" "$port" bkt
tap_result $? "s3rver starts" || { tap_done; exit 1; }
faultproxy_start "$TMP/proxy" "$S3RVER_PORT"
tap_result $? "faultproxy starts"
[ -n "$FAULTPROXY_PID" ] || { tap_done; exit 1; }
P=$FAULTPROXY_URL
LOG=$FAULTPROXY_LOG
SIG=(--aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3RVER_ACCESS_KEY:$S3RVER_SECRET_KEY"
	-H "x-amz-content-sha256: UNSIGNED-PAYLOAD")
c() { curl -sS --max-time 20 "${SIG[@]}" "$@"; }

# logq PYTHON-EXPR: evaluate EXPR with `L` = the log records (a list of
# dicts), `req`/`resp` = only request/response events; print the result.
logq() {
	"$PYTHON3" - "$LOG" "$1" <<'PY'
import json, sys
L = [json.loads(line) for line in open(sys.argv[1])]
req = [r for r in L if r["event"] == "request"]
resp = [r for r in L if r["event"] == "response"]
print(eval(sys.argv[2]))
PY
}
# last_req FIELD: FIELD of the latest request event (None/True/False as python prints)
last_req() { logq "req[-1][\"$1\"]"; }
last_resp() { logq "resp[-1][\"$1\"]"; }

head -c $((3 * 1024 * 1024 + 17)) /dev/urandom >"$TMP/big"
size=$(stat -c %s "$TMP/big")

# --- transparency ----------------------------------------------------------
out=$(c -T "$TMP/big" "$P/bkt/big" -o /dev/null -w '%{http_code}')
contains "PUT 3 MiB through the proxy: 200" "$out" 200
contains "curl's upload asked for 100-continue and got it relayed" "$(last_req expect)" 100-continue
out=$(c "$P/bkt/big" -o "$TMP/got" -w '%{http_code}')
contains "GET through the proxy: 200" "$out" 200
check "GET through the proxy is byte-identical" cmp "$TMP/big" "$TMP/got"
out=$(curl -sS -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" "$S3RVER_ENDPOINT/bkt/big" -o "$TMP/direct" -w '%{http_code}')
check "the same object read directly from s3rver agrees" cmp "$TMP/big" "$TMP/direct"

out=$(c -T - "$P/bkt/chunked" -o /dev/null -w '%{http_code}' <"$TMP/big")
contains "chunked upload (stdin) through the proxy: 200" "$out" 200
contains "the log saw Transfer-Encoding: chunked" "$(last_req transfer_encoding)" chunked
c "$P/bkt/chunked" -o "$TMP/got"
check "chunked upload stored byte-identical" cmp "$TMP/big" "$TMP/got"

out=$(c -I "$P/bkt/big")
contains "HEAD through the proxy: 200" "$out" "200 OK"
contains "HEAD keeps Content-Length" "$out" "Content-Length: $size"

out=$(c -r 10-19 "$P/bkt/big" -o "$TMP/range" -w '%{http_code}')
contains "Range GET: 206" "$out" 206
check "Range GET returns bytes 10-19" cmp <(tail -c +11 "$TMP/big" | head -c 10) "$TMP/range"
contains "the log records Range" "$(last_req range)" "bytes=10-19"
c -H 'If-None-Match: "abc"' "$P/bkt/big" -o /dev/null
contains "the log records If-None-Match" "$(last_req if_none_match)" '"abc"'
contains "the log records Authorization present" "$(last_req auth)" True
contains "the log records the access key" "$(last_req auth_key)" S3RVER

c "$P/bkt/big" -o /dev/null "$P/bkt/chunked" -o /dev/null
contains "two GETs in one curl share a keep-alive connection" \
	"$(logq '(req[-1]["conn"] == req[-2]["conn"], req[-1]["seq"])')" "(True, 2)"

check "pipelined HEAD + ranged GET on one connection" "$PYTHON3" - "$FAULTPROXY_PORT" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
h = "Host: 127.0.0.1:%s\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n" % sys.argv[1]
s.sendall(("HEAD /bkt/big HTTP/1.1\r\n" + h + "\r\n"
           "GET /bkt/big HTTP/1.1\r\n" + h + "Range: bytes=0-4\r\n\r\n").encode())
f = s.makefile("rb")
def response():
    status = f.readline().split()[1]
    length = 0
    while True:
        line = f.readline()
        if line in (b"\r\n", b""):
            return status, length
        k, _, v = line.decode().partition(":")
        if k.lower() == "content-length":
            length = int(v)
st1, _ = response()              # HEAD: no body whatever Content-Length says
st2, n = response()
body = f.read(n)
assert (st1, st2, len(body)) == (b"200", b"206", 5), (st1, st2, len(body))
PY

# --- status ------------------------------------------------------------------
faultproxy_rule '{"fault":"status","code":503,"retry_after":2,"method":"GET","path":"^/bkt/big$","times":2}'
out=$(c "$P/bkt/big" -D - -o /dev/null)
contains "status: 503 answered" "$out" "503 Service Unavailable"
contains "status: Retry-After sent" "$out" "Retry-After: 2"
out=$(c -I "$P/bkt/big")
contains "status: a GET rule leaves HEAD alone" "$out" "200 OK"
out=$(c "$P/bkt/big" -o /dev/null -w '%{http_code}' "$P/bkt/big" -o /dev/null -w ' %{http_code}')
contains "status: times 2 -- second 503, then 200 on the same connection" "$out" "503 200"
contains "status: the connection was kept" "$(logq 'req[-1]["conn"] == req[-2]["conn"]')" True
out=$(c "$P/bkt/big" -o /dev/null -w '%{http_code}')
contains "status: the rule is used up" "$out" 200
faultproxy_rule '{"fault":"status","code":500,"method":"PUT"}'
out=$(c -T "$TMP/big" "$P/bkt/x" -o "$TMP/err" -w '%{http_code}')
contains "status: PUT with Expect gets 500 without sending the body" "$out" 500
check "status: the error body is S3 XML" grep -q "<Code>InternalError</Code>" "$TMP/err"
contains "status: upstream never saw that PUT" \
	"$(curl -sS -o /dev/null -w '%{http_code}' -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -I "$S3RVER_ENDPOINT/bkt/x")" 404

# --- reset ---------------------------------------------------------------------
faultproxy_rule '{"fault":"reset","path":"/bkt/big"}'
expect_exit 56 "reset before any response: curl sees a reset (56)" c "$P/bkt/big" -o /dev/null
contains "reset: logged as reset" "$(last_resp outcome)" reset
faultproxy_rule '{"fault":"reset","after_bytes":1000}'
expect_exit 56 "reset after 1000 body bytes: curl sees a reset (56)" \
	c "$P/bkt/big" -o "$TMP/part"
check "reset after 1000 bytes: at most 1000 bytes arrived" test "$(stat -c %s "$TMP/part")" -le 1000
contains "reset: the log counts 1000 body bytes" "$(last_resp body_bytes)" 1000
faultproxy_rule '{"fault":"reset","forward":true,"method":"PUT"}'
head -c 1000 /dev/urandom >"$TMP/small"
expect_exit 56 "reset with forward: the PUT lands but its response is lost (56)" \
	c -T "$TMP/small" "$P/bkt/lost" -o /dev/null
contains "reset with forward: the object exists upstream" \
	"$(curl -sS -o /dev/null -w '%{http_code}' -H 'x-amz-content-sha256: UNSIGNED-PAYLOAD' -I "$S3RVER_ENDPOINT/bkt/lost")" 200

# --- stall -----------------------------------------------------------------------
faultproxy_rule '{"fault":"stall","seconds":3}'
t0=$(date +%s%N)
expect_exit 28 "stall: curl --max-time 1 times out (28)" c --max-time 1 "$P/bkt/big" -o /dev/null
faultproxy_rule '{"fault":"stall","seconds":1,"then":"forward"}'
out=$(c "$P/bkt/big" -o "$TMP/got" -w '%{http_code} %{time_starttransfer}')
contains "stall then forward: 200" "$out" "200 "
check "stall then forward: the first byte came after >= 1 s" \
	"$PYTHON3" -c "import sys; sys.exit(not float('${out#* }') >= 0.95)"
check "stall then forward: body intact" cmp "$TMP/big" "$TMP/got"
faultproxy_rule '{"fault":"stall","seconds":6,"after_bytes":4096}'
expect_exit 28 "stall mid-body: curl's low-speed limit fires (28)" \
	c --speed-limit 100000 --speed-time 2 "$P/bkt/big" -o "$TMP/part"
contains "stall mid-body: 4096 bytes arrived first" "$(stat -c %s "$TMP/part")" 4096
t1=$(date +%s%N)
echo "# stall checks took $(((t1 - t0) / 1000000)) ms"

# --- truncate --------------------------------------------------------------------
faultproxy_rule '{"fault":"truncate","after_bytes":1000}'
expect_exit 18 "truncate: curl reports a short transfer (18)" \
	c "$P/bkt/big" -D "$TMP/hdr" -o "$TMP/part"
check "truncate: Content-Length still the full size" grep -qi "^content-length: $size" "$TMP/hdr"
contains "truncate: exactly 1000 bytes arrived" "$(stat -c %s "$TMP/part")" 1000
cmp -s <(head -c 1000 "$TMP/big") "$TMP/part"
tap_result $? "truncate: those bytes are the object's first 1000"
faultproxy_rule '{"fault":"truncate"}'
expect_exit 18 "truncate with no size given cuts at half" c "$P/bkt/big" -o "$TMP/part"
contains "truncate: half arrived" "$(stat -c %s "$TMP/part")" $((size / 2))

# --- corrupt ---------------------------------------------------------------------
faultproxy_rule '{"fault":"corrupt","offset":12345}'
out=$(c "$P/bkt/big" -o "$TMP/got" -w '%{http_code} %{size_download}')
contains "corrupt: 200 and the full size" "$out" "200 $size"
diffs=$(cmp -l "$TMP/big" "$TMP/got" | awk '{print $1}' | tr '\n' ' ')
contains "corrupt: exactly byte 12345 differs" "$diffs" "12346 "
contains "corrupt: only one byte" "$(cmp -l "$TMP/big" "$TMP/got" | wc -l)" 1

# --- redirect --------------------------------------------------------------------
faultproxy_rule '{"fault":"redirect","method":"GET"}'
out=$(c "$P/bkt/big" -D - -o /dev/null)
contains "redirect: 302" "$out" "302 Found"
contains "redirect: Location is the redirect listener" "$out" \
	"Location: http://127.0.0.1:$FAULTPROXY_REDIRECT_PORT/bkt/big"
faultproxy_rule '{"fault":"redirect","method":"GET"}'
out=$(c -L "$P/bkt/big" -o "$TMP/got" -w '%{http_code} %{num_redirects}')
contains "redirect: curl -L follows, 200 after one redirect" "$out" "200 1"
check "redirect: body intact" cmp "$TMP/big" "$TMP/got"
contains "redirect: the log shows the redirected GET without Authorization" \
	"$(logq '(req[-1]["listener"], req[-1]["auth"], req[-2]["fault"])')" "('redirect', False, 'redirect')"
faultproxy_rule '{"fault":"redirect","method":"GET"}'
c --location-trusted "$P/bkt/big" -o /dev/null
contains "redirect: with --location-trusted the log shows Authorization" \
	"$(logq '(req[-1]["listener"], req[-1]["auth"])')" "('redirect', True)"

# --- control -----------------------------------------------------------------------
out=$(curl -sS -X POST --data '{"fault":"nope"}' "$P/__fault__" -w ' %{http_code}')
contains "control: an unknown fault is refused with 400" "$out" " 400"
out=$(curl -sS -X POST --data '{"fault":"stall","seconds":1,"colour":"red"}' "$P/__fault__" -w ' %{http_code}')
contains "control: an unknown key is refused" "$out" "colour"
faultproxy_rule '[{"fault":"status","code":429,"times":0,"path":"forever"},{"fault":"corrupt","path":"never"}]'
out=$(curl -sS "$P/__fault__")
contains "control: GET lists the queue" "$out" '"left": "forever"'
out=$(c "$P/bkt/forever" -o /dev/null -w '%{http_code}' "$P/bkt/forever" -o /dev/null -w ' %{http_code}')
contains "control: times 0 applies every time" "$out" "429 429"
check "control: DELETE empties the queue" faultproxy_clear
contains "control: queue is empty" "$(curl -sS "$P/__fault__")" '"rules": []'
contains "control: requests are not logged" "$(logq 'any("__fault__" in r["path"] for r in req)')" False

# --- awscli through the proxy ------------------------------------------------------
n0=$(logq 'len(req)')
head -c $((12 * 1024 * 1024)) /dev/urandom >"$TMP/mp"
check "aws s3 cp (multipart, 12 MiB) through the proxy" \
	aws_at "$P" "$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY" s3 cp --only-show-errors "$TMP/mp" s3://bkt/mp
check "aws s3 cp back through the proxy" \
	aws_at "$P" "$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY" s3 cp --only-show-errors s3://bkt/mp "$TMP/mp.got"
check "awscli round trip is byte-identical" cmp "$TMP/mp" "$TMP/mp.got"
out=$(aws_at "$P" "$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY" s3 ls s3://bkt/)
contains "aws s3 ls through the proxy lists it" "$out" " mp"
contains "awscli used multipart (2 parts of 8 MiB + 4 MiB in the log)" \
	"$(logq "sum(1 for r in req[$n0:] if 'partNumber=' in r['query'])")" 2
contains "no fault touched the awscli requests, all answered < 300" \
	"$(logq "(all(r['fault'] is None for r in req[$n0:]), all(r['status'] < 300 for r in resp[$n0:]))")" \
	"(True, True)"

# --- bandwidth (--rate) ------------------------------------------------------------
# 3 MiB at 2 MB/s: 1.57 s each way at the least (a 64 KiB send waits for
# its slot), and well under 5 s on an idle link
faultproxy_stop
FAULTPROXY_RATE=2M faultproxy_start "$TMP/proxy-rate" "$S3RVER_PORT"
tap_result $? "faultproxy --rate 2M starts"
P=$FAULTPROXY_URL
elapsed() { "$PYTHON3" -c 'import sys; print("%.2f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }
t1=$(date +%s.%N)
out=$(c -T "$TMP/big" "$P/bkt/slow" -o /dev/null -w '%{http_code}')
t2=$(date +%s.%N)
c "$P/bkt/slow" -o "$TMP/got"
t3=$(date +%s.%N)
contains "rate: PUT 3 MiB through the throttled proxy: 200" "$out" 200
check "rate: GET back byte-identical" cmp "$TMP/big" "$TMP/got"
up=$(elapsed "$t1" "$t2") down=$(elapsed "$t2" "$t3")
check "rate: 3 MiB up took 1.5-5 s at 2 MB/s ($up s)" \
	"$PYTHON3" -c 'import sys; sys.exit(not 1.5 <= float(sys.argv[1]) < 5)' "$up"
check "rate: 3 MiB down took 1.5-5 s at 2 MB/s ($down s)" \
	"$PYTHON3" -c 'import sys; sys.exit(not 1.5 <= float(sys.argv[1]) < 5)' "$down"
tap_done
