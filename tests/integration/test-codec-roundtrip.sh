#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-codec-roundtrip: `wsync diff` then `wsync apply` rebuilds NEW byte for
# byte from OLD -- generated bf16/f16/f32 series, no change at all, every
# element changed, random and odd-sized and empty files, tensors added,
# removed, renamed, reshaped and retyped, plain files, files added and
# deleted, nested directories, mode changes, single files, -o OUTDIR, a
# sparse file over 4 GiB within 256 MiB of RSS -- the delta does not depend
# on --threads, and apply is all or nothing: a wrong base, a corrupt or
# truncated delta, or a symlink on the way leaves TARGET exactly as it was
# (exit 65, no temp file left).
. "$(dirname "$0")/lib.sh"

export LC_ALL=C

# A small safetensors writer, independent of wsync's code.
cat >"$TMP/mk.py" <<'EOF'
import json, os, struct, sys
import numpy as np

def write(path, tensors, pad=True):
    """tensors: list of (name, dtype, shape, bytes)."""
    hdr, off = {}, 0
    for name, dt, shape, raw in tensors:
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(hdr).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for _, _, _, raw in tensors:
            f.write(raw)

def bf16(a):
    return (a.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)

def nudge(u, frac, rng):
    """Change frac of the elements of an unsigned view by +-1 ulp."""
    u = u.copy()
    idx = rng.choice(u.size, max(1, int(u.size * frac)), replace=False)
    u.flat[idx] += rng.choice(np.array([1, -1], dtype=np.int64), idx.size).astype(u.dtype)
    return u

def tensors_pair(out):
    rng = np.random.default_rng(7)
    w = bf16(rng.normal(0, 0.02, (64, 96)))
    h = rng.normal(0, 0.02, (33, 17)).astype(np.float16).view(np.uint16)
    s = rng.normal(0, 1, (40, 25)).astype(np.float32).view(np.uint32)
    i64 = rng.integers(0, 1 << 40, 77, dtype=np.int64)
    u8 = rng.integers(0, 255, 1001, dtype=np.uint8)
    old = [
        ("a.kept", "BF16", [64, 96], w.tobytes()),
        ("b.changed", "BF16", [64, 96], bf16(rng.normal(0, 0.02, (64, 96))).tobytes()),
        ("c.f16", "F16", [33, 17], h.tobytes()),
        ("d.f32", "F32", [40, 25], s.tobytes()),
        ("e.i64", "I64", [77], i64.tobytes()),
        ("f.u8", "U8", [1001], u8.tobytes()),
        ("g.empty", "BF16", [0, 4], b""),
        ("h.scalar", "F32", [], np.float32(3.5).tobytes()),
        ("i.removed", "BF16", [10, 10], bf16(rng.normal(0, 1, 100)).tobytes()),
        ("j.old_name", "BF16", [8, 8], bf16(rng.normal(0, 1, 64)).tobytes()),
        ("k.reshaped", "BF16", [4, 6], bf16(rng.normal(0, 1, 24)).tobytes()),
        ("l.regrown", "BF16", [4, 6], bf16(rng.normal(0, 1, 24)).tobytes()),
        ("m.retyped", "BF16", [5, 5], bf16(rng.normal(0, 1, 25)).tobytes()),
    ]
    changed = np.frombuffer(old[1][3], np.uint16)
    new = [
        old[0],
        ("b.changed", "BF16", [64, 96], nudge(changed, 0.01, rng).tobytes()),
        ("c.f16", "F16", [33, 17], nudge(h, 0.05, rng).tobytes()),
        ("d.f32", "F32", [40, 25], nudge(s, 0.02, rng).tobytes()),
        ("e.i64", "I64", [77], (i64 + (np.arange(77) % 5 == 0)).tobytes()),
        old[5],
        ("g.empty", "BF16", [0, 4], b""),
        ("h.scalar", "F32", [], np.float32(3.75).tobytes()),
        ("j.new_name", "BF16", [8, 8], old[9][3]),
        ("k.reshaped", "BF16", [6, 4], old[10][3]),
        ("l.regrown", "BF16", [5, 6], old[11][3] + b"\x01\x02" * 6),
        ("m.retyped", "F32", [5, 5], np.arange(25, dtype=np.float32).tobytes()),
        ("n.added", "BF16", [3, 3], bf16(rng.normal(0, 1, 9)).tobytes()),
        ("o.empty_added", "F16", [0], b""),
    ]
    write(os.path.join(out, "old", "model.safetensors"), old)
    write(os.path.join(out, "new", "model.safetensors"), new)
    # Only empty tensors, and no tensor at all; unpadded header.
    write(os.path.join(out, "old", "empty.safetensors"), [("z", "BF16", [0], b"")])
    write(os.path.join(out, "new", "empty.safetensors"), [("z", "BF16", [0], b""),
                                                        ("y", "F32", [2, 0], b"")])
    write(os.path.join(out, "old", "none.safetensors"), [], pad=False)
    write(os.path.join(out, "new", "none.safetensors"), [("x", "U8", [3], b"abc")], pad=False)

