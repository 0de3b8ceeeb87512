#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-inspect: `wsync inspect` lists every tensor of generated checkpoints
# (sharded and single-file), its --json agrees with an independent reader,
# and broken input gets a clear message and the documented exit code (a
# file that is neither a safetensors file nor a delta is called that).
# A delta per tensor: an anchor's tensors named from its own header, a
# delta's from --names DIR (any step of the model) or from its own header
# when that changed length; each tensor's coded bytes agree with its
# pieces (tensor-costs.py computes them apart: exact where one tensor
# holds a piece or a segment's streams, "~" shares that add up where
# several do), and with the header and framing make the file's bytes in
# the delta; changed elements exactly those the data changed; the
# costliest 20 by default, every one with --tensors, pieces beside with
# --pieces; a --names folder that does not fit refused by its name (its
# pieces listed instead), one hint how to name headers coded against the
# base; the exit codes of the new options.
. "$(dirname "$0")/lib.sh"

"$GEN" --params 2M --steps 2 --shards 3 --quiet --out "$TMP/sharded" >/dev/null 2>&1
"$GEN" --params 1M --steps 1 --shards 1 --quiet --out "$TMP/single" >/dev/null 2>&1
ck="$TMP/sharded/checkpoint-1"

expect_exit 0 "inspect a sharded checkpoint directory" "$WSYNC" inspect "$ck"
contains "text output names the embedding" "$OUT" "model.embed_tokens.weight"
contains "text output shows dtype and shape" "$OUT" "BF16"
contains "text output has a total over 3 files" "$OUT" "total: 3 files"
contains "text output says it used the index" "$OUT" "(indexed)"

expect_exit 0 "inspect --json" "$WSYNC" inspect --json "$ck"
printf '%s' "$OUT" >"$TMP/inspect.json"
check "--json agrees with the index and an independent header reader" \
	"$PYTHON3" - "$TMP/inspect.json" "$ck" <<'PY'
import json, struct, sys, os
out = json.load(open(sys.argv[1]))
ck = sys.argv[2]
idx = json.load(open(os.path.join(ck, "model.safetensors.index.json")))
names = {t["name"]: (f["file"], t) for f in out["files"] for t in f["tensors"]}
assert set(names) == set(idx["weight_map"]), "tensor sets differ"
for n, shard in idx["weight_map"].items():
    assert names[n][0] == shard, (n, names[n][0], shard)
total = 0
for f in out["files"]:
    raw = open(os.path.join(ck, f["file"]), "rb").read()
    hl = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + hl])
    hdr.pop("__metadata__", None)
    assert f["size"] == len(raw)
    for t in f["tensors"]:
        h = hdr[t["name"]]
        assert h["dtype"] == t["dtype"] and h["shape"] == t["shape"], t["name"]
        b, e = h["data_offsets"]
        assert t["bytes"] == e - b and t["offset"] == 8 + hl + b, t["name"]
        total += t["bytes"]
assert out["tensor_bytes"] == total == idx["metadata"]["total_size"]
assert out["indexed"] is True
PY

single="$TMP/single/checkpoint-1/model.safetensors"
expect_exit 0 "inspect a single .safetensors file" "$WSYNC" inspect "$single"
contains "single file lists lm_head" "$OUT" "lm_head.weight"
contains "norm weights are F32" "$OUT" "F32"
expect_exit 0 "inspect a directory without an index" "$WSYNC" inspect "$TMP/single/checkpoint-1"

# Broken input: exit 65 (EX_DATAERR) and a message naming the problem.
head -c 100 "$single" >"$TMP/truncated.safetensors"
expect_exit 65 "truncated file is refused with 65" "$WSYNC" inspect "$TMP/truncated.safetensors"
contains "truncated file: message names the file" "$OUT" "truncated.safetensors"

cp "$single" "$TMP/garbled.safetensors"
printf 'X' | dd of="$TMP/garbled.safetensors" bs=1 seek=8 conv=notrunc 2>/dev/null
expect_exit 65 "garbled header is refused with 65" "$WSYNC" inspect "$TMP/garbled.safetensors"
contains "garbled header: says why" "$OUT" "does not start with '{'"

