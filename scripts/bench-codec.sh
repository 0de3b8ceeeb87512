#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench-codec.sh -- wsync's delta codec beside the codecs RL users run
# today, on one generated checkpoint series, in one run, side by side:
#
#   wsync            wsync diff / wsync apply
#   xor-zstd -1      slime: per changed tensor zstd -1 of (new XOR old)
#   int32 idx+val    HF TRL: int32 flat indices + raw values
#   uint16 gap+val   TRL's later revision: uint16 index gaps + raw values
#   zstd patch-from  zstd -19 --long=31 --patch-from=OLD, per changed file
#   xdelta3 -9       xdelta3 -9 -e -s OLD, per changed file
#
# (the three in-process peers are tests/bench/bench-peers.c, which checks
# every round trip byte for byte; the CLI tools' and wsync's outputs are
# compared with cmp).  For each consecutive pair of checkpoints, and one
# high-density pair, it prints a markdown table: bytes per changed element,
# delta bytes, ratio to the full checkpoint, encode and apply MB/s with 1
# and 2 threads, peak RSS; the same reading and writing with no codec
# (bench-peers --method io: how far this machine's memory and page cache
# let two threads scale at all); then a line checking wsync's goals.  Speeds are
# the codecs': everything lives on tmpfs (/dev/shm when it has room).  The
# time to apply onto a real disk, fsyncs included, is reported apart
# ("durable write").
#
#   scripts/bench-codec.sh [--params 250M] [--steps 3] [--high-lr 1e-4] [--dtype bf16]
#                          [--runs 3] [--zstd first|all|none] [--shards 2]
#                          [--disk-dir /var/tmp] [--keep] [--quick]
#
# WSYNC_BENCH_BUILD=DIR takes wsync and bench-peers from that meson build
# directory, already built, instead of building build-bench (release), and
# does not run scripts/setup.sh.
#
# MB/s are 10^6 bytes of the target checkpoint (every file of it) per
# second.  wsync and bench-peers report their own codec time (best of
# --runs rounds, each a fresh process; a round runs every method at 1 and
# 2 threads in turn, so drift of the machine's speed over the minutes
# falls on all of them alike); the CLI tools are timed whole by
# /usr/bin/time, once (zstd -19 runs at ~1 MB/s: by default only on the
# first pair).  Peak RSS is /usr/bin/time's %M, the most over all runs.
# The 2-thread scaling a goal line checks is the median over the rounds of
# each round's one-thread time over its two-thread time (the two run back
# to back); the ratio of the best figures is printed beside it.
set -euo pipefail
export LC_ALL=C
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

params=250M
params_set=0
steps=3
high_lr=1e-4
dtype=bf16
runs=3
runs_set=0
zstd_mode=first
zstd_set=0
shards=2
disk_dir=/var/tmp
keep=0
quick=0

usage() {
	cat <<'EOF'
Usage: scripts/bench-codec.sh [OPTIONS]

Generates a checkpoint series on tmpfs and compares wsync diff/apply with
the peers (XOR+zstd -1, int32 indices, uint16 gaps, zstd --patch-from,
xdelta3) on every consecutive pair and one high-density pair.

  --params N     model size for scripts/gen-checkpoints (default 250M,
                 i.e. 500 MB of bf16 per checkpoint)
  --steps N      checkpoints in the series (default 3: two pairs)
  --high-lr LR   learning rate of the extra high-density pair (default
                 1e-4, ~25% of elements change); 0 leaves it out
  --dtype D      dtype of the matrices, as gen-checkpoints --dtype takes it
                 (default bf16; f8_e4m3, f8_e5m2, f16, f32); the size goals
                 (1.25 bytes per changed element, 2x XOR+zstd) are bf16's
                 and are checked for bf16 only
  --runs N       fresh-process runs of wsync and bench-peers per figure,
                 best kept (default 3)
  --zstd MODE    pairs to run zstd -19 --patch-from on: first (default),
                 all, none -- it runs at ~1 MB/s
  --shards N     safetensors shards per checkpoint (default 2)
  --disk-dir D   where the durable-write figure writes (default /var/tmp;
                 must not be tmpfs to mean anything)
  --keep         keep the generated series and results (path printed)
  --quick        smoke run: 50M parameters, one run per figure, no zstd
                 (add --zstd first to include it: ~4 more minutes)
  -h, --help     this text

WSYNC_BENCH_BUILD=DIR uses the wsync and bench-peers already built in
that meson build directory instead of building build-bench (release),
and skips scripts/setup.sh (the tools it needs must be there).
EOF
}

