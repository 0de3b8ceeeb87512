#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-gen-checkpoints.sh -- scripts/gen-checkpoints writes what the other
# tests rely on: HF-style checkpoint directories with valid safetensors
# shards, static files byte-identical across steps, deltas as sparse as
# real RL fine-tuning (checked from the files, not just from what the
# generator claims), and output fully determined by the seed whichever way
# the optimizer state is stored.
. "$(dirname "$0")/lib.sh"

# A small safetensors reader, independent of the generator's code.
cat >"$TMP/st.py" <<'EOF'
import json, os, struct, sys
import numpy as np

SIZES = {"BF16": 2, "F16": 2, "F32": 4}


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        raw = f.read(n)
    assert len(raw) == n, "%s: short header" % path
    assert n % 8 == 0, "%s: header length %d is not padded to 8" % (path, n)
    hdr = json.loads(raw)
    return hdr, 8 + n


def check_shard(path):
    """Offsets contiguous from 0, sizes = prod(shape) * dtype size."""
    hdr, base = read_header(path)
    assert hdr.pop("__metadata__") == {"format": "pt"}, "metadata"
    pos = 0
    for name, e in hdr.items():
        b, end = e["data_offsets"]
        assert b == pos, "%s: %s starts at %d, expected %d" % (path, name, b, pos)
        want = int(np.prod(e["shape"])) * SIZES[e["dtype"]]
        assert end - b == want, "%s: %s has %d bytes, expected %d" % (
            path, name, end - b, want)
        pos = end
    size = os.path.getsize(path)
    assert size == base + pos, "%s: file is %d bytes, header says %d" % (
        path, size, base + pos)
    return hdr


def shards(ckpt):
    return sorted(f for f in os.listdir(ckpt) if f.endswith(".safetensors"))


def tensors(ckpt):
    """name -> (dtype, shape, raw bits as unsigned ints)."""
    out = {}
    for s in shards(ckpt):
        path = os.path.join(ckpt, s)
        hdr, base = read_header(path)
        hdr.pop("__metadata__")
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for name, e in hdr.items():
            b, end = e["data_offsets"]
            bits = {2: "<u2", 4: "<u4"}[SIZES[e["dtype"]]]
            out[name] = (e["dtype"], e["shape"],
                         data[base + b:base + end].view(bits))
    return out


