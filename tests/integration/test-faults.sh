#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-faults.sh [--outage SECONDS] -- network and store faults under
# running daemons: one publisher and one subscriber wsyncd on s3rver,
# through tests/integration/faultproxy.py, while a trainer saves steps
# (gen-checkpoints, 2M parameters, 2 shards, copied in one step at a time).
# In turn:
#   resets     connections reset before the answer
#   5xx storm  503 + Retry-After: 1 to every GET of HEAD and every PUT,
#              more of them than one request retries (retry_attempts)
#   stall      no byte for longer than [store] timeout, before the answer
#              or in the middle of an object's body
#   truncate   object bodies cut short (Content-Length still the full size)
#   outage     s3rver stopped for --outage seconds (default 60): the
#              proxy answers 502 for the first half, then is stopped too
#              (connections refused); the trainer saves two steps meanwhile
#   restart    s3rver killed (SIGKILL) and started again on the same port
#              and data dir
# After each: both daemons still run (same pids), the subscriber's target
# is byte-identical to the trainer's newest step (bounded wait), and, for
# the faults that outlast a request's retries, the daemons said so:
# status.json (wsync status --json: store_ok false and a last_error while
# it lasts, back to ok after) and the journal (STORE_UNREACHABLE then
# STORE_REACHABLE, through WSYNC_JOURNAL_SOCKET and journal-recv.py).
# During the outage: each daemon's CPU time (utime+stime) stays under 5 %
# of one core, and the requests the proxy saw stay within what the backoff
# schedules allow (no busy loop).  Figures are printed as TAP comments.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"

OUTAGE=60
while [ $# -gt 0 ]; do
	case $1 in
	--outage) OUTAGE=$2; shift 2 ;;
	*) echo "usage: $0 [--outage SECONDS]" >&2; exit 2 ;;
	esac
done
CONVERGE=60	# seconds a convergence may take after a short fault
trap 'daemons_kill_all; s3servers_stop_all; [ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"; rm -rf "$TMP"' EXIT

have_s3rver || { echo "1..0 # SKIP $S3S_WHY"; exit 0; }

CK=$TMP/ck
W=$TMP/watch
mkdir -p "$W" "$TMP"/{pub,sub}
"$PYTHON3" "$GEN" --params 2M --steps 10 --shards 2 --no-trainer-files --quiet --out "$CK" || {
	echo "Bail out! gen-checkpoints failed"
	exit 1
}

read -r S3PORT < <(free_ports 1)
s3rver_start "$TMP/s3rver" "$S3PORT" wsync-faults
tap_result $? "s3rver is up on port $S3PORT" || true
faultproxy_start "$TMP/proxy" "$S3PORT"
tap_result $? "faultproxy is up on port ${FAULTPROXY_PORT:-?}"
[ -n "$S3RVER_PID" ] && [ -n "$FAULTPROXY_PID" ] || { echo "Bail out! no store"; exit 1; }

# timeout 3 s: the stall below outlasts it; 6 attempts a request (the
# default), so the storm of 8 outlasts one request's retries.
store=$(STORE_ENDPOINT=$FAULTPROXY_URL s3rver_store s3://wsync-faults/run "timeout = 3s" \
	"connect_timeout = 2s" "retry_attempts = 6" "retry_max_time = 20s")
write_ini "$TMP/pub.ini" publisher "$TMP/pub" "$store" "[daemon]" "log_level = debug" "[publisher]" \
	"watch_dir = $W" "anchor_every = 4" "keep_anchors = 2" "rescan_interval = 1s"
write_ini "$TMP/sub.ini" subscriber "$TMP/sub" "$store" "[daemon]" "log_level = debug" "[subscriber]" \
	"target_dir = $TMP/sub/target" "poll_interval = 1s"

UNREACH=$(mid STORE_UNREACHABLE)
REACH=$(mid STORE_REACHABLE)
journal_start jpub "$TMP/pub.sock" "$TMP/pub.jsonl" &&
	journal_start jsub "$TMP/sub.sock" "$TMP/sub.jsonl"
tap_result $? "journal receivers listen"
start -c "$TMP/pub.ini" -l "$TMP/pub.log" pub WSYNC_JOURNAL_SOCKET="$TMP/pub.sock"
start -c "$TMP/sub.ini" -l "$TMP/sub.log" sub WSYNC_JOURNAL_SOCKET="$TMP/sub.sock"
PUB=${DPID[pub]}
SUB=${DPID[sub]}
PST=$TMP/pub/run/status.json
SST=$TMP/sub/run/status.json

