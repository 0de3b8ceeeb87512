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
#                          [--parts N] [--dir DIR] [--keep]
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
#   --dir DIR       work dir (default a temp dir under /var/tmp); needs about
#                   7x a checkpoint's bytes free (checked first)
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
#                        longest apply), goal <= 1.5
#   downloaded           wsync_bytes_downloaded_total (the metrics file),
#                        per step
#   pub read / ckpt      the publisher's rchar / (old + new checkpoint bytes)
#                        (the anchor: / new bytes); goal <= 1.1, each byte
#                        read once
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
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prebuilt=0
[ -n "${WSYNC:-}" ] && [ -n "${WSYNCD:-}" ] && prebuilt=1
PYTHON3=${PYTHON3:-/usr/bin/python3}
GEN=$root/scripts/gen-checkpoints

quick=0 params= shards= steps= backend= dir= keep=0 mmap=0 throttle= parts=1
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

# ---- helper programs (python) ------------------------------------------------------
cat >"$WORK/trainer.py" <<'PY'
# trainer.py GEN CKPT STEP TOTAL PARAMS SHARDS OUT_JSON: checkpoint STEP of
# gen-checkpoints' series (--steps TOTAL --shards SHARDS --no-trainer-files),
# byte-identical to what gen-checkpoints writes, made by replaying steps
# 1..STEP one chunk at a time (no optimizer state held); OUT_JSON gets each
# file's size and SHA-256, hashed as written.
import concurrent.futures, copy, hashlib, importlib.machinery, importlib.util
import json, math, os, sys, threading, time
gen, ckpt, step, total, params, shards, out_json = sys.argv[1:8]
step = int(step)
t0 = time.monotonic()
loader = importlib.machinery.SourceFileLoader("gen_checkpoints", gen)
g = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(g)
np = g.np
a = g.parse_args(["--params", params, "--shards", shards, "--steps", total,
                  "--no-trainer-files", "--quiet", ckpt])
dtype = g.DTYPES[a.dtype]
shape = g.choose_shape(a.params, a.hidden, a.layers, a.vocab)
tensors, nparams = g.build_tensors(shape, dtype)
layout = g.Layout(a, shape, dtype, tensors)
files = {}

write_file = g.write_file
def hashed_write_file(path, data):
    write_file(path, data)
    files[os.path.basename(path)] = [len(data), hashlib.sha256(data).hexdigest()]
g.write_file = hashed_write_file

class ShardWriter(g.ShardWriter):
    def __call__(self, t, bits):
        if self.shard != t.shard:
            self.close()
            self.name = self.layout.names[t.shard]
            self.f = open(os.path.join(self.ckpt, self.name), "wb")
            self.h, self.n = hashlib.sha256(), 0
            hdr = self.layout.headers[t.shard]
            self.f.write(hdr)
            self.h.update(hdr)
            self.n += len(hdr)
            self.shard = t.shard
        mv = memoryview(bits).cast("B")
        self.f.write(mv)
        self.h.update(mv)
        self.n += len(mv)

    def close(self):
        if self.f is not None:
            self.f.close()
            self.f = None
            files[self.name] = [self.n, self.h.hexdigest()]
g.ShardWriter = ShardWriter

class ChunkState:
    on_disk = False  # _init_chunk zeroes m and v
    def __init__(self, n):
        self.w = np.empty(n, np.float32)
        self.m = np.empty(n, np.float32)
        self.v = np.empty(n, np.float32)

cap = max(g.CHUNK_ELEMS, max(t.cols for t in tensors))
local = threading.local()
anchors, anchors_lock = {}, threading.Lock()

class Replay(g.Trainer):
    """run_chunk from the initial weights: a chunk's own fp32 master, m and
    v, in a per-thread buffer, through steps 1..last_step."""
    def cached_anchors(self, t, s0, s1):
        k = (t.index, s0, s1)
        with anchors_lock:
            v = anchors.get(k)
        if v is None:
            v = self.anchors(t, s0, s1)
            with anchors_lock:
                anchors[k] = v
        return v

    def run_chunk(self, t, ci, first_step, last_step, _anchors, want_stats):
        inner = getattr(local, "trainer", None)
        if inner is None:
            inner = local.trainer = g.Trainer(self.a, self.tensors, ChunkState(cap))
        tc = copy.copy(t)
        tc.offset = -t.chunks[ci][0] * t.cols  # the chunk at 0 of the buffer
        inner._init_chunk(tc, ci)
        run = g.Trainer.run_chunk
        # no statistics: they would cost a second pass over the last step
        return run(inner, tc, ci, 1, last_step, self.cached_anchors(t, 1, last_step), False)