def big_pair(out, mib):
    """One BF16 tensor over several 32 MiB segments, 1% of it nudged."""
    rng = np.random.default_rng(11)
    n = mib * (1 << 20) // 2
    w = bf16(rng.normal(0, 0.02, n).astype(np.float32))
    write(os.path.join(out, "old", "big.safetensors"), [("w", "BF16", [n], w.tobytes())])
    write(os.path.join(out, "new", "big.safetensors"),
          [("w", "BF16", [n], nudge(w, 0.01, rng).tobytes())])
    # changed in its last tenth only: the diff finds the first MiBs equal
    # before coding and hashes them once for both sides
    n = 3 * (1 << 20) // 2
    w = bf16(rng.normal(0, 0.02, n).astype(np.float32))
    v = w.copy()
    v[n - n // 10:] = nudge(w[n - n // 10:], 0.05, rng)
    write(os.path.join(out, "old", "late.safetensors"), [("w", "BF16", [n], w.tobytes())])
    write(os.path.join(out, "new", "late.safetensors"), [("w", "BF16", [n], v.tobytes())])

def sparse(path, nelem):
    """A BF16 tensor of nelem elements, all zero, as a sparse file."""
    h = json.dumps({"w": {"dtype": "BF16", "shape": [nelem],
                          "data_offsets": [0, 2 * nelem]}}).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        f.truncate(8 + len(h) + 2 * nelem)
    print(8 + len(h))

cmd = sys.argv[1]
if cmd == "tensors":
    tensors_pair(sys.argv[2])
elif cmd == "big":
    big_pair(sys.argv[2], int(sys.argv[3]))
elif cmd == "sparse":
    sparse(sys.argv[2], int(sys.argv[3]))
EOF

# A listing of a tree: path, mode, checksum; temp files show up in it.
tree_sums() {
	(cd "$1" && find . -mindepth 1 \( -type f -o -type l -o -type d \) -printf '%P %y %m\n' |
		sort | while read -r p t m; do
			if [ "$t" = f ]; then echo "$p $m $(cksum <"$p")"; else echo "$p $t $m"; fi
		done)
}

# roundtrip NAME OLD NEW [diff options...]: diff, apply to a copy of OLD,
# compare with NEW (content, modes, file set); leaves the delta in $TMP/NAME.wsd.
roundtrip() {
	local name=$1 old=$2 new=$3
	shift 3
	local d="$TMP/$name.wsd" t="$TMP/$name.target"
	rm -rf "$t"
	if [ -d "$old" ]; then cp -a "$old" "$t"; else cp -a "$old" "$t"; fi
	expect_exit 0 "$name: diff" "$WSYNC" diff "$old" "$new" -o "$d" "$@"
	expect_exit 0 "$name: apply" "$WSYNC" apply "$t" "$d"
	if [ -d "$new" ]; then
		check "$name: result equals NEW (content, modes, no extra or temp files)" \
			diff <(tree_sums "$t") <(tree_sums "$new")
	else
		check "$name: result equals NEW" cmp "$t" "$new"
	fi
}

# ---- generated checkpoint series ----
for dtype in bf16 f16 f32 f8_e4m3 f8_e5m2; do
	"$GEN" --params 2M --steps 3 --shards 2 --dtype "$dtype" --quiet \
		--out "$TMP/gen-$dtype" >/dev/null 2>&1
	roundtrip "gen-$dtype-1-2" "$TMP/gen-$dtype/checkpoint-1" "$TMP/gen-$dtype/checkpoint-2"
	roundtrip "gen-$dtype-2-3" "$TMP/gen-$dtype/checkpoint-2" "$TMP/gen-$dtype/checkpoint-3"
done
g="$TMP/gen-bf16"

# FP8 matrices take the float coder (FLOAT pieces of their family), not XOR
for dtype in f8_e4m3 f8_e5m2; do
	expect_exit 0 "gen-$dtype: inspect" "$WSYNC" inspect "$TMP/gen-$dtype-1-2.wsd"
	contains "gen-$dtype: FLOAT pieces of family ${dtype^^}" "$OUT" "FLOAT   ${dtype^^}"
done

# ---- every instruction-set path codes and decodes the same ----
# (the machine's best is what ran above; WSYNC_CODEC_ISA caps it)
for dtype in bf16 f16 f32 f8_e4m3 f8_e5m2; do
	for isa in plain avx2; do
		WSYNC_CODEC_ISA=$isa roundtrip "isa-$isa-$dtype" \
			"$TMP/gen-$dtype/checkpoint-1" "$TMP/gen-$dtype/checkpoint-2"
		check "isa $isa, $dtype: the same delta as the default path" \
			cmp "$TMP/isa-$isa-$dtype.wsd" "$TMP/gen-$dtype-1-2.wsd"
	done
done

# ---- a high-density step (a quarter of the weights move): DENSE pieces ----
for dtype in bf16 f16; do
	"$GEN" --params 2M --steps 2 --lr 1e-4 --dtype "$dtype" --quiet \
		--out "$TMP/hi-$dtype" >/dev/null 2>&1
	roundtrip "hi-$dtype" "$TMP/hi-$dtype/checkpoint-1" "$TMP/hi-$dtype/checkpoint-2"
	expect_exit 0 "hi-$dtype: inspect" "$WSYNC" inspect "$TMP/hi-$dtype.wsd"
	contains "hi-$dtype: coded as DENSE pieces" "$OUT" "DENSE   ${dtype^^}"
	expect_exit 0 "hi-$dtype: inspect --json" "$WSYNC" inspect --json "$TMP/hi-$dtype.wsd"
	printf '%s' "$OUT" >"$TMP/hi-$dtype.json"
	check "hi-$dtype: the changes counted from the DENSE codes are the diff's" \
		"$PYTHON3" - "$TMP/hi-$dtype.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
n = 0
for f in d["files"]:
    if f["op"] == "WRITE" and f["elements"]:
        assert sum(s["changed"] for s in f["segments"]) == f["changed"], f["path"]
        assert f["changed"] > f["elements"] / 10, f["path"]
        n += 1
assert n > 0
PY
	WSYNC_CODEC_ISA=plain roundtrip "hi-$dtype-plain" \
		"$TMP/hi-$dtype/checkpoint-1" "$TMP/hi-$dtype/checkpoint-2"
	check "hi-$dtype: the plain path gives the same DENSE delta" \
		cmp "$TMP/hi-$dtype-plain.wsd" "$TMP/hi-$dtype.wsd"
done
# FP8 has no DENSE form: where a tenth or more changed, its pieces go XOR
"$GEN" --params 2M --steps 2 --lr 1e-3 --dtype f8_e4m3 --quiet \
	--out "$TMP/hi-f8" >/dev/null 2>&1
roundtrip "hi-f8" "$TMP/hi-f8/checkpoint-1" "$TMP/hi-f8/checkpoint-2"
expect_exit 0 "hi-f8: inspect" "$WSYNC" inspect "$TMP/hi-f8.wsd"
printf '%s\n' "$OUT" >"$TMP/hi-f8.txt"
check "hi-f8: no FP8 piece is coded FLOAT, and the matrices are XOR pieces" \
	"$PYTHON3" - "$TMP/hi-f8.txt" <<'PY'
import sys
t = open(sys.argv[1]).read()
assert "FLOAT   F8_E4M3" not in t, "a FLOAT F8 piece"
assert t.count("  XOR  ") > 10, t.count("  XOR  ")
PY

expect_exit 0 "diff --json" "$WSYNC" diff "$g/checkpoint-1" "$g/checkpoint-2" -o "$TMP/j.wsd" --json
printf '%s' "$OUT" >"$TMP/summary.json"
check "--json has the documented keys and sane figures" "$PYTHON3" - "$TMP/summary.json" "$TMP/j.wsd" <<'PY'
import json, os, sys
s = json.load(open(sys.argv[1]))
for k in ("files", "target_bytes", "delta_bytes", "elements", "changed", "density",
          "bytes_per_changed", "seconds", "mb_per_s"):
    assert k in s, k
assert s["delta_bytes"] == os.path.getsize(sys.argv[2])
assert 0.001 < s["density"] < 0.05, s["density"]
assert s["changed"] > 0 and s["bytes_per_changed"] < 4, s
assert s["delta_bytes"] < s["target_bytes"] / 20, s
PY
expect_exit 0 "text summary" "$WSYNC" diff "$g/checkpoint-1" "$g/checkpoint-2" -o "$TMP/j.wsd"
contains "text summary gives density and bytes per changed element" "$OUT" "bytes per changed element"

expect_exit 0 "inspect a delta" "$WSYNC" inspect "$TMP/j.wsd"
contains "inspect names a shard" "$OUT" "model-00001-of-00002.safetensors  WRITE  safetensors"
contains "inspect shows FLOAT pieces" "$OUT" "FLOAT   BF16"
contains "inspect shows kept files" "$OUT" "config.json  KEEP"
contains "inspect shows a WRITE's FILE_END record" "$OUT" "  FILE_END  target xxh128 "
expect_exit 0 "inspect a delta --json" "$WSYNC" inspect --json "$TMP/j.wsd"
printf '%s' "$OUT" >"$TMP/inspect.json"
check "inspect --json: pieces tile each file, methods known" "$PYTHON3" - "$TMP/inspect.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "wsync-delta" and d["version"] == 4
seen = set()
for f in d["files"]:
    pos = 0
    for s in f["segments"]:
        assert s["offset"] == pos
        for p in s["pieces"]:
            assert p["offset"] == pos, (f["path"], p)
            assert p["method"] in ("COPY", "LITERAL", "ZSTD", "XOR", "FLOAT", "DENSE")
            seen.add(p["method"])
            pos += p["length"]
        assert pos == s["offset"] + s["length"]
    if f["op"] == "WRITE":
        assert pos == f["target_size"], f["path"]
    assert f.get("file_end", False) == (f["op"] == "WRITE"), f["path"]
assert "FLOAT" in seen, seen
PY

# ---- no change at all: every file KEPT, nothing touched ----
roundtrip "same" "$g/checkpoint-2" "$g/checkpoint-2"
expect_exit 0 "density 0: diff --json" "$WSYNC" diff "$g/checkpoint-2" "$g/checkpoint-2" -o "$TMP/same.wsd" --json
contains "density 0: nothing changed" "$OUT" '"changed":0'
check "density 0: the delta is only FILE records (< 3 KiB)" \
	test "$(stat -c %s "$TMP/same.wsd")" -lt 3072
before=$(stat -c '%i %Y' "$TMP/same.target/model-00001-of-00002.safetensors")
expect_exit 0 "density 0: apply again" "$WSYNC" apply "$TMP/same.target" "$TMP/same.wsd"
check "density 0: kept files are not rewritten" test "$before" = \
	"$(stat -c '%i %Y' "$TMP/same.target/model-00001-of-00002.safetensors")"

# ---- every element changed: two unrelated models ----
"$GEN" --params 2M --steps 1 --shards 2 --seed 99 --quiet --out "$TMP/other" >/dev/null 2>&1
roundtrip "all-changed" "$g/checkpoint-1" "$TMP/other/checkpoint-1"

# ---- hand-made tensors: added, removed, renamed, reshaped, retyped, empty ----
"$PYTHON3" "$TMP/mk.py" tensors "$TMP/st"
roundtrip "tensors" "$TMP/st/old" "$TMP/st/new"
expect_exit 0 "tensors: inspect --json" "$WSYNC" inspect --json "$TMP/tensors.wsd"
printf '%s' "$OUT" >"$TMP/tensors.json"
check "tensors: the model file is coded tensor-aware (FLOAT, XOR and ZSTD pieces)" \
	"$PYTHON3" - "$TMP/tensors.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
f = [f for f in d["files"] if f["path"] == "model.safetensors"][0]
assert f["kind"] == "safetensors"
m = {p["method"] for s in f["segments"] for p in s["pieces"]}
assert {"FLOAT", "ZSTD"} <= m or {"FLOAT", "LITERAL"} <= m, m
PY

# ---- plain files: random, odd sizes, empty, changed config, added, deleted ----
mk_plain() {
	local o="$TMP/plain/old" n="$TMP/plain/new"
	mkdir -p "$o/sub/deeper" "$n/sub/deeper" "$n/newdir/x"
	head -c 3000000 /dev/urandom >"$o/random.bin"
	head -c 3000000 /dev/urandom >"$n/random.bin"          # same size, all new
	head -c 1000 /dev/urandom >"$o/grows.bin"
	{ cat "$o/grows.bin"; head -c 777 /dev/urandom; } >"$n/grows.bin"
	for s in 1 3 4097; do
		head -c $s /dev/urandom >"$o/odd-$s"
		head -c $s /dev/urandom >"$n/odd-$s"
	done
	: >"$o/empty"; : >"$n/empty"                            # empty, kept
	: >"$o/becomes-empty"; head -c 10 /dev/urandom >"$o/becomes-empty"; : >"$n/becomes-empty"
	: >"$o/was-empty"; head -c 5000 /dev/urandom >"$n/was-empty"
	: >"$n/new-empty"
	echo '{"lr": 2e-6, "steps": 1}' >"$o/config.json"
	echo '{"lr": 2e-6, "steps": 2, "note": "longer"}' >"$n/config.json"
	echo same >"$o/sub/deeper/kept.txt"; cp -p "$o/sub/deeper/kept.txt" "$n/sub/deeper/"
	echo bye >"$o/sub/deleted.txt"
	mkdir -p "$o/gone/away"; echo x >"$o/gone/away/file"
	echo hi >"$n/newdir/x/added.txt"
	printf 'script' >"$o/mode.sh"; cp -p "$o/mode.sh" "$n/mode.sh"; chmod 755 "$n/mode.sh"
	printf 'not safetensors' >"$o/fake.safetensors"; cp "$g/checkpoint-1/config.json" "$n/fake.safetensors"
	# over 1 MiB: compared before coding; unchanged, or changed in its
	# last byte only (hashed from the equal prefix, then coded)
	head -c 3145728 /dev/urandom >"$o/big-same.bin"; cp -p "$o/big-same.bin" "$n/"
	head -c 3145728 /dev/urandom >"$o/late-change.bin"; cp -p "$o/late-change.bin" "$n/"
	"$PYTHON3" -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-1, 2); b = f.read(1); f.seek(-1, 2); f.write(bytes([b[0] ^ 1]))' "$n/late-change.bin"
}
mk_plain
roundtrip "plain" "$TMP/plain/old" "$TMP/plain/new"
expect_exit 0 "plain: inspect" "$WSYNC" inspect "$TMP/plain.wsd"
contains "plain: deleted file listed" "$OUT" "sub/deleted.txt  DELETE"
contains "plain: new file listed" "$OUT" "newdir/x/added.txt  WRITE  bytes"
contains "plain: an unchanged 3 MiB file is KEEP" "$OUT" "big-same.bin  KEEP"
contains "plain: a 3 MiB file changed in its last byte is WRITE" "$OUT" "late-change.bin  WRITE"
check "plain: a deleted directory's files are gone" test ! -e "$TMP/plain.target/gone/away/file"

