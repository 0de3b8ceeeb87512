#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-inspect: `wsync inspect` lists every tensor of generated checkpoints
# (sharded and single-file), its --json agrees with an independent reader,
# and broken input gets a clear message and the documented exit code (a
# file that is neither a safetensors file nor a delta is called that).
. "$(dirname "$0")/lib.sh"

"$GEN" --params 2M --steps 1 --shards 3 --quiet --out "$TMP/sharded" >/dev/null 2>&1
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

expect_exit 1 "nonexistent path fails with 1" "$WSYNC" inspect "$TMP/nope"
expect_exit 2 "no argument is a usage error" "$WSYNC" inspect
contains "no argument: says PATH is missing" "$OUT" "wsync inspect: missing PATH"
expect_exit 2 "unknown option is a usage error" "$WSYNC" inspect --bogus "$ck"
contains "unknown option: named after the full prefix" "$OUT" "wsync inspect: unknown option --bogus"
expect_exit 2 "unknown command is a usage error" "$WSYNC" frobnicate
expect_exit 0 "wsync --version" "$WSYNC" --version
contains "version printed" "$OUT" "wsync "
tap_done
