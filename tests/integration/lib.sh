# SPDX-License-Identifier: Apache-2.0
# lib.sh -- the one helper library of the integration scripts (sourced,
# not run; bash): TAP, bounded waits, wsyncd daemons and their status,
# buckets and checkpoints.  tests/README.md lists every function.
#
#   . "$(dirname "$0")/lib.sh"
#   check "inspect lists every tensor" grep -q model.norm.weight out.txt
#   expect_exit 78 "bad key exits 78" "$WSYNCD" --check-config bad.ini
#   tap_done
#
# Every script gets a private scratch dir in $TMP, removed on exit, and
# the paths of the built programs in $WSYNC / $WSYNCD (set by meson; the
# defaults below let a script run by hand from the source tree).

set -u
TAP_N=0
TAP_FAILED=0
: "${WSYNC_SOURCE_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${WSYNC:=$WSYNC_SOURCE_ROOT/build/daemon/wsync}"
: "${WSYNCD:=$WSYNC_SOURCE_ROOT/build/daemon/wsyncd}"
: "${PYTHON3:=/usr/bin/python3}"
GEN="$WSYNC_SOURCE_ROOT/scripts/gen-checkpoints"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wsync-test.XXXXXX")
PIDS=()   # other background processes killed on exit (daemons are in DPID)
trap 'daemons_kill_all; rm -rf "$TMP"' EXIT
trap 'exit 143' TERM	# (so that the EXIT trap runs)
trap 'exit 130' INT