tr = Replay(a, tensors, None)
tr.grad_norm = math.sqrt(sum(tr._init_rows(t) for t in tensors))
with concurrent.futures.ThreadPoolExecutor(a.threads) as pool:
    stats = g.save_checkpoint(a, layout, tr, pool, ckpt, step - 1, step)
json.dump({"step": step, "params": nparams, "bytes": sum(v[0] for v in files.values()),
           "weights": layout.bytes, "shards": layout.names, "files": files,
           "seconds": round(time.monotonic() - t0, 3)},
          open(out_json, "w"), indent=1, sort_keys=True)
PY

cat >"$WORK/verify.py" <<'PY'
# verify.py CKPT_JSON TARGET [PATTERN...]: TARGET (.wsync/ aside) holds
# exactly the checkpoint's files that match a PATTERN (fnmatch on the name;
# none: every file), each of the size and SHA-256 the trainer wrote; nothing
# else. Each file read is dropped from the page cache after.
import concurrent.futures, fnmatch, hashlib, json, os, sys
ck, target, pats = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3:]
want = {n: v for n, v in ck["files"].items()
        if not pats or any(fnmatch.fnmatchcase(n, p) for p in pats)}
found, problems = set(), []
for d, dirs, names in os.walk(target):
    rel = os.path.relpath(d, target)
    if rel == ".":
        dirs[:] = [x for x in dirs if x != ".wsync"]
    for x in dirs:
        if os.path.islink(os.path.join(d, x)):
            problems.append("%s: a symbolic link" % os.path.normpath(os.path.join(rel, x)))
    for n in names:
        found.add(os.path.normpath(os.path.join(rel, n)))
for n in sorted(found - set(want)):
    problems.append("%s: not expected here" % n)
for n in sorted(set(want) - found):
    problems.append("%s: missing" % n)

def digest(n):
    p = os.path.join(target, n)
    fd = os.open(p, os.O_RDONLY)
    try:
        if os.path.islink(p) or not os.path.isfile(p):
            return n, -1, None
        h, size, buf = hashlib.sha256(), 0, bytearray(8 << 20)
        mv = memoryview(buf)
        with os.fdopen(os.dup(fd), "rb", buffering=0) as f:
            while True:
                k = f.readinto(buf)
                if not k:
                    break
                h.update(mv[:k])
                size += k
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return n, size, h.hexdigest()
    finally:
        os.close(fd)

with concurrent.futures.ThreadPoolExecutor(2) as pool:
    for n, size, sha in pool.map(digest, sorted(found & set(want))):
        if size != want[n][0]:
            problems.append("%s: %d bytes, the checkpoint's has %d" % (n, size, want[n][0]))
        elif sha != want[n][1]:
            problems.append("%s: content differs (SHA-256)" % n)
if problems:
    print("MISMATCH: " + "; ".join(problems[:20]) + (" ..." if len(problems) > 20 else ""))
    sys.exit(1)
print("ok: %d files, %d bytes identical, nothing else" % (len(want), sum(v[0] for v in want.values())))
PY

