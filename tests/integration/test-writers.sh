#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-writers: one writer per bucket (BUCKET.md §8), on a file:// bucket
# (conditional writes by the file system), on s3rver, which ignores them
# (WSYNC_WRITERS_BACKEND=s3, test-writers-s3.sh), and on an S3 server
# that honours them as AWS does (hostile-s3.py without lies,
# WSYNC_WRITERS_BACKEND=s3cond, test-writers-s3cond.sh): two publishers
# with their own state_dir, the same watch_dir and bucket, and a
# subscriber.
#  - started together: one writes, the other stands by (status "standby"
#    naming the writer, one WRITER_OTHER journal entry, the metric), and
#    the subscriber is byte-identical at each step within 60 s of its
#    marker; no version number is written twice, no step published twice;
#  - the writer stopped: the standby takes over at once (the handover)
#    and publishes nothing the bucket holds already;
#  - the writer killed (SIGKILL: its lease stays): the other, started
#    again, takes over once the lease has gone writer_lease unrenewed;
#  - a publisher restarted with an empty state_dir and no new checkpoint
#    leaves HEAD's version unchanged;
#  - the writer paused (SIGSTOP) past its lease: the standby takes over
#    and publishes; the old one, resumed, writes nothing and stands by.
. "$(dirname "$0")/lib.sh"

BACKEND=${WSYNC_WRITERS_BACKEND:-file}
CK=$TMP/ck
gen_ckpts "$CK" --params 2M --steps 6 --shards 2
TRAIN=$TMP/train
mkdir -p "$TRAIN"
if [ "$BACKEND" = s3 ]; then
	. "$(dirname "$0")/s3-servers.sh"
	s3servers_trap_exit
	have_s3rver || { echo "1..0 # SKIP $S3S_WHY"; exit 0; }
	read -r port < <(free_ports 1)
	s3rver_start "$TMP/s3rver" "$port" wsync-writers || {
		tap_result 1 "s3rver started"
		tap_done
		exit 1
	}
	STORE=$(s3rver_store "s3://wsync-writers/w")
elif [ "$BACKEND" = s3cond ]; then
	mkdir -p "$TMP/hs-bucket"
	hs_start hs --bucket "wsync-writers=$TMP/hs-bucket" ||
		{ echo "Bail out! hostile-s3.py did not start"; exit 1; }
	STORE=$(printf 'url = s3://wsync-writers/w\nendpoint = http://127.0.0.1:%s' "$HS_PORT")
else
	mkdir -p "$TMP/bucket"
	STORE="url = file://$TMP/bucket"
fi
for n in a b; do
	mkdir -p "$TMP/$n"
	write_ini "$TMP/$n.ini" publisher "$TMP/$n" "$STORE" \
		"[publisher]" "watch_dir = $TRAIN" "settle_time = 200ms" "watch_mode = poll" \
		"rescan_interval = 200ms" "writer_lease = 6s"
done
mkdir -p "$TMP/s"
write_ini "$TMP/s.ini" subscriber "$TMP/s" "$STORE" "[subscriber]" \
	"target_dir = $TMP/s/model" "poll_interval = 200ms"
