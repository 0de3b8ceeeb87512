#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench-e2e.sh -- wsyncd end to end on loopback: one publisher and K
# subscribers on a file:// bucket and on s3rver, a series of checkpoints
# written into the watched dir one at a time (marker last), against a
# full-copy sync of the same steps.
#
#   scripts/bench-e2e.sh [--quick] [--params P] [--steps N] [--subscribers K]
#                        [--backend file|s3|both] [--dir DIR] [--keep]
#
#   --params P      model size (gen-checkpoints; bf16, 2 bytes/param):
#                   default 500M, --quick 50M; 1B is a 2 GB checkpoint
#   --steps N       delta steps measured (default 4, --quick 3); one more
#                   checkpoint comes first (the anchor, reported apart)
#   --subscribers K default 2
#   --backend       default both (s3 needs tests/s3rver: npm ci --prefix tests/s3rver)
#   --dir DIR       work dir (default a temp dir under /var/tmp)
#
# The programs measured are built from this tree first (build-bench,
# release, as scripts/bench-codec.sh does), so the figures are those of
# the commit the header names; WSYNC and WSYNCD in the environment (both)
# run those programs instead, unbuilt.
#
# Per delta step:
#   e2e      checkpoint complete (trainer_state.json's mtime) to the last
#            subscriber's "version V ... applied" log line (ms timestamps)
#   bytes    the step's objects in the bucket (delta + manifest + HEAD)
#   full     the same step as a full copy: `wsync store put` of every file,
#            then `wsync store get` of every file by each subscriber
#            (subscribers in parallel)
#   encode   `wsync diff PREV NEW` (threads 2), transfer `wsync store put`
#            + one `wsync store get` of that delta, apply `wsync apply` in
#            place on a copy of PREV; ratio = e2e / (encode+transfer+apply),
#            goal <= 1.5
# Per daemon: CPU seconds (utime+stime) and peak RSS (VmHWM) read from
# /proc just before SIGTERM; goal: peak RSS < 256 MiB for a 2 GB checkpoint.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prebuilt=0
[ -n "${WSYNC:-}" ] && [ -n "${WSYNCD:-}" ] && prebuilt=1
PYTHON3=${PYTHON3:-/usr/bin/python3}
GEN=$root/scripts/gen-checkpoints

quick=0 params= steps= subs=2 backend=both dir= keep=0
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=1 ;;
	--params) params=$2; shift ;;
	--steps) steps=$2; shift ;;
	--subscribers) subs=$2; shift ;;
	--backend) backend=$2; shift ;;
	--dir) dir=$2; shift ;;
	--keep) keep=1 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "bench-e2e.sh: unknown option $1" >&2; exit 2 ;;
	esac
	shift
done
[ -n "$params" ] || params=$([ $quick = 1 ] && echo 50M || echo 500M)
[ -n "$steps" ] || steps=$([ $quick = 1 ] && echo 3 || echo 4)
[ "$backend" = both ] && backend="file s3"
[ -n "$dir" ] || dir=$(mktemp -d "${TMPDIR:-/var/tmp}/wsync-bench-e2e.XXXXXX")
mkdir -p "$dir"
WORK=$(cd "$dir" && pwd)