cat >"$WORK/sample.py" <<'PY'
# sample.py NAME=PID...: per process "name cpu_s rchar wchar read_bytes
# write_bytes blkio_ticks hwm_kib" (blkio: delayacct_blkio_ticks summed over
# the live threads, in clock ticks).
import os, sys
tck = os.sysconf("SC_CLK_TCK")
for arg in sys.argv[1:]:
    name, pid = arg.split("=")
    f = open("/proc/%s/stat" % pid).read().rsplit(")", 1)[1].split()
    cpu = (int(f[11]) + int(f[12])) / tck
    io = dict(l.split(": ") for l in open("/proc/%s/io" % pid).read().splitlines())
    blkio = 0
    for t in os.listdir("/proc/%s/task" % pid):
        try:
            blkio += int(open("/proc/%s/task/%s/stat" % (pid, t)).read().rsplit(")", 1)[1].split()[39])
        except (OSError, IndexError, ValueError):
            pass
    hwm = 0
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    print(name, "%.2f" % cpu, io["rchar"], io["wchar"], io["read_bytes"], io["write_bytes"], blkio, hwm)
PY

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
	ckb=$("$PYTHON3" - "$GEN" "$p" "$shards" <<'PY'
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("gen_checkpoints", sys.argv[1])
g = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(g)
a = g.parse_args(["--params", sys.argv[2], "--shards", sys.argv[3], "--no-trainer-files", "x"])
shape = g.choose_shape(a.params)
tensors, n = g.build_tensors(shape, g.DTYPES["bf16"])
layout = g.Layout(a, shape, g.DTYPES["bf16"], tensors)
print(layout.bytes, len(layout.names), " ".join(layout.names))
PY
)
	read -r ckb k shard_names <<<"$ckb"
	# shellcheck disable=SC2206
	shard_names=($shard_names)
	[ "$k" = "$shards" ] || echo "# the model has $k shards, not $shards (one tensor or more per shard)"
	half=$((k / 2))
	inc="*.json ${shard_names[*]:0:$half}"
	# disk: watch 2x; the publisher's base (hardlinks of a checkpoint, kept
	# past the rotation) 1x; bucket ~0.8x; subscribers (target, download,
	# the partial's half) ~2.7x; the 8 GB run used 5.4x (43 GB) at most
	need=$((ckb * 7))
	avail=$(($(df -k --output=avail "$WORK" | tail -1) * 1024))
	if [ "$avail" -lt "$need" ]; then
		echo "bench-scale.sh: $b: $WORK has $((avail / 1000000000)) GB free; a run of $((ckb / 1000000000)) GB checkpoints needs about $((need / 1000000000)) GB (7x)" >&2
		return 1
	fi
	subfs_setup $((ckb * 3 + (1 << 30)))
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
		local e n
		for n in pub s1 s2; do
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
			sed -e "s|$d/pub/|$d/pub$q/|" -e "s|^part = 1/|part = $q/|" "$d/pub.ini" >"$d/pub$q.ini"
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
		} >"$d/$s.ini"
	done
	echo
	echo "## $b: $p parameters, $(commas "$ckb") bytes of weights in $k shards; 1 anchor + $steps delta steps$([ "$parts" -gt 1 ] && echo "; $parts publisher parts")"
	echo "# full subscriber s1: every file; partial subscriber s2: include = $inc"
	echo "# subscribers' state and targets: $SUBFS"
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
	eval "\"\$PYTHON3\" \"\$WORK/sample.py\" $SAMPLE" >"$d/proc-0.tsv"
	: >"$d/marker-times"
	: >"$d/verify.txt"
	local fail=0 total=$((steps + 1)) ts
	for i in $(seq 1 $total); do
		# the trainer's rotation: keep the newest checkpoint and the one it writes
		for k in $(seq 1 $((i - 2))); do rm -rf "$d/watch/checkpoint-$k"; done
		t0=$(now)
		"$PYTHON3" "$WORK/trainer.py" "$GEN" "$d/watch/checkpoint-$i" "$i" "$total" "$p" "$shards" \
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
		eval "\"\$PYTHON3\" \"\$WORK/sample.py\" $SAMPLE" >"$d/proc-$i.tsv"
		for s in $PUBS s1 s2; do cp "$d/$s/run/wsync.prom" "$d/prom-$s-$i.prom"; done
		local v1 v2 r1=0 r2=0
		v1=$("$PYTHON3" "$WORK/verify.py" "$d/ck-$i.json" "$sd/s1/target") || r1=1
		# shellcheck disable=SC2086 # the include globs, one argument each
		v2=$(set -f; "$PYTHON3" "$WORK/verify.py" "$d/ck-$i.json" "$sd/s2/target" $inc) || r2=1
		printf '%s\t%s\t%s\n%s\t%s\t%s\n' "$i" s1 "$v1" "$i" s2 "$v2" >>"$d/verify.txt"
		echo "# $b: step $i verified: full $v1; partial $v2" >&2
		if [ $r1 = 1 ] || [ $r2 = 1 ]; then
			fail=1
			break
		fi
	done
	for s in $PUBS s1 s2; do
		stop_pid "${PID[$s]}"
		PID[$s]=
	done
	"$WSYNC" store ls "$url/" --json --config "$d/pub.ini" >"$d/listing.json" 2>/dev/null || echo '[]' >"$d/listing.json"
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
	"$PYTHON3" - "$1" "$2" "$3" "$4" "$5" "$rate" "$mmap" "$delayacct" "$TSV" <<'PY'