tap_result() { # tap_result STATUS DESCRIPTION
	TAP_N=$((TAP_N + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $TAP_N - $2"
	else
		echo "not ok $TAP_N - $2"
		TAP_FAILED=$((TAP_FAILED + 1))
	fi
}

# check DESCRIPTION COMMAND...: passes when COMMAND exits 0.
check() {
	local desc=$1
	shift
	local out
	out=$("$@" 2>&1)
	local rc=$?
	[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /' | head -40
	tap_result $rc "$desc"
}

# expect_exit CODE DESCRIPTION COMMAND...: passes when COMMAND exits CODE;
# its combined output is left in $OUT for further checks.
expect_exit() {
	local want=$1 desc=$2
	shift 2
	OUT=$("$@" 2>&1)
	local rc=$?
	if [ $rc -ne "$want" ]; then
		echo "# exit $rc, expected $want; output:"
		printf '%s\n' "$OUT" | sed 's/^/# /' | head -40
	fi
	tap_result $((rc != want)) "$desc"
}

# contains DESCRIPTION HAYSTACK NEEDLE: passes when NEEDLE is in HAYSTACK.
contains() {
	case "$2" in
	*"$3"*) tap_result 0 "$1" ;;
	*)
		echo "# expected to find: $3"
		printf '%s\n' "$2" | sed 's/^/# /' | head -40
		tap_result 1 "$1"
		;;
	esac
}

# wait_for SECONDS COMMAND...: run COMMAND every 0.1 s until it exits 0,
# at most SECONDS; the exit status of its last run.
wait_for() {
	local secs=$1 i
	shift
	for ((i = 0; i < secs * 10; i++)); do
		"$@" && return 0
		sleep 0.1
	done
	"$@"
}

tap_done() {
	echo "1..$TAP_N"
	[ "$TAP_FAILED" -eq 0 ]
}

# ---- daemons -------------------------------------------------------------
# A daemon is known by NAME.  Unless told otherwise it lives under
# $DAEMONS ($TMP unless a script points it elsewhere): its configuration
# is $DAEMONS/NAME.ini, its folder $DAEMONS/NAME/ (state/, run/, log).
#
#   start [-c CONF] [-l LOG] [-m UMASK] NAME [ENV=VALUE...]
#                      wsyncd -c CONF in the background (under UMASK when
#                      given), its output appended to LOG, --log-target
#                      stderr unless ENV holds WSYNC_JOURNAL_SOCKET (then
#                      journal); pid in DPID[NAME]
#   stop NAME          SIGTERM, at most 15 s, then SIGKILL; the exit code
#                      (137: killed; 1 when NAME is not running)
#   stop_all           stop every daemon still running, all at once (15 s)
#   kill9 NAME         SIGKILL, reaped
#   daemons_kill_all   SIGKILL every daemon and PIDS entry (EXIT traps)
#   daemon_alive PID   0 while PID runs (a zombie does not)
#   cpu_ticks PID / cpu_seconds PID / peak_rss_mib PID
#                      utime + stime in clock ticks, in seconds (2
#                      decimals); VmHWM in MiB (1 decimal)
#   status_field FILE KEY   a key of a status.json ("" when absent or
#                      null; booleans as true/false)
#   field NAME KEY     the same of $DAEMONS/NAME/run/status.json (of
#                      $RUN_DIRS/NAME/status.json when RUN_DIRS is set)
#   status_json NAME   the path field reads
#   at_version NAME V  its status says version V and idle
#   said NAME          what NAME says (version, step, state, message) and
#                      its log's last lines, as # lines
#   wait_status FILE SECS KEY=VALUE...   bounded wait until that
#                      status.json says every KEY=VALUE (polled every 20 ms)
#   wait_version NAME V [SECS]   idle at version V (20 s unless SECS);
#   wait_step NAME STEP [SECS]   idle at step STEP; both say what the
#                      daemon says and its last log lines on timeout
#   wait_field NAME KEY VALUE [SECS], wait_state NAME STATE [SECS]
#   wait_error NAME TEXT [SECS]  last_error holds TEXT
#   wait_grep FILE TEXT [SECS]   FILE holds TEXT (a fixed string; 20 s
#                      unless SECS); its last lines on timeout
#   wait_log NAME TEXT [SECS]    the same of the daemon's log
#   in_log NAME REGEX  the log holds a match, now
#   wait_converged SECS PUB_STATUS SUB_STATUS... STEP
#                      until the publisher's status.json says step STEP,
#                      idle, and every subscriber's its version, idle
#   journal_start NAME SOCKET OUT   tests/integration/journal-recv.py
#                      --serve on SOCKET, entries appended to OUT as JSON
#                      lines (a receiver NAME still running is stopped
#                      first); waits (bounded) for the socket.  Pid in
#                      DPID[NAME]
#   journal_count FILE MESSAGE_ID [FROM_LINE]  entries with that id
#   mid NAME           a MESSAGE_ID of common/base/log-messages.h
#
# ---- configurations, buckets, checkpoints --------------------------------
#   write_ini FILE ROLE DIR STORE [LINE...]   a wsyncd configuration: role
#                      ROLE, state_dir DIR/state, runtime_dir DIR/run, one
#                      jobs thread, [store] STORE, then the LINEs (a line
#                      "[section]" starts a section)
#   conf NAME BUCKET [verify]   a subscriber of file://BUCKET in
#                      $DAEMONS/NAME.ini (target $DAEMONS/NAME/target,
#                      debug log, 200 ms polls; verify_key $TMP/key.pub)
#   s3rver_store URL [KEY = VALUE...]   the [store] lines for URL on the
#                      running s3rver ($S3RVER_ENDPOINT, or $STORE_ENDPOINT
#                      when set, e.g. a fault proxy), path style, keys in
#                      $TMP/s3.cred (written), then the extra lines
#   gen_ckpts OUT [ARGS...]      scripts/gen-checkpoints ARGS --quiet --out
#                      OUT, or "Bail out!"
#   hs_start NAME ARGS...       tests/integration/hostile-s3.py in the
#                      background (log $TMP/NAME.jsonl, port in HS_PORT)
#   pub BUCKET VERSION CKPT [options]   tests/integration/bucket-writer.py
#                      (needs KEY, EMPTY exported)
#   head_version BUCKET          the version HEAD names (0: none)
#   wait_head BUCKET V [SECS]    HEAD names V (30 s unless SECS)
#   put_ckpt SRC DEST [MARKER]   the trainer saves SRC as DEST, file by
#                      file, trainer_state.json last (MARKER's content when
#                      given)
#   same_tree REF TARGET         byte-identical, .wsync/ (the subscriber's
#                      own) left out
#   same_files REF TARGET FILE...   those files byte-identical
#   only_files TARGET FILE...    TARGET's files (.wsync/ aside) are exactly
#                      these

DAEMONS=$TMP
declare -A DPID=()

start() {
	local conf= log= mask= name target=stderr e
	while [ $# -gt 1 ]; do
		case $1 in
		-c) conf=$2 ;;
		-l) log=$2 ;;
		-m) mask=$2 ;;
		*) break ;;
		esac
		shift 2
	done
	name=$1
	shift
	for e in "$@"; do
		[[ $e == WSYNC_JOURNAL_SOCKET=* ]] && target=journal
	done
	(
		[ -z "$mask" ] || umask "$mask"
		exec env "$@" "$WSYNCD" -c "${conf:-$DAEMONS/$name.ini}" --log-target "$target"
	) >>"${log:-$DAEMONS/$name/log}" 2>&1 &
	DPID[$name]=$!
}

