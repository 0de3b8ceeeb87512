#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench-scale.sh -- wsyncd at scale: a checkpoint larger than the page
# cache can hold with its base, bucket and target copies (default 4B
# parameters in bf16: 8 GB in 16 shards), an anchor and delta steps, one
# publisher, one FULL subscriber and one PARTIAL subscriber (the first
# half of the shards and every *.json, by [subscriber] include), on a
# file:// bucket and/or on s3rver.
#
#   scripts/bench-scale.sh [--quick] [--params P] [--shards N] [--steps N]
#                          [--backend file|s3|both] [--mmap] [--throttle RATE]
#                          [--parts N] [--no-apart] [--sub KEY=VALUE]...
#                          [--partial GLOBS]
#                          [--dir DIR] [--keep]
#
#   --quick         small, for the test suite: 200M parameters (400 MB),
#                   4 shards, 1 delta step, file:// only; well under a minute
#   --params P      model size (bf16, 2 bytes a parameter): default 4B on
#                   file://, 1B (2 GB) on s3rver (it moves ~30 MB/s here)
#   --shards N      safetensors shards per checkpoint (default 16, --quick 4)
#   --steps N       delta steps after the anchor (default 2, --quick 1)
#   --backend       file (default), s3 or both (s3 needs tests/s3rver:
#                   npm ci --prefix tests/s3rver)
#   --mmap          run the publisher with WSYNC_MMAP=1: its encoder reads
#                   through mappings, which rchar does not count, so the
#                   read figures then come from read_bytes (rchar undercounts)
#   --throttle RATE s3 only: each daemon talks to s3rver through its own
#                   tests/integration/faultproxy.py --rate RATE (bytes a
#                   second each way, k/M/G = 10^3/10^6/10^9: 20M), its own
#                   link; adds transfer = object bytes / RATE and the ratio
#                   latency / transfer (goal <= 1.3 where the transfer
#                   takes 1 s or more)
#   --parts N       N publisher instances publish each version together
#                   ([publisher] part = K/N, BUCKET.md §7) instead of one:
#                   part 1 commits; each part's reads, CPU and peak RSS are
#                   reported (the read-once goal then applies to their sum)
#   --no-apart      do not run each step's stages apart (below)
#   --sub KEY=VALUE a [subscriber] setting for both subscribers (repeat for
#                   more): --sub ahead_pace=off, --sub ahead_max=0
#   --partial GLOBS the partial subscriber's include (default: every *.json
#                   and the first half of the shards); one shard's name
#                   (--partial 'model-00001-of-00016.safetensors') leaves the
#                   full subscriber nearly alone beside the publisher, as
#                   on a colocated node (the one-host goal line)
#   --dir DIR       work dir (default a temp dir under /var/tmp); needs about
#                   8x a checkpoint's bytes free (7x with --no-apart; checked
#                   first)
#   --keep          keep the work dir (the loop image unmounted); without it
#                   only DIR/bench-scale.tsv is left
#
# The programs measured are built from this tree first (build-bench,
# release, as scripts/bench-e2e.sh does); WSYNC and WSYNCD in the
# environment (both) run those programs instead, unbuilt.
#
# The trainer: scripts/gen-checkpoints' model and optimizer (AdamW on fp32
# masters, saved as bf16), its output byte for byte, but each checkpoint
# is made by replaying steps 1..S chunk by chunk, so the 12 bytes a
# parameter of optimizer state are never held (48 GB at 4B). It writes
# checkpoint-S into the watched folder in place, trainer_state.json last,
# hashing every file as it writes it; before writing it, it deletes the
# checkpoints older than the newest one (a rotation keeping 2). Steps are
# one at a time: the next checkpoint is written once every subscriber
# applied the last and the publisher is idle.
#
# The subscribers' state_dir and target_dir live on a file system of their
# own when it can be made (root): ext4 on a sparse image in the work dir,
# through a loop device with direct I/O to the image (else mount -o loop),
# so the trainer's writes do not charge a subscriber's fsync through
# ext4's shared journal. Otherwise plain directories, and it says so.
#
# Per step (a table, and a row of DIR/bench-scale.tsv):
#   marker -> announced  the publisher's "version V (step S) announced"
#                        line ("-" when the publisher has none)
#   marker -> HEAD       its "published version V" line (logged once HEAD
#                        names V); the publish stage
#   marker -> applied    each subscriber's "version V (step S) applied" line;
#                        apply s: the duration that line gives (the apply
#                        job: verify, decode, write, swap; not the download)
#   ratio                (marker -> last applied) / max(publish stage, the
#                        longest apply): the stages as long as they took in
#                        this contended run; goal <= 1.5 for delta steps
#   stages apart         after the step, the daemons idle: `wsync diff OLD NEW`
#                        and `wsync apply OLD DELTA -o OUT` (OUT on the
#                        subscribers' file system, OLD dropped from the page
#                        cache first: a subscriber's target is cold), one
#                        after the other (scripts/bench-scale-apart.py; the
#                        anchor: from an empty directory), and
#                        (marker -> applied) / max(diff, apply) for each
#                        subscriber; goal <= 1.5 for the full one on file://
#                        (one host, one disk)
#   transfer             (throttled s3 only) per subscriber: the bytes the
#                        step moved over the busier of its two links, the
#                        publisher's (request bodies up) and its own
#                        (response bodies down), each counted from its
#                        faultproxy's log over the step, / RATE; the ratio
#                        (marker -> applied) / transfer, goal <= 1.3
#   downloaded           wsync_bytes_downloaded_total (the metrics file),
#                        per step
#   pub read / ckpt      the publisher's rchar / (old + new checkpoint bytes)
#                        (the anchor: / new bytes); goal <= 1.1, each byte
#                        read once (the anchor: <= 1.2)
#   per daemon           CPU s (utime+stime), rchar, wchar, read_bytes,
#                        write_bytes (/proc/PID/io), block-I/O delay
#                        (delayacct_blkio_ticks, /proc/PID/task/*/stat field
#                        42, live threads; 0 while kernel.task_delayacct is
#                        off), as differences over the step; sampled when
#                        every subscriber applied the step and the publisher
#                        is idle; peak RSS (VmHWM) at the end, goal < 256 MiB
# After each step the full subscriber's target must be byte-identical to
# the checkpoint (SHA-256 of every file against the trainer's) and the
# partial one must hold exactly its files, identical, and nothing else;
# a mismatch stops the run with exit 1. The check reads each target file
# once and drops it from the page cache after (posix_fadvise DONTNEED), so
# a step starts with no target file cached by the check.
#
# Under the table, the machine's I/O and CPU pressure over each step
# (/proc/pressure: the share of the time some task waited; everything on
# the machine counts), to tell a noisy run.
#
# Each row is checked for consistency (HEAD after the announcement, each
# subscriber's apply after HEAD: it renames nothing in before HEAD names
# the version, built ahead or not); a row that is not says so. At the end
# of each backend's tables, each goal of the run with its figure, "ok" or
# "MISSED". DIR/bench-scale.tsv has no empty field ("-" where a figure does
# not apply), so whitespace-splitting readers (awk, read) keep the columns;
# a TSV of another layout left in DIR is moved aside, not appended to.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prebuilt=0
[ -n "${WSYNC:-}" ] && [ -n "${WSYNCD:-}" ] && prebuilt=1
PYTHON3=${PYTHON3:-/usr/bin/python3}
GEN=$root/scripts/gen-checkpoints

