# SPDX-License-Identifier: Apache-2.0
# s3-servers.sh -- local S3 servers and the fault proxy for the S3 backend
# tests (sourced, not run; bash only).
#
#   . "$(dirname "$0")/lib.sh"
#   . "$(dirname "$0")/s3-servers.sh"
#   s3servers_trap_exit               # stop every server below on exit
#   have_s3rver || { echo "1..0 # SKIP $S3S_WHY"; exit 0; }
#   read -r port < <(free_ports 1)
#   s3rver_start "$TMP/s3rver" "$port" bucket || exit 1
#   aws_s3rver s3 cp file s3://bucket/key
#
# Servers:
#   s3rver_start DIR PORT BUCKET   s3rver 3.7.1 (tests/s3rver) on 127.0.0.1:PORT,
#                                  data in DIR, BUCKET created.  Keys S3RVER /
#                                  S3RVER ($S3RVER_ACCESS_KEY/_SECRET_KEY).
#                                  Sets S3RVER_PORT, S3RVER_ENDPOINT, S3RVER_PID.
#   s3rver_stop
#   swift_start DIR PORT           single-node OpenStack Swift with s3api,
#                                  tempauth and slo; everything (configs,
#                                  rings, devices, logs) under DIR; proxy on
#                                  127.0.0.1:PORT, the account, container and
#                                  object servers on free ports.  Access key
#                                  test:tester, secret testing, region
#                                  us-east-1 ($SWIFT_ACCESS_KEY/_SECRET_KEY).
#                                  Checks before returning that a right key
#                                  gets 200 and a wrong secret 403.  Sets
#                                  SWIFT_PORT, SWIFT_ENDPOINT, SWIFT_PIDS.
#   swift_spawn DIR PORT / swift_wait   swift_start in two halves: spawn
#                                  returns once the servers are launched
#                                  (~2.5 s, the rings), wait does the rest;
#                                  other work can run between them while
#                                  Swift boots (~5-10 s on 2 cores).
#   swift_stop
#   swift_make_bucket NAME         PUT bucket with a SigV4-signed request.
#   faultproxy_start DIR UPSTREAM_PORT [PORT [REDIRECT_PORT]]
#                                  tests/integration/faultproxy.py in front of
#                                  127.0.0.1:UPSTREAM_PORT (ports 0/absent: the
#                                  proxy picks free ones).  Sets FAULTPROXY_PORT,
#                                  FAULTPROXY_REDIRECT_PORT, FAULTPROXY_URL,
#                                  FAULTPROXY_LOG (JSON lines), FAULTPROXY_PID.
#                                  With FAULTPROXY_RATE set (bytes a second,
#                                  20M), the proxy passes at most that each
#                                  way (faultproxy.py --rate).
#   faultproxy_rule JSON           queue a rule (object or list); see faultproxy.py
#   faultproxy_clear               empty the rule queue
#   faultproxy_stop
#   s3servers_stop_all             stop whatever of the above is running
#   s3servers_trap_exit            put s3servers_stop_all in front of the EXIT
#                                  trap (lib.sh's rm -rf "$TMP" is kept) and
#                                  turn INT/TERM into an exit, so a failing or
#                                  timed-out (meson sends SIGTERM) test still
#                                  stops its servers.  Call it once, after
#                                  sourcing lib.sh, before starting anything.
#                                  Setting your own `trap ... EXIT` later
#                                  replaces it: include s3servers_stop_all.
# Checks (0 when usable; otherwise 1 with the reason in $S3S_WHY):
#   have_s3rver   node and tests/s3rver/node_modules (npm ci --prefix tests/s3rver)
#   have_swift    the Debian swift packages (scripts/setup.sh installs them)
#   have_awscli   an `aws` CLI ($AWS: /usr/bin/aws first, else the one in PATH)
#   have_curl     the curl CLI
# Clients:
#   free_ports N                   print N distinct free loopback TCP ports, one a
#                                  line.  Callers choose ports with it and pass
#                                  them in; the small race with other programs
#                                  taking the port meanwhile is accepted.
#   aws_at ENDPOINT ACCESS SECRET ARGS...  run `aws --endpoint-url ENDPOINT ARGS`
#                                  with those keys, region us-east-1, path-style
#                                  addressing, multipart_threshold 5MB, no
#                                  metadata lookups, no user config.
#   aws_s3rver ARGS... / aws_swift ARGS...  the same against the running server
#   s3_request [-d FILE] [-o FILE] [-D FILE] [-H 'Name: value']... METHOD URL ACCESS SECRET
#                                  one SigV4-signed request (python stdlib,
#                                  ~0.1 s where an aws call costs ~2.5 s);
#                                  uploads -d FILE, prints the HTTP status,
#                                  body to -o FILE, headers (Name: value
#                                  lines) to -D FILE.
#
# Every server runs in its own process group (setsid) with a parent-death
# signal, so stop kills the whole group and even a test killed with SIGKILL
# does not leave servers behind.  The start functions must run in the
# test's own shell, not in a subshell, $(...) or lib.sh's `check` (which
# runs its command in $(...)): they set variables, and the servers would
# die with the subshell; use `s3rver_start ...; tap_result $? "..."`.
# Waits are bounded: 20 s for a server to answer, 5 s for it to stop after
# SIGTERM (then SIGKILL).
#
# What the servers do and do not check: s3rver verifies no signature (any
# secret works; the access key is only parsed), requires
# x-amz-content-sha256, ignores If-None-Match on PUT and gives multipart
# objects a plain MD5 ETag; Swift verifies SigV4, answers 501 to
# conditional PUTs, and gives multipart objects "md5-N" ETags.
#
# s3rver is pinned by tests/s3rver/package.json and package-lock.json;
# install it with `npm ci --prefix tests/s3rver` (scripts/setup.sh does when
# tests/s3rver/node_modules is missing).

