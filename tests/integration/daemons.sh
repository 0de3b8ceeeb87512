# SPDX-License-Identifier: Apache-2.0
# daemons.sh -- wsyncd processes, their status and their cost, for the
# integration tests that run many daemons (sourced after lib.sh; bash).
#
#   daemon_start NAME CONF LOG [ENV=VALUE...]
#                      wsyncd -c CONF in the background, stderr log to LOG
#                      (--log-target stderr unless ENV holds
#                      WSYNC_JOURNAL_SOCKET, then journal); pid in DPID[NAME]
#   daemon_stop NAME   SIGTERM, wait at most 15 s (then SIGKILL); returns
#                      the exit code
#   daemons_kill_all   SIGKILL every daemon still in DPID (for EXIT traps)
#   daemon_alive PID   0 while PID runs (a zombie does not)
#   cpu_ticks PID      utime + stime of PID in clock ticks (/proc/PID/stat)
#   cpu_seconds PID    the same in seconds, 2 decimals
#   peak_rss_mib PID   VmHWM of PID in MiB, 1 decimal
#   status_field FILE KEY      a key of a status.json ("" when absent/null)
#   wait_converged TIMEOUT PUB_STATUS SUB_STATUS... STEP
#                      bounded wait until the publisher's status says
#                      step STEP, idle, and every subscriber's says the
#                      publisher's version, idle; prints what each says on
#                      timeout
#   put_ckpt SRC DEST  the trainer saves SRC as DEST, file by file,
#                      trainer_state.json last (the publisher's marker)
#   same_files REF TARGET FILE...   those files of the two folders
#                      byte-identical (a partial subscriber's)
#   only_files TARGET FILE...  TARGET's files (.wsync/ aside) are exactly
#                      these
#   same_tree REF TARGET       byte-identical, .wsync/ (the subscriber's
#                      own) left out
#   journal_start NAME SOCKET OUT   tests/integration/journal-recv.py
#                      --serve on SOCKET, entries as JSON lines in OUT;
#                      waits (bounded) for the socket.  Pid in DPID[NAME]
#   journal_count FILE MESSAGE_ID [FROM_LINE]  entries with that id (from
#                      line FROM_LINE on, 1-based)
#   mid NAME           a MESSAGE_ID of common/base/log-messages.h (STORE_UNREACHABLE)
#   s3rver_store URL [KEY = VALUE...]   the [store] lines for URL on the
#                      running s3rver ($S3RVER_ENDPOINT, or $STORE_ENDPOINT
#                      when set, e.g. a fault proxy), path style, keys in
#                      $TMP/s3.cred (written), then the extra lines
#   write_ini FILE ROLE DIR STORE [LINE...]   a wsyncd configuration: role
#                      ROLE, state_dir DIR/state, runtime_dir DIR/run, one
#                      jobs thread, [store] STORE, then the LINEs (a line
#                      "[section]" starts a section)

declare -A DPID=()

daemon_start() {
	local name=$1 conf=$2 log=$3 target=stderr e
	shift 3
	for e in "$@"; do
		[[ $e == WSYNC_JOURNAL_SOCKET=* ]] && target=journal
	done
	env "$@" "$WSYNCD" -c "$conf" --log-target "$target" >>"$log" 2>&1 &
	DPID[$name]=$!
}

daemon_stop() {
	local p=${DPID[$1]:-} i
	[ -n "$p" ] || return 1
	kill -TERM "$p" 2>/dev/null
	for ((i = 0; i < 150; i++)); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$p" 2>/dev/null && { echo "# $1 still running 15 s after SIGTERM"; kill -9 "$p"; }
	wait "$p"
	local rc=$?
	DPID[$1]=
	return $rc
}

daemons_kill_all() {
	local n
	for n in "${!DPID[@]}"; do
		[ -n "${DPID[$n]}" ] || continue
		kill -9 "${DPID[$n]}" 2>/dev/null
		wait "${DPID[$n]}" 2>/dev/null
	done
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

put_ckpt() {
	local f
	mkdir -p "$2"
	for f in "$1"/*; do
		[ "${f##*/}" = trainer_state.json ] || cp "$f" "$2/"
	done
	cp "$1/trainer_state.json" "$2/"
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

journal_start() {
	local name=$1 sock=$2 out=$3 i
	rm -f "$sock"
	: >"$out"
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
