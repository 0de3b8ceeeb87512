#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-loop-fsync.sh -- nothing blocks the loop: a publisher and a
# subscriber, each under `strace -f -e trace=fsync,fdatasync`, through
# three steps on a file:// bucket; every fsync and fdatasync either
# daemon makes runs on a thread other than its main one (the loop's):
# the jobs thread, libuv's pool.  (A debug build's check in
# common/base/durable.c aborts on one from the loop thread; this sees the
# process from outside, as an operator's strace would.)
. "$(dirname "$0")/lib.sh"

if ! command -v strace >/dev/null; then
	echo "1..0 # SKIP strace is not installed"
	exit 0
fi
CK=$TMP/ck
gen_ckpts "$CK" --params 1M --steps 3 --shards 2
mkdir -p "$TMP/watch" "$TMP/bucket" "$TMP/p" "$TMP/s"
write_ini "$TMP/p.ini" publisher "$TMP/p" "url = file://$TMP/bucket" \
	"[publisher]" "watch_dir = $TMP/watch" "step_pattern = checkpoint-*" \
	"settle_time = 200ms" "rescan_interval = 500ms"
conf s "$TMP/bucket"

# traced NAME: wsyncd under strace, every thread's fsyncs in
# $TMP/NAME/strace; the daemon's pid in $TMP/NAME/pid and DPID (stop NAME
# stops the daemon; strace ends with it), strace's in STRACE.  (Found by
# their command lines: with the EXIT trap set, bash runs a background
# command in a subshell of its own, so $! is neither.)
declare -A STRACE=() JOB=()
traced() {
	local d t
	strace -f -qq -e trace=fsync,fdatasync -o "$TMP/$1/strace" \
		"$WSYNCD" -c "$TMP/$1.ini" >>"$TMP/$1/log" 2>&1 &
	JOB[$1]=$!
	PIDS+=("$!")
	for _ in $(seq 50); do
		t=$(pgrep -f "^strace .* -o $TMP/$1/strace " | head -1)
		d=$(pgrep -f "^$WSYNCD -c $TMP/$1.ini" | head -1)
		if [ -n "$t" ] && [ -n "$d" ]; then
			STRACE[$1]=$t
			DPID[$1]=$d
			PIDS+=("$t" "$d")
			echo "$d" >"$TMP/$1/pid"
			return 0
		fi
		sleep 0.1
	done
	return 1
}
# untraced NAME: stop the daemon, then wait for its strace (the trace
# complete); bounded: 30 s, then both are killed
untraced() {
	local d=${DPID[$1]} t=${STRACE[$1]}
	stop "$1" >/dev/null 2>&1
	for _ in $(seq 300); do
		kill -0 "$t" 2>/dev/null || break
		sleep 0.1
	done
	if kill -0 "$t" 2>/dev/null; then
		echo "# $1: strace (pid $t) still running 30 s after the daemon's stop"
		kill -9 "$d" "$t" 2>/dev/null
	fi
	wait "${JOB[$1]}" 2>/dev/null
	return 0
}
# (not through check: it runs its command in a subshell)
traced p
tap_result $? "publisher started under strace"
traced s
tap_result $? "subscriber started under strace"
steps=$(ls "$CK" | sort -t- -k2 -n)
v=0
for c in $steps; do
	v=$((v + 1))
	cp -r "$CK/$c" "$TMP/watch/.$c.tmp" && mv "$TMP/watch/.$c.tmp" "$TMP/watch/$c"
	check "publisher: version $v ($c) published" wait_version p "$v" 60
	check "subscriber: version $v applied" wait_version s "$v" 60
done
last=$(echo "$steps" | tail -1)
check "subscriber: the target holds $last's weights" \
	same_files "$CK/$last" "$TMP/s/target" $(cd "$CK/$last" && ls ./*.safetensors)
untraced p
untraced s

# strace -f writes "TID syscall(...)": the main thread's TID is the pid.
on_main() { # on_main NAME: the fsync lines of the main thread
	awk -v main="$(cat "$TMP/$1/pid")" '$1 == main && /(fsync|fdatasync)\(/' "$TMP/$1/strace"
}
for n in p s; do
	role=$([ $n = p ] && echo publisher || echo subscriber)
	total=$(grep -cE '(fsync|fdatasync)\(' "$TMP/$n/strace")
	check "$role: fsyncs were traced ($total)" test "$total" -gt 0
	main=$(on_main $n | wc -l)
	[ "$main" -eq 0 ] || on_main $n | head -5 | sed 's/^/# main thread: /'
	check "$role: no fsync on the loop thread ($main of $total)" test "$main" -eq 0
done
tap_done
