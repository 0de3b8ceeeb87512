#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-hostile-server.sh -- an S3 server that lies (issue 26), not the
# bucket's content: tests/integration/hostile-s3.py on loopback serves
# file:// bucket directories honestly until told to lie, and each lie
# ends with a clear error within seconds, in bounded memory (peak RSS:
# getrusage for `wsync store`, VmHWM for the daemons) and bounded disk:
#  1. `wsync store get`: a HEAD claiming 1 TiB (over --max-size) and
#     1 PiB (over the default, the free space), a HEAD claiming another
#     size than --expect-size: refused before any GET; a body that never
#     ends (one GET, and parallel ranges): cut at the size announced, the
#     server sent little; a one-byte drip: the attempt's deadline; a
#     503 with Retry-After in the year 2147483647 or of 10^20 seconds:
#     final at once (clamped, past the retry time limit), one request;
#  2. `wsync store ls`: a continuation token that comes back, common
#     prefixes without end (1000 new ones per page), prefixes growing
#     deeper: each refused, naming the limit;
#  3. redirects, over TLS on loopback (a self-signed CA given as
#     ca_file): https -> http refused, the plain server never asked;
#     https -> https on another host name followed, without the
#     Authorization header;
#  4. a subscriber wsyncd at version 1: HEAD of the next delta claims
#     1 TiB, then its body never ends: clear errors in status.json, the
#     target stays byte-identical to version 1, no big file in its state;
#     honest again, it reaches version 2;
#  5. a publisher wsyncd: recovery's listing of manifests/ repeats its
#     token (status.json says so, retried with backoff); then the
#     garbage collection's listing of the whole bucket never ends (common
#     prefixes): a warning naming the limit, the publication stands.
# Every wait is bounded.
. "$(dirname "$0")/lib.sh"
unset AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY AWS_SESSION_TOKEN CREDENTIALS_DIRECTORY

RSS_MAX_MIB=64		# wsync store: about 10 MiB when all is well
DAEMON_RSS_MAX_MIB=96
TIB=1099511627776

# rules PORT JSON [CAFILE]: replace the lies of the server on PORT
rules() {
	"$PYTHON3" - "$@" <<'PY'
import ssl, sys, urllib.request
port, body = sys.argv[1], sys.argv[2].encode()
ctx = None
scheme = "http"
if len(sys.argv) > 3:
    scheme, ctx = "https", ssl.create_default_context(cafile=sys.argv[3])
req = urllib.request.Request("%s://127.0.0.1:%s/__rules__" % (scheme, port), data=body,
                             method="PUT")
urllib.request.urlopen(req, timeout=10, context=ctx).read()
PY
}

# logq NAME FROM EXPR: EXPR over the log of server NAME from line FROM on
# (1-based), `L` its request events, `R` its response events; prints it
logq() {
	"$PYTHON3" - "$TMP/$1.jsonl" "$2" "$3" <<'PY'
import json, sys
E = [json.loads(l) for l in open(sys.argv[1]).readlines()[int(sys.argv[2]) - 1:]]
L = [e for e in E if e["event"] == "request"]
R = [e for e in E if e["event"] == "response"]
print(eval(sys.argv[3]))
PY
}
mark() { echo $(($(wc -l <"$TMP/$1.jsonl") + 1)); }
# sent NAME FROM FILTER: body bytes the server sent on the requests from
# FROM whose path holds FILTER, once each of them is over (at most 10 s)
sent() {
	local i
	for ((i = 0; i < 100; i++)); do
		[ "$(logq "$1" "$2" 'len(L) == len(R)')" = True ] && break
		sleep 0.1
	done
	logq "$1" "$2" "sum(r['bytes'] for r in R if '$3' in r['path'])"
}