# shellcheck disable=SC2034 # the variables set here are for the sourcing test
: "${WSYNC_SOURCE_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${PYTHON3:=/usr/bin/python3}"
S3S_DIR="$WSYNC_SOURCE_ROOT/tests/integration"
S3RVER_JS="$WSYNC_SOURCE_ROOT/tests/s3rver/node_modules/s3rver/bin/s3rver.js"
S3RVER_ACCESS_KEY=S3RVER
S3RVER_SECRET_KEY=S3RVER
SWIFT_ACCESS_KEY=test:tester
SWIFT_SECRET_KEY=testing
S3_REGION=us-east-1
S3S_WHY=
S3RVER_PID=
SWIFT_PIDS=()
FAULTPROXY_PID=
S3S_START_TIMEOUT=20
S3S_STOP_TIMEOUT=5

# --- checks -------------------------------------------------------------

have_s3rver() {
	if ! command -v node >/dev/null 2>&1; then
		S3S_WHY="node is not installed"
		return 1
	fi
	if [ ! -f "$S3RVER_JS" ]; then
		S3S_WHY="s3rver missing: run npm ci --prefix tests/s3rver"
		return 1
	fi
	return 0
}

have_swift() {
	local b
	for b in swift-ring-builder swift-proxy-server swift-account-server \
		swift-container-server swift-object-server; do
		if ! command -v "$b" >/dev/null 2>&1; then
			S3S_WHY="$b missing: apt-get install swift swift-proxy swift-account swift-container swift-object python3-swift"
			return 1
		fi
	done
	# find_spec does not run swift/__init__.py (importing swift costs ~1 s)
	if ! /usr/bin/python3 -c '
import importlib.util, os, sys
spec = importlib.util.find_spec("swift")
sys.exit(not (spec and any(os.path.isdir(os.path.join(d, "common/middleware/s3api"))
                           for d in spec.submodule_search_locations)))' 2>/dev/null; then
		S3S_WHY="python3-swift (with s3api) is not importable by /usr/bin/python3"
		return 1
	fi
	return 0
}