stop() {
	local p=${DPID[$1]:-} i rc
	[ -n "$p" ] || return 1
	kill -TERM "$p" 2>/dev/null
	for ((i = 0; i < 150; i++)); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$p" 2>/dev/null && { echo "# $1 (pid $p) still running 15 s after SIGTERM: SIGKILL"; kill -KILL "$p"; }
	wait "$p"
	rc=$?
	DPID[$1]=
	return $rc
}

stop_all() {
	local n i alive
	for n in "${!DPID[@]}"; do
		[ -n "${DPID[$n]}" ] && kill -TERM "${DPID[$n]}" 2>/dev/null
	done
	for ((i = 0; i < 150; i++)); do
		alive=0
		for n in "${!DPID[@]}"; do
			[ -n "${DPID[$n]}" ] && kill -0 "${DPID[$n]}" 2>/dev/null && alive=1
		done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for n in "${!DPID[@]}"; do
		[ -n "${DPID[$n]}" ] || continue
		kill -0 "${DPID[$n]}" 2>/dev/null &&
			{ echo "# $n (pid ${DPID[$n]}) still running 15 s after SIGTERM: SIGKILL"; kill -KILL "${DPID[$n]}"; }
		wait "${DPID[$n]}" 2>/dev/null
		DPID[$n]=
	done
	return 0
}

kill9() {
	[ -n "${DPID[$1]:-}" ] || return 1
	kill -9 "${DPID[$1]}" 2>/dev/null
	wait "${DPID[$1]}" 2>/dev/null
	DPID[$1]=
}

daemons_kill_all() {
	local n p
	for n in "${!DPID[@]}"; do
		[ -n "${DPID[$n]}" ] || continue
		kill -9 "${DPID[$n]}" 2>/dev/null
		wait "${DPID[$n]}" 2>/dev/null
	done
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	return 0
}

daemon_alive() {
	[ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" | cut -d' ' -f1)" != Z ]
}