# measure CMD...: run CMD (at most 60 s), its combined output in $OUT;
# sets RC, RSS (peak, MiB, from wait4) and SECS
measure() {
	local r
	r=$("$PYTHON3" - "$TMP/measure.out" "$@" <<'PY'
import os, signal, subprocess, sys, time
t0 = time.monotonic()
with open(sys.argv[1], "wb") as out:
    p = subprocess.Popen(sys.argv[2:], stdout=out, stderr=subprocess.STDOUT)
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - t0 > 60:
            p.kill()
        time.sleep(0.02)
print(os.waitstatus_to_exitcode(status), ru.ru_maxrss // 1024, "%.1f" % (time.monotonic() - t0))
PY
)
	read -r RC RSS SECS <<<"$r"
	OUT=$(cat "$TMP/measure.out")
}
# bounded WHAT MAX_SECS: the last measured command was quick and small
bounded() {
	check "$1: within $2 s ($SECS s)" "$PYTHON3" -c "import sys; sys.exit(not $SECS < $2)"
	check "$1: peak RSS $RSS MiB < $RSS_MAX_MIB MiB" test "$RSS" -lt "$RSS_MAX_MIB"
}
is() { # is WHAT RC NEEDLE: the last measured command exited RC saying NEEDLE
	if [ "$RC" != "$2" ]; then
		echo "# exit $RC, expected $2; output:"
		printf '%s\n' "$OUT" | sed 's/^/# /' | head -20
	fi
	tap_result $((RC != $2)) "$1: exit $2"
	contains "$1: says \"$3\"" "$OUT" "$3"
}
nothing_left() { # nothing_left WHAT DIR: DIR holds no file at all (no temp file)
	check "$1: nothing written in $2" test -z "$(ls -A "$2")"
}

# --- the servers and buckets -----------------------------------------------
mkdir -p "$TMP"/{b,sb,pb,out,watch,sub,pubd}
head -c $((12 * 1024 * 1024 + 7)) /dev/urandom >"$TMP/b/big"
head -c 300000 /dev/urandom >"$TMP/b/small"
head -c 4096 /dev/urandom >"$TMP/b/drip"
printf 'hello over TLS\n' >"$TMP/b/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
	-subj /CN=127.0.0.1 -addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
	-keyout "$TMP/tls.key" -out "$TMP/tls.crt" 2>/dev/null ||
	{ echo "Bail out! openssl cannot make a certificate"; exit 1; }

hs_start plain --bucket bkt="$TMP/b" --bucket sub="$TMP/sb" --bucket pub="$TMP/pb" \
	--endless-max $((512 * 1024 * 1024)) || { echo "Bail out! hostile-s3.py did not start"; exit 1; }
P=$HS_PORT
hs_start tls --bucket bkt="$TMP/b" --tls "$TMP/tls.crt" "$TMP/tls.key" ||
	{ echo "Bail out! hostile-s3.py (TLS) did not start"; exit 1; }
PT=$HS_PORT
printf '[default]\naws_access_key_id = HOSTILE\naws_secret_access_key = HOSTILE\n' >"$TMP/cred"

# cli_conf NAME ENDPOINT [LINE...]: a --config for `wsync store`
cli_conf() {
	local name=$1 ep=$2 l
	shift 2
	{
		printf '[daemon]\nrole = subscriber\n[store]\nurl = s3://bkt\nendpoint = %s\n' "$ep"
		printf 'credentials = %s\npath_style = true\npart_size = 5MiB\n' "$TMP/cred"
		printf 'retry_attempts = 2\nretry_max_time = 10s\ntimeout = 2s\nconnect_timeout = 1s\n'
		for l in "$@"; do printf '%s\n' "$l"; done
		printf '[subscriber]\ntarget_dir = %s/model\n' "$TMP"
	} >"$TMP/$name.ini"
}
cli_conf cli "http://127.0.0.1:$P"
cli_conf tls "https://127.0.0.1:$PT" "ca_file = $TMP/tls.crt"
W=("$WSYNC" store --config "$TMP/cli.ini")
WT=("$WSYNC" store --config "$TMP/tls.ini")

measure "${W[@]}" get s3://bkt/small "$TMP/out/small"
is "an honest get" 0 ""
check "an honest get: the bytes" cmp "$TMP/b/small" "$TMP/out/small"
rm -f "$TMP/out/small"

# --- 1. wsync store get ------------------------------------------------------
m=$(mark plain)
rules "$P" "[{\"method\":\"HEAD\",\"path\":\"^/bkt/big\",\"do\":\"head_size\",\"size\":$TIB}]"
measure "${W[@]}" get --max-size 1GiB s3://bkt/big "$TMP/out/big"
is "HEAD claims 1 TiB, --max-size 1GiB" 1 "the store says $TIB bytes, more than the 1073741824"
bounded "HEAD claims 1 TiB" 10
contains "HEAD claims 1 TiB: not one GET was sent" "$(logq plain "$m" 'sum(r["method"] == "GET" for r in L)')" 0
nothing_left "HEAD claims 1 TiB" "$TMP/out"

m=$(mark plain)
rules "$P" '[{"method":"HEAD","path":"^/bkt/big","do":"head_size","size":1125899906842624}]'
measure "${W[@]}" get s3://bkt/big "$TMP/out/big"
is "HEAD claims 1 PiB, no --max-size (the free space)" 1 "the store says 1125899906842624 bytes, more than the"
bounded "HEAD claims 1 PiB" 10
contains "HEAD claims 1 PiB: not one GET was sent" "$(logq plain "$m" 'sum(r["method"] == "GET" for r in L)')" 0
nothing_left "HEAD claims 1 PiB" "$TMP/out"

m=$(mark plain)
rules "$P" '[{"method":"HEAD","path":"^/bkt/small","do":"head_size","size":300001}]'
measure "${W[@]}" get --expect-size 300000 s3://bkt/small "$TMP/out/small"
is "HEAD claims another size than expected" 65 "the store says 300001 bytes, expected 300000"
contains "HEAD claims another size: not one GET was sent" "$(logq plain "$m" 'sum(r["method"] == "GET" for r in L)')" 0
nothing_left "HEAD claims another size" "$TMP/out"

m=$(mark plain)
rules "$P" '[{"method":"GET","path":"^/bkt/small","do":"endless"}]'
measure "${W[@]}" get s3://bkt/small "$TMP/out/small"
is "a body that never ends" 65 "goes on past the 300000 bytes expected"
bounded "a body that never ends" 10
sent=$(sent plain "$m" /bkt/small)
check "a body that never ends: the server sent $sent bytes, < 64 MiB" test "$sent" -lt $((64 << 20))
nothing_left "a body that never ends" "$TMP/out"

m=$(mark plain)
rules "$P" '[{"method":"GET","path":"^/bkt/big","do":"endless"}]'
measure "${W[@]}" get s3://bkt/big "$TMP/out/big"
is "ranges that never end (12 MiB in 5 MiB parts)" 65 "goes on past the"
bounded "ranges that never end" 10
sent=$(sent plain "$m" /bkt/big)
check "ranges that never end: the server sent $sent bytes, < 64 MiB" test "$sent" -lt $((64 << 20))
nothing_left "ranges that never end" "$TMP/out"

m=$(mark plain)
rules "$P" '[{"method":"GET","path":"^/bkt/drip","do":"drip","interval":0.25}]'
measure "${W[@]}" get s3://bkt/drip "$TMP/out/drip"
is "a body dripped at 4 bytes/s" 1 "deadline"
check "a body dripped: each attempt cut after ~3 s (2 attempts, $SECS s)" \
	"$PYTHON3" -c "import sys; sys.exit(not 5 < $SECS < 15)"
nothing_left "a body dripped" "$TMP/out"

for ra in "Wed, 21 Oct 2147483647 07:28:00 GMT" 99999999999999999999; do
	m=$(mark plain)
	rules "$P" "[{\"path\":\"^/bkt/small\",\"do\":\"status\",\"code\":503,\"retry_after\":\"$ra\"}]"
	measure "${W[@]}" get s3://bkt/small "$TMP/out/small"
	is "503 with Retry-After: $ra" 1 "503"
	bounded "503 with Retry-After: $ra" 5
	contains "503 with Retry-After: $ra: one request, no retry" "$(logq plain "$m" 'len(L)')" 1
done
rules "$P" '[]'

# --- 2. wsync store ls -----------------------------------------------------------
m=$(mark plain)
rules "$P" '[{"method":"GET","path":"prefix=loop","do":"list_token"}]'
measure "${W[@]}" ls s3://bkt/loop/
is "a continuation token that comes back" 1 'the store sent the continuation token "again" a second time'
bounded "a continuation token that comes back" 10
contains "a continuation token that comes back: two pages asked for" "$(logq plain "$m" 'len(L)')" 2

rules "$P" '[{"method":"GET","path":"prefix=wide","do":"list_wide"}]'
measure "${W[@]}" ls s3://bkt/wide/
is "common prefixes without end" 1 "more than 10000 common prefixes (WSYNC_STORE_LIST_PREFIXES_MAX)"
bounded "common prefixes without end" 20

rules "$P" '[{"method":"GET","path":"prefix=deep","do":"list_deep"}]'
measure "${W[@]}" ls s3://bkt/deep/
is "common prefixes ever deeper" 1 "a common prefix longer than 1024 bytes"
bounded "common prefixes ever deeper" 20
rules "$P" '[]'
measure "${W[@]}" ls s3://bkt/
is "an honest listing afterwards" 0 "big"

# --- 3. redirects over TLS ---------------------------------------------------------
measure "${WT[@]}" get s3://bkt/tls "$TMP/out/tls"
is "TLS on loopback: an honest get" 0 ""
check "TLS on loopback: the bytes" cmp "$TMP/b/tls" "$TMP/out/tls"
rm -f "$TMP/out/tls"
m=$(mark plain)
rules "$PT" "[{\"path\":\"^/bkt/tls\",\"do\":\"redirect\",\"location\":\"http://127.0.0.1:$P/bkt/{key}\"}]" "$TMP/tls.crt"
measure "${WT[@]}" get s3://bkt/tls "$TMP/out/tls"
is "a redirect from https to http" 1 "a redirect from https to http"
contains "https -> http: the plain server was never asked" "$(logq plain "$m" 'len(L)')" 0
nothing_left "https -> http" "$TMP/out"
mt=$(mark tls)
rules "$PT" '[{"path":"^/bkt/tls$","do":"redirect","location":"https://localhost:{port}/bkt/{key}?edge=1"}]' "$TMP/tls.crt"
measure "${WT[@]}" get s3://bkt/tls "$TMP/out/tls"
is "a redirect to another https host (a CDN edge)" 0 ""
check "https -> another host: the bytes" cmp "$TMP/b/tls" "$TMP/out/tls"
contains "https -> another host: HEAD and GET redirected, credentials to the endpoint only" \
	"$(logq tls "$mt" '[(r["method"], r["rule"], r["host"].split(":")[0], r["auth"]) for r in L]')" \
	"[('HEAD', 'redirect', '127.0.0.1', True), ('HEAD', None, 'localhost', False), ('GET', 'redirect', '127.0.0.1', True), ('GET', None, 'localhost', False)]"
rules "$PT" '[]' "$TMP/tls.crt"

# --- 4. a subscriber ------------------------------------------------------------------
gen_ckpts "$TMP/ck" --params 1M --steps 2 --shards 1
CK=$TMP/ck/checkpoint
mkdir -p "$TMP/empty"
openssl genpkey -algorithm ed25519 -out "$TMP/key.pem" 2>/dev/null
openssl pkey -in "$TMP/key.pem" -pubout -out "$TMP/key.pub" 2>/dev/null
export KEY="$TMP/key.pem" EMPTY="$TMP/empty" WSYNC
pub "$TMP/sb" 1 "$CK-1" --anchor --sign || { echo "Bail out! bucket-writer failed"; exit 1; }
store_lines() { # store_lines BUCKET: the [store] lines for the plain server
	printf 'url = s3://%s\nendpoint = http://127.0.0.1:%s\ncredentials = %s\n' "$1" "$P" "$TMP/cred"
	printf 'path_style = true\nretry_attempts = 2\nretry_max_time = 5s\ntimeout = 2s\n'
	printf 'connect_timeout = 1s\n'
}
write_ini "$TMP/sub.ini" subscriber "$TMP/sub" "$(store_lines sub)" \
	"[subscriber]" "target_dir = $TMP/sub/target" "poll_interval = 200ms" \
	"verify_key = $TMP/key.pub"
start -l "$TMP/sub.log" sub
check "subscriber: version 1 from the honest server" wait_version sub 1 30
same_v1() { same_tree "$CK-1" "$TMP/sub/target"; }
check "subscriber: the target is version 1" same_v1

DELTA=deltas/000000000002.wsd
rules "$P" "[{\"method\":\"HEAD\",\"path\":\"^/sub/$DELTA\",\"do\":\"head_size\",\"size\":$TIB}]"
m=$(mark plain)
pub "$TMP/sb" 2 "$CK-2" --prev "$CK-1" --sign
t0=$(date +%s)
check "subscriber: HEAD claims 1 TiB for the delta: a clear error" \
	wait_error sub "the store says $TIB bytes, expected"
echo "# after $(($(date +%s) - t0)) s: $(field sub last_error)"
contains "subscriber: no GET of the delta was sent" \
	"$(logq plain "$m" "sum(r['method'] == 'GET' and '$DELTA' in r['path'] for r in L)")" 0
check "subscriber: still version 1" test "$(field sub version)" = 1
check "subscriber: the target is still version 1" same_v1

rules "$P" "[{\"method\":\"GET\",\"path\":\"^/sub/$DELTA\",\"do\":\"endless\"}]"
m=$(mark plain)
check "subscriber: a delta whose body never ends: a clear error" \
	wait_error sub "goes on past the"
echo "# $(field sub last_error)"
sent=$(sent plain "$m" "$DELTA")
check "subscriber: the server sent $sent bytes of the delta, < 64 MiB" test "$sent" -lt $((64 << 20))
check "subscriber: still version 1" test "$(field sub version)" = 1
check "subscriber: the target is still version 1" same_v1
state_kib=$(du -sk "$TMP/sub" --exclude=target | cut -f1)
check "subscriber: its state and downloads hold $state_kib KiB (< 16 MiB)" test "$state_kib" -lt 16384
rss=$(peak_rss_mib "${DPID[sub]}")
check "subscriber: peak RSS $rss MiB < $DAEMON_RSS_MAX_MIB MiB" \
	"$PYTHON3" -c "import sys; sys.exit(not $rss < $DAEMON_RSS_MAX_MIB)"
rules "$P" '[]'
check "subscriber: honest again, version 2" wait_version sub 2 30
check "subscriber: the target is version 2" same_tree "$CK-2" "$TMP/sub/target"
stop sub
tap_result $? "subscriber: stops cleanly"

# --- 5. a publisher ---------------------------------------------------------------
write_ini "$TMP/pubd.ini" publisher "$TMP/pubd" "$(store_lines pub)" \
	"[publisher]" "watch_dir = $TMP/watch" "settle_time = 0" "quiet_period = 1s" \
	"rescan_interval = 1s" "gc_grace = 0"
rules "$P" '[{"method":"GET","path":"^/pub\\?.*prefix=manifests","do":"list_token"}]'
start -l "$TMP/pub.log" pubd
check "publisher: recovery's listing repeats its token: a clear error" \
	wait_error pubd "a second time"
echo "# $(field pubd last_error)"
# Recovery passes; the garbage collection after the first publication
# lists the whole bucket ("prefix=" last in the query), then each common
# prefix the server makes up.
rules "$P" '[{"method":"GET","path":"^/pub\\?.*prefix=(w[0-9]|$)","do":"list_wide"}]'
put_ckpt "$CK-1" "$TMP/watch/checkpoint-1"
check "publisher: version 1 published" wait_version pubd 1 30
check "publisher: the garbage collection's listing that never ends: a warning" \
	wait_for 20 grep -q "garbage collection: listing the bucket: .*more than 10000 common prefixes" "$TMP/pub.log"
grep "garbage collection" "$TMP/pub.log" | tail -1 | cut -c1-300 | sed 's/^/# /'
check "publisher: still running, idle at version 1" at_version pubd 1
rss=$(peak_rss_mib "${DPID[pubd]}")
check "publisher: peak RSS $rss MiB < $DAEMON_RSS_MAX_MIB MiB" \
	"$PYTHON3" -c "import sys; sys.exit(not $rss < $DAEMON_RSS_MAX_MIB)"
check "publisher: HEAD is in the bucket" test -s "$TMP/pb/HEAD"
stop pubd
tap_result $? "publisher: stops cleanly"
tap_done