import datetime, json, os, re, sys
b, d, params, prefix, subfs = sys.argv[1:6]
rate, mmap, delayacct, tsv = int(sys.argv[6]), sys.argv[7] == "1", sys.argv[8] == "1", sys.argv[9]
tck = os.sysconf("SC_CLK_TCK")
tz = datetime.datetime.now().astimezone().tzinfo
def ts(line):
    return datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=tz).timestamp()
marker = {int(k): float(v) for k, v in (l.split() for l in open(d + "/marker-times"))}
steps = sorted(marker)
ck = {i: json.load(open("%s/ck-%d.json" % (d, i))) for i in steps}
def lines(name, rx):
    out = {}
    for line in open("%s/%s.log" % (d, name), errors="replace"):
        m = re.search(rx, line)
        if m and int(m.group(1)) not in out:
            out[int(m.group(1))] = (ts(line), m)
    return out
announced = lines("pub", r"version (\d+) \(step -?\d+\) announced")
published = lines("pub", r"info: (?:published|committed the parts of) version (\d+) ")
# the apply's duration: duration_ms= of the line's fields, else its "N.NN s"
applied = {s: lines(s, r"info: version (\d+) \(step -?\d+\) applied from .*?"
                       r"(?:duration_ms=(\d+)|, ([0-9.]+) s$)")
           for s in ("s1", "s2")}
def apply_s(m):
    return int(m.group(2)) / 1000 if m.group(2) else float(m.group(3))
def proc(i):
    out = {}
    try:
        for l in open("%s/proc-%d.tsv" % (d, i)):
            f = l.split()
            out[f[0]] = [float(f[1])] + [int(x) for x in f[2:]]
    except OSError:
        pass
    return out
P = {i: proc(i) for i in [0] + steps}
def prom(s, i, name):
    try:
        for l in open("%s/prom-%s-%d.prom" % (d, s, i)):
            m = re.match(r"%s(\{[^}]*\})? (\S+)$" % re.escape(name), l)
            if m:
                return float(m.group(2))
    except OSError:
        pass
    return None
listing = json.load(open(d + "/listing.json"))
size = {(o["key"][len(prefix):] if o["key"].startswith(prefix) else o["key"]): o["size"] for o in listing}
verified = {}
for l in open(d + "/verify.txt"):
    i, s, text = l.rstrip("\n").split("\t", 2)
    verified[(int(i), s)] = text
done = [i for i in steps if i in P and P[i] and all(i in applied[s] for s in ("s1", "s2"))]

def mb(x):
    return "{:,.1f}".format(x / 1e6)
def sec(x):
    return "-" if x is None else "%.2f" % x
rows, goals = [], []
print()
print("Latency from the checkpoint's marker (trainer_state.json's mtime), s; object: what the step put in the bucket:")
print()
hdr = "| step | object bytes | → announced | → HEAD (publish) | → applied full | → applied partial | apply s full / partial | ratio (goal ≤ 1.5) |"
sep = "|---|---:|---:|---:|---:|---:|---:|---:|"
if rate:
    hdr += " transfer s (bytes / rate) | latency ÷ transfer (goal ≤ 1.3) |"
    sep += "---:|---:|"