def cmd_check(ckpt):
    names = []
    for s in shards(ckpt):
        names += list(check_shard(os.path.join(ckpt, s)))
    idx = os.path.join(ckpt, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            index = json.load(f)
        wm = index["weight_map"]
        assert sorted(wm) == sorted(names), "weight_map vs shard contents"
        assert len(names) == len(set(names)), "a tensor is in two shards"
        for s in shards(ckpt):
            hdr, _ = read_header(os.path.join(ckpt, s))
            for name in hdr:
                if name != "__metadata__":
                    assert wm[name] == s, "%s mapped to %s, found in %s" % (
                        name, wm[name], s)
        total = sum(int(np.prod(e[1])) * SIZES[e[0]]
                    for e in tensors(ckpt).values())
        assert index["metadata"]["total_size"] == total, "total_size"
    print(len(names))


def cmd_dtypes(ckpt, want_matrix):
    """Norm weights F32, every other tensor in want_matrix."""
    t = tensors(ckpt)
    norms = [n for n in t if n.endswith("norm.weight")]
    assert norms, "no norm weights"
    for n, (dt, shape, _) in t.items():
        want = "F32" if n.endswith("norm.weight") else want_matrix
        assert dt == want, "%s is %s, expected %s" % (n, dt, want)
    for n in ("model.embed_tokens.weight", "lm_head.weight",
              "model.layers.0.self_attn.q_proj.weight",
              "model.layers.0.mlp.down_proj.weight", "model.norm.weight"):
        assert n in t, "missing " + n


def cmd_values(ckpt, want_matrix):
    """Matrices look like N(0, 0.02), norms like 1 + N(0, 0.02)."""
    t = tensors(ckpt)
    for n, (dt, shape, bits) in t.items():
        if dt == "F32":
            x = bits.view("<f4").astype(np.float64)
        elif dt == "F16":
            x = bits.view("<f2").astype(np.float64)
        else:
            x = (bits.astype(np.uint32) << 16).view("<f4").astype(np.float64)
        assert np.all(np.isfinite(x)), n
        mean = 1.0 if n.endswith("norm.weight") else 0.0
        assert abs(x.mean() - mean) < 0.01 and 0.01 < x.std() < 0.03, (
            "%s: mean %g std %g" % (n, x.mean(), x.std()))


def cmd_delta(a, b):
    """Fraction of low-precision elements changed, share of them by 1 ULP."""
    ta, tb = tensors(a), tensors(b)
    n = changed = one = 0
    for name, (dt, shape, x) in ta.items():
        if dt == "F32":
            continue
        y = tb[name][2]
        d = y.astype(np.int64) - x.astype(np.int64)
        same_sign = ((x ^ y) & 0x8000) == 0
        n += x.size
        changed += int(np.count_nonzero(d))
        one += int(np.count_nonzero((np.abs(d) == 1) & same_sign))
    print(changed, one, n)


getattr(sys.modules[__name__], "cmd_" + sys.argv[1])(*sys.argv[2:])
EOF
st() { "$PYTHON3" "$TMP/st.py" "$@"; }

check "gen-checkpoints is executable" test -x "$GEN"
expect_exit 0 "--help works" "$GEN" --help
contains "--help documents --params forms" "$OUT" "2B"

# The model size lands within 10% of --params, in every accepted form.
size_ok() { # size_ok FORM PARAMS
	local got
	got=$("$GEN" "$TMP/none" --params "$1" --dry-run --json) || return 1
	"$PYTHON3" -c 'import json, sys
d = json.loads(sys.argv[1]); want = float(sys.argv[2])
assert abs(d["params"] / want - 1) < 0.10, d
assert d["hidden_size"] % 64 == 0, d' "$got" "$2"
}
check "--params 1e6 lands within 10%" size_ok 1e6 1e6
check "--params 1M lands within 10%" size_ok 1M 1e6
check "--params 500M lands within 10%" size_ok 500M 5e8
check "--params 2B lands within 10%" size_ok 2B 2e9
check "--dry-run writes nothing" test ! -e "$TMP/none"
expect_exit 2 "a malformed --params is rejected" "$GEN" "$TMP/bad" --params 12Q

# --- the main series: ~2M params, 4 steps, 2 shards --------------------
A=$TMP/a
expect_exit 0 "generate 2M params x 4 steps in 2 shards" \
	"$GEN" "$A" --params 2M --steps 4 --shards 2 --seed 7 --json
printf '%s\n' "$OUT" >"$TMP/a.json"

files_ok() {
	local d s f
	[ "$(find "$A" -mindepth 1 -maxdepth 1 | wc -l)" -eq 4 ] || return 1
	for s in 1 2 3 4; do
		d=$A/checkpoint-$s
		[ "$(ls "$d"/*.safetensors | wc -l)" -eq 2 ] || return 1
		for f in model-00001-of-00002.safetensors \
			model-00002-of-00002.safetensors model.safetensors.index.json \
			config.json tokenizer.json trainer_state.json optimizer.pt \
			scheduler.pt rng_state.pth training_args.bin; do
			[ -s "$d/$f" ] || { echo "missing $d/$f"; return 1; }
		done
		[ ! -e "$d/model.safetensors" ] || return 1
	done
}
check "4 checkpoint dirs with 2 shards, index, config, tokenizer, trainer files" files_ok

same_across_steps() { # same_across_steps FILE
	local s
	for s in 2 3 4; do
		cmp "$A/checkpoint-1/$1" "$A/checkpoint-$s/$1" || return 1
	done
}
check "config.json is identical across steps" same_across_steps config.json
check "tokenizer.json is identical across steps" same_across_steps tokenizer.json
check "config.json says bfloat16 and the model's size" "$PYTHON3" -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["torch_dtype"] == "bfloat16", c
assert c["hidden_size"] % 64 == 0 and c["num_hidden_layers"] >= 1, c
assert c["vocab_size"] == len(json.load(open(sys.argv[2]))["model"]["vocab"])
' "$A/checkpoint-1/config.json" "$A/checkpoint-1/tokenizer.json"
check "trainer files change between steps" \
	bash -c '! cmp -s "$1/checkpoint-1/optimizer.pt" "$1/checkpoint-2/optimizer.pt"' _ "$A"

check "trainer_state.json has the step and a log history" "$PYTHON3" -c '
import json, sys
for s in (1, 2, 3, 4):
    st = json.load(open("%s/checkpoint-%d/trainer_state.json" % (sys.argv[1], s)))
    assert st["global_step"] == s, st["global_step"]
    assert [e["step"] for e in st["log_history"]] == list(range(1, s + 1))
' "$A"

written_last() {
	local d=$A/checkpoint-4
	[ -z "$(find "$d" -type f -newer "$d/trainer_state.json")" ]
}
check "trainer_state.json is written last" written_last

headers_ok() {
	local s n
	for s in 1 2 3 4; do
		n=$(st check "$A/checkpoint-$s") || return 1
		[ "$n" -gt 10 ] || return 1
	done
}
check "shard headers parse, offsets contiguous, index covers every tensor once" headers_ok
check "norm weights are F32, matrices BF16" st dtypes "$A/checkpoint-4" BF16
check "weights look like N(0, 0.02), norms like 1 + N(0, 0.02)" \
	st values "$A/checkpoint-4" BF16

# The densities the generator reports, then the same recomputed from the
# files. Steps 3 and 4 must be sparse and mostly one-ULP moves.
density_ok() { # density_ok CHANGED ONE_ULP TOTAL
	"$PYTHON3" -c 'import sys
c, o, n = map(int, sys.argv[1:])
assert 0.001 <= c / n <= 0.05, "changed %.4f%%" % (100.0 * c / n)
assert o / c >= 0.80, "1 ulp share %.2f%%" % (100.0 * o / c)' "$@"
}
reported() { # reported STEP -> "changed one_ulp elements" from --json
	"$PYTHON3" -c 'import json, sys
for line in open(sys.argv[1]):
    d = json.loads(line)
    if d.get("event") == "step" and d["step"] == int(sys.argv[2]):
        print(d["changed_elements"], d["one_ulp_elements"], d["elements"])' \
		"$TMP/a.json" "$1"
}
for s in 3 4; do
	rep=$(reported $s)
	got=$(st delta "$A/checkpoint-$((s - 1))" "$A/checkpoint-$s" 2>"$TMP/err") ||
		sed 's/^/# /' "$TMP/err"
	check "step $s: reported density is sparse and mostly 1 ULP ($rep)" \
		density_ok $rep
	check "step $s: density recomputed from the files ($got)" density_ok $got
	check "step $s: reported counts match the files" test "$rep" = "$got"
done
check "step 1 reports its size, no delta" "$PYTHON3" -c 'import json, sys
d = [json.loads(l) for l in open(sys.argv[1])]
first = [x for x in d if x.get("event") == "step"][0]
assert first["step"] == 1 and first["changed"] is None and first["bytes"] > 0
assert d[-1]["event"] == "done" and d[-1]["checkpoints"] == 4' "$TMP/a.json"

# --- determinism ---------------------------------------------------------
expect_exit 0 "same seed again" \
	"$GEN" "$TMP/a2" --params 2M --steps 4 --shards 2 --seed 7 --quiet
check "same seed gives byte-identical output" diff -r "$A" "$TMP/a2"
check "--quiet prints nothing" test -z "$OUT"
expect_exit 0 "another seed" \
	"$GEN" "$TMP/b" --params 2M --steps 4 --shards 2 --seed 8 --quiet
check "another seed gives different weights" bash -c '! cmp -s \
	"$1/checkpoint-4/model-00001-of-00002.safetensors" \
	"$2/checkpoint-4/model-00001-of-00002.safetensors"' _ "$A" "$TMP/b"
mkdir -p "$TMP/state"
expect_exit 0 "optimizer state on disk" \
	"$GEN" "$TMP/d" --params 2M --steps 4 --shards 2 --seed 7 --quiet \
	--state-on-disk --state-dir "$TMP/state"
check "--state-on-disk output is byte-identical to the in-RAM one" \
	diff -r "$A" "$TMP/d"
check "the on-disk state is removed at exit" \
	test -z "$(ls -A "$TMP/state")"
expect_exit 0 "one worker thread" \
	"$GEN" "$TMP/t1" --params 2M --steps 2 --shards 2 --seed 7 --quiet \
	--threads 1
check "--threads does not change the weights" cmp \
	"$A/checkpoint-2/model-00002-of-00002.safetensors" \
	"$TMP/t1/checkpoint-2/model-00002-of-00002.safetensors"

# --- layouts ---------------------------------------------------------------
I=$TMP/inplace
expect_exit 0 "--inplace" "$GEN" "$I" --params 1M --steps 3 --inplace --quiet
inplace_ok() {
	[ -z "$(find "$I" -name 'checkpoint-*')" ] || return 1
	[ -s "$I/model.safetensors" ] || return 1
	[ ! -e "$I/model.safetensors.index.json" ] || return 1
	"$PYTHON3" -c 'import json, sys
assert json.load(open(sys.argv[1]))["global_step"] == 3' \
		"$I/trainer_state.json"
}
check "--inplace rewrites OUT itself, one shard, global_step 3" inplace_ok
check "--inplace shard is valid" st check "$I"

R=$TMP/rot
expect_exit 0 "--save-total-limit 2" \
	"$GEN" "$R" --params 1M --steps 4 --save-total-limit 2 --quiet
check "--save-total-limit 2 keeps only the last two" \
	test "$(cd "$R" && echo checkpoint-*)" = "checkpoint-3 checkpoint-4"

E=$TMP/every
expect_exit 0 "--save-every 5 --no-trainer-files" \
	"$GEN" "$E" --params 1M --steps 2 --save-every 5 --no-trainer-files --quiet
check "--save-every names checkpoints by global step" \
	test "$(cd "$E" && echo checkpoint-*)" = "checkpoint-10 checkpoint-5"
check "--no-trainer-files omits them" \
	test -z "$(cd "$E/checkpoint-5" && ls optimizer.pt scheduler.pt \
		rng_state.pth training_args.bin 2>/dev/null)"
check "--save-every logs every optimizer step" "$PYTHON3" -c '
import json, sys
st = json.load(open(sys.argv[1]))
assert st["global_step"] == 10 and len(st["log_history"]) == 10, st
' "$E/checkpoint-10/trainer_state.json"

H=$TMP/f16
expect_exit 0 "--dtype f16" \
	"$GEN" "$H" --params 1M --steps 3 --dtype f16 --json
f16_reported() {
	"$PYTHON3" -c 'import json, sys
steps = [json.loads(l) for l in sys.argv[1].splitlines()
         if json.loads(l).get("event") == "step"]
assert [d["dtype"] for d in steps] == ["f16"] * 3
assert 0 < steps[2]["changed"] < 1, steps[2]' "$OUT"
}
check "--dtype f16 reports f16 deltas" f16_reported
check "--dtype f16 saves F16 matrices and F32 norms" \
	st dtypes "$H/checkpoint-3" F16
check "--dtype f16 values are sane" st values "$H/checkpoint-3" F16
check "--dtype f16 config says float16" \
	grep -q '"torch_dtype": "float16"' "$H/checkpoint-1/config.json"

tap_done