sed -i "s/^threads = 1/threads = 2\nlog_level = debug/" "$TMP"/*.ini

phase() { field "$1" phase; }
writer() { # the one publisher that is not standing by, once the other is
	local pa pb
	pa=$(phase a) pb=$(phase b)
	if [ "$pb" = standby ] && [ -n "$pa" ] && [ "$pa" != standby ]; then echo a
	elif [ "$pa" = standby ] && [ -n "$pb" ] && [ "$pb" != standby ]; then echo b
	fi
}
wait_writer() {
	local i w
	for ((i = 0; i < 300; i++)); do
		w=$(writer)
		[ -n "$w" ] && { echo "$w"; return 0; }
		sleep 0.1
	done
	return 1
}
# step STEP: the trainer saves checkpoint STEP; the subscriber holds it,
# byte for byte, within 60 s (the seconds it took in $SECS)
step() {
	local t0 i
	t0=$(date +%s.%N)
	put_ckpt "$CK/checkpoint-$1" "$TRAIN/checkpoint-$1"
	for ((i = 0; i < 600; i++)); do
		[ "$(field s step)" = "$1" ] && [ "$(field s state)" = idle ] &&
			same_files "$CK/checkpoint-$1" "$TMP/s/model" config.json \
				model-00001-of-00002.safetensors model-00002-of-00002.safetensors \
				>/dev/null && break
		sleep 0.1
	done
	SECS=$(echo "$(date +%s.%N) - $t0" | bc)
	echo "# step $1 on the subscriber after $SECS s"
	printf 'step %s %.1f s; ' "$1" "$SECS" >>"$TMP/times"	# (check runs this in a subshell)
	[ $i -lt 600 ]
}
# what the bucket holds: the version HEAD names and the manifests
bucket_versions() {
	if [ "$BACKEND" != file ]; then
		"$WSYNC" store ls --config "$TMP/s.ini" "s3://wsync-writers/w/manifests/" 2>/dev/null |
			grep -c 'manifests/'
	else
		find "$TMP/bucket/manifests" -type f -name '*.json' | wc -l
	fi
}
count() { grep -c -- "$2" "$TMP/$1/log"; } # count NAME TEXT: lines of NAME's log

start s
start a
start b
W=$(wait_writer) || W=
check "started together: one publisher writes, the other stands by" test -n "$W"
O=$([ "$W" = a ] && echo b || echo a)
check "... the standby's status names the writer's state_dir" \
	bash -c "grep -q 'another publisher writes the bucket.*$TMP/$W/state' '$(status_json "$O")'"
grep -h "writer lease\|another publisher" "$TMP"/[ab]/log | cut -c1-250 | sed "s/^/# /"
check "... one journal entry (WRITER_OTHER) says so" \
	bash -c "[ \$(grep -c 'another publisher writes this bucket' '$TMP/$O/log') = 1 ]"
check "... the metric wsync_publisher_standby is 1 on the standby" \
	bash -c "'$WSYNC' status --prometheus --config '$TMP/$O.ini' | grep -qx 'wsync_publisher_standby{[^}]*} 1'"
check "step 1: the subscriber is exact within 60 s" step 1
check "step 2: the subscriber is exact within 60 s" step 2
check "... versions 1 and 2, each written once" test "$(bucket_versions)" = 2
check "... the standby wrote nothing and still stands by" test "$(phase "$O")" = standby
sed "s|state_dir = .*|state_dir = $TMP/once|" "$TMP/$O.ini" >"$TMP/once.ini"
expect_exit 1 "\`wsync publish\` beside the writer refuses, naming it" \
	"$WSYNC" publish --config "$TMP/once.ini" "$CK/checkpoint-2"
contains "... naming the writer" "$OUT" "another publisher writes the bucket (host"
check "... and writes nothing" test "$(bucket_versions)" = 2

# the handover: stop the writer; the standby takes over, publishes nothing
# HEAD holds, then the next step
stop "$W"
check "the writer stopped: the other takes over the lease" \
	wait_for 10 bash -c "grep -q 'holds the bucket.s writer lease' '$TMP/$O/log'"
sleep 2
check "... and publishes nothing the bucket holds already" test "$(bucket_versions)" = 2
check "step 3 through the new writer: exact within 60 s" step 3
check "... version 3 written once" test "$(bucket_versions)" = 3

# failover: the writer killed, its lease left behind; the other one,
# started again, stands by, then takes over after writer_lease
kill9 "$O"
start "$W"
check "the writer killed: the other, started again, takes over after writer_lease" \
	wait_for 30 bash -c "grep -q 'has not been renewed for 6 s' '$TMP/$W/log'"
check "step 4 through it: exact within 60 s" step 4
check "... version 4 written once" test "$(bucket_versions)" = 4

# a publisher restarted with an empty state_dir, no new checkpoint
stop "$W"
rm -rf "$TMP/$W/state"
n=$(count "$W" 'nothing is published')
start "$W"
check "restarted with an empty state_dir: adopts HEAD's version, publishes nothing" \
	wait_for 30 bash -c "[ \$(grep -c 'nothing is published' '$TMP/$W/log') -gt $n ]"
sleep 2
check "... HEAD's version is unchanged" test "$(bucket_versions)" = 4
check "step 5: exact within 60 s" step 5

# a writer paused past its lease (a VM migrated, SIGSTOP), then resumed
start "$O"
standing_by() { [ "$(phase "$1")" = standby ]; }
check "the other one started again: it stands by" wait_for 30 standing_by "$O"
kill -STOP "${DPID[$W]}"
n=$(count "$O" 'has not been renewed')
check "the writer paused: the standby takes over after writer_lease" \
	wait_for 30 bash -c "[ \$(grep -c 'has not been renewed' '$TMP/$O/log') -gt $n ]"
check "step 6 through it while the old writer is paused: exact within 60 s" step 6
kill -CONT "${DPID[$W]}"
check "the old writer resumed: it finds the lease another's and stands by" \
	wait_for 30 standing_by "$W"
check "... having written nothing: versions 1..6, each once" test "$(bucket_versions)" = 6
check "... HEAD still the new writer's: the subscriber exact at step 6" \
	same_files "$CK/checkpoint-6" "$TMP/s/model" config.json model-00001-of-00002.safetensors \
	model-00002-of-00002.safetensors
check "... and still at step 6" test "$(field s step)" = 6
if [ "$BACKEND" = s3cond ]; then
	conds() { grep -c "\"cond\": *\"$1" "$TMP/hs.jsonl"; }
	check "the manifests went up with If-None-Match: *" test "$(conds 'If-None-Match: \*')" -ge 5
	check "HEAD and the lease went up with If-Match" test "$(conds 'If-Match: ')" -ge 5
fi
echo "# $BACKEND: from the trainer's marker to the subscriber exact: $(cat "$TMP/times")"
stop_all
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
PIDS=()
tap_done