while [ $# -gt 0 ]; do
	case $1 in
	--params) params=$2; params_set=1; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--high-lr) high_lr=$2; shift 2 ;;
	--dtype) dtype=$2; shift 2 ;;
	--runs) runs=$2; runs_set=1; shift 2 ;;
	--zstd) zstd_mode=$2; zstd_set=1; shift 2 ;;
	--shards) shards=$2; shift 2 ;;
	--disk-dir) disk_dir=$2; shift 2 ;;
	--keep) keep=1; shift ;;
	--quick) quick=1; shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-codec: unknown option $1 (see --help)" >&2; exit 2 ;;
	esac
done
if [ "$quick" = 1 ]; then
	[ "$params_set" = 1 ] || params=50M
	[ "$runs_set" = 1 ] || runs=1
	[ "$zstd_set" = 1 ] || zstd_mode=none
fi
case $zstd_mode in first | all | none) ;; *) echo "bench-codec: --zstd first|all|none" >&2; exit 2 ;; esac
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 2 ] || { echo "bench-codec: --steps: 2 or more" >&2; exit 2; }
[[ $runs =~ ^[0-9]+$ ]] && [ "$runs" -ge 1 ] || { echo "bench-codec: --runs: 1 or more" >&2; exit 2; }

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'bench-codec: %s\n' "$*" >&2; exit 1; }

# A given build (WSYNC_BENCH_BUILD) was set up with its tools already;
# running setup.sh again there would race a test suite's own dpkg use.
if [ -z "${WSYNC_BENCH_BUILD:-}" ]; then
	say "installing what is missing"
	scripts/setup.sh
fi
for tool in zstd xdelta3 /usr/bin/time /usr/bin/python3 cmp; do
	command -v "$tool" >/dev/null || die "$tool is missing after scripts/setup.sh"
done

if [ -n "${WSYNC_BENCH_BUILD:-}" ]; then
	# a build directory already built (the smoke test's): no build here
	say "using the programs of $WSYNC_BENCH_BUILD"
	WSYNC=$WSYNC_BENCH_BUILD/daemon/wsync
	PEERS=$WSYNC_BENCH_BUILD/tests/bench/bench-peers
else
	say "building (build-bench, release)"
	if [ ! -d build-bench/meson-private ]; then
		setup_log=$(mktemp)
		meson setup build-bench -Dbuildtype=release >"$setup_log" 2>&1 ||
			{ cat "$setup_log"; rm -f "$setup_log"; die "meson setup failed"; }
		mv "$setup_log" build-bench/setup.log
	fi
	# only the two programs measured: a test another change breaks does
	# not stop the benchmark
	ninja -C build-bench daemon/wsync tests/bench/bench-peers >build-bench/build.log 2>&1 ||
		{ tail -40 build-bench/build.log; die "build failed"; }
	WSYNC=$root/build-bench/daemon/wsync
	PEERS=$root/build-bench/tests/bench/bench-peers
fi
[ -x "$PEERS" ] || die "$PEERS was not built"
have_wsync=0
if "$WSYNC" --help 2>/dev/null | grep -qE '^ +diff ' &&
	"$WSYNC" --help 2>/dev/null | grep -qE '^ +apply '; then
	have_wsync=1
else
	say "wsync diff/apply are not built yet: their rows will say so"
fi

# ---- where the data goes ------------------------------------------------
shape=$(scripts/gen-checkpoints --params "$params" --shards "$shards" --dtype "$dtype" --dry-run x) ||
	die "gen-checkpoints --params $params --dtype $dtype --dry-run failed"