# --- helpers ----------------------------------------------------------------

STEP=0
# save: the trainer saves the next step
save() {
	STEP=$((STEP + 1))
	put_ckpt "$CK/checkpoint-$STEP" "$W/checkpoint-$STEP"
}
# show_journal FILE: its last messages, as TAP comments
show_journal() {
	"$PYTHON3" -c '
import json, sys
for l in open(sys.argv[1]).readlines()[-12:]:
    print("#   " + json.loads(l).get("MESSAGE", l.strip())[:200])' "$1"
}
# converged WHAT: both daemons run with their first pids, the subscriber
# has the trainer's newest step, byte for byte
converged() {
	local ok=0
	daemon_alive "$PUB" && daemon_alive "$SUB"
	tap_result $? "$1: both daemons still run (pids $PUB, $SUB)"
	wait_converged "$CONVERGE" "$PST" "$SST" "$STEP" || ok=1
	[ $ok -eq 0 ] && { same_tree "$CK/checkpoint-$STEP" "$TMP/sub/target" || ok=1; }
	if [ $ok -ne 0 ]; then
		echo "# publisher:"; show_journal "$TMP/pub.jsonl"
		echo "# subscriber:"; show_journal "$TMP/sub.jsonl"
	fi
	tap_result $ok "$1: the subscriber converged to step $STEP, byte-identical"
}
# proxy_requests T0 T1 [PYTHON-EXPR over r]: requests the proxy saw in [T0, T1)
proxy_requests() {
	"$PYTHON3" - "$FAULTPROXY_LOG" "$1" "$2" "${3:-True}" <<'PY'
import json, sys
t0, t1, n = float(sys.argv[2]), float(sys.argv[3]), 0
for line in open(sys.argv[1]):
    r = json.loads(line)
    if r.get("event") == "request" and t0 <= r["time"] < t1 and eval(sys.argv[4], {}, {"r": r}):
        n += 1
print(n)
PY
}
# proxy_outcomes EXPR: responses whose outcome/status match (python over r)
proxy_outcomes() {
	"$PYTHON3" - "$FAULTPROXY_LOG" "$1" <<'PY'
import json, sys
print(sum(1 for l in open(sys.argv[1])
          if (r := json.loads(l)).get("event") == "response" and eval(sys.argv[2], {}, {"r": r})))
PY
}
# reported WHAT FROM_PUB FROM_SUB [pub|sub|both]: journal lines from those
# line numbers on hold STORE_UNREACHABLE, then STORE_REACHABLE
reported() {
	local who=${4:-both} n ok f from
	for n in pub sub; do
		[ "$who" = both ] || [ "$who" = "$n" ] || continue
		f=$TMP/$n.jsonl
		[ $n = pub ] && from=$2 || from=$3
		ok=0
		"$PYTHON3" - "$f" "$from" "$UNREACH" "$REACH" <<'PY' || ok=1
import json, sys
ids = [json.loads(l).get("MESSAGE_ID") for l in open(sys.argv[1]).readlines()[int(sys.argv[2]) - 1:]]
down = [i for i, m in enumerate(ids) if m == sys.argv[3]]
up = [i for i, m in enumerate(ids) if m == sys.argv[4]]
if not down or not up or up[-1] < down[0]:
    print("# STORE_UNREACHABLE at %s, STORE_REACHABLE at %s" % (down, up))
    sys.exit(1)
PY
		tap_result $ok "$1: $n journal: STORE_UNREACHABLE, then STORE_REACHABLE"
	done
}
jlines() { wc -l <"$TMP/$1.jsonl"; }
# wait_store_ok NAME false|true: wsync status --json says store_ok so (60 s)
wait_store_ok() {
	local end=$((SECONDS + 60)) v
	while [ $SECONDS -lt $end ]; do
		v=$("$WSYNC" status --runtime-dir "$TMP/$1/run" --json 2>/dev/null |
			"$PYTHON3" -c 'import json,sys; print(str(json.load(sys.stdin).get("store_ok")).lower())' 2>/dev/null)
		[ "$v" = "$2" ] && return 0
		sleep 0.1
	done
	echo "# $1: store_ok is $v, waited for $2"
	return 1
}

# --- a clean start ------------------------------------------------------------

