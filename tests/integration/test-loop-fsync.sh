#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-loop-fsync.sh -- nothing blocks the loop: a publisher and a
# subscriber, each under `strace -f -e trace=fsync,fdatasync`, through
# three steps on a file:// bucket; every fsync and fdatasync either
# daemon makes runs on a thread other than its main one (the loop's):
# the jobs thread, libuv's pool.  (The debug build's check in
# common/base/durable.c aborts on one; this sees the process from the
# outside, release builds included.)
. "$(dirname "$0")/lib.sh"

if ! command -v strace >/dev/null; then
	echo "1..0 # SKIP strace is not installed"
	exit 0
fi
CK=$TMP/ck
"$GEN" --params 1M --steps 3 --shards 2 --quiet --out "$CK" || {
	echo "Bail out! gen-checkpoints failed"
	exit 1
}
mkdir -p "$TMP/watch" "$TMP/bucket" "$TMP/p"
cat >"$TMP/p/wsyncd.ini" <<INI
[daemon]
role = publisher
state_dir = $TMP/p/state
runtime_dir = $TMP/p/run
threads = 1
log_level = debug
[store]
url = file://$TMP/bucket
[publisher]
watch_dir = $TMP/watch
step_pattern = checkpoint-*
settle_time = 200ms
rescan_interval = 500ms
INI
conf s "$TMP/bucket"

# traced NAME: wsyncd under strace, its threads' fsyncs in $TMP/NAME/strace
traced() {
	strace -f -qq -e trace=fsync,fdatasync -o "$TMP/$1/strace" \
		"$WSYNCD" -c "$TMP/$1/wsyncd.ini" >>"$TMP/$1/log" 2>&1 &
	eval "PID_$1=$!"
	PIDS+=($!)
}
child() { # child NAME: the daemon's pid, strace's child, into $TMP/NAME/pid
	local spid
	eval "spid=\$PID_$1"
	for _ in $(seq 50); do
		cat /proc/"$spid"/task/*/children 2>/dev/null | awk '{ print $1 }' | grep . >"$TMP/$1/pid" && return 0
		sleep 0.1
	done
	return 1
}
traced p
traced s
check "publisher started under strace" child p
check "subscriber started under strace" child s
steps=$(ls "$CK" | sort -t- -k2 -n)
v=0
for c in $steps; do
	v=$((v + 1))
	cp -r "$CK/$c" "$TMP/watch/.$c.tmp" && mv "$TMP/watch/.$c.tmp" "$TMP/watch/$c"
	check "publisher: version $v (step $c) published" wait_version p "$v" 60
	check "subscriber: version $v applied" wait_version s "$v" 60
done
same_shards() { # the weight shards of checkpoint $1 in the target, byte for byte
	local f n=0
	for f in "$CK/$1"/*.safetensors; do
		cmp -s "$f" "$TMP/s/target/${f##*/}" || return 1
		n=$((n + 1))
	done
	[ "$n" -gt 0 ]
}
check "subscriber: the target holds the last checkpoint's shards" same_shards "$(echo "$steps" | tail -1)"
stop p >/dev/null
stop s >/dev/null

# strace -f writes "TID syscall(...)": the main thread's TID is the
# daemon's pid (strace's child).
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