check "plain: the mode change was applied" test "$(stat -c %a "$TMP/plain.target/mode.sh")" = 755

# ---- single files ----
roundtrip "single" "$g/checkpoint-1/model-00001-of-00002.safetensors" \
	"$g/checkpoint-2/model-00001-of-00002.safetensors"
roundtrip "single-bytes" "$TMP/plain/old/random.bin" "$TMP/plain/new/random.bin"
cp "$g/checkpoint-1/model-00001-of-00002.safetensors" "$TMP/other-name.safetensors"
expect_exit 0 "single: a one-file delta applies to a file of any name" \
	"$WSYNC" apply "$TMP/other-name.safetensors" "$TMP/single.wsd"
check "single: ...with the right result" cmp "$TMP/other-name.safetensors" \
	"$g/checkpoint-2/model-00001-of-00002.safetensors"
expect_exit 65 "single: a file that is not the base is refused" \
	"$WSYNC" apply "$TMP/other-name.safetensors" "$TMP/single-bytes.wsd"
expect_exit 65 "a directory delta does not apply to a file" \
	"$WSYNC" apply "$TMP/other-name.safetensors" "$TMP/plain.wsd"

# ---- -o OUTDIR leaves TARGET as it was ----
t="$TMP/outdir.target"
cp -a "$g/checkpoint-1" "$t"
tree_sums "$t" >"$TMP/outdir.before"
expect_exit 0 "-o: apply into OUTDIR" "$WSYNC" apply "$t" "$TMP/gen-bf16-1-2.wsd" -o "$TMP/outdir.result"
check "-o: OUTDIR equals NEW" diff <(tree_sums "$TMP/outdir.result") <(tree_sums "$g/checkpoint-2")
check "-o: TARGET unchanged" diff "$TMP/outdir.before" <(tree_sums "$t")
expect_exit 0 "-o: single file into a file path" "$WSYNC" apply \
	"$g/checkpoint-1/model-00001-of-00002.safetensors" "$TMP/single.wsd" -o "$TMP/single-out.st"