print(hdr)
print(sep)
for i in done:
    k = "%012d" % i
    # an object stored whole, or in chunks (BUCKET.md 3.2: deltas/<V>-<N>.wsd)
    # ... or, made by parts, their chunks (BUCKET.md 7: parts/<V>/<K>-<F>-<N>.ws[da])
    obj = sum(n for key, n in size.items()
              if re.fullmatch(r"(deltas/%s(-\d{5})?\.wsd|anchors/%s(-\d{5})?\.wsa|"
                              r"parts/%s/\d+-[0-9a-f]{32}-\d{5}\.ws[da])" % (k, k, k), key))
    m0 = marker[i]
    ann = announced[i][0] - m0 if i in announced else None
    head = published[i][0] - m0 if i in published else None
    app = {s: applied[s][i][0] - m0 for s in ("s1", "s2")}
    dur = {s: apply_s(applied[s][i][1]) for s in ("s1", "s2")}
    last = max(app.values())
    stage = max(head or 0, max(dur.values()))
    ratio = last / stage if stage > 0 else None
    kind = "anchor" if i == steps[0] else "delta"
    line = "| %d (%s) | %s | %s | %s | %s | %s | %s / %s | %s |" % (
        i, kind, format(obj, ","), sec(ann), sec(head), sec(app["s1"]), sec(app["s2"]),
        sec(dur["s1"]), sec(dur["s2"]), "-" if ratio is None else "%.2f×" % ratio)
    xfer = xratio = None
    if rate:
        xfer = obj / rate
        xratio = last / xfer if xfer > 0 else None
        line += " %.1f | %s |" % (xfer, "-" if xratio is None else "%.2f×" % xratio)
        # a step whose transfer takes under a second (a small delta) is
        # reported, not checked: the ratio then measures everything but it
        if xratio is not None and xfer >= 1:
            goals.append(("latency ÷ transfer ≤ 1.3 at step %d: %.2f×" % (i, xratio), xratio <= 1.3))
    if ratio is not None:
        goals.append(("latency ratio ≤ 1.5 at step %d: %.2f×" % (i, ratio), ratio <= 1.5))
    print(line)
    rows.append(dict(step=i, kind=kind, ckpt=ck[i]["bytes"], obj=obj, ann=ann, head=head,
                     app_s1=app["s1"], app_s2=app["s2"], dur_s1=dur["s1"], dur_s2=dur["s2"],
                     ratio=ratio, xfer=xfer, xratio=xratio))
if rate:
    print("\n(transfer: the step's object at the throttled rate, the time one link needs to carry it once; "
          "the ≤ 1.3 goal is checked where that is 1 s or more)")
print()
print("Bytes per step (MB = 10^6 bytes); the publisher's reads over the checkpoint bytes it had to read (a delta: old + new; the anchor: new):")
print()
col = "read_bytes" if mmap else "rchar"
print("| step | checkpoint MB | downloaded full MB | downloaded partial MB (share) | publisher rchar ÷ ckpt bytes (goal ≤ 1.1) |%s" %
      (" publisher read_bytes ÷ ckpt bytes |" if mmap else ""))
print("|---|---:|---:|---:|---:|%s" % ("---:|" if mmap else ""))
for r in rows:
    i = r["step"]
    dl = {}
    for s in ("s1", "s2"):
        v = prom(s, i, "wsync_bytes_downloaded_total")
        dl[s] = None if v is None else int(v - (prom(s, i - 1, "wsync_bytes_downloaded_total") or 0))
    prior = steps.index(i)
    base = ck[i]["bytes"] + (ck[steps[prior - 1]]["bytes"] if prior else 0)
    # every publisher part's reads together (one publisher: its own)
    pubs = sorted(n for n in P[i] if n.startswith("pub"))
    p0 = P[steps[prior - 1] if prior else 0]
    pr = sum(P[i][n][1] - p0[n][1] for n in pubs)
    pb = sum(P[i][n][3] - p0[n][3] for n in pubs)
    r.update(dl_s1=dl["s1"], dl_s2=dl["s2"], pub_rchar_ratio=pr / base, pub_rb_ratio=pb / base)
    share = "" if not dl["s1"] or dl["s2"] is None else " (%.0f%%)" % (100 * dl["s2"] / dl["s1"])
    print("| %d | %s | %s | %s%s | %.2f |%s" % (
        i, mb(ck[i]["bytes"]), "-" if dl["s1"] is None else mb(dl["s1"]),
        "-" if dl["s2"] is None else mb(dl["s2"]), share, pr / base,
        (" %.2f |" % (pb / base)) if mmap else ""))
    if prior and not mmap:
        goals.append(("publisher reads each byte once at step %d: rchar ÷ (old + new) %.2f ≤ 1.1" % (i, pr / base), pr / base <= 1.1))
if mmap:
    print("\n(--mmap: the encoder reads through mappings, which rchar does not count: rchar undercounts; "
          "read_bytes counts only what came from the disk. The read-once goal is not checked.)")
