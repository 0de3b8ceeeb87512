#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-load.sh [--steps N] [--subscribers N] [--interval SECONDS] [--params P]
# -- one publisher and N subscriber wsyncd (default 16, each its own
# target_dir, state_dir and runtime_dir) on one loopback s3rver bucket,
# while a trainer saves a checkpoint every --interval seconds (default
# 0.5) for --steps steps (default 50) without waiting for anyone:
# gen-checkpoints --params 2M (4 MB bf16, 2 shards plus the usual JSON
# files, RL-like density: ~1 % of the values move a step), anchors every
# STEPS/5 versions, the trainer keeping the newest 4 checkpoints.
# The last quarter of the subscribers start half way through.
# Checks: the publisher publishes the last step; every subscriber ends
# byte-identical to it; each subscriber's applied versions (its log's
# VERSION_APPLIED lines) strictly increase (none applied twice) and end at
# HEAD's version, i.e. it applied every version or skipped forward to
# HEAD (the late ones skipped).  Prints a table: subscriber, versions applied, skipped, CPU
# seconds (utime+stime), peak RSS (VmHWM) and the final comparison,
# measured just before each daemon is stopped; the publisher's too.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"

STEPS=50
NSUB=16
INTERVAL=0.5
PARAMS=2M
while [ $# -gt 0 ]; do
	case $1 in
	--steps) STEPS=$2; shift 2 ;;
	--subscribers) NSUB=$2; shift 2 ;;
	--interval) INTERVAL=$2; shift 2 ;;
	--params) PARAMS=$2; shift 2 ;;
	*) echo "usage: $0 [--steps N] [--subscribers N] [--interval S] [--params P]" >&2; exit 2 ;;
	esac
done
CONVERGE=$((60 + STEPS + 2 * NSUB))	# seconds after the trainer's last step
TRAINER=
trap '[ -n "$TRAINER" ] && kill "$TRAINER" 2>/dev/null; daemons_kill_all; s3servers_stop_all; rm -rf "$TMP"' EXIT

have_s3rver || { echo "1..0 # SKIP $S3S_WHY"; exit 0; }
# The figures are the daemons' own: meson's MALLOC_PERTURB_ would make
# glibc fill every allocation and count all of it in the RSS.
unset MALLOC_PERTURB_

CK=$TMP/ck
W=$TMP/watch
mkdir -p "$W" "$TMP/pub"
t=$(date +%s.%N)
"$PYTHON3" "$GEN" --params "$PARAMS" --steps "$STEPS" --shards 2 --no-trainer-files --quiet \
	--out "$CK" || { echo "Bail out! gen-checkpoints failed"; exit 1; }
echo "# $STEPS checkpoints of $(du -sh "$CK/checkpoint-1" | cut -f1) ($(ls "$CK/checkpoint-1" | wc -l) files) generated in $(awk -v t="$t" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - t }') s"