cpu_ticks() { # fields 14 and 15 of stat, counted after the ")" of comm
	sed 's/.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

cpu_seconds() {
	awk -v t="$(cpu_ticks "$1")" -v hz="$(getconf CLK_TCK)" 'BEGIN { printf "%.2f\n", t / hz }'
}

peak_rss_mib() {
	awk '/^VmHWM:/ { printf "%.1f\n", $2 / 1024 }' "/proc/$1/status"
}

status_field() {
	"$PYTHON3" -c '
import json, sys
try:
    v = json.load(open(sys.argv[1])).get(sys.argv[2])
except (OSError, ValueError):
    v = None
print("" if v is None else str(v).lower() if isinstance(v, bool) else v)' "$1" "$2"
}

# status_json NAME: the path of its status.json ($RUN_DIRS/NAME/ when a
# script sets RUN_DIRS, the runtime folders of daemons it did not start)
status_json() { echo "${RUN_DIRS:-$DAEMONS/$1/run}${RUN_DIRS:+/$1}/status.json"; }

field() { status_field "$(status_json "$1")" "$2"; }

at_version() { [ "$(field "$1" version)" = "$2" ] && [ "$(field "$1" state)" = idle ]; }

wait_status() {
	"$PYTHON3" - "$@" <<'PY'
import json, sys, time
path, secs, want = sys.argv[1], float(sys.argv[2]), [a.split("=", 1) for a in sys.argv[3:]]
def text(v):
    return "" if v is None else str(v).lower() if isinstance(v, bool) else str(v)
end = time.monotonic() + secs
while True:
    try:
        with open(path) as f:
            s = json.load(f)
    except (OSError, ValueError):
        s = {}
    if all(text(s.get(k)) == v for k, v in want):
        sys.exit(0)
    if time.monotonic() > end:
        sys.exit(1)
    time.sleep(0.02)
PY
}

# the daemon NAME's own words and last log lines, after a wait timed out
said() {
	echo "# $1: version $(field "$1" version) step $(field "$1" step), $(field "$1" state): $(field "$1" message)"
	tail -5 "$DAEMONS/$1/log" 2>/dev/null | sed 's/^/# /'
}

wait_version() {
	wait_status "$(status_json "$1")" "${3:-20}" version="$2" state=idle || { said "$1"; return 1; }
}

wait_step() {
	wait_status "$(status_json "$1")" "${3:-20}" step="$2" state=idle || { said "$1"; return 1; }
}

wait_field() {
	wait_status "$(status_json "$1")" "${4:-20}" "$2=$3" || {
		echo "# $1: $2 is \"$(field "$1" "$2")\", not \"$3\""
		return 1
	}
}

wait_state() { wait_field "$1" state "$2" "${3:-20}"; }

wait_error() {
	local i
	for ((i = 0; i < ${3:-20} * 10; i++)); do
		case "$(field "$1" last_error)" in *"$2"*) return 0 ;; esac
		sleep 0.1
	done
	echo "# last_error: $(field "$1" last_error)"
	return 1
}

wait_grep() {
	local i
	for ((i = 0; i < ${3:-20} * 10; i++)); do
		grep -qF -- "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "# no \"$2\" in $1; its last lines:"
	tail -10 "$1" 2>/dev/null | cut -c1-300 | sed 's/^/# /'
	return 1
}

wait_log() { wait_grep "$DAEMONS/$1/log" "$2" "${3:-20}"; }

in_log() { grep -q -- "$2" "$DAEMONS/$1/log"; }

wait_converged() {
	"$PYTHON3" - "$@" <<'PY'
import json, sys, time
timeout, pub, subs, step = float(sys.argv[1]), sys.argv[2], sys.argv[3:-1], int(sys.argv[-1])
def st(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}
end = time.monotonic() + timeout
while True:
    p = st(pub)
    ss = [st(s) for s in subs]
    v = p.get("version")
    if (p.get("step") == step and p.get("state") == "idle" and v
            and all(s.get("version") == v and s.get("state") == "idle" for s in ss)):
        sys.exit(0)
    if time.monotonic() > end:
        for name, s in [(pub, p)] + list(zip(subs, ss)):
            print("# %s: version %s step %s state %s store_ok %s error %s" % (
                name, s.get("version"), s.get("step"), s.get("state"),
                s.get("store_ok"), s.get("last_error")))
        print("# waited %g s for step %d" % (timeout, step))
        sys.exit(1)
    time.sleep(0.1)
PY
}

journal_start() {
	local name=$1 sock=$2 out=$3 i
	[ -z "${DPID[$name]:-}" ] || stop "$name"	# a receiver of NAME before
	rm -f "$sock"
	: >>"$out"
	"$PYTHON3" "$WSYNC_SOURCE_ROOT/tests/integration/journal-recv.py" "$sock" "$out" \
		--serve 3600 &
	DPID[$name]=$!
	for ((i = 0; i < 100; i++)); do
		[ -S "$sock" ] && return 0
		sleep 0.05
	done
	return 1
}

journal_count() {
	tail -n "+${3:-1}" "$1" | grep -c "\"MESSAGE_ID\": \"$2\""
}