have_awscli() {
	if [ -z "${AWS:-}" ]; then
		if [ -x /usr/bin/aws ]; then
			AWS=/usr/bin/aws
		else
			AWS=$(command -v aws 2>/dev/null) || AWS=
		fi
	fi
	if [ -z "$AWS" ] || ! "$AWS" --version >/dev/null 2>&1; then
		S3S_WHY="the aws CLI is missing: apt-get install awscli"
		return 1
	fi
	return 0
}

have_curl() {
	command -v curl >/dev/null 2>&1 && return 0
	S3S_WHY="the curl CLI is missing: apt-get install curl"
	return 1
}

# --- process helpers ----------------------------------------------------

free_ports() { # free_ports N
	"$PYTHON3" - "${1:-1}" <<'PY'
import socket, sys
socks = []
for _ in range(int(sys.argv[1])):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    socks.append(s)
for s in socks:
    print(s.getsockname()[1])
PY
}

# _s3s_spawn LOG CMD...: start CMD in its own session (its pid is its
# process group id) with SIGTERM as parent-death signal; sets S3S_PID.
_s3s_spawn() {
	local log=$1 me=$BASHPID # expanded here: after the fork it is the child's
	shift
	"$PYTHON3" -c '
import ctypes, os, signal, sys
ppid = int(sys.argv[1])
os.setsid()
ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
if os.getppid() != ppid:
    sys.exit("parent already gone")
os.execvp(sys.argv[2], sys.argv[2:])
' "$me" "$@" >>"$log" 2>&1 </dev/null &
	S3S_PID=$!
}

# _s3s_kill PID...: SIGTERM each process group, wait up to S3S_STOP_TIMEOUT
# seconds for all to go, SIGKILL what is left, reap.
_s3s_kill() {
	local p i alive
	[ $# -gt 0 ] || return 0
	for p in "$@"; do
		kill -TERM -- "-$p" 2>/dev/null || kill -TERM "$p" 2>/dev/null || true
	done
	for ((i = 0; i < S3S_STOP_TIMEOUT * 10; i++)); do
		alive=0
		for p in "$@"; do
			kill -0 -- "-$p" 2>/dev/null && alive=1
		done
		[ $alive -eq 0 ] && break
		sleep 0.1
	done
	for p in "$@"; do
		kill -KILL -- "-$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
}

# _s3s_wait_http PORT PID PATH LOG: wait until 127.0.0.1:PORT answers any
# HTTP response to GET PATH, while PID lives; bounded by S3S_START_TIMEOUT.
_s3s_wait_http() {
	if "$PYTHON3" - "$1" "$2" "$3" "$S3S_START_TIMEOUT" <<'PY'; then
import http.client, sys, time
port, pid, path, limit = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4])
end = time.monotonic() + limit
def alive():
    try:
        with open("/proc/%s/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
while time.monotonic() < end:
    if not alive():
        sys.exit("process %s exited" % pid)
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
        c.request("GET", path)
        c.getresponse().read()
        sys.exit(0)
    except (OSError, http.client.HTTPException):
        time.sleep(0.1)
sys.exit("no answer on port %d within %gs" % (port, limit))
PY
		return 0
	fi
	echo "# server on port $1 did not come up; last lines of $4:" >&2
	tail -20 "$4" 2>/dev/null | sed 's/^/#   /' >&2
	return 1
}

# --- s3rver ---------------------------------------------------------------

s3rver_start() { # s3rver_start DIR PORT BUCKET
	local dir=$1 port=$2 bucket=$3
	have_s3rver || { echo "# s3rver_start: $S3S_WHY" >&2; return 1; }
	[ -z "$S3RVER_PID" ] || s3rver_stop
	mkdir -p "$dir/data"
	_s3s_spawn "$dir/s3rver.log" node "$S3RVER_JS" -d "$dir/data" \
		-a 127.0.0.1 -p "$port" --configure-bucket "$bucket"
	S3RVER_PID=$S3S_PID
	S3RVER_PORT=$port
	S3RVER_ENDPOINT="http://127.0.0.1:$port"
	if ! _s3s_wait_http "$port" "$S3RVER_PID" / "$dir/s3rver.log"; then
		s3rver_stop
		return 1
	fi
}