# A file that is neither (a checkpoint's config.json, a short text): said
# so, naming the file, not read as a huge header length.
"$PYTHON3" -c 'import json, sys; json.dump({"architectures": ["LlamaForCausalLM"], "hidden_size": 256}, open(sys.argv[1], "w"), indent=2)' "$TMP/config.json"
expect_exit 65 "inspect config.json exits 65" "$WSYNC" inspect "$TMP/config.json"
contains "config.json: neither a safetensors file nor a delta, named" "$OUT" \
	"wsync inspect: $TMP/config.json: neither a safetensors file nor a wsync delta"
case "$OUT" in *"header length"*) r=1 ;; *) r=0 ;; esac
tap_result $r "config.json: no header length is quoted"
printf 'hi\n' >"$TMP/short.txt"
expect_exit 65 "inspect a 3-byte text file exits 65" "$WSYNC" inspect "$TMP/short.txt"
contains "short file: neither a safetensors file nor a delta" "$OUT" \
	"$TMP/short.txt: neither a safetensors file nor a wsync delta"

mkdir "$TMP/bad-index"
cp "$ck"/*.safetensors "$TMP/bad-index/"
"$PYTHON3" - "$ck/model.safetensors.index.json" "$TMP/bad-index/model.safetensors.index.json" <<'PY'
import json, sys
idx = json.load(open(sys.argv[1]))
del idx["weight_map"]["lm_head.weight"]
json.dump(idx, open(sys.argv[2], "w"))
PY
expect_exit 65 "index missing a tensor is refused with 65" "$WSYNC" inspect "$TMP/bad-index"
contains "index mismatch names the tensor" "$OUT" "lm_head.weight"

rm "$TMP/bad-index/$(ls "$TMP/bad-index" | grep -m1 safetensors$)"
cp "$ck/model.safetensors.index.json" "$TMP/bad-index/"
expect_exit 1 "missing shard fails with 1" "$WSYNC" inspect "$TMP/bad-index"
contains "missing shard is named" "$OUT" "No such file"

# ---- a delta per tensor ----
TC=$WSYNC_SOURCE_ROOT/tests/integration/tensor-costs.py
mkdir -p "$TMP/m/empty"
for s in 1 2 3; do mkdir -p "$TMP/m/s$s" && "$PYTHON3" "$TC" make "$TMP/m/s$s" $s; done
mkdir -p "$TMP/m/swapped" "$TMP/m/long" "$TMP/m/other"
"$PYTHON3" "$TC" make "$TMP/m/swapped" 1 --layout swapped
"$PYTHON3" "$TC" make "$TMP/m/long" 2 --header-len 8192
cp "$single" "$TMP/m/other/model.safetensors"
check "the swapped layout is as long as the real one" \
	test "$(stat -c %s "$TMP/m/swapped/model.safetensors")" = "$(stat -c %s "$TMP/m/s1/model.safetensors")"
"$WSYNC" diff "$TMP/m/empty" "$TMP/m/s2" -o "$TMP/m/anchor.wsd" >/dev/null
"$WSYNC" diff "$TMP/m/s1" "$TMP/m/s2" -o "$TMP/m/d12.wsd" >/dev/null
"$WSYNC" diff "$TMP/m/s1" "$TMP/m/long" -o "$TMP/m/d1long.wsd" >/dev/null

expect_exit 0 "an anchor per tensor, no --names" "$WSYNC" inspect "$TMP/m/anchor.wsd"
contains "... named from its own header" "$OUT" "26 tensors, names from the delta's own header; the costliest:"
contains "... the costliest first (f.head, 3 MiB of F32 noise)" "$(grep -A1 '  NAME ' <<<"$OUT")" "f.head "
contains "... the rest summed, and how to see them" "$OUT" "... 6 more tensors, "
contains "... the header and the framing" "$OUT" "(records and tables)"
case "$OUT" in *"    [0, +"*) r=1 ;; *) r=0 ;; esac
tap_result $r "... its pieces not listed"
"$WSYNC" inspect --json "$TMP/m/anchor.wsd" >"$TMP/m/anchor.json"
check "anchor --json: per-tensor bytes agree with the pieces and add up to the file's" \
	"$PYTHON3" "$TC" check "$TMP/m/anchor.json" model.safetensors delta
check "anchor --json: the 20 shown are the costliest, the 6 more's bytes their sum" \
	"$PYTHON3" - "$TMP/m/anchor.json" "$OUT" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))["files"][0]
ts = f["tensors"]
assert all(t["changed"] is None for t in ts if t["bytes"]), "an anchor knows no changes"
order = sorted(range(len(ts)), key=lambda i: (-ts[i]["coded_bytes"], i))
lines = [l.split() for l in sys.argv[2].splitlines() if l.startswith("    ") and not l.startswith("    NAME")]
shown = [l[0] for l in lines if not l[0].startswith(("(", "..."))]
assert shown == [ts[i]["name"] for i in order[:20]], shown
more = [l for l in lines if l[0] == "..."][0]
assert int(more[4]) == sum(ts[i]["coded_bytes"] for i in order[20:]), more
PY
expect_exit 0 "--tensors: every tensor" "$WSYNC" inspect --tensors "$TMP/m/anchor.wsd"
check "... all 26, in file order" "$PYTHON3" -c '
import json, sys
ts = [t["name"] for t in json.load(open(sys.argv[1]))["files"][0]["tensors"]]
names = [l.split()[0] for l in sys.argv[2].splitlines() if l.startswith("    ") and l.split()[0] in ts]
assert names == ts, names' "$TMP/m/anchor.json" "$OUT"
expect_exit 0 "--pieces: tensors and pieces" "$WSYNC" inspect --pieces "$TMP/m/anchor.wsd"
contains "... the tensors" "$OUT" "names from the delta's own header"
contains "... and the pieces" "$OUT" "    [0, +"

expect_exit 0 "a delta without --names" "$WSYNC" inspect "$TMP/m/d12.wsd"
contains "... its pieces" "$OUT" "FLOAT   BF16"
contains "... and once how to name its tensors" "$OUT" "(1 safetensors file listed by pieces: its header is coded against the base; --names DIR"
expect_exit 0 "a delta with --names (a checkpoint of another step)" "$WSYNC" inspect "$TMP/m/d12.wsd" --names "$TMP/m/s3"
contains "... named from that folder's file" "$OUT" "26 tensors, names from $TMP/m/s3/model.safetensors"
case "$OUT" in *"FLOAT   BF16"*) r=1 ;; *) r=0 ;; esac
tap_result $r "... its pieces not listed"
"$WSYNC" inspect --json "$TMP/m/d12.wsd" --names "$TMP/m/s3" >"$TMP/m/d12.json"
check "delta --json: bytes agree with the pieces; a.embed and c.proj exact, changed as made" \
	"$PYTHON3" "$TC" check "$TMP/m/d12.json" model.safetensors "$TMP/m/s3/model.safetensors" \
	--changed a.embed=1000 --exact a.embed --changed f.head=0 --changed b.norm=0
check "delta --json: c.proj's changes counted from its DENSE pieces (or unknown if XOR)" \
	"$PYTHON3" - "$TMP/m/d12.json" <<'PY'
import json, sys
f = json.load(open(sys.argv[1]))["files"][0]
c = [t for t in f["tensors"] if t["name"] == "c.proj"][0]
ms = {p["method"] for s in f["segments"] for p in s["pieces"]
      if c["offset"] <= p["offset"] < c["offset"] + c["bytes"]}
if ms == {"DENSE"}:
    assert c["changed"] == 1024 * 1024 * 2 // 5 and not c["changed_estimated"], c
else:
    assert c["changed"] is None, (ms, c)
PY
expect_exit 0 "a delta whose header changed length: named without --names" "$WSYNC" inspect "$TMP/m/d1long.wsd"
contains "... from its own header" "$OUT" "26 tensors, names from the delta's own header"
"$WSYNC" inspect --json "$TMP/m/d1long.wsd" >"$TMP/m/d1long.json"
check "... its bytes agree with the pieces" \
	"$PYTHON3" "$TC" check "$TMP/m/d1long.json" model.safetensors delta --changed a.embed=1000

expect_exit 0 "--names whose layout differs: exit 0" "$WSYNC" inspect "$TMP/m/d12.wsd" --names "$TMP/m/swapped"
contains "... refused, naming the file and why" "$OUT" \
	"wsync inspect: note: model.safetensors: --names: $TMP/m/swapped/model.safetensors does not match model.safetensors in the delta: the delta's"
contains "... its pieces listed instead" "$OUT" "FLOAT   BF16"
case "$OUT" in *"names from"*) r=1 ;; *) r=0 ;; esac
tap_result $r "... and no tensor named from it"
expect_exit 0 "--names of another model: exit 0" "$WSYNC" inspect "$TMP/m/d12.wsd" --names "$TMP/m/other"
contains "... refused: its tensors end elsewhere" "$OUT" \
	"$TMP/m/other/model.safetensors does not match model.safetensors in the delta: its tensors end at byte $(stat -c %s "$single"), the file has"
"$WSYNC" inspect --json "$TMP/m/d12.wsd" --names "$TMP/m/other" >"$TMP/m/other.json" 2>/dev/null
check "... in --json: no tensors, and why" "$PYTHON3" -c '
import json, sys
f = json.load(open(sys.argv[1]))["files"][0]
assert f["tensor_names"] is None and "tensors" not in f, f.keys()
assert sys.argv[2] + "/model.safetensors does not match" in f["tensors_unavailable"], f["tensors_unavailable"]' \
	"$TMP/m/other.json" "$TMP/m/other"
expect_exit 0 "--names folder without the file: exit 0" "$WSYNC" inspect "$TMP/m/d12.wsd" --names "$TMP/m/empty"
contains "... says it is missing" "$OUT" "--names: $TMP/m/empty/model.safetensors: No such file or directory"
expect_exit 0 "--names as the one file of a one-file delta" "$WSYNC" inspect "$TMP/m/d12.wsd" --names "$TMP/m/s1/model.safetensors"
contains "... names from it" "$OUT" "names from $TMP/m/s1/model.safetensors"

"$WSYNC" diff "$ck" "$TMP/sharded/checkpoint-2" -o "$TMP/m/ck.wsd" >/dev/null 2>&1
expect_exit 0 "a sharded checkpoint's delta without --names" "$WSYNC" inspect "$TMP/m/ck.wsd"
check "... the hint said once, for both shards" test "$(grep -c 'listed by pieces' <<<"$OUT")" = 1
contains "... counting them" "$OUT" "(3 safetensors files listed by pieces"
expect_exit 0 "... with --names: every shard named" "$WSYNC" inspect "$TMP/m/ck.wsd" --names "$ck"
check "... 3 shards named" test "$(grep -c 'names from ' <<<"$OUT")" = 3

expect_exit 1 "--names that does not exist: 1" "$WSYNC" inspect "$TMP/m/d12.wsd" --names "$TMP/nope"
contains "... named" "$OUT" "wsync inspect: --names $TMP/nope: No such file or directory"
expect_exit 2 "--names on a checkpoint, not a delta: 2" "$WSYNC" inspect "$ck" --names "$ck"
contains "... says what it goes with" "$OUT" "--names, --tensors and --pieces go with a delta"
expect_exit 2 "--tensors on a safetensors file: 2" "$WSYNC" inspect "$single" --tensors
expect_exit 2 "--names without its folder: 2" "$WSYNC" inspect "$TMP/m/d12.wsd" --names

expect_exit 1 "nonexistent path fails with 1" "$WSYNC" inspect "$TMP/nope"
expect_exit 2 "no argument is a usage error" "$WSYNC" inspect
contains "no argument: says PATH is missing" "$OUT" "wsync inspect: missing PATH"
expect_exit 2 "unknown option is a usage error" "$WSYNC" inspect --bogus "$ck"
contains "unknown option: named after the full prefix" "$OUT" "wsync inspect: unknown option --bogus"
expect_exit 2 "unknown command is a usage error" "$WSYNC" frobnicate
expect_exit 0 "wsync --version" "$WSYNC" --version
contains "version printed" "$OUT" "wsync "
tap_done