mid() {
	sed -nE "s/^#define WSYNC_MID_$1 +\"([0-9a-f]+)\".*/\\1/p" \
		"$WSYNC_SOURCE_ROOT/common/base/log-messages.h"
}

write_ini() {
	local file=$1 role=$2 dir=$3 store=$4 l
	shift 4
	{
		printf '[daemon]\nrole = %s\nstate_dir = %s/state\nruntime_dir = %s/run\nthreads = 1\n' \
			"$role" "$dir" "$dir"
		printf '[store]\n%s\n' "$store"
		for l in "$@"; do printf '%s\n' "$l"; done
	} >"$file"
}

conf() {
	local d="$DAEMONS/$1"
	mkdir -p "$d"
	{
		echo "[daemon]"
		echo "role = subscriber"
		echo "state_dir = $d/state"
		echo "runtime_dir = $d/run"
		echo "threads = 2"
		echo "log_level = debug"
		echo "[store]"
		echo "url = file://$2"
		echo "[subscriber]"
		echo "target_dir = $d/target"
		echo "poll_interval = 200ms"
		[ "${3:-}" = verify ] && echo "verify_key = $TMP/key.pub"
	} >"$DAEMONS/$1.ini"
}

s3rver_store() {
	local l
	# temp + rename: a daemon started before may be reading it
	printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' \
		"$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY" >"$TMP/s3.cred.$$" &&
		mv -f "$TMP/s3.cred.$$" "$TMP/s3.cred"
	printf 'url = %s\nendpoint = %s\ncredentials = %s\npath_style = true\n' \
		"$1" "${STORE_ENDPOINT:-$S3RVER_ENDPOINT}" "$TMP/s3.cred"
	shift
	for l in "$@"; do printf '%s\n' "$l"; done
}

gen_ckpts() {
	"$GEN" "${@:2}" --quiet --out "$1" >/dev/null || { echo "Bail out! gen-checkpoints failed"; exit 1; }
}

# hs_start NAME ARGS...: hostile-s3.py in the background (an S3 server
# that lies on request, else honest, conditional writes included), log in
# $TMP/NAME.jsonl; its port in HS_PORT.
hs_start() {
	local name=$1 i
	shift
	"$PYTHON3" "$WSYNC_SOURCE_ROOT/tests/integration/hostile-s3.py" \
		--ports-file "$TMP/$name.port" --log "$TMP/$name.jsonl" "$@" 2>>"$TMP/$name.err" &
	PIDS+=($!)
	for ((i = 0; i < 100; i++)); do
		[ -s "$TMP/$name.port" ] && break
		sleep 0.05
	done
	HS_PORT=$("$PYTHON3" -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' \
		"$TMP/$name.port") || return 1
	: >>"$TMP/$name.jsonl"
}

pub() { "$PYTHON3" "$WSYNC_SOURCE_ROOT/tests/integration/bucket-writer.py" "$@"; }

head_version() {
	"$PYTHON3" -c 'import json,sys; print(json.loads(open(sys.argv[1]).read().split("\nwsync-signature")[0])["version"])' \
		"$1/HEAD" 2>/dev/null || echo 0
}

wait_head() {
	local i
	for ((i = 0; i < ${3:-30} * 10; i++)); do
		[ "$(head_version "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	echo "# HEAD names version $(head_version "$1"), not $2"
	return 1
}

put_ckpt() {
	local f
	mkdir -p "$2"
	for f in "$1"/*; do
		[ "${f##*/}" = trainer_state.json ] || cp "$f" "$2/"
	done
	cp "${3:-$1/trainer_state.json}" "$2/trainer_state.json"
}

same_tree() { diff -r -x .wsync "$1" "$2" >/dev/null; }

same_files() {
	local ref=$1 t=$2 f
	shift 2
	for f in "$@"; do
		cmp -s "$ref/$f" "$t/$f" || { echo "# $f differs"; return 1; }
	done
}

only_files() {
	local t=$1
	shift
	diff <(cd "$t" && find . -path ./.wsync -prune -o -type f -print | sed 's|^\./||' | sort) \
		<(printf '%s\n' "$@" | sort)
}