quick=0 params= shards= steps= backend= dir= keep=0 mmap=0 throttle= parts=1 apart=1 subset=() partial=
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--params) params=$2; shift ;;
	--shards) shards=$2; shift ;;
	--steps) steps=$2; shift ;;
	--backend) backend=$2; shift ;;
	--mmap) mmap=1 ;;
	--throttle) throttle=$2; shift ;;
	--parts) parts=$2; shift ;;
	--no-apart) apart=0 ;;
	--partial) partial=$2; shift ;;
	--sub)
		case $2 in
		[a-z]*=*) subset+=("${2%%=*} = ${2#*=}") ;;
		*) echo "bench-scale.sh: --sub KEY=VALUE" >&2; exit 2 ;;
		esac
		shift
		;;
	--dir) dir=$2; shift ;;
	--keep) keep=1 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-scale.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
if [ $quick = 1 ]; then
	[ -n "$params" ] || params=200M
	[ -n "$shards" ] || shards=4
	[ -n "$steps" ] || steps=1
	[ -n "$backend" ] || backend=file
	[ "$backend" = file ] || { echo "bench-scale.sh: --quick is file:// only" >&2; exit 2; }
fi
[ -n "$shards" ] || shards=16
[ -n "$steps" ] || steps=2
[ -n "$backend" ] || backend=file
[ "$backend" = both ] && backend="file s3"
for b in $backend; do
	case $b in file | s3) ;; *) echo "bench-scale.sh: --backend file, s3 or both" >&2; exit 2 ;; esac