# s3rver helpers (tests/integration/s3-servers.sh wants lib.sh's TMP)
TMP=$WORK
WSYNC_SOURCE_ROOT=$root
. "$root/tests/integration/s3-servers.sh"
declare -A PID=()
cleanup() {
	local n
	for n in "${!PID[@]}"; do [ -n "${PID[$n]}" ] && kill -9 "${PID[$n]}" 2>/dev/null; done
	s3servers_stop_all
	if [ $keep = 1 ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

. "$root/scripts/bench-build.sh"
bench_build bench-e2e.sh

commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
echo "# bench-e2e: params $params (bf16), $steps delta steps (+1 anchor), $subs subscribers," \
	"backends: $backend; source commit $commit, wsyncd $WSYNCD; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# work dir $WORK ($(df -h --output=fstype "$WORK" | tail -1 | tr -d ' '))"

CK=$WORK/ck
t0=$(date +%s)
"$GEN" --params "$params" --steps $((steps + 1)) --no-trainer-files --quiet --out "$CK"
ck_bytes=$(du -sb "$CK/checkpoint-1" | cut -f1)
echo "# generated $((steps + 1)) checkpoints of $ck_bytes bytes in $(($(date +%s) - t0)) s"

now() { date +%s.%N; }
elapsed() { "$PYTHON3" -c 'import sys; print("%.3f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }

# --- separately measured: encode + transfer + apply per delta step ---------
# (file:// bucket and, for s3, s3rver: measured per backend)
components() { # components BACKEND CONFIG URL -> $WORK/comp-BACKEND.tsv
	local b=$1 conf=$2 url=$3 i t1 t2 t3 t4 t5 out=$WORK/comp-$1.tsv
	: >"$out"
	for i in $(seq 2 $((steps + 1))); do
		rm -rf "$WORK/apply" "$WORK/d.wsd" "$WORK/d.got"
		cp -r "$CK/checkpoint-$((i - 1))" "$WORK/apply"
		sync
		t1=$(now)
		"$WSYNC" diff "$CK/checkpoint-$((i - 1))" "$CK/checkpoint-$i" -o "$WORK/d.wsd" --threads 2 >/dev/null
		t2=$(now)
		"$WSYNC" store put "$WORK/d.wsd" "$url/bench-components/$i.wsd" --config "$conf" >/dev/null
		t3=$(now)
		"$WSYNC" store get "$url/bench-components/$i.wsd" "$WORK/d.got" --config "$conf" >/dev/null
		t4=$(now)
		"$WSYNC" apply "$WORK/apply" "$WORK/d.got" --threads 2 >/dev/null
		t5=$(now)
		printf '%s\t%s\t%s\t%s\t%s\n' "$i" "$(elapsed "$t1" "$t2")" "$(elapsed "$t2" "$t4")" \
			"$(elapsed "$t4" "$t5")" "$(stat -c %s "$WORK/d.wsd")" >>"$out"
	done
	rm -rf "$WORK/apply" "$WORK/d.wsd" "$WORK/d.got"
}

# --- full-copy sync of the same steps ------------------------------------------
fullcopy() { # fullcopy BACKEND CONFIG URL -> $WORK/full-BACKEND.tsv
	local b=$1 conf=$2 url=$3 i f s t1 t2 t3 out=$WORK/full-$1.tsv
	: >"$out"
	for i in $(seq 2 $((steps + 1))); do
		t1=$(now)
		for f in "$CK/checkpoint-$i"/*; do
			"$WSYNC" store put "$f" "$url/bench-full/$i/${f##*/}" --config "$conf" >/dev/null
		done
		t2=$(now)
		local gets=()
		for s in $(seq 1 "$subs"); do
			(
				rm -rf "$WORK/full-sub$s"
				mkdir -p "$WORK/full-sub$s"
				for f in "$CK/checkpoint-$i"/*; do
					"$WSYNC" store get "$url/bench-full/$i/${f##*/}" "$WORK/full-sub$s/${f##*/}" \
						--config "$conf" >/dev/null
				done
			) &
			gets+=($!)
		done
		wait "${gets[@]}"	# not a bare wait: s3rver is a child too
		t3=$(now)
		printf '%s\t%s\t%s\n' "$i" "$(elapsed "$t1" "$t2")" "$(elapsed "$t2" "$t3")" >>"$out"
	done
	rm -rf "$WORK"/full-sub*
}

# --- the daemons ------------------------------------------------------------------
proc_usage() { # proc_usage PID: "cpu_seconds peak_rss_kib"
	"$PYTHON3" "$root/scripts/bench-proc.py" "p=$1" | awk '{ print $2, $8 }'
}

daemons() { # daemons BACKEND STORE_LINES -> $WORK/e2e-BACKEND.tsv, $WORK/usage-BACKEND.tsv
	local b=$1 store=$2 d=$WORK/$1 n i v
	rm -rf "$d"
	mkdir -p "$d"/watch "$d"/pub
	cat >"$d/pub.ini" <<EOF
[daemon]
role = publisher
state_dir = $d/pub/state
runtime_dir = $d/pub/run
threads = 2
[store]
$store
[publisher]
watch_dir = $d/watch
anchor_every = 100000
keep_anchors = 2
gc_grace = 1d
rescan_interval = 5s
EOF
	"$WSYNCD" -c "$d/pub.ini" --log-target stderr 2>"$d/pub.log" &
	PID[pub]=$!
	for s in $(seq 1 "$subs"); do
		mkdir -p "$d/s$s"
		cat >"$d/s$s.ini" <<EOF
[daemon]
role = subscriber
state_dir = $d/s$s/state
runtime_dir = $d/s$s/run
threads = 2
[store]
$store
[subscriber]
target_dir = $d/s$s/target
poll_interval = 200ms
EOF
		"$WSYNCD" -c "$d/s$s.ini" --log-target stderr 2>"$d/s$s.log" &
		PID[s$s]=$!
	done
	: >"$d/marker-times"
	for i in $(seq 1 $((steps + 1))); do
		mkdir -p "$d/watch/checkpoint-$i"
		for f in "$CK/checkpoint-$i"/*; do
			[ "${f##*/}" = trainer_state.json ] || cp "$f" "$d/watch/checkpoint-$i/"
		done
		cp "$CK/checkpoint-$i/trainer_state.json" "$d/watch/checkpoint-$i/"
		echo "$i $(stat -c %.9Y "$d/watch/checkpoint-$i/trainer_state.json")" >>"$d/marker-times"
		# every subscriber applied version i, bounded (10 min a step)
		for s in $(seq 1 "$subs"); do
			for _ in $(seq 12000); do
				grep -q "info: version $i (step $i) applied" "$d/s$s.log" && break
				kill -0 "${PID[s$s]}" 2>/dev/null || { echo "subscriber s$s died" >&2; tail "$d/s$s.log" >&2; exit 1; }
				sleep 0.05
			done
			grep -q "info: version $i (step $i) applied" "$d/s$s.log" ||
				{ echo "s$s did not apply version $i in 10 min" >&2; tail "$d/s$s.log" >&2; exit 1; }
		done
		# the trainer keeps 2 checkpoints (the publisher keeps its own base)
		rm -rf "$d/watch/checkpoint-$((i - 2))"
	done
	: >"$WORK/usage-$b.tsv"
	for n in pub $(seq -f 's%g' 1 "$subs"); do
		echo "$n $(proc_usage "${PID[$n]}")" >>"$WORK/usage-$b.tsv"
		kill -TERM "${PID[$n]}"
		wait "${PID[$n]}" || echo "# $n exited with $?" >&2
		PID[$n]=
	done
	"$WSYNC" store ls "${3}/" --json --config "$d/pub.ini" >"$d/listing.json"
	# e2e latency per step from the logs
	"$PYTHON3" "$root/scripts/bench-e2e-latency.py" "$d" "$subs" "$steps" "$4" >"$WORK/e2e-$b.tsv"
}

results() { # results BACKEND: the table rows
	"$PYTHON3" "$root/scripts/bench-e2e-report.py" "$WORK" "$1" "$subs" "$ck_bytes" "$params"
}

for b in $backend; do
	case $b in
	file)
		mkdir -p "$WORK/bucket-file"
		store="url = file://$WORK/bucket-file"
		url=file://$WORK/bucket-file
		prefix=
		;;
	s3)
		if ! have_s3rver; then
			echo "# s3: skipped ($S3S_WHY)"
			continue
		fi
		printf '[default]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n' >"$WORK/s3.cred"
		read -r port < <(free_ports 1)
		s3rver_start "$WORK/s3rver" "$port" wsync-bench
		store=$(printf 'url = s3://wsync-bench/e2e\nendpoint = %s\ncredentials = %s\npath_style = true' \
			"$S3RVER_ENDPOINT" "$WORK/s3.cred")
		url=s3://wsync-bench/e2e
		prefix=e2e/
		;;
	*) echo "unknown backend $b" >&2; exit 2 ;;
	esac
	printf '[daemon]\nrole = publisher\nstate_dir = %s\nruntime_dir = %s\n[store]\n%s\n[publisher]\nwatch_dir = %s\n' \
		"$WORK/tool" "$WORK/tool" "$store" "$WORK/tool-watch" >"$WORK/tool-$b.ini"
	mkdir -p "$WORK/tool" "$WORK/tool-watch"
	echo "# $b: daemons" >&2
	daemons "$b" "$store" "$url" "$prefix"
	echo "# $b: encode + transfer + apply, separately" >&2
	components "$b" "$WORK/tool-$b.ini" "$url"
	echo "# $b: full copy" >&2
	fullcopy "$b" "$WORK/tool-$b.ini" "$url"
	results "$b"
	[ "$b" = s3 ] && s3rver_stop
done
echo
echo "# e2e: checkpoint complete (marker mtime) -> last subscriber's 'applied' log line;"
echo "# (published): -> the publisher's 'published version' line.  Same machine for everything."