check "-o: single file result equals NEW" cmp "$TMP/single-out.st" \
	"$g/checkpoint-2/model-00001-of-00002.safetensors"

# ---- files read through mappings (WSYNC_MMAP=1): the same delta ----
WSYNC_MMAP=1 expect_exit 0 "diff through mappings (WSYNC_MMAP=1)" "$WSYNC" diff \
	"$g/checkpoint-1" "$g/checkpoint-2" -o "$TMP/mmap.wsd" --threads 2
check "mapped and pread reads give the same delta" cmp "$TMP/mmap.wsd" "$TMP/gen-bf16-1-2.wsd"
WSYNC_MMAP=1 expect_exit 0 "diff through mappings, one thread" "$WSYNC" diff \
	"$g/checkpoint-1" "$g/checkpoint-2" -o "$TMP/mmap1.wsd" --threads 1
check "mapped, one thread: the same delta" cmp "$TMP/mmap1.wsd" "$TMP/gen-bf16-1-2.wsd"

# ---- --threads does not change the delta ----
"$PYTHON3" "$TMP/mk.py" big "$TMP/big" 150
roundtrip "big-t1" "$TMP/big/old" "$TMP/big/new" --threads 1
roundtrip "big-t2" "$TMP/big/old" "$TMP/big/new" --threads 2
check "--threads 1 and 2 give identical deltas (7 segments)" cmp "$TMP/big-t1.wsd" "$TMP/big-t2.wsd"
# 150 MiB: 32 MiB segments while two more fit, then half of the rest each
# time (27, 13.5, 6.75 MiB), and the last 6.75 MiB whole (its half would be
# under 4 MiB), so the workers finish a file together
check "big: 32 MiB segments, then shrinking ones at the end" "$PYTHON3" -c '
import json, sys
d = json.load(sys.stdin)
seg = [s["length"] for f in d["files"] if f["path"] == "big.safetensors" for s in f["segments"]]
want = [32, 32, 32, 27, 13.5, 6.75, 6.75]
sys.exit(0 if len(seg) == len(want) and
         all(abs(a - w * 2**20) <= 4096 for a, w in zip(seg, want)) else 1)' \
	< <("$WSYNC" inspect "$TMP/big-t1.wsd" --json)