save
converged "clean start"
daemon_alive "$PUB" && daemon_alive "$SUB" || {
	tail -n 5 "$TMP/pub.log" "$TMP/sub.log" | sed 's/^/# /'
	echo "Bail out! a daemon exited"
	exit 1
}

# fault_phase WHAT FAULT N RULES: with RULES queued the trainer saves a
# step; both daemons converge, and the proxy applied FAULT to N requests
fault_phase() {
	faultproxy_clear
	faultproxy_rule "$4"
	save
	converged "$1"
	check "$1: the proxy applied $2 to $3 requests" \
		test "$(proxy_requests 0 1e12 "r.get('fault') == '$2'")" -eq "$3"
}

# --- resets -------------------------------------------------------------------
fault_phase "connection resets" reset 4 '{"fault":"reset","method":"PUT|GET","times":4}'

# --- 5xx storm with Retry-After -------------------------------------------------
faultproxy_clear
jp=$(jlines pub) js=$(jlines sub)
t0=$(date +%s.%N)
faultproxy_rule '[{"fault":"status","code":503,"retry_after":1,"method":"GET","path":"/HEAD$","times":8},
	{"fault":"status","code":503,"retry_after":1,"method":"PUT","times":12}]'
save
converged "5xx storm"
# 12 = 2 x retry_attempts: however the publisher's PUTs share them, one
# of its requests runs out of attempts (and the outage is reported)
n503=$(proxy_outcomes 'r.get("status") == 503')
check "5xx storm: 20 answers were 503 (got $n503)" test "$n503" -eq 20
# the subscriber's GETs of HEAD are one at a time: Retry-After spaces them
gaps=$("$PYTHON3" - "$FAULTPROXY_LOG" "$t0" <<'PY'
import json, sys
ts = [r["time"] for l in open(sys.argv[1]) if (r := json.loads(l)).get("event") == "request"
      and r["method"] == "GET" and r["path"].endswith("/HEAD") and r.get("fault") == "status"
      and r["time"] >= float(sys.argv[2])]
print(" ".join("%.2f" % (b - a) for a, b in zip(ts, ts[1:])))
PY
)
echo "# gaps between the subscriber's 503'd GETs of HEAD (s): $gaps"
# Within a request the retries wait Retry-After (the engine's own backoff
# would wait 0-0.4 s for the first retries); between two cycles the
# subscriber waits poll_interval +-20 %.
check "5xx storm: every retry of HEAD waited Retry-After (6 of 7 gaps >= 0.95 s, all >= 0.75 s)" \
	"$PYTHON3" -c 'import sys; g = [float(x) for x in sys.argv[1:]]; sys.exit(not (len(g) == 7 and min(g) >= 0.75 and sum(x >= 0.95 for x in g) >= 6))' $gaps
reported "5xx storm" "$((jp + 1))" "$((js + 1))"
check "5xx storm: publisher status back to store_ok" wait_store_ok pub true
check "5xx storm: subscriber status back to store_ok" wait_store_ok sub true

# --- stalls longer than the timeout --------------------------------------------
# one object GET stalls after its first 1000 body bytes, then two
# requests before any byte
fault_phase "stalls of 6 s (timeout 3 s)" stall 3 \
	'[{"fault":"stall","seconds":6,"after_bytes":1000,"method":"GET","path":"/(deltas|anchors)/","times":1},
	{"fault":"stall","seconds":6,"method":"GET|PUT","times":2}]'

# --- truncated bodies ----------------------------------------------------------
fault_phase "truncated bodies" truncate 3 \
	'{"fault":"truncate","method":"GET","path":"/(deltas|anchors|manifests)/","times":3}'
faultproxy_clear

# --- the store down ------------------------------------------------------------
jp=$(jlines pub) js=$(jlines sub)
c0p=$(cpu_ticks "$PUB") c0s=$(cpu_ticks "$SUB")
t0=$(date +%s.%N)
# The first half, the proxy answers 502 (its upstream, s3rver, is down);
# the second, nothing listens (connections refused).
PROXYPORT=$FAULTPROXY_PORT
s3rver_stop
save	# the trainer goes on
check "outage: publisher status says store_ok false" wait_store_ok pub false
check "outage: subscriber status says store_ok false" wait_store_ok sub false
for n in pub sub; do
	"$WSYNC" status --runtime-dir "$TMP/$n/run" --json >"$TMP/$n.status" 2>&1
	rc=$?
	check "outage: wsync status exits 1 (unhealthy) for the $n" test $rc -eq 1
	check "outage: $n status.json has a last_error" \
		"$PYTHON3" -c 'import json,sys; e = json.load(open(sys.argv[1])).get("last_error"); print(e); sys.exit(not e)' "$TMP/$n.status"