read -r port < <(free_ports 1)
s3rver_start "$TMP/s3rver" "$port" wsync-load
tap_result $? "s3rver is up on port $port"
[ -n "$S3RVER_PID" ] || { echo "Bail out! no s3rver"; exit 1; }
# an anchor every STEPS/5 versions (10 for 50 steps): the late
# subscribers find one newer than version 1
ANCHOR_EVERY=$((STEPS / 5 > 2 ? STEPS / 5 : 2))
store=$(s3rver_store s3://wsync-load/run "retry_max_time = 30s")
# settle_time: this trainer keeps a checkpoint 4 x 0.5 s = 2 s, the default
# settle time; it writes the marker last, so a short settle is safe here
write_ini "$TMP/pub.ini" publisher "$TMP/pub" "$store" "[publisher]" "watch_dir = $W" \
	"anchor_every = $ANCHOR_EVERY" "keep_anchors = 2" "rescan_interval = 1s" \
	"settle_time = 200ms"
subs=()
for ((i = 1; i <= NSUB; i++)); do
	n=s$i
	subs+=("$n")
	mkdir -p "$TMP/$n"
	write_ini "$TMP/$n.ini" subscriber "$TMP/$n" "$store" "[subscriber]" \
		"target_dir = $TMP/$n/target" "poll_interval = 500ms"
done

# The last quarter of the subscribers (at least one) join half way: they
# start from an anchor, skipping the versions before it.
NLATE=$(((NSUB + 3) / 4))
start -c "$TMP/pub.ini" -l "$TMP/pub.log" pub
for n in "${subs[@]:0:NSUB-NLATE}"; do
	start -c "$TMP/$n.ini" -l "$TMP/$n.log" "$n"
done

# The trainer: a step every INTERVAL s on a fixed clock, whoever keeps up;
# like save_total_limit 4, it deletes checkpoints older than the newest 4.
trainer() {
	local i t0
	t0=$(date +%s.%N)
	for ((i = 1; i <= STEPS; i++)); do
		"$PYTHON3" -c 'import sys,time; time.sleep(max(0, float(sys.argv[1]) + float(sys.argv[2]) * float(sys.argv[3]) - time.time()))' \
			"$t0" "$INTERVAL" "$((i - 1))"
		put_ckpt "$CK/checkpoint-$i" "$W/checkpoint-$i"
		[ $i -gt 4 ] && rm -rf "$W/checkpoint-$((i - 4))"
	done
	awk -v t="$t0" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f\n", n - t }' >"$TMP/trainer.secs"
}
t0=$(date +%s.%N)
trainer &
TRAINER=$!
for ((i = 0; i < 600; i++)); do	# bounded: 60 s
	[ -e "$W/checkpoint-$((STEPS / 2 + 1))" ] && break
	sleep 0.1
done
for n in "${subs[@]:NSUB-NLATE}"; do
	start -c "$TMP/$n.ini" -l "$TMP/$n.log" "$n"
done
echo "# ${subs[*]:NSUB-NLATE} started after step $((STEPS / 2))"
wait "$TRAINER"
TRAINER=
echo "# the trainer saved $STEPS steps in $(cat "$TMP/trainer.secs") s (one every $INTERVAL s)"

sts=()
for n in "${subs[@]}"; do sts+=("$TMP/$n/run/status.json"); done
wait_converged "$CONVERGE" "$TMP/pub/run/status.json" "${sts[@]}" "$STEPS"
tap_result $? "publisher and $NSUB subscribers at step $STEPS within $CONVERGE s of the last save"
echo "# converged $(awk -v t="$t0" -v n="$(date +%s.%N)" 'BEGIN { printf "%.1f", n - t }') s after the first save"
HEADV=$(status_field "$TMP/pub/run/status.json" version)

alive=0
for n in pub "${subs[@]}"; do
	daemon_alive "${DPID[$n]}" && alive=$((alive + 1))
done
check "all $((NSUB + 1)) daemons ran to the end" test "$alive" -eq $((NSUB + 1))

# Cost, then stop: CPU and peak RSS read while each process still exists.
declare -A CPU RSS
for n in pub "${subs[@]}"; do
	CPU[$n]=$(cpu_seconds "${DPID[$n]}" 2>/dev/null || echo "?")
	RSS[$n]=$(peak_rss_mib "${DPID[$n]}" 2>/dev/null || echo "?")
done
bad_exit=
for n in pub "${subs[@]}"; do
	stop "$n" || bad_exit="$bad_exit $n"
done
check "every daemon exits 0 on SIGTERM${bad_exit:+ (not:$bad_exit)}" test -z "$bad_exit"

# Per subscriber: versions applied (from VERSION_APPLIED log lines), in order.
printf '# %-10s %8s %8s %7s %9s %s\n' daemon applied skipped "CPU s" "RSS MiB" final
printf '# %-10s %8s %8s %7s %9s %s\n' pub "$HEADV" - "${CPU[pub]}" "${RSS[pub]}" "HEAD v$HEADV step $STEPS"
n_same=0 n_order=0 n_late_skip=0 tot_cpu=0 max_rss=0
for n in "${subs[@]}"; do
	mapfile -t vs < <(sed -nE 's/.*version ([0-9]+) \(step -?[0-9]+\) applied from .*/\1/p' "$TMP/$n.log")
	order=ok
	prev=0
	for v in "${vs[@]}"; do
		[ "$v" -gt "$prev" ] || order="v$v after v$prev"
		prev=$v
	done
	[ "$prev" = "$HEADV" ] || [ "$order" != ok ] || order="last applied v$prev, HEAD v$HEADV"
	[ "$order" = ok ] && n_order=$((n_order + 1))
	if same_tree "$CK/checkpoint-$STEPS" "$TMP/$n/target"; then
		fin=identical
		n_same=$((n_same + 1))
	else
		fin=DIFFERS
	fi
	[ "$order" = ok ] || fin="$fin; $order"
	[[ " ${subs[*]:NSUB-NLATE} " == *" $n "* ]] && [ $((HEADV - ${#vs[@]})) -gt 0 ] &&
		n_late_skip=$((n_late_skip + 1))
	printf '# %-10s %8s %8s %7s %9s %s\n' "$n" "${#vs[@]}" "$((HEADV - ${#vs[@]}))" \
		"${CPU[$n]}" "${RSS[$n]}" "$fin"
	tot_cpu=$(awk -v a="$tot_cpu" -v b="${CPU[$n]}" 'BEGIN { print a + b }')
	max_rss=$(awk -v a="$max_rss" -v b="${RSS[$n]}" 'BEGIN { print (b > a ? b : a) }')
done
echo "# subscribers: $(awk -v t="$tot_cpu" -v n="$NSUB" 'BEGIN { printf "%.2f", t / n }') CPU s on average, peak RSS at most $max_rss MiB; the publisher published $HEADV versions of $STEPS steps"
check "the publisher's HEAD carries step $STEPS (version $HEADV)" test -n "$HEADV" -a "$HEADV" -ge 1
check "every subscriber byte-identical to step $STEPS ($n_same of $NSUB)" test "$n_same" -eq "$NSUB"
check "every subscriber applied strictly increasing versions ending at HEAD ($n_order of $NSUB)" \
	test "$n_order" -eq "$NSUB"
check "the $NLATE late subscribers skipped forward ($n_late_skip of $NLATE)" test "$n_late_skip" -eq "$NLATE"
tap_done