check "--threads 1 and 2 give identical deltas (generated series)" \
	sh -c "'$WSYNC' diff '$g/checkpoint-1' '$g/checkpoint-2' -o '$TMP/t1.wsd' --threads 1 >/dev/null &&
	       '$WSYNC' diff '$g/checkpoint-1' '$g/checkpoint-2' -o '$TMP/t3.wsd' --threads 3 >/dev/null &&
	       cmp '$TMP/t1.wsd' '$TMP/t3.wsd'"
# A tree of every kind of path, coded by workers that each take a file of
# their own (and share the last ones): the 150 MiB tensor file and two
# shards changed, an unchanged 12 MB file (read whole before it proves
# unchanged, while the workers code the files before it), one deleted,
# one new; the delta does not depend on the thread count.
mkdir -p "$TMP/mix/old" "$TMP/mix/new"
cp "$g/checkpoint-1"/* "$TMP/mix/old/"
cp "$g/checkpoint-2"/* "$TMP/mix/new/"
cp "$TMP/big/old/big.safetensors" "$TMP/mix/old/"
cp "$TMP/big/new/big.safetensors" "$TMP/mix/new/"
head -c 12000000 /dev/urandom >"$TMP/mix/old/same.bin"
cp "$TMP/mix/old/same.bin" "$TMP/mix/new/same.bin"
head -c 6000000 /dev/urandom >"$TMP/mix/old/gone.bin"
head -c 6000000 /dev/urandom >"$TMP/mix/new/fresh.bin"
for t in 1 2 3; do
	expect_exit 0 "mixed tree: diff --threads $t" \
		"$WSYNC" diff "$TMP/mix/old" "$TMP/mix/new" -o "$TMP/mix-t$t.wsd" --threads "$t"
done
check "mixed tree: --threads 1 and 2 give identical deltas" cmp "$TMP/mix-t1.wsd" "$TMP/mix-t2.wsd"
check "mixed tree: --threads 1 and 3 give identical deltas" cmp "$TMP/mix-t1.wsd" "$TMP/mix-t3.wsd"
cp -a "$TMP/mix/old" "$TMP/mix/target"
expect_exit 0 "mixed tree: apply --threads 2" "$WSYNC" apply "$TMP/mix/target" "$TMP/mix-t2.wsd" --threads 2
check "mixed tree: result equals NEW" diff <(tree_sums "$TMP/mix/target") <(tree_sums "$TMP/mix/new")
rm -rf "$TMP/mix" "$TMP"/mix-t*.wsd
expect_exit 0 "big: apply with --threads 2" "$WSYNC" apply "$TMP/big/old" "$TMP/big-t1.wsd" --threads 2 -o "$TMP/big-t2-out"
check "big: --threads 2 apply equals NEW" cmp "$TMP/big-t2-out/big.safetensors" "$TMP/big/new/big.safetensors"
# ---- a file written to in place while diff reads it: refused, not coded ----
# (same size: what was coded and what was hashed could differ).  The file
# is rewritten a byte at a time all the while the diff runs, by one
# process started before it (a dd per write left gaps of milliseconds on a
# busy machine, as long as a whole diff of this file).
mkdir -p "$TMP/chg"
cp "$TMP/big/new/big.safetensors" "$TMP/chg/big.safetensors"
"$PYTHON3" - "$TMP/chg/big.safetensors" "$TMP/chg.ready" <<'EOF' &
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY)
open(sys.argv[2], "w").close()
end = time.monotonic() + 60
for n in range(100_000_000):   # bounded in count and in time; killed sooner
    if n % 1024 == 0 and time.monotonic() > end:
        break
    os.pwrite(fd, b"\x01", 4000000)
EOF
writer_pid=$!
for _ in $(seq 200); do [ -e "$TMP/chg.ready" ] && break; sleep 0.05; done
"$WSYNC" diff "$TMP/big/old/big.safetensors" "$TMP/chg/big.safetensors" -o "$TMP/chg.wsd" \
	--threads 1 >"$TMP/chg.out" 2>&1
chg_rc=$?
kill "$writer_pid" 2>/dev/null
wait "$writer_pid" 2>/dev/null
check "diff of a file rewritten in place meanwhile fails (exit $chg_rc)" test "$chg_rc" -ne 0
check "... saying it changed while being read" grep -q "changed.* while being read" "$TMP/chg.out"

# ---- memory_limit: more threads than fit wait instead of growing RSS ----
# eight threads on six 25 MiB segments by default (256 MiB): peak RSS stays
# under it and the delta is the one-thread delta; within 128 MiB one thread
# codes; a size that is not one is a usage error
expect_exit 0 "big: diff --threads 8 (default memory)" /usr/bin/time -f %M -o "$TMP/rss-t8" \
	"$WSYNC" diff "$TMP/big/old" "$TMP/big/new" -o "$TMP/big-t8.wsd" --threads 8
check "big: --threads 8 gives the same delta" cmp "$TMP/big-t8.wsd" "$TMP/big-t1.wsd"
check "big: --threads 8 peak RSS <= 256 MiB ($(tail -1 "$TMP/rss-t8") KiB)" \
	test "$(tail -1 "$TMP/rss-t8")" -le 262144
expect_exit 0 "big: diff --threads 8 --memory 128MiB" /usr/bin/time -f %M -o "$TMP/rss-m128" \
	"$WSYNC" diff "$TMP/big/old" "$TMP/big/new" -o "$TMP/big-m128.wsd" --threads 8 --memory 128MiB
check "big: --memory 128MiB gives the same delta" cmp "$TMP/big-m128.wsd" "$TMP/big-t1.wsd"
check "big: --memory 128MiB peak RSS <= 128 MiB ($(tail -1 "$TMP/rss-m128") KiB)" \
	test "$(tail -1 "$TMP/rss-m128")" -le 131072
expect_exit 0 "big: apply --threads 8 --memory 128MiB" /usr/bin/time -f %M -o "$TMP/rss-am128" \
	"$WSYNC" apply "$TMP/big/old" "$TMP/big-t1.wsd" --threads 8 --memory 128MiB -o "$TMP/big-am-out"
check "big: apply --memory 128MiB equals NEW" cmp "$TMP/big-am-out/big.safetensors" "$TMP/big/new/big.safetensors"
check "big: apply --memory 128MiB peak RSS <= 128 MiB ($(tail -1 "$TMP/rss-am128") KiB)" \
	test "$(tail -1 "$TMP/rss-am128")" -le 131072
expect_exit 2 "diff --memory lots: usage error" "$WSYNC" diff "$TMP/big/old" "$TMP/big/new" \
	-o "$TMP/x.wsd" --memory lots
expect_exit 2 "apply --memory 1MiB (below 64MiB): usage error" "$WSYNC" apply "$TMP/big/old" \
	"$TMP/big-t1.wsd" --memory 1MiB -o "$TMP/x-out"

# Several changed files, each worker on a file of its own: what a worker
# codes ahead of the file being written waits in memory, so incompressible
# files (output as large as the input) must not take the RSS past the
# limit.  Three random 72 MB files (3 segments each), two and three threads.
mkdir -p "$TMP/rnd/old" "$TMP/rnd/new"
for f in a b c; do
	head -c 72000000 /dev/urandom >"$TMP/rnd/old/$f"
	head -c 72000000 /dev/urandom >"$TMP/rnd/new/$f"
done
expect_exit 0 "random files: diff --threads 1" \
	"$WSYNC" diff "$TMP/rnd/old" "$TMP/rnd/new" -o "$TMP/rnd-t1.wsd" --threads 1
for t in 2 3; do
	expect_exit 0 "random files: diff --threads $t" /usr/bin/time -f %M -o "$TMP/rss-rnd$t" \
		"$WSYNC" diff "$TMP/rnd/old" "$TMP/rnd/new" -o "$TMP/rnd-t$t.wsd" --threads "$t"
	check "random files: --threads $t gives the same delta" cmp "$TMP/rnd-t$t.wsd" "$TMP/rnd-t1.wsd"
	check "random files: --threads $t peak RSS <= 256 MiB ($(tail -1 "$TMP/rss-rnd$t") KiB)" \
		test "$(tail -1 "$TMP/rss-rnd$t")" -le 262144
done
expect_exit 0 "random files: diff --threads 2 --memory 128MiB" /usr/bin/time -f %M -o "$TMP/rss-rnd-m128" \
	"$WSYNC" diff "$TMP/rnd/old" "$TMP/rnd/new" -o "$TMP/rnd-m128.wsd" --threads 2 --memory 128MiB
check "random files: --memory 128MiB gives the same delta" cmp "$TMP/rnd-m128.wsd" "$TMP/rnd-t1.wsd"
check "random files: --memory 128MiB peak RSS <= 128 MiB ($(tail -1 "$TMP/rss-rnd-m128") KiB)" \
	test "$(tail -1 "$TMP/rss-rnd-m128")" -le 131072
expect_exit 0 "random files: apply --threads 2" \
	"$WSYNC" apply "$TMP/rnd/old" "$TMP/rnd-t1.wsd" --threads 2 -o "$TMP/rnd-out"
for f in a b c; do
	check "random files: apply gives NEW's $f" cmp "$TMP/rnd-out/$f" "$TMP/rnd/new/$f"
done
rm -rf "$TMP/rnd" "$TMP/rnd-out" "$TMP"/rnd-*.wsd

# three workers: those ahead of the hashing turn keep their whole segment
# (25 MiB; 128 MiB / 3 each) and hash it when their turn comes
expect_exit 0 "big: apply with --threads 3" "$WSYNC" apply "$TMP/big/old" "$TMP/big-t1.wsd" --threads 3 -o "$TMP/big-t3-out"
check "big: --threads 3 apply equals NEW" cmp "$TMP/big-t3-out/big.safetensors" "$TMP/big/new/big.safetensors"
# six: they keep what fits (21 MiB of 25) and read the rest back
expect_exit 0 "big: apply with --threads 6" "$WSYNC" apply "$TMP/big/old" "$TMP/big-t1.wsd" --threads 6 -o "$TMP/big-t6-out"
check "big: --threads 6 apply equals NEW" cmp "$TMP/big-t6-out/big.safetensors" "$TMP/big/new/big.safetensors"
mkdir "$TMP/big-bad"
cp "$TMP/big/old/"* "$TMP/big-bad/"
"$PYTHON3" -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(-4096, 2); b = f.read(1); f.seek(-4096, 2); f.write(bytes([b[0] ^ 1]))' "$TMP/big-bad/big.safetensors"
expect_exit 65 "big: a base wrong in its last segment is refused (--threads 3)" \
	"$WSYNC" apply "$TMP/big-bad" "$TMP/big-t1.wsd" --threads 3 -o "$TMP/big-bad-out"
contains "big: the wrong base is named" "$OUT" "big.safetensors: base does not match"

# ---- all or nothing ----
no_temps() { ! find "$1" -name '.*.wsync-*' | grep -q .; }

t="$TMP/wrong.target"
cp -a "$g/checkpoint-2" "$t"       # step 2 is not the base of the 1->2 delta
tree_sums "$t" >"$TMP/wrong.before"
expect_exit 65 "wrong base: refused with 65" "$WSYNC" apply "$t" "$TMP/gen-bf16-1-2.wsd"
contains "wrong base: names the file and both hashes" "$OUT" "base does not match the delta (expected size"
check "wrong base: TARGET unchanged" diff "$TMP/wrong.before" <(tree_sums "$t")
check "wrong base: no temp file left" no_temps "$t"

# Only the LAST file's base is wrong: nothing may have been written before.
t="$TMP/lastwrong.target"
cp -a "$g/checkpoint-1" "$t"
echo '{"tampered": true}' >"$t/trainer_state.json"
tree_sums "$t" >"$TMP/lastwrong.before"
expect_exit 65 "last base wrong: refused with 65" "$WSYNC" apply "$t" "$TMP/gen-bf16-1-2.wsd"
contains "last base wrong: names trainer_state.json" "$OUT" "trainer_state.json: base does not match"
check "last base wrong: TARGET unchanged (shards not replaced)" diff "$TMP/lastwrong.before" <(tree_sums "$t")

t="$TMP/missing.target"
cp -a "$g/checkpoint-1" "$t"
rm "$t/model-00002-of-00002.safetensors"
tree_sums "$t" >"$TMP/missing.before"
expect_exit 65 "missing base: refused with 65" "$WSYNC" apply "$t" "$TMP/gen-bf16-1-2.wsd"
contains "missing base: says so" "$OUT" "the file is missing"
check "missing base: TARGET unchanged" diff "$TMP/missing.before" <(tree_sums "$t")

t="$TMP/exists.target"
cp -a "$TMP/plain/old" "$t"
echo surprise >"$t/new-empty"
tree_sums "$t" >"$TMP/exists.before"
expect_exit 65 "a file the delta creates already exists: refused" "$WSYNC" apply "$t" "$TMP/plain.wsd"
check "...and TARGET unchanged" diff "$TMP/exists.before" <(tree_sums "$t")

d="$TMP/gen-bf16-1-2.wsd"
size=$(stat -c %s "$d")
cp "$d" "$TMP/flipped.wsd"
byte=$(od -An -tu1 -j $((size / 2)) -N1 "$d" | tr -d ' ')
printf "\\$(printf '%03o' $((byte ^ 255)))" |
	dd of="$TMP/flipped.wsd" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
check "flipped byte: the copy differs from the delta in one byte" \
	test "$(cmp -l "$d" "$TMP/flipped.wsd" | wc -l)" -eq 1
t="$TMP/corrupt.target"
cp -a "$g/checkpoint-1" "$t"
tree_sums "$t" >"$TMP/corrupt.before"
expect_exit 65 "flipped byte: refused with 65" "$WSYNC" apply "$t" "$TMP/flipped.wsd"
contains "flipped byte: says the delta is damaged" "$OUT" "checksum mismatch"
check "flipped byte: TARGET unchanged" diff "$TMP/corrupt.before" <(tree_sums "$t")
head -c $((size - 100)) "$d" >"$TMP/truncated.wsd"
expect_exit 65 "truncated delta: refused with 65" "$WSYNC" apply "$t" "$TMP/truncated.wsd"
contains "truncated delta: says so" "$OUT" "truncated"
check "truncated delta: TARGET unchanged, no temp" diff "$TMP/corrupt.before" <(tree_sums "$t")
expect_exit 65 "inspect of a corrupt delta: 65" "$WSYNC" inspect "$TMP/flipped.wsd"

# ---- symbolic links are refused, never followed ----
mkdir -p "$TMP/ln/old" "$TMP/ln/new"
echo a >"$TMP/ln/old/a"; echo b >"$TMP/ln/new/a"
ln -s /etc/passwd "$TMP/ln/new/link"
expect_exit 65 "diff: a symlink inside NEW is refused with 65" "$WSYNC" diff "$TMP/ln/old" "$TMP/ln/new" -o "$TMP/ln.wsd"
contains "diff: says it is a symbolic link" "$OUT" "link: is a symbolic link"
check "diff: no delta left behind" test ! -e "$TMP/ln.wsd"

t="$TMP/escape.target"
cp -a "$TMP/plain/old" "$t"
mv "$t/sub" "$TMP/outside"
ln -s "$TMP/outside" "$t/sub"
tree_sums "$TMP/outside" >"$TMP/outside.before"
tree_sums "$t" >"$TMP/escape.before"
expect_exit 65 "apply: a symlinked directory on a path is refused with 65" "$WSYNC" apply "$t" "$TMP/plain.wsd"
contains "apply: says why" "$OUT" "symbolic link"
check "apply: nothing written through the link" diff "$TMP/outside.before" <(tree_sums "$TMP/outside")
check "apply: TARGET unchanged" diff "$TMP/escape.before" <(tree_sums "$t")

t="$TMP/filelink.target"
cp -a "$g/checkpoint-1" "$t"
mv "$t/config.json" "$TMP/config-outside.json"
ln -s "$TMP/config-outside.json" "$t/config.json"
expect_exit 65 "apply: a base that is a symlink is refused with 65" "$WSYNC" apply "$t" "$TMP/gen-bf16-1-2.wsd"
check "apply: no temp file left" no_temps "$t"

# ---- usage ----
expect_exit 2 "diff without -o is a usage error" "$WSYNC" diff "$TMP/ln/old" "$TMP/ln/old"
expect_exit 2 "apply with one argument is a usage error" "$WSYNC" apply "$TMP/ln/old"
expect_exit 2 "bad --threads is a usage error" "$WSYNC" diff a b -o c --threads 0
expect_exit 1 "diff of a missing path fails with 1" "$WSYNC" diff "$TMP/nope" "$TMP/ln/old" -o "$TMP/x.wsd"
expect_exit 65 "diff of a file against a directory: 65" "$WSYNC" diff "$TMP/ln/old/a" "$TMP/ln/old" -o "$TMP/x.wsd"
expect_exit 1 "apply of a missing delta fails with 1" "$WSYNC" apply "$TMP/ln/old" "$TMP/nope.wsd"
expect_exit 65 "apply of a file that is no delta: 65" "$WSYNC" apply "$TMP/ln/old" "$TMP/ln/old/a"

# ---- -o onto an older tree with a directory where a file now is ----
# (the subscriber applies anchors this way): refused before anything is
# replaced, not half-way through the renames.
dw="$TMP/dirway"
mkdir -p "$dw/empty" "$dw/new" "$dw/out/x"
echo "a, new" >"$dw/new/a.txt"
echo "x is a file now" >"$dw/new/x"
echo "a, old" >"$dw/out/a.txt"
echo "under x" >"$dw/out/x/f"
expect_exit 0 "dir in the way: the anchor is made" "$WSYNC" diff "$dw/empty" "$dw/new" -o "$dw/a.wsd"
expect_exit 1 "dir in the way: apply -o is refused" "$WSYNC" apply "$dw/empty" "$dw/a.wsd" -o "$dw/out"
contains "dir in the way: the error names it" "$OUT" "x: a directory is in the way"
check "dir in the way: the files before it are not replaced" grep -q "a, old" "$dw/out/a.txt"
check "dir in the way: no temp is left" test -z "$(find "$dw/out" -name '.*wsync-*')"
rm -rf "$dw"

# ---- a sparse safetensors file over 4 GiB, in bounded memory ----
# One BF16 tensor of 2.2e9 elements (4.4 GB, all holes); NEW changes a few
# elements, two of them past 4 GiB.  RSS is checked against 256 MiB.
h="$TMP/huge"
mkdir -p "$h/old" "$h/new"
nelem=2200000000
off=$("$PYTHON3" "$TMP/mk.py" sparse "$h/old/w.safetensors" $nelem)
cp --sparse=always "$h/old/w.safetensors" "$h/new/w.safetensors"
for e in 0 12345 1000000000 2100000000 $((nelem - 1)); do
	printf '\x80\x3f' | dd of="$h/new/w.safetensors" bs=1 seek=$((off + 2 * e)) conv=notrunc 2>/dev/null
done
expect_exit 0 "over 4 GiB: diff" /usr/bin/time -f %M -o "$TMP/rss-diff" \
	"$WSYNC" diff "$h/old" "$h/new" -o "$TMP/huge.wsd" --threads 2 --json
contains "over 4 GiB: 5 elements changed" "$OUT" '"changed":5,'
cp -a --sparse=always "$h/old" "$h/target"
expect_exit 0 "over 4 GiB: apply" /usr/bin/time -f %M -o "$TMP/rss-apply" \
	"$WSYNC" apply "$h/target" "$TMP/huge.wsd" --threads 2
check "over 4 GiB: result equals NEW" cmp "$h/target/w.safetensors" "$h/new/w.safetensors"
echo "# peak RSS: diff $(cat "$TMP/rss-diff") KiB, apply $(cat "$TMP/rss-apply") KiB; delta $(stat -c %s "$TMP/huge.wsd") bytes"
check "over 4 GiB: diff peak RSS <= 256 MiB" test "$(cat "$TMP/rss-diff")" -le 262144
check "over 4 GiB: apply peak RSS <= 256 MiB" test "$(cat "$TMP/rss-apply")" -le 262144
check "over 4 GiB: the delta is small (< 64 KiB)" test "$(stat -c %s "$TMP/huge.wsd")" -lt 65536
rm -rf "$h"

tap_done