done
# half way: the proxy goes too, and the trainer saves another step
"$PYTHON3" -c 'import sys,time; time.sleep(max(0, float(sys.argv[1]) + float(sys.argv[2]) / 2 - time.time()))' "$t0" "$OUTAGE"
th=$(date +%s.%N)
faultproxy_stop
save
"$PYTHON3" -c 'import sys,time; time.sleep(max(0, float(sys.argv[1]) + float(sys.argv[2]) - time.time()))' "$t0" "$OUTAGE"
t1=$(date +%s.%N)
c1p=$(cpu_ticks "$PUB") c1s=$(cpu_ticks "$SUB")
hz=$(getconf CLK_TCK)
for n in pub sub; do
	[ $n = pub ] && d=$((c1p - c0p)) || d=$((c1s - c0s))
	pct=$(awk -v d="$d" -v hz="$hz" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "%.2f", 100 * d / hz / (t1 - t0) }')
	echo "# outage: $n used $(awk -v d="$d" -v hz="$hz" 'BEGIN { printf "%.2f", d / hz }') s CPU in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s ($pct % of one core)"
	check "outage: $n CPU < 5 % of one core ($pct %)" awk -v p="$pct" 'BEGIN { exit !(p < 5) }'
done
np=$(proxy_requests "$t0" "$th" 'r["method"] != "GET" or not r["path"].endswith("/HEAD")')
ns=$(proxy_requests "$t0" "$th" 'r["method"] == "GET" and r["path"].endswith("/HEAD")')
# Bounds: a store operation is retried after 1 s doubling to 60 s (the
# publisher), or poll_interval (1 s) doubling to 60 s, -20 % jitter at
# worst (the subscriber): the tries that fit in the first half, plus one,
# each at most retry_attempts (6) requests, the publisher's with up to 4
# objects in flight.
half=$(awk -v a="$t0" -v b="$th" 'BEGIN { printf "%.1f", b - a }')
tries=$(awk -v o="$half" 'BEGIN { n = 1; for (t = 0; t < o; d = (d ? 2 * d : 1)) { n++; t += 0.8 * (d > 60 ? 60 : d ? d : 1) } print n }')
echo "# outage: in its first $half s the proxy saw $ns GETs of HEAD (subscriber) and $np other requests (publisher); bounds $((tries * 6)) and $((tries * 24))"
check "outage: subscriber requests within the backoff schedule ($ns <= $((tries * 6)))" test "$ns" -le $((tries * 6))
check "outage: publisher requests within the backoff schedule ($np <= $((tries * 24)))" test "$np" -le $((tries * 24))
check "outage: both daemons kept trying (requests seen: $ns, $np)" test "$ns" -ge 2 -a "$np" -ge 2
s3rver_start "$TMP/s3rver" "$S3PORT" wsync-faults
tap_result $? "outage: s3rver back on port $S3PORT after $OUTAGE s"
faultproxy_start "$TMP/proxy" "$S3PORT" "$PROXYPORT"
tap_result $? "outage: the proxy back on port $PROXYPORT"
CONVERGE=$((OUTAGE + 30)) converged "store down $OUTAGE s"
reported "store down $OUTAGE s" "$((jp + 1))" "$((js + 1))"
check "outage over: publisher store_ok again" wait_store_ok pub true
check "outage over: subscriber store_ok again" wait_store_ok sub true
check "outage over: subscriber's last_error cleared" test -z "$(status_field "$SST" last_error)"

# --- the store restarted ----------------------------------------------------------
{
	kill -KILL -- "-$S3RVER_PID"
	wait "$S3RVER_PID"
} 2>/dev/null
S3RVER_PID=
s3rver_start "$TMP/s3rver" "$S3PORT" wsync-faults
tap_result $? "restart: s3rver killed and started again on port $S3PORT"
save
converged "store restarted"

stop pub
check "the publisher exits 0 on SIGTERM" test $? -eq 0
stop sub
check "the subscriber exits 0 on SIGTERM" test $? -eq 0
tap_done