done
case $shards in '' | *[!0-9]*) echo "bench-scale.sh: --shards N" >&2; exit 2 ;; esac
case $steps in '' | *[!0-9]*) echo "bench-scale.sh: --steps N" >&2; exit 2 ;; esac
[ "$shards" -ge 2 ] || { echo "bench-scale.sh: --shards must be at least 2 (the partial subscriber takes half)" >&2; exit 2; }
[ "$steps" -ge 1 ] || { echo "bench-scale.sh: --steps must be at least 1" >&2; exit 2; }
rate=0
if [ -n "$throttle" ]; then
	rate=$("$PYTHON3" -c '
import re, sys
m = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMgG]?)(i?)[bB]?(/s)?\s*", sys.argv[1])
if not m or float(m.group(1)) <= 0:
    sys.exit("bench-scale.sh: --throttle RATE: bytes a second, e.g. 20M")
k = {"": 0, "k": 1, "m": 2, "g": 3}[m.group(2).lower()]
print(int(float(m.group(1)) * (1024 if m.group(3) else 1000) ** k))' "$throttle")
	case " $backend " in *" s3 "*) ;; *) echo "bench-scale.sh: --throttle is for --backend s3 (or both)" >&2; exit 2 ;; esac
fi
[ -n "$dir" ] || dir=$(mktemp -d "${TMPDIR:-/var/tmp}/wsync-bench-scale.XXXXXX")
mkdir -p "$dir"
WORK=$(cd "$dir" && pwd)
TSV=$WORK/bench-scale.tsv

# s3rver helpers (tests/integration/s3-servers.sh wants lib.sh's TMP)
TMP=$WORK
WSYNC_SOURCE_ROOT=$root
. "$root/tests/integration/s3-servers.sh"

declare -A PID=() PROXY_PID=() PROXY_URL=()
MNT= LOOPDEV= IMG= SUBFS=plain TRAINER_PID=
now() { date +%s.%N; }
# psi: the machine's I/O and CPU "some" stall totals (microseconds; - without PSI)
psi() {
	local f v
	for f in io cpu; do
		v=$(sed -n 's/^some .*total=\([0-9]*\)$/\1/p' "/proc/pressure/$f" 2>/dev/null)
		printf '%s ' "${v:--}"
	done
}
commas() { sed ':a; s/\B[0-9]\{3\}\>/,&/; ta' <<<"$1"; }