ckpt_bytes=$(/usr/bin/python3 -c '
import re, sys
m = re.search(r"([0-9.]+) (kB|MB|GB|TB) \w+ in", sys.argv[1])
print(int(float(m.group(1)) * {"kB": 1e3, "MB": 1e6, "GB": 1e9, "TB": 1e12}[m.group(2)]) if m else "")
' "$shape")
[ -n "$ckpt_bytes" ] || die "could not size a $params checkpoint from: $shape"
ckpt_mb=$((ckpt_bytes / 1000000))
n_ckpt=$((steps + 2))
[ "$high_lr" = 0 ] && n_ckpt=$steps
# the series, plus per pair: a base copy, wsync's and a peer's output, deltas
need=$((ckpt_bytes * (n_ckpt + 4) + (256 << 20)))
avail() { df -B1 --output=avail "$1" 2>/dev/null | tail -1; }
if [ -d /dev/shm ] && [ "$(avail /dev/shm)" -ge "$need" ]; then
	base=/dev/shm
else
	base=${TMPDIR:-/tmp}
	say "WARNING: /dev/shm lacks the $((need >> 20)) MiB needed; using $base," \
		"so the speeds include that file system"
	[ "$(avail "$base")" -ge "$need" ] || die "$base lacks the $((need >> 20)) MiB needed too"
fi
work=$(mktemp -d "$base/wsync-bench.XXXXXX")
disk=
cleanup() {
	[ -n "$disk" ] && rm -rf "$disk"
	if [ "$keep" = 1 ]; then
		rm -rf "$work/tmp"
		echo "bench-codec: kept the series and results in $work" >&2
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
res=$work/results
mkdir -p "$res" "$work/tmp"

# ---- the series -----------------------------------------------------------
gen() {
	scripts/gen-checkpoints --params "$params" --shards "$shards" --dtype "$dtype" \
		--no-trainer-files --quiet "$@"
}
say "generating $steps checkpoints of a $params-parameter $dtype model ($ckpt_mb MB each) in $work"
gen --steps "$steps" --out "$work/series"
pairs=()
prev=
for d in $(ls -d "$work"/series/checkpoint-* | sort -t- -k2 -n); do
	[ -n "$prev" ] && pairs+=("$prev|$d|step $(basename "$prev" | cut -d- -f2) -> $(basename "$d" | cut -d- -f2)")
	prev=$d
done
if [ "$high_lr" != 0 ]; then
	say "generating a high-density pair (--lr $high_lr)"
	gen --steps 2 --lr "$high_lr" --seed 2 --out "$work/high"
	pairs+=("$work/high/checkpoint-1|$work/high/checkpoint-2|high density (--lr $high_lr), step 1 -> 2")
fi

# ---- helpers ----------------------------------------------------------------
# timed PREFIX CMD...: run CMD with stdout in PREFIX.out, stderr in
# PREFIX.err and "seconds peak-RSS-KiB" from /usr/bin/time in PREFIX.time.
timed() {
	local p=$1
	shift
	/usr/bin/time -f '%e %M' -o "$p.time" "$@" >"$p.out" 2>"$p.err"
}

# same_tree EXPECTED GOT WHAT: GOT holds exactly EXPECTED's files, byte for
# byte, or the run fails loudly.
same_tree() {
	local a=$1 b=$2 what=$3 f
	if ! cmp -s <(cd "$a" && find . -type f | sort) <(cd "$b" && find . -type f | sort); then
		die "ROUND TRIP MISMATCH: $what: the files of $b are not those of $a"
	fi
	while IFS= read -r f; do
		cmp -s "$a/$f" "$b/$f" || die "ROUND TRIP MISMATCH: $what: $b/$f differs from $a/$f"
	done < <(cd "$a" && find . -type f | sort)
}

# changed_files OLD NEW: the files of NEW that OLD lacks or holds otherwise.
changed_files() {
	local f
	while IFS= read -r f; do
		cmp -s "$1/$f" "$2/$f" 2>/dev/null || printf '%s\n' "$f"
	done < <(cd "$2" && find . -type f | sort | sed 's|^\./||')
}

# cli_peer TOOL THREADS OLD NEW OUTPREFIX: encode every changed file with
# the CLI tool, apply it, compare; writes OUTPREFIX-enc.json and
# OUTPREFIX-apply.json ({"seconds", "rss_kib", "bytes"}), or OUTPREFIX.note.
cli_peer() {
	local tool=$1 t=$2 old=$3 new=$4 out=$5 f z o
	local tmp=$work/tmp/$tool
	local es=0 er=0 as=0 ar=0 bytes=0 s r
	rm -rf "$tmp" && mkdir -p "$tmp/d" "$tmp/o"
	while IFS= read -r f; do
		if [ "$tool" = zstd ] &&
			{ [ "$(stat -c %s "$new/$f")" -gt $((2 << 30)) ] ||
				{ [ -f "$old/$f" ] && [ "$(stat -c %s "$old/$f")" -gt $((2 << 30)) ]; }; }; then
			echo "skipped: $f is over 2 GiB, more than --patch-from can take" >"$out.note"
			return 0
		fi
		z=$tmp/d/$(echo "$f" | tr / _)
		o=$tmp/o/$f
		mkdir -p "$(dirname "$o")"
		local src=$old/$f
		[ -f "$src" ] || src=/dev/null
		if [ "$tool" = zstd ]; then
			timed "$tmp/e" zstd -q -f -19 --long=31 -T"$t" --patch-from="$src" "$new/$f" -o "$z" ||
				die "zstd --patch-from failed on $f: $(tail -3 "$tmp/e.err")"
			timed "$tmp/a" zstd -q -f -d --long=31 --patch-from="$src" "$z" -o "$o" ||
				die "zstd -d --patch-from failed on $f: $(tail -3 "$tmp/a.err")"
		else
			timed "$tmp/e" xdelta3 -9 -e -f -s "$src" "$new/$f" "$z" ||
				die "xdelta3 -e failed on $f: $(tail -3 "$tmp/e.err")"
			timed "$tmp/a" xdelta3 -d -f -s "$src" "$z" "$o" ||
				die "xdelta3 -d failed on $f: $(tail -3 "$tmp/a.err")"
		fi
		cmp -s "$new/$f" "$o" || die "ROUND TRIP MISMATCH: $tool: $f"
		read -r s r < <(tail -1 "$tmp/e.time")
		es=$(/usr/bin/python3 -c "print($es + $s)")
		[ "$r" -gt "$er" ] && er=$r
		read -r s r < <(tail -1 "$tmp/a.time")
		as=$(/usr/bin/python3 -c "print($as + $s)")
		[ "$r" -gt "$ar" ] && ar=$r
		bytes=$((bytes + $(stat -c %s "$z")))
		rm -f "$z" "$o"
	done < <(changed_files "$old" "$new")
	printf '{"seconds": %s, "rss_kib": %s, "bytes": %s}\n' "$es" "$er" "$bytes" >"$out-enc.json"
	printf '{"seconds": %s, "rss_kib": %s, "bytes": %s}\n' "$as" "$ar" "$bytes" >"$out-apply.json"
}

# other_busy: CPUs kept busy by other processes (or taken by the host as
# steal) over 2 s while this script sleeps; 0.0 on an idle machine.
cpu_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9, $2+$3+$4+$5+$6+$7+$8+$9}' /proc/stat; }
other_busy() {
	local b0 t0 b1 t1
	read -r b0 t0 < <(cpu_ticks)
	sleep 2
	read -r b1 t1 < <(cpu_ticks)
	awk -v b="$((b1 - b0))" -v t="$((t1 - t0))" -v n="$(nproc)" \
		'BEGIN {printf "%.2f", t ? b / t * n : 0}'
}

# ---- the runs ---------------------------------------------------------------
{
	echo "{\"nproc\": $(nproc),"
	echo " \"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p' | head -1)\","
	echo " \"threads_per_core\": \"$(lscpu | sed -n 's/^Thread(s) per core: *//p' | head -1)\","
	echo " \"cores_per_socket\": \"$(lscpu | sed -n 's/^Core(s) per socket: *//p' | head -1)\","
	echo " \"kernel\": \"$(uname -r)\", \"workdir\": \"$work\","
	echo " \"fs\": \"$(stat -f -c %T "$work")\", \"params\": \"$params\", \"runs\": $runs,"
	echo " \"dtype\": \"$dtype\","
	echo " \"commit\": \"$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)\","
	echo " \"load_start\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"have_wsync\": $have_wsync}"
} >"$res/machine.json"

i=0
for p in "${pairs[@]}"; do
	i=$((i + 1))
	IFS='|' read -r old new label <<<"$p"
	out=$res/pair$i
	mkdir -p "$out"
	full=$(find "$new" -type f -printf '%s\n' | awk '{s += $1} END {print s}')
	printf '{"label": "%s", "old": "%s", "new": "%s", "full_bytes": %s, "busy": %s}\n' \
		"$label" "$old" "$new" "$full" "$(other_busy)" >"$out/meta.json"
	say "pair $i: $label"

	# Rounds, not blocks of runs: each round runs every method at 1 and
	# 2 threads, so a machine that gets slower or faster over the minutes
	# (a shared VM does) weighs on every method and thread count alike,
	# and the best of the rounds compares like with like.  A method's two
	# runs are back to back (the scaling pairs them), one thread first in
	# odd rounds, two in even ones (what a run leaves behind -- cached
	# pages, freed memory the host takes back -- falls on both alike).
	if [ "$have_wsync" = 1 ]; then
		rm -rf "$work/tmp/base"
		cp -a "$old" "$work/tmp/base"
	fi
	mkdir -p "$work/tmp/peer-out"
	for r in $(seq "$runs"); do
		say "  round $r of $runs: wsync diff / apply, bench-peers xor-zstd, int32, uint16, io (1 and 2 threads)"
		order="1 2"
		[ $((r % 2)) = 1 ] || order="2 1"
		if [ "$have_wsync" = 1 ]; then
			for t in $order; do
				timed "$out/wsync-diff-t$t-r$r" "$WSYNC" diff "$old" "$new" \
					-o "$work/tmp/delta.wsd" --threads "$t" --json ||
					die "wsync diff failed: $(tail -5 "$out/wsync-diff-t$t-r$r.err")"
			done
			rm -rf "$work/tmp/out-t1" "$work/tmp/out-t2"
			for t in $order; do
				timed "$out/wsync-apply-t$t-r$r" "$WSYNC" apply "$work/tmp/base" \
					"$work/tmp/delta.wsd" -o "$work/tmp/out-t$t" --threads "$t" --json ||
					die "wsync apply failed: $(tail -5 "$out/wsync-apply-t$t-r$r.err")"
			done
			for t in 1 2; do
				same_tree "$new" "$work/tmp/out-t$t" "wsync apply --threads $t"
				rm -rf "$work/tmp/out-t$t"
			done
		fi
		for m in xor-zstd int32 uint16 io; do
			for t in $order; do
				timed "$out/peer-$m-t$t-r$r" "$PEERS" "$old" "$new" --method "$m" \
					--threads "$t" --write-dir "$work/tmp/peer-out" --json ||
					die "bench-peers --method $m failed: $(tail -5 "$out/peer-$m-t$t-r$r.err")"
			done
		done
	done
	if [ "$have_wsync" = 1 ]; then
		same_tree "$old" "$work/tmp/base" "wsync apply -o left its TARGET"
		cp "$work/tmp/delta.wsd" "$out/wsync.delta" # for the durable write
		rm -rf "$work/tmp/base"
	fi

	say "  xdelta3 -9 (one thread: xdelta3 has no others)"
	cli_peer xdelta3 1 "$old" "$new" "$out/xdelta3-t1"
	if [ "$zstd_mode" = all ] || { [ "$zstd_mode" = first ] && [ "$i" = 1 ]; }; then
		for t in 1 2; do
			say "  zstd -19 --long=31 --patch-from -T$t (slow: ~1 MB/s)"
			cli_peer zstd "$t" "$old" "$new" "$out/zstd-t$t"
		done
	else
		echo "not run on this pair (--zstd $zstd_mode; it runs at ~1 MB/s)" >"$out/zstd-t1.note"
	fi
done

# ---- durable write: wsync apply onto a disk, with its fsyncs ---------------
last_low=$((steps - 1)) # the last pair of the series
if [ "$have_wsync" = 1 ] && [ -d "$disk_dir" ] && [ -f "$res/pair$last_low/wsync.delta" ]; then
	IFS='|' read -r old new label <<<"${pairs[$((last_low - 1))]}"
	disk=$(mktemp -d "$disk_dir/wsync-bench-disk.XXXXXX")
	say "durable write: wsync apply onto $disk_dir ($(stat -f -c %T "$disk")), pair $last_low"
	sync
	timed "$res/durable-wsync" "$WSYNC" apply "$old" "$res/pair$last_low/wsync.delta" \
		-o "$disk/out" --threads 1 --json || die "wsync apply onto disk failed"
	same_tree "$new" "$disk/out" "wsync apply onto disk"
	# the floor: the same bytes copied there and fsynced, by coreutils
	sync
	mkdir -p "$disk/cp"
	t0=$(date +%s.%N)
	cp -r "$new/." "$disk/cp/"
	find "$disk/cp" -type f -exec sync {} +
	sync "$disk/cp"
	t1=$(date +%s.%N)
	printf '{"pair": %s, "fs": "%s", "dir": "%s", "cp_fsync_s": %s}\n' "$last_low" \
		"$(stat -f -c %T "$disk")" "$disk_dir" \
		"$(/usr/bin/python3 -c "print($t1 - $t0)")" >"$res/durable.json"
	rm -rf "$disk"
	disk=
fi
sed -i "s|\"have_wsync\"|\"load_end\": \"$(cut -d' ' -f1-3 /proc/loadavg)\", \"have_wsync\"|" "$res/machine.json"
rm -f "$res"/pair*/wsync.delta

# ---- the tables ---------------------------------------------------------------
/usr/bin/python3 - "$res" <<'EOF'
import glob, json, os, statistics, sys

res = sys.argv[1]
machine = json.load(open(os.path.join(res, "machine.json")))
MIB = 1 << 20


def load_json_out(path):
    """The last line of a tool's stdout that parses as JSON."""
    for line in reversed(open(path).read().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"bench-codec: no JSON in {path}")


def time_rss(prefix):
    return int(open(prefix + ".time").read().split()[-1])


def runs(pair_dir, stem):
    """[(json, rss_kib)] of every run PAIR/STEM-r*."""
    out = []
    found = glob.glob(os.path.join(pair_dir, stem + "-r*.out"))
    for p in sorted(found, key=lambda p: int(p[:-4].rsplit("-r", 1)[1])):  # round order
        prefix = p[:-4]
        out.append((load_json_out(p), time_rss(prefix)))
    return out


def best(vals):
    vals = [v for v in vals if v]
    return min(vals) if vals else None


def mbs(full, s):
    return full / 1e6 / s if s else None


def fmt_mbs(x):
    return "—" if x is None else f"{x:.1f}" if x < 10 else f"{x:,.0f}"


def fmt_bpc(x):
    return "—" if x is None else f"{x:.3f}"


summary = []
print()
print(f"machine: {machine['cpu']}, nproc {machine['nproc']} "
      f"({machine['cores_per_socket']} cores/socket, {machine['threads_per_core']} thread/core "
      f"as the guest sees it), kernel {machine['kernel']}; data on {machine['fs']}; "
      f"load average {machine['load_start']} at start, {machine.get('load_end', '?')} at end")
print(f"source: commit {machine['commit']}; model {machine['params']} params, {machine['dtype']} matrices; "
      f"wsync and bench-peers: best of {machine['runs']} "
      f"fresh-process run(s); zstd/xdelta3: one run, whole-process wall time")
busiest = max(json.load(open(m))["busy"] for m in glob.glob(os.path.join(res, "pair*", "meta.json")))
if busiest > 0.2:
    print(f"NOTE: other work was running on this {machine['nproc']}-CPU machine (up to {busiest:.2f} "
          f"CPUs busy before a pair): speeds, the 2-thread ones most, are lower and noisier than "
          f"on an idle machine")

for pair_dir in sorted(glob.glob(os.path.join(res, "pair*")), key=lambda d: int(d.rsplit("pair", 1)[1])):
    meta = json.load(open(os.path.join(pair_dir, "meta.json")))
    full = meta["full_bytes"]
    rows = []

    # the peers in bench-peers: exact changed-element counts come from here
    changed = elements = None
    peer = {}
    for m in ("xor-zstd", "int32", "uint16", "io"):
        r = {}
        for t in (1, 2):
            rr = runs(pair_dir, f"peer-{m}-t{t}")
            r[t] = rr
            for j, _ in rr:
                if not j.get("verified"):
                    raise SystemExit(f"bench-codec: bench-peers {m} did not verify")
                changed, elements = j["changed"], j["elements"]
        peer[m] = r
    density = changed / elements if elements else 0

    def row(name, delta, enc, app, app_mem, rss, note="", scale=None):
        rows.append(dict(name=name, delta=delta, enc=enc, app=app, app_mem=app_mem,
                         rss=rss, note=note, scale=scale or {}))

    def paired(t1, t2):
        """Median over rounds of one-thread time / two-thread time: the two
        runs of a round are back to back, so a drift of the machine falls
        on both (a ratio of best figures follows the luckiest run)."""
        r = [a / b for a, b in zip(t1, t2) if a and b]
        return statistics.median(r) if r else None

    # wsync
    w = {}
    if machine["have_wsync"]:
        for t in (1, 2):
            w[t] = (runs(pair_dir, f"wsync-diff-t{t}"), runs(pair_dir, f"wsync-apply-t{t}"))
        d = w[1][0][0][0]
        note = ""
        if d.get("changed") is not None and d["changed"] != changed:
            note = f"wsync counts {d['changed']} changed elements"
        row("wsync", d["delta_bytes"],
            {t: mbs(full, best(j["seconds"] for j, _ in w[t][0])) for t in (1, 2)},
            {t: mbs(full, best(j["seconds"] for j, _ in w[t][1])) for t in (1, 2)},
            {1: None, 2: None},
            {t: max(r for _, r in w[t][0] + w[t][1]) / 1024 for t in (1, 2)}, note,
            {k: paired([j["seconds"] for j, _ in w[1][i]], [j["seconds"] for j, _ in w[2][i]])
             for k, i in (("enc", 0), ("app", 1))})
    else:
        rows.append(dict(name="wsync", missing="not built yet"))

    # io: the reading and writing alone, what no codec can scale past
    io = peer["io"]
    io_scale = {k: paired([j[f] for j, _ in io[1]], [j[f] for j, _ in io[2]])
                for k, f in (("enc", "encode_s"), ("app", "apply_files_s"))}
    io_mbs = {k: {t: mbs(full, best(j[f] for j, _ in io[t])) for t in (1, 2)}
              for k, f in (("enc", "encode_s"), ("app", "apply_files_s"))}

    names = {"xor-zstd": "XOR+zstd -1 (slime)", "int32": "int32 idx + values (TRL)",
             "uint16": "uint16 gaps + values (TRL)"}
    for m in ("xor-zstd", "int32", "uint16"):
        r = peer[m]
        row(names[m], r[1][0][0]["delta_bytes"],
            {t: mbs(full, best(j["encode_s"] for j, _ in r[t])) for t in (1, 2)},
            {t: mbs(full, best(j["apply_files_s"] for j, _ in r[t])) for t in (1, 2)},
            {t: mbs(full, best(j["apply_s"] for j, _ in r[t])) for t in (1, 2)},
            {t: max(x for _, x in r[t]) / 1024 for t in (1, 2)}, "",
            {k: paired([j[f] for j, _ in r[1]], [j[f] for j, _ in r[2]])
             for k, f in (("enc", "encode_s"), ("app", "apply_files_s"))})

    for tool, name in (("zstd", "zstd -19 --long=31 --patch-from"), ("xdelta3", "xdelta3 -9")):
        notes = glob.glob(os.path.join(pair_dir, f"{tool}-t*.note"))
        if notes:
            rows.append(dict(name=name, missing=open(notes[0]).read().strip()))
            continue
        enc, app, rss, delta = {}, {}, {}, None
        for t in (1, 2):
            e = os.path.join(pair_dir, f"{tool}-t{t}-enc.json")
            a = os.path.join(pair_dir, f"{tool}-t{t}-apply.json")
            if not os.path.exists(e):
                enc[t] = app[t] = rss[t] = None
                continue
            e, a = json.load(open(e)), json.load(open(a))
            delta = e["bytes"]
            enc[t] = mbs(full, e["seconds"])
            # decompression is single-threaded in both tools: show it once
            app[t] = mbs(full, a["seconds"]) if t == 1 else None
            rss[t] = max(e["rss_kib"], a["rss_kib"]) / 1024
        row(name, delta, enc, app, {1: None, 2: None}, rss)

    print()
    print(f"### Pair {pair_dir.rsplit('pair', 1)[1]}: {meta['label']} — "
          f"{full / 1e6:,.1f} MB, density {100 * density:.3f}% "
          f"({changed:,} of {elements:,} elements changed); other work kept "
          f"{meta['busy']:.2f} of {machine['nproc']} CPUs busy just before")
    print()
    print("| method | B/changed elem | delta bytes | ratio to full | encode MB/s 1t | 2t "
          "| apply MB/s 1t | 2t | in-memory apply MB/s 1t | 2t | peak RSS MiB 1t | 2t |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        if "missing" in r:
            print(f"| {r['name']} | {r['missing']} |" + " |" * 10)
            continue
        rs = lambda t: "—" if r["rss"].get(t) is None else f"{r['rss'][t]:,.0f}"
        print(f"| {r['name']} | {fmt_bpc(r['delta'] / changed if changed else None)} "
              f"| {r['delta']:,} | {100 * r['delta'] / full:.3f}% "
              f"| {fmt_mbs(r['enc'][1])} | {fmt_mbs(r['enc'][2])} "
              f"| {fmt_mbs(r['app'][1])} | {fmt_mbs(r['app'][2])} "
              f"| {fmt_mbs(r['app_mem'][1])} | {fmt_mbs(r['app_mem'][2])} "
              f"| {rs(1)} | {rs(2)} |" + (f" {r['note']}" if r["note"] else ""))

    print()
    print(f"Reading and writing alone (bench-peers io, no codec, as in an encode: "
          f"OLD and NEW read; as in an apply to files: NEW read and written): "
          f"encode {fmt_mbs(io_mbs['enc'][1])} / {fmt_mbs(io_mbs['enc'][2])} MB/s at 1 / 2 "
          f"threads, scaling {io_scale['enc'] or 0:.2f}x; apply "
          f"{fmt_mbs(io_mbs['app'][1])} / {fmt_mbs(io_mbs['app'][2])} MB/s, scaling "
          f"{io_scale['app'] or 0:.2f}x")

    # goal checks
    by = {r["name"]: r for r in rows if "missing" not in r}
    ws = by.get("wsync")
    if not ws:
        print("\ngoals: wsync not built yet")
        continue
    xz = by[names["xor-zstd"]]
    peers = [r for r in by.values() if r is not ws]
    best_peer = min(peers, key=lambda r: r["delta"])
    low = 0.003 <= density <= 0.03 and machine["dtype"] == "bf16"
    mid = 0.10 <= density <= 0.50
    checks = []

    def check(ok, text):
        checks.append(("PASS" if ok else "FAIL") + " " + text)
        summary.append((meta["label"], ok, text))

    bpc = ws["delta"] / changed if changed else 0
    if low:
        check(bpc <= 1.25, f"B/changed {bpc:.3f} <= 1.25 (density {100 * density:.2f}%)")
        check(xz["delta"] >= 2 * ws["delta"],
              f"{xz['delta'] / ws['delta']:.2f}x smaller than XOR+zstd -1 (>= 2x)")
    check(ws["delta"] <= best_peer["delta"],
          f"not larger than the best peer ({best_peer['name']}: "
          f"{best_peer['delta'] / ws['delta']:.2f}x wsync)")
    if mid:
        check(ws["delta"] <= xz["delta"], "not larger than XOR+zstd -1 at 10-50% density")
    for what, key, xkey in (("encode", "enc", "enc"), ("apply", "app", "app")):
        v, xv = ws[key][1] or 0, xz[xkey][1] or 0
        check(v >= 1000, f"{what} {v:,.0f} MB/s >= 1 GB/s on one thread")
        check(v >= xv, f"{what} not slower than XOR+zstd -1 ({xv:,.0f} MB/s, 1 thread)")
        b2 = (ws[key][2] or 0) / v if v else 0
        s2 = ws["scale"].get(key) or 0
        xs2 = xz["scale"].get(xkey) or 0
        check(s2 >= 1.7, f"{what} 2-thread scaling {s2:.2f}x >= 1.7x "
              f"(median of the rounds' ratios, {b2:.2f}x from the best figures, "
              f"XOR+zstd -1 scales {xs2:.2f}x here, its reading and writing "
              f"alone {io_scale[key] or 0:.2f}x)")
    rss = max(ws["rss"].values())
    check(rss <= 256, f"peak RSS {rss:,.0f} MiB <= 256 MiB")
    print()
    print("goals (wsync): " + "; ".join(checks))

dpath = os.path.join(res, "durable.json")
if os.path.exists(dpath):
    d = json.load(open(dpath))
    j = load_json_out(os.path.join(res, "durable-wsync.out"))
    wall = float(open(os.path.join(res, "durable-wsync.time")).read().split()[-2])
    meta = json.load(open(os.path.join(res, f"pair{d['pair']}", "meta.json")))
    full = meta["full_bytes"]
    print()
    print(f"durable write (pair {d['pair']}, onto {d['dir']}, {d['fs']}, one thread): "
          f"wsync apply with its fsyncs {j['seconds']:.2f} s ({mbs(full, j['seconds']):,.0f} MB/s; "
          f"{wall:.2f} s wall); cp + fsync of the same {full / 1e6:,.0f} MB: {d['cp_fsync_s']:.2f} s")

if summary:
    failed = [s for s in summary if not s[1]]
    print()
    print(f"goal checks: {len(summary) - len(failed)} passed, {len(failed)} failed")
EOF