s3rver_stop() {
	[ -n "$S3RVER_PID" ] || return 0
	_s3s_kill "$S3RVER_PID"
	S3RVER_PID=
}

# --- Swift ----------------------------------------------------------------

# The launcher: Swift reads /etc/swift/swift.conf at a fixed path, and
# swift.common.utils already takes the hash prefix and suffix from it on
# import (Debian's package ships one with "changeme").  set_swift_dir()
# points SWIFT_CONF_FILE at DIR's copy and re-reads prefix and suffix;
# policies and constraints are reloaded from it before the server modules
# import them.  So a test writes nothing outside DIR.  Logs go to stderr
# (the server's log file) instead of syslog.
_swift_launcher() { # _swift_launcher FILE
	cat >"$1" <<'PY'
import logging, os, sys
swift_dir, app, conf = sys.argv[1:4]
from swift.common import utils
utils.set_swift_dir(swift_dir)
assert utils.SWIFT_CONF_FILE == os.path.join(swift_dir, "swift.conf")
class NoSyslog(logging.NullHandler):
    def __init__(self, *args, **kwargs):
        super().__init__()
utils.ThreadSafeSysLogHandler = NoSyslog
from swift.common import constraints, storage_policy
storage_policy.reload_storage_policies()
constraints.reload_constraints()
from swift.common.wsgi import run_wsgi
sys.exit(run_wsgi(conf, app, verbose=True))
PY
}