# stop_pid PID: SIGTERM, at most 30 s, then SIGKILL; reaped.
stop_pid() {
	local p=$1 i
	kill -TERM "$p" 2>/dev/null || return 0
	for ((i = 0; i < 300; i++)); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$p" 2>/dev/null && { echo "# pid $p ignored SIGTERM for 30 s: SIGKILL" >&2; kill -KILL "$p" 2>/dev/null; }
	wait "$p" 2>/dev/null || true
}
proxies_stop() {
	local n
	for n in "${!PROXY_PID[@]}"; do
		FAULTPROXY_PID=${PROXY_PID[$n]}
		faultproxy_stop
		unset "PROXY_PID[$n]"
	done
}
subfs_umount() {
	local i
	[ -n "$MNT" ] || return 0
	if mountpoint -q "$MNT"; then
		timeout 120 umount "$MNT" 2>/dev/null ||
			{ echo "# umount $MNT failed or took over 2 min: lazy unmount" >&2; umount -l "$MNT" || true; }
	fi
	if [ -n "$LOOPDEV" ]; then
		for ((i = 0; i < 50; i++)); do
			losetup -d "$LOOPDEV" 2>/dev/null && break
			sleep 0.2
		done
		LOOPDEV=
	fi
	MNT=
}
cleanup() {
	local st=$? n
	for n in "${!PID[@]}"; do [ -n "${PID[$n]}" ] && stop_pid "${PID[$n]}"; done
	[ -n "$TRAINER_PID" ] && stop_pid "$TRAINER_PID"
	proxies_stop
	s3servers_stop_all
	subfs_umount
	if [ $keep = 1 ]; then
		echo "kept $WORK" >&2
	else
		# everything but the TSV
		find "$WORK" -mindepth 1 -maxdepth 1 ! -name bench-scale.tsv -exec rm -rf {} + 2>/dev/null || true
		[ -s "$TSV" ] && echo "# TSV: $TSV" >&2
	fi
	exit "$st"	# the status the script was leaving with, whatever ran here
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

. "$root/scripts/bench-build.sh"
bench_build bench-scale.sh

delayacct=$(cat /proc/sys/kernel/task_delayacct 2>/dev/null || echo 0)
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
echo "# bench-scale: backends: $backend; $shards shards, 1 anchor + $steps delta steps;" \
	"one publisher, a full and a partial subscriber; source commit $commit, wsyncd $WSYNCD;" \
	"$(nproc) cores, $(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo) GiB RAM;" \
	"load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# work dir $WORK ($(df -h --output=fstype "$WORK" | tail -1 | tr -d ' '))"
[ "$delayacct" = 1 ] || echo "# block-I/O delay: kernel.task_delayacct is 0 (delay accounting off), so every delay reads 0"
[ $mmap = 1 ] && echo "# --mmap: the publisher runs with WSYNC_MMAP=1: its encoder reads through mappings, which rchar does not count (rchar undercounts; read_bytes shown)"

# The disk under the work dir (the bucket, the subscribers' image), alone:
# 2 GiB written and read back around the page cache, once, before the run.
# With the daemons' bytes to and from it, the report gives the least time
# a step's I/O takes here (one host: the floor under its goal line).
disk_probe() {
	local f=$WORK/disk-probe t0 t1 t2
	t0=$(date +%s.%N)
	dd if=/dev/zero of="$f" bs=8M count=256 oflag=direct conv=fsync status=none || return 1
	t1=$(date +%s.%N)
	dd if="$f" of=/dev/null bs=8M iflag=direct status=none || return 1
	t2=$(date +%s.%N)
	rm -f "$f"
	awk -v a="$t0" -v b="$t1" -v c="$t2" \
		'BEGIN { printf "%.0f %.0f\n", 2147483648 / (b - a), 2147483648 / (c - b) }' >"$WORK/disk-rates"
	echo "# the work dir's disk alone (2 GiB, O_DIRECT): write $(awk '{ printf "%.2f", $1 / 1e9 }' "$WORK/disk-rates") GB/s, read $(awk '{ printf "%.2f", $2 / 1e9 }' "$WORK/disk-rates") GB/s"
}
disk_probe || { rm -f "$WORK/disk-probe" "$WORK/disk-rates"; echo "# the work dir's disk: not measured (dd with O_DIRECT failed)"; }

# The helper programs are beside this script (run with $PYTHON3):
# bench-scale-trainer.py (writes a checkpoint, hashing it), bench-scale-verify.py
# (a target against those hashes), bench-proc.py (a process's CPU, I/O and peak
# RSS), bench-scale-size.py (a checkpoint's size and shards), bench-scale-report.py
# (the tables).

# ---- the subscribers' file system ----------------------------------------------------
# subfs_setup BYTES: an ext4 of BYTES (sparse image) mounted at $WORK/subfs,
# or a plain directory; sets SUBFS (what it is, for the output).
subfs_setup() {
	local size=$1 why=
	MNT=$WORK/subfs
	IMG=$WORK/subfs.img
	mkdir -p "$MNT"
	if [ "$(id -u)" != 0 ]; then
		why="not root"
	elif ! command -v mkfs.ext4 >/dev/null || ! command -v losetup >/dev/null; then
		why="mkfs.ext4 or losetup missing"
	else
		rm -f "$IMG"
		truncate -s "$size" "$IMG"
		if ! mkfs.ext4 -q -F -m 0 -L wsync-bench "$IMG" >"$WORK/mkfs.log" 2>&1; then
			why="mkfs.ext4 failed ($(tail -1 "$WORK/mkfs.log"))"
		elif LOOPDEV=$(losetup -f --show --direct-io=on "$IMG" 2>"$WORK/losetup.log") &&
			mount "$LOOPDEV" "$MNT" 2>"$WORK/mount.log"; then
			if [ "$(cat "/sys/block/${LOOPDEV#/dev/}/loop/dio" 2>/dev/null)" = 1 ]; then
				SUBFS="ext4 of its own (own journal) on $LOOPDEV, direct I/O to the sparse image $IMG"
			else
				SUBFS="ext4 of its own (own journal) on $LOOPDEV (buffered: the image's pages are cached twice), sparse image $IMG"
			fi
		else
			[ -n "$LOOPDEV" ] && { losetup -d "$LOOPDEV" 2>/dev/null || true; }
			LOOPDEV=
			if mount -o loop "$IMG" "$MNT" 2>"$WORK/mount.log"; then
				SUBFS="ext4 of its own (own journal), mount -o loop of the sparse image $IMG"
			else
				why="mount failed ($(tail -1 "$WORK/mount.log"))"
			fi
		fi
	fi
	if [ -n "$why" ]; then
		rm -f "$IMG"
		MNT=
		mkdir -p "$WORK/subfs"
		SUBFS="plain directories on the work dir's file system ($why): the trainer's and the publisher's writes share ext4's journal with the subscribers' fsyncs"
	fi
}

# ---- one backend ------------------------------------------------------------------------
# wait_applied LOG PID V DEADLINE: LOG has "version V (step V) applied",
# while PID lives, before DEADLINE (epoch seconds)
wait_applied() {
	local log=$1 pid=$2 v=$3 deadline=$4
	while :; do
		grep -q "info: version $v (step $v) applied" "$log" && return 0
		kill -0 "$pid" 2>/dev/null || { echo "bench-scale.sh: a daemon died (log $log):" >&2; tail -5 "$log" >&2; return 1; }
		[ "$(date +%s)" -lt "$deadline" ] || { echo "bench-scale.sh: version $v not applied in time (log $log):" >&2; tail -5 "$log" >&2; return 1; }
		sleep 0.1
	done
}
# wait_idle RUNDIR V: its status.json says idle at version V (60 s at most)
wait_idle() {
	local i
	for ((i = 0; i < 600; i++)); do
		if [ -f "$1/status.json" ] && grep -q '"state": "idle"' "$1/status.json" &&
			grep -q "^  \"version\": $2,\$" "$1/status.json"; then
			return 0
		fi
		sleep 0.1
	done
	echo "bench-scale.sh: $1/status.json not idle at version $2 after 60 s" >&2
	return 1
}

run_backend() { # run_backend BACKEND PARAMS
	local b=$1 p=$2
	local d=$WORK/$b url prefix ckb need avail i k s t0 deadline
	local s1_store s2_store pub_store inc shard_names=() half
	rm -rf "$d"
	mkdir -p "$d/watch" "$d/pub"
	# the checkpoint's size, from the trainer's layout
	ckb=$("$PYTHON3" "$root/scripts/bench-scale-size.py" "$GEN" "$p" "$shards")
	read -r ckb k shard_names <<<"$ckb"
	# shellcheck disable=SC2206
	shard_names=($shard_names)
	[ "$k" = "$shards" ] || echo "# the model has $k shards, not $shards (one tensor or more per shard)"
	half=$((k / 2))
	inc=${partial:-"*.json ${shard_names[*]:0:$half}"}
	# disk: watch 2x; the publisher's base (hardlinks of a checkpoint, kept
	# past the rotation) 1x; bucket ~0.8x; subscribers (target, download,
	# the partial's half) ~2.7x; the 8 GB run used 5.4x (43 GB) at most
	# the stages apart: their delta (the anchor: ~0.8x) and their output (1x)
	need=$((ckb * (7 + apart)))
	avail=$(($(df -k --output=avail "$WORK" | tail -1) * 1024))
	if [ "$avail" -lt "$need" ]; then
		echo "bench-scale.sh: $b: $WORK has $((avail / 1000000000)) GB free; a run of $((ckb / 1000000000)) GB checkpoints needs about $((need / 1000000000)) GB ($((7 + apart))x)" >&2
		return 1
	fi
	subfs_setup $((ckb * (5 + apart) + (1 << 30)))
	local sd=$WORK/subfs/$b
	rm -rf "$sd"
	mkdir -p "$sd"

	case $b in
	file)
		mkdir -p "$d/bucket"
		url=file://$d/bucket
		prefix=
		pub_store="url = $url"
		s1_store=$pub_store s2_store=$pub_store
		;;
	s3)
		printf '[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n' >"$WORK/s3.cred"
		read -r port < <(free_ports 1)
		s3rver_start "$WORK/s3rver" "$port" wsync-bench || return 1
		url=s3://wsync-bench/scale
		prefix=scale/
		local e n q
		local names="pub s1 s2"
		for ((q = 2; q <= parts; q++)); do names="$names pub$q"; done
		for n in $names; do
			e=$S3RVER_ENDPOINT
			if [ "$rate" -gt 0 ]; then
				FAULTPROXY_PID=
				FAULTPROXY_RATE=$rate faultproxy_start "$WORK/proxy-$n" "$S3RVER_PORT" || return 1
				PROXY_PID[$n]=$FAULTPROXY_PID
				PROXY_URL[$n]=$FAULTPROXY_URL
				FAULTPROXY_PID=
				e=${PROXY_URL[$n]}
			fi
			printf -v "${n}_store" 'url = %s\nendpoint = %s\ncredentials = %s\npath_style = true' \
				"$url" "$e" "$WORK/s3.cred"
		done
		;;
	esac

	cat >"$d/pub.ini" <<EOF
[daemon]
role = publisher
state_dir = $d/pub/state
runtime_dir = $d/pub/run
threads = 2
[store]
$pub_store
[publisher]
watch_dir = $d/watch
anchor_every = 100000
keep_anchors = 2
gc_grace = 1d
rescan_interval = 5s
EOF
	# more parts: pub is part 1 (it commits), pub2..pubN the others
	PUBS="pub"
	if [ "$parts" -gt 1 ]; then
		printf 'part = 1/%d\n' "$parts" >>"$d/pub.ini"
		local q
		for ((q = 2; q <= parts; q++)); do
			# each part on its own node: with --throttle, its own link
			sed -e "s|$d/pub/|$d/pub$q/|" -e "s|^part = 1/|part = $q/|" \
				-e "s|^endpoint = ${PROXY_URL[pub]:-}\$|endpoint = ${PROXY_URL[pub$q]:-}|" \
				"$d/pub.ini" >"$d/pub$q.ini"
			mkdir -p "$d/pub$q"
			PUBS="$PUBS pub$q"
		done
	fi
	for s in s1 s2; do
		local st=s1_store
		[ $s = s2 ] && st=s2_store
		{
			printf '[daemon]\nrole = subscriber\nstate_dir = %s\nruntime_dir = %s\nthreads = 2\n' \
				"$sd/$s/state" "$d/$s/run"
			printf '[store]\n%s\n' "${!st}"
			printf '[subscriber]\ntarget_dir = %s\npoll_interval = 200ms\n' "$sd/$s/target"
			[ $s = s2 ] && printf 'include = %s\n' "$inc"
			[ ${#subset[@]} = 0 ] || printf '%s\n' "${subset[@]}"
		} >"$d/$s.ini"
	done
	echo
	echo "## $b: $p parameters, $(commas "$ckb") bytes of weights in $k shards; 1 anchor + $steps delta steps$([ "$parts" -gt 1 ] && echo "; $parts publisher parts")"
	echo "# full subscriber s1: every file; partial subscriber s2: include = $inc"
	echo "# subscribers' state and targets: $SUBFS"
	[ ${#subset[@]} = 0 ] || echo "# both subscribers: $(printf '%s; ' "${subset[@]}")"
	case $SUBFS in ext4*) echo "#   (so the trainer's writes do not charge the subscribers' fsyncs through ext4's shared journal)" ;; esac
	[ "$rate" -gt 0 ] && [ "$b" = s3 ] &&
		echo "# each daemon reaches s3rver through its own faultproxy.py --rate $rate (bytes/s each way)"

	if [ $mmap = 1 ]; then
		WSYNC_MMAP=1 "$WSYNCD" -c "$d/pub.ini" --log-target stderr 2>"$d/pub.log" &
	else
		"$WSYNCD" -c "$d/pub.ini" --log-target stderr 2>"$d/pub.log" &
	fi
	PID[pub]=$!
	local q
	for ((q = 2; q <= parts; q++)); do
		"$WSYNCD" -c "$d/pub$q.ini" --log-target stderr 2>"$d/pub$q.log" &
		PID[pub$q]=$!
	done
	for s in s1 s2; do
		"$WSYNCD" -c "$d/$s.ini" --log-target stderr 2>"$d/$s.log" &
		PID[$s]=$!
	done
	SAMPLE=""
	for s in $PUBS s1 s2; do SAMPLE="$SAMPLE $s=\${PID[$s]}"; done
	for s in $PUBS s1 s2; do
		for ((i = 0; i < 200; i++)); do
			[ -f "$d/$s/run/status.json" ] && break
			kill -0 "${PID[$s]}" 2>/dev/null || break
			sleep 0.1
		done
		[ -f "$d/$s/run/status.json" ] || { echo "bench-scale.sh: $s did not start:" >&2; tail -5 "$d/$s.log" >&2; return 1; }
	done
	eval "\"\$PYTHON3\" \"\$root/scripts/bench-proc.py\" $SAMPLE" >"$d/proc-0.tsv"
	: >"$d/marker-times"
	: >"$d/step-times"
	: >"$d/apart.txt"
	mkdir -p "$d/apart-empty"
	: >"$d/verify.txt"
	local fail=0 total=$((steps + 1)) ts
	for i in $(seq 1 $total); do
		# the trainer's rotation: keep the newest checkpoint and the one it writes
		for k in $(seq 1 $((i - 2))); do rm -rf "$d/watch/checkpoint-$k"; done
		t0=$(now) psi0=$(psi)
		"$PYTHON3" "$root/scripts/bench-scale-trainer.py" "$GEN" "$d/watch/checkpoint-$i" "$i" "$total" "$p" "$shards" \
			"$d/ck-$i.json" &
		TRAINER_PID=$!
		wait "$TRAINER_PID" || { TRAINER_PID=; echo "bench-scale.sh: the trainer failed at step $i" >&2; return 1; }
		TRAINER_PID=
		ts=$(stat -c %.9Y "$d/watch/checkpoint-$i/trainer_state.json")
		echo "$i $ts" >>"$d/marker-times"
		echo "# $b: step $i written in $("$PYTHON3" -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$t0" "$ts") s" >&2
		# bounded: 10 min + 1 s per 5 MB, + 3 transfers at the throttled rate
		deadline=$(($(date +%s) + 600 + ckb / 5000000 + (rate > 0 ? 3 * ckb / rate : 0)))
		for s in s1 s2; do
			wait_applied "$d/$s.log" "${PID[$s]}" "$i" "$deadline" || return 1
		done
		for s in $PUBS s1 s2; do wait_idle "$d/$s/run" "$i" || return 1; done
		# the step's window (the links' bytes are counted in it)
		echo "$i $t0 $(now) $psi0$(psi)" >>"$d/step-times"
		eval "\"\$PYTHON3\" \"\$root/scripts/bench-proc.py\" $SAMPLE" >"$d/proc-$i.tsv"
		for s in $PUBS s1 s2; do cp "$d/$s/run/wsync.prom" "$d/prom-$s-$i.prom"; done
		local v1 v2 r1=0 r2=0
		v1=$("$PYTHON3" "$root/scripts/bench-scale-verify.py" "$d/ck-$i.json" "$sd/s1/target") || r1=1
		# shellcheck disable=SC2086 # the include globs, one argument each
		v2=$(set -f; "$PYTHON3" "$root/scripts/bench-scale-verify.py" "$d/ck-$i.json" "$sd/s2/target" $inc) || r2=1
		printf '%s\t%s\t%s\n%s\t%s\t%s\n' "$i" s1 "$v1" "$i" s2 "$v2" >>"$d/verify.txt"
		echo "# $b: step $i verified: full $v1; partial $v2" >&2
		if [ $r1 = 1 ] || [ $r2 = 1 ]; then
			fail=1
			break
		fi
		if [ $apart = 1 ]; then
			local old=$d/apart-empty fig
			[ "$i" -gt 1 ] && old=$d/watch/checkpoint-$((i - 1))
			fig=$("$PYTHON3" "$root/scripts/bench-scale-apart.py" "$WSYNC" "$old" "$d/watch/checkpoint-$i" \
				"$d/apart.wsd" "$WORK/subfs/$b-apart" 2) || return 1
			echo "$i $fig" >>"$d/apart.txt"
			echo "# $b: step $i's stages apart: wsync diff, wsync apply, delta bytes: $fig" >&2
		fi
	done
	for s in $PUBS s1 s2; do
		stop_pid "${PID[$s]}"
		PID[$s]=
	done
	"$WSYNC" store ls "$url/" --json --config "$d/pub.ini" >"$d/listing.json" 2>/dev/null || echo '[]' >"$d/listing.json"
	# parts' chunks, asked for by their folder: s3rver names no common
	# prefix for parts/, which holds only deeper ones
	[ "$parts" -gt 1 ] && { "$WSYNC" store ls "$url/parts/" --json --config "$d/pub.ini" \
		>"$d/listing-parts.json" 2>/dev/null || echo '[]' >"$d/listing-parts.json"; }
	report "$b" "$d" "$p" "$prefix" "$SUBFS"
	proxies_stop
	[ "$b" = s3 ] && s3rver_stop
	rm -rf "$d/watch" "$d/pub" "$d"/pub[0-9]* "$d/bucket" "$WORK/s3rver" "$sd"
	subfs_umount
	[ $keep = 1 ] || rm -f "$IMG"
	return $fail
}

# ---- the tables ---------------------------------------------------------------------------
report() { # report BACKEND DIR PARAMS PREFIX SUBFS
	"$PYTHON3" "$root/scripts/bench-scale-report.py" "$1" "$2" "$3" "$4" "$5" "$rate" "$mmap" "$delayacct" "$TSV" "$WORK"
}

rc=0
for b in $backend; do
	p=$params
	[ -n "$p" ] || p=$([ "$b" = s3 ] && echo 1B || echo 4B)
	if [ "$b" = s3 ] && ! have_s3rver; then
		echo "# s3: skipped ($S3S_WHY)"
		continue
	fi
	# a failure ends the run (the trap stops what is left running)
	run_backend "$b" "$p" || { rc=1; break; }
done
echo
echo "# latency: from the checkpoint's marker (trainer_state.json's mtime) to each daemon's log line (ms timestamps);"
echo "# same machine for everything; table rows also in $TSV"
exit $rc
