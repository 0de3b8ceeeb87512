#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-scale-trainer.py GEN CKPT STEP TOTAL PARAMS SHARDS OUT_JSON: checkpoint STEP of
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