# swift_spawn DIR PORT: write configs and rings, start the four servers
# and return at once; swift_wait completes the start.
swift_spawn() {
	local dir=$1 port=$2 etc ports a c o m user ring kind
	have_swift || { echo "# swift_start: $S3S_WHY" >&2; return 1; }
	[ ${#SWIFT_PIDS[@]} -eq 0 ] || swift_stop
	dir=$(mkdir -p "$dir" && cd "$dir" && pwd) || return 1
	etc=$dir/etc
	mkdir -p "$etc" "$dir/srv/node/sdb1" "$dir/log" || return 1
	# account, container, object servers, and a port where no memcached
	# listens (the cache middleware tolerates that; tempauth's s3 path
	# needs no token cache).
	mapfile -t ports < <(free_ports 5 | grep -vx "$port" | head -4)
	a=${ports[0]} c=${ports[1]} o=${ports[2]} m=${ports[3]}
	user=$(id -un)

	cat >"$etc/swift.conf" <<EOF
[swift-hash]
swift_hash_path_suffix = wsync-test-suffix
swift_hash_path_prefix = wsync-test-prefix

[storage-policy:0]
name = Policy-0
default = yes
EOF
	# One python run for the three rings: swift-ring-builder costs ~1.7 s
	# a call, nine calls would be most of the start-up time.
	# eventlet's green DNS imports dnspython: ~0.7 s per process, for
	# nothing here (all addresses are literal)
	if ! EVENTLET_NO_GREENDNS=yes /usr/bin/python3 - "$etc" "$a" "$c" "$o" >"$dir/log/rings.log" 2>&1 <<'PY'; then
import os, sys
etc = sys.argv[1]
from swift.common import utils
utils.set_swift_dir(etc)
from swift.common.ring import RingBuilder
for kind, port in zip(("account", "container", "object"), sys.argv[2:5]):
    b = RingBuilder(10, 1, 1)  # 2^10 partitions, 1 replica, 1 h min_part_hours
    b.add_dev({"region": 1, "zone": 1, "ip": "127.0.0.1", "port": int(port),
               "device": "sdb1", "weight": 100})
    b.rebalance()
    b.get_ring().save(os.path.join(etc, kind + ".ring.gz"))
    b.save(os.path.join(etc, kind + ".builder"))
PY
		echo "# swift_start: building the rings failed:" >&2
		tail -20 "$dir/log/rings.log" | sed 's/^/#   /' >&2
		return 1
	fi
	for ring in "account:$a" "container:$c" "object:$o"; do
		kind=${ring%%:*}
		p=${ring#*:}
		cat >"$etc/$kind-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $p
devices = $dir/srv/node
mount_check = false
disable_fallocate = true
workers = 0
user = $user
swift_dir = $etc
log_name = $kind-server

[pipeline:main]
pipeline = $kind-server

[app:$kind-server]
use = egg:swift#$kind
EOF
	done
	cat >"$etc/proxy-server.conf" <<EOF
[DEFAULT]
bind_ip = 127.0.0.1
bind_port = $port
workers = 0
user = $user
swift_dir = $etc
log_name = proxy-server

[pipeline:main]
pipeline = catch_errors healthcheck proxy-logging cache s3api tempauth slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true

[filter:catch_errors]
use = egg:swift#catch_errors

[filter:healthcheck]
use = egg:swift#healthcheck

[filter:proxy-logging]
use = egg:swift#proxy_logging

[filter:cache]
use = egg:swift#memcache
memcache_servers = 127.0.0.1:$m

[filter:s3api]
use = egg:swift#s3api
location = $S3_REGION

[filter:tempauth]
use = egg:swift#tempauth
user_test_tester = $SWIFT_SECRET_KEY .admin

[filter:slo]
use = egg:swift#slo

[filter:dlo]
use = egg:swift#dlo
EOF
	_swift_launcher "$etc/launch.py"

	SWIFT_PIDS=()
	for ring in "account:$a" "container:$c" "object:$o" "proxy:$port"; do
		kind=${ring%%:*}
		_s3s_spawn "$dir/log/$kind.log" env EVENTLET_NO_GREENDNS=yes \
			/usr/bin/python3 "$etc/launch.py" \
			"$etc" "$kind-server" "$etc/$kind-server.conf"
		SWIFT_PIDS+=("$S3S_PID")
	done
	SWIFT_PORT=$port
	SWIFT_ENDPOINT="http://127.0.0.1:$port"
	SWIFT_DIR=$dir
	_SWIFT_PORTS=("$a" "$c" "$o" "$port")
}

# swift_wait: after swift_spawn, wait (bounded) until the four servers
# answer, then check the S3 API and its signature check: ListBuckets with
# the right key gets 200, with a wrong secret 403.  Stops Swift on failure.
swift_wait() {
	local i st kinds=(account container object proxy)
	[ ${#SWIFT_PIDS[@]} -eq 4 ] || { echo "# swift_wait: swift_spawn first" >&2; return 1; }
	for i in 0 1 2 3; do
		if ! _s3s_wait_http "${_SWIFT_PORTS[$i]}" "${SWIFT_PIDS[$i]}" /healthcheck \
			"$SWIFT_DIR/log/${kinds[$i]}.log"; then
			swift_stop
			return 1
		fi
	done
	st=$(s3_request GET "$SWIFT_ENDPOINT/" "$SWIFT_ACCESS_KEY" "$SWIFT_SECRET_KEY")
	if [ "$st" != 200 ]; then
		echo "# swift_wait: ListBuckets answered '$st', not 200; proxy log:" >&2
		tail -20 "$SWIFT_DIR/log/proxy.log" | sed 's/^/#   /' >&2
		swift_stop
		return 1
	fi
	st=$(s3_request GET "$SWIFT_ENDPOINT/" "$SWIFT_ACCESS_KEY" wrong-secret)
	if [ "$st" != 403 ]; then
		echo "# swift_wait: a wrong secret got '$st', not 403: signatures unchecked" >&2
		swift_stop
		return 1
	fi
}

swift_start() { # swift_start DIR PORT
	swift_spawn "$1" "$2" && swift_wait
}

swift_stop() {
	[ ${#SWIFT_PIDS[@]} -gt 0 ] || return 0
	_s3s_kill "${SWIFT_PIDS[@]}"
	SWIFT_PIDS=()
}

swift_make_bucket() { # swift_make_bucket NAME
	local st
	st=$(s3_request PUT "$SWIFT_ENDPOINT/$1" "$SWIFT_ACCESS_KEY" "$SWIFT_SECRET_KEY")
	[ "$st" = 200 ] && return 0
	echo "# swift_make_bucket $1: HTTP $st" >&2
	return 1
}

# --- the fault proxy ----------------------------------------------------

faultproxy_start() { # faultproxy_start DIR UPSTREAM_PORT [PORT [REDIRECT_PORT]]
	local dir=$1 i
	mkdir -p "$dir" || return 1
	[ -z "$FAULTPROXY_PID" ] || faultproxy_stop
	FAULTPROXY_LOG=$dir/faultproxy.jsonl
	rm -f "$dir/ports.json"
	_s3s_spawn "$dir/faultproxy.stderr" "$PYTHON3" "$S3S_DIR/faultproxy.py" \
		--port "${3:-0}" --redirect-port "${4:-0}" --upstream-port "$2" \
		--log "$FAULTPROXY_LOG" --ports-file "$dir/ports.json" \
		${FAULTPROXY_RATE:+--rate "$FAULTPROXY_RATE"}
	FAULTPROXY_PID=$S3S_PID
	for ((i = 0; i < S3S_START_TIMEOUT * 10; i++)); do
		[ -s "$dir/ports.json" ] && break
		kill -0 "$FAULTPROXY_PID" 2>/dev/null || break
		sleep 0.1
	done
	if [ ! -s "$dir/ports.json" ]; then
		echo "# faultproxy did not start:" >&2
		sed 's/^/#   /' "$dir/faultproxy.stderr" >&2
		faultproxy_stop
		return 1
	fi
	read -r FAULTPROXY_PORT FAULTPROXY_REDIRECT_PORT < <("$PYTHON3" -c \
		'import json,sys; d=json.load(open(sys.argv[1])); print(d["port"], d["redirect_port"])' \
		"$dir/ports.json")
	FAULTPROXY_URL="http://127.0.0.1:$FAULTPROXY_PORT"
}

# _faultproxy_control METHOD [JSON]: talk to the control endpoint.
_faultproxy_control() {
	"$PYTHON3" - "$FAULTPROXY_PORT" "$1" "${2:-}" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=10)
c.request(sys.argv[2], "/__fault__", body=sys.argv[3].encode() or None)
r = c.getresponse()
body = r.read().decode()
if r.status != 200:
    sys.exit("faultproxy: %d %s" % (r.status, body.strip()))
PY
}

faultproxy_rule() { _faultproxy_control POST "$1"; }
faultproxy_clear() { _faultproxy_control DELETE; }

faultproxy_stop() {
	[ -n "$FAULTPROXY_PID" ] || return 0
	_s3s_kill "$FAULTPROXY_PID"
	FAULTPROXY_PID=
}

# --- clients ----------------------------------------------------------------

# aws_at ENDPOINT ACCESS SECRET ARGS...
aws_at() {
	local endpoint=$1 access=$2 secret=$3 cfg
	shift 3
	have_awscli || { echo "# aws_at: $S3S_WHY" >&2; return 127; }
	cfg=${S3S_AWS_CONFIG:-}
	if [ -z "$cfg" ] || [ ! -f "$cfg" ]; then
		cfg=$(mktemp "${TMPDIR:-/tmp}/s3s-aws-config.XXXXXX") || return 1
		S3S_AWS_CONFIG=$cfg
		# request_checksum_calculation: newer botocore adds aws-chunked
		# checksum trailers that neither s3rver nor the HF gateway accept;
		# older versions ignore the key.
		cat >"$cfg" <<EOF
[default]
region = $S3_REGION
output = json
request_checksum_calculation = when_required
response_checksum_validation = when_required
s3 =
    addressing_style = path
    multipart_threshold = 5MB
EOF
	fi
	env -u AWS_SESSION_TOKEN -u AWS_PROFILE -u AWS_DEFAULT_PROFILE \
		-u AWS_ENDPOINT_URL -u AWS_CA_BUNDLE \
		AWS_CONFIG_FILE="$cfg" AWS_SHARED_CREDENTIALS_FILE=/dev/null \
		AWS_ACCESS_KEY_ID="$access" AWS_SECRET_ACCESS_KEY="$secret" \
		AWS_DEFAULT_REGION=$S3_REGION AWS_REGION=$S3_REGION \
		AWS_EC2_METADATA_DISABLED=true AWS_PAGER= \
		"$AWS" --endpoint-url "$endpoint" "$@"
}

aws_s3rver() { aws_at "$S3RVER_ENDPOINT" "$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY" "$@"; }
aws_swift() { aws_at "$SWIFT_ENDPOINT" "$SWIFT_ACCESS_KEY" "$SWIFT_SECRET_KEY" "$@"; }

# s3_request [-d FILE] [-o FILE] [-D FILE] [-H 'Name: value']... METHOD URL ACCESS SECRET
s3_request() {
	"$PYTHON3" - "$S3_REGION" "$@" <<'PY'
import argparse, datetime, hashlib, hmac, http.client, sys, urllib.parse
region = sys.argv[1]
ap = argparse.ArgumentParser(prog="s3_request")
ap.add_argument("-d", dest="data")
ap.add_argument("-o", dest="out")
ap.add_argument("-D", dest="dump")
ap.add_argument("-H", dest="headers", action="append", default=[])
ap.add_argument("method")
ap.add_argument("url")
ap.add_argument("access")
ap.add_argument("secret")
a = ap.parse_args(sys.argv[2:])
u = urllib.parse.urlsplit(a.url)
path = urllib.parse.quote(urllib.parse.unquote(u.path or "/"), safe="/-_.~")
q = sorted(urllib.parse.parse_qsl(u.query, keep_blank_values=True))
query = "&".join("%s=%s" % (urllib.parse.quote(k, safe="-_.~"),
                            urllib.parse.quote(v, safe="-_.~")) for k, v in q)
h = hashlib.sha256()
length = 0
if a.data:
    with open(a.data, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
            length += len(block)
now = datetime.datetime.now(datetime.timezone.utc)
amzdate, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
headers = {"host": u.netloc, "x-amz-date": amzdate,
           "x-amz-content-sha256": h.hexdigest()}
if a.data or a.method in ("PUT", "POST"):
    headers["content-length"] = str(length)
for line in a.headers:
    k, _, v = line.partition(":")
    headers[k.strip().lower()] = v.strip()
names = sorted(headers)
canon = "\n".join([a.method, path, query,
                   "".join("%s:%s\n" % (k, " ".join(headers[k].split())) for k in names),
                   ";".join(names), headers["x-amz-content-sha256"]])
scope = "%s/%s/s3/aws4_request" % (day, region)
sts = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope,
                 hashlib.sha256(canon.encode()).hexdigest()])
key = ("AWS4" + a.secret).encode()
for part in (day, region, "s3", "aws4_request"):
    key = hmac.new(key, part.encode(), hashlib.sha256).digest()
sig = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
headers["authorization"] = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, "
                            "Signature=%s" % (a.access, scope, ";".join(names), sig))
c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=60)
body = open(a.data, "rb") if a.data else None
c.request(a.method, path + ("?" + query if query else ""), body=body,
          headers={k: v for k, v in headers.items() if k != "host"})
r = c.getresponse()
data = r.read()
if a.out:
    with open(a.out, "wb") as f:
        f.write(data)
if a.dump:
    with open(a.dump, "w") as f:
        f.writelines("%s: %s\n" % kv for kv in r.getheaders())
print(r.status)
PY
}

# --- cleanup ----------------------------------------------------------------

s3servers_stop_all() {
	faultproxy_stop
	s3rver_stop
	swift_stop
	if [ -n "${S3S_AWS_CONFIG:-}" ]; then
		rm -f "$S3S_AWS_CONFIG"
		S3S_AWS_CONFIG=
	fi
}

s3servers_trap_exit() {
	local prev=
	# `trap -p EXIT` prints: trap -- 'COMMAND' EXIT, quoted for eval
	eval "set -- $(trap -p EXIT)"
	[ $# -eq 4 ] && prev=$3
	# shellcheck disable=SC2064
	trap "s3servers_stop_all; $prev" EXIT
	trap 'exit 143' TERM
	trap 'exit 130' INT
}
