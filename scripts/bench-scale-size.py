#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
# bench-scale-size.py GEN PARAMS SHARDS: "BYTES SHARDS NAME..." of the checkpoint
# gen-checkpoints (GEN) writes for PARAMS in SHARDS shards (bf16, no trainer files).
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("gen_checkpoints", sys.argv[1])
g = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
loader.exec_module(g)
a = g.parse_args(["--params", sys.argv[2], "--shards", sys.argv[3], "--no-trainer-files", "x"])
shape = g.choose_shape(a.params)
tensors, n = g.build_tensors(shape, g.DTYPES["bf16"])
layout = g.Layout(a, shape, g.DTYPES["bf16"], tensors)
print(layout.bytes, len(layout.names), " ".join(layout.names))
