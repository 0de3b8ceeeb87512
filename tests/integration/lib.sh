# SPDX-License-Identifier: Apache-2.0
# lib.sh -- TAP helpers for the integration scripts (sourced, not run).
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
PIDS=()   # background processes killed on exit (start below adds to it)
trap 'for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done; rm -rf "$TMP"' EXIT

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

# ---- a subscriber wsyncd against a hand-written file:// bucket ----------
# (test-subscriber.sh, test-hostile.sh).  A script may define its own
# function of the same name after sourcing this file.
#
#   pub BUCKET VERSION CKPT [options]   tests/integration/bucket-writer.py
#                                       (needs KEY, EMPTY exported)
#   conf NAME BUCKET [verify]           a subscriber config in $TMP/NAME/
#   start NAME / stop NAME              wsyncd in the background / SIGTERM
#   field NAME KEY                      a field of its status.json
#   wait_version NAME V [SECS], wait_error NAME TEXT, wait_log NAME TEXT
#                                       (20 s unless SECS says otherwise)
#   same DIR1 DIR2                      identical trees (.wsync/ aside)
pub() { "$PYTHON3" "$WSYNC_SOURCE_ROOT/tests/integration/bucket-writer.py" "$@"; }

conf() {
	local d="$TMP/$1"
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
	} >"$d/wsyncd.ini"
}

start() { # start NAME: wsyncd in the background, log in $TMP/NAME/log
	"$WSYNCD" -c "$TMP/$1/wsyncd.ini" >>"$TMP/$1/log" 2>&1 &
	eval "PID_$1=$!"
	PIDS+=($!)
}
stop() { # stop NAME: SIGTERM, at most 10 s, then SIGKILL; the exit code (137: killed)
	local pid
	eval "pid=\$PID_$1"
	kill -TERM "$pid" 2>/dev/null
	for _ in $(seq 100); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$pid" 2>/dev/null && { echo "# $1 (pid $pid) ignored SIGTERM for 10 s: SIGKILL"; kill -KILL "$pid"; }
	wait "$pid"
}
field() {
	"$PYTHON3" -c 'import json,sys
try: v = json.load(open(sys.argv[1])).get(sys.argv[2])
except Exception: v = None
print("" if v is None else v)' "$TMP/$1/run/status.json" "$2"
}
wait_version() { # NAME V [SECONDS, default 20]
	for _ in $(seq $((${3:-20} * 10))); do
		[ "$(field "$1" version)" = "$2" ] && [ "$(field "$1" state)" = idle ] && return 0
		sleep 0.1
	done
	echo "# status: $(field "$1" message)"
	tail -5 "$TMP/$1/log" | sed 's/^/# /'
	return 1
}
wait_error() { # NAME TEXT [SECONDS, default 20]
	for _ in $(seq $((${3:-20} * 10))); do
		case "$(field "$1" last_error)" in *"$2"*) return 0 ;; esac
		sleep 0.1
	done
	echo "# last_error: $(field "$1" last_error)"
	return 1
}
wait_log() {
	for _ in $(seq 200); do
		grep -qF "$2" "$TMP/$1/log" && return 0
		sleep 0.1
	done
	return 1
}
same() { diff -r -x .wsync "$1" "$2" >/dev/null; }   # .wsync/: the subscriber's own