print()
print("Per daemon and step: CPU s, /proc/PID/io in MB, block-I/O delay s%s:" %
      ("" if delayacct else " (0: kernel.task_delayacct is off, no delay accounting)"))
print()
print("| step | daemon | CPU s | rchar | wchar | read_bytes | write_bytes | blkio delay s |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
names = {"pub": "publisher", "s1": "full s1", "s2": "partial s2"}
pubs = sorted((n for n in P[0] if n.startswith("pub")), key=lambda n: int(n[3:] or 1))
if len(pubs) > 1:
    names.update({n: "part %s" % (n[3:] or "1") for n in pubs})
for r in rows:
    i = r["step"]
    prior = steps.index(i)
    p0 = P[steps[prior - 1] if prior else 0]
    for n in pubs + ["s1", "s2"]:
        a, z = p0[n], P[i][n]
        dv = [z[j] - a[j] for j in range(len(z))]
        r.update({"%s_cpu" % n: dv[0], "%s_rchar" % n: dv[1], "%s_wchar" % n: dv[2],
                  "%s_read_bytes" % n: dv[3], "%s_write_bytes" % n: dv[4],
                  "%s_blkio" % n: dv[5] / tck})
        print("| %d | %s | %.2f | %s | %s | %s | %s | %.2f |" % (
            i, names[n], dv[0], mb(dv[1]), mb(dv[2]), mb(dv[3]), mb(dv[4]), dv[5] / tck))
print()
final = P[done[-1]] if done else {}
print("| daemon | CPU s (whole run) | peak RSS MiB (goal < 256) |")
print("|---|---:|---:|")
for n in pubs + ["s1", "s2"]:
    if n in final:
        hwm = final[n][6] / 1024
        print("| %s | %.2f | %.0f |" % (names[n], final[n][0], hwm))
        goals.append(("peak RSS < 256 MiB: %s %.0f MiB" % (names[n], hwm), hwm < 256))
print()
for i in steps:
    for s in ("s1", "s2"):
        if (i, s) in verified:
            print("step %d %s: %s" % (i, "full s1" if s == "s1" else "partial s2", verified[(i, s)]))
print()
for text, ok in goals:
    print("%s %s" % ("PASS" if ok else "FAIL", text))
print("goal checks (%s): %d passed, %d failed" % (b, sum(1 for _, ok in goals if ok), sum(1 for _, ok in goals if not ok)))

cols = ["backend", "params", "subfs", "mmap", "rate_bytes_s", "step", "kind", "ckpt_bytes", "object_bytes", "marker_announced_s",
        "marker_head_s", "marker_applied_full_s", "marker_applied_partial_s", "apply_full_s",
        "apply_partial_s", "ratio", "transfer_s", "latency_over_transfer", "downloaded_full",
        "downloaded_partial", "pub_rchar_over_ckpt", "pub_read_bytes_over_ckpt"]
cols += ["%s_%s" % (n, f) for n in ("pub", "full", "partial")
         for f in ("cpu_s", "rchar", "wchar", "read_bytes", "write_bytes", "blkio_s")]
new = not os.path.exists(tsv) or os.path.getsize(tsv) == 0
with open(tsv, "a") as f:
    if new:
        f.write("\t".join(cols) + "\n")
    for r in rows:
        def v(x):
            return "" if x is None else ("%.3f" % x if isinstance(x, float) else str(x))
        vals = [b, params, "loop" if subfs.startswith("ext4") else "plain", int(mmap), rate, r["step"], r["kind"], r["ckpt"], r["obj"], r["ann"], r["head"],
                r["app_s1"], r["app_s2"], r["dur_s1"], r["dur_s2"], r["ratio"], r["xfer"],
                r["xratio"], r.get("dl_s1"), r.get("dl_s2"), r.get("pub_rchar_ratio"),
                r.get("pub_rb_ratio")]
        for n in ("pub", "s1", "s2"):
            vals += [r["%s_cpu" % n], r["%s_rchar" % n], r["%s_wchar" % n],
                     r["%s_read_bytes" % n], r["%s_write_bytes" % n], r["%s_blkio" % n]]
        f.write("\t".join(v(x) for x in vals) + "\n")
PY
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
