#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""cost-model.py -- what a step of a large model costs with wsync, from
figures measured on small ones (scripts/BENCHMARKS.md, "A trillion
parameters").

    scripts/cost-model.py [--params 1e12] [--parts 1,64] [--nodes 256]
                          [--partial-share 0.125] [--partial-nodes 192]
                          [--disk-gbs 2.0] [--cores 8] [--density 0.0125]

Every input is either a measurement (its default, named below with the
command that made it) or a property of the deployment (model size,
nodes, disks), given on the command line.  Nothing else is assumed: the
model is per stage, a stage's time the larger of its CPU time (bytes at
the measured per-core rate, over the cores it has) and its I/O time
(bytes at the disk rate given), plus the fixed costs measured.
"""
import argparse

# ---- measured (scripts/BENCHMARKS.md) -------------------------------------
# scripts/bench-codec.sh --runs 5 --zstd none (bf16, density 1.25%):
B_PER_CHANGED = 0.874          # delta bytes per changed bf16 element
ENCODE_MBS_CORE = 2373         # encode, MB of checkpoint a second, one core
APPLY_MBS_CORE = 2362          # apply, MB of checkpoint a second, one core
SCALING_2T = 1.76              # encode speed-up at 2 threads (4,176 / 2,373)
# scripts/bench-scale.sh and --parts 4 (8 GB, 16 shards): a delta step's
# reads over old + new, the largest seen (rchar: one publisher 1.01-1.06x,
# four parts together 1.08-1.09x), its anchor is 0.78 of the weights
# (6,238,933,544 of 8,000,439,040 bytes), and the memory of each daemon is
# bounded (the largest peak RSS of each kind in those runs):
PUB_READ_FACTOR = {"one": 1.06, "parts": 1.09}
ANCHOR_RATIO = 6238933544 / 8000439040
RSS_MIB = {"publisher": 193, "full subscriber": 109, "partial subscriber": 69}
# part 1 polls the records every second (publisher_parts.c PART_POLL_MS):
# it commits at most 1 s after the last part's record, then the merge (no
# object is read) and three small PUTs -- a bound, not a measurement
COMMIT_S = 1.0
# scripts/bench-scale.sh --parts 4: each part's peak RSS 183-193 MiB, the
# same bound as one publisher's 188 (the encoder's memory is per process)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--params", type=float, default=1e12)
    ap.add_argument("--parts", default="1,64", help="publisher parts to compare")
    ap.add_argument("--nodes", type=int, default=256, help="inference nodes")
    ap.add_argument("--partial-nodes", type=int, default=192,
                    help="of which take one pipeline stage's shards only")
    ap.add_argument("--partial-share", type=float, default=0.125,
                    help="the share of the weights a partial node takes")
    ap.add_argument("--disk-gbs", type=float, default=2.0,
                    help="a node's disk (or page cache) read and write rate, GB/s")
    ap.add_argument("--cores", type=int, default=8, help="cores a daemon uses")
    ap.add_argument("--density", type=float, default=0.0125,
                    help="share of bf16 elements that change in a step")
    ap.add_argument("--anchor-every", type=int, default=20)
    a = ap.parse_args()

    W = 2 * a.params                          # bytes of bf16 weights
    delta = a.params * a.density * B_PER_CHANGED
    anchor = W * ANCHOR_RATIO
    core_scale = 1 + (a.cores - 1) * (SCALING_2T - 1)   # the measured 2-thread gain, per core
    enc = ENCODE_MBS_CORE * 1e6 * core_scale
    app = APPLY_MBS_CORE * 1e6 * core_scale
    disk = a.disk_gbs * 1e9
    full = a.nodes - a.partial_nodes

    def gb(x):
        return "%.1f GB" % (x / 1e9) if x < 1e12 else "%.2f TB" % (x / 1e12)

    print("model: %.0e parameters, %s of bf16; density %.2f%%: a delta of %s, an anchor of %s"
          % (a.params, gb(W), 100 * a.density, gb(delta), gb(anchor)))
    print("deployment: %d inference nodes (%d full, %d taking %.1f%% each), %d cores a daemon, "
          "disks %.1f GB/s" % (a.nodes, full, a.partial_nodes, 100 * a.partial_share,
                               a.cores, a.disk_gbs))
    print()
    print("| publisher parts | bytes each part reads | encode CPU s | read s | publish s (slowest part + commit) |")
    print("|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in a.parts.split(",")):
        share = W / n
        reads = 2 * share * PUB_READ_FACTOR["parts" if n > 1 else "one"]
        cpu = share / enc
        io = reads / disk
        print("| %d | %s | %.1f | %.1f | %.1f |" % (n, gb(reads), cpu, io,
                                                   max(cpu, io) + (COMMIT_S if n > 1 else 0)))
    print()
    apply_full = max(W / app, W / disk)       # every shard changes: all rewritten
    part_w = W * a.partial_share
    apply_part = max(part_w / app, part_w / disk)
    print("| subscriber | downloads a step | apply s (CPU vs disk, the larger) | peak RSS MiB (measured) |")
    print("|---|---:|---:|---:|")
    print("| full | %s | %.1f | %d |" % (gb(delta), apply_full, RSS_MIB["full subscriber"]))
    print("| partial (%.1f%%) | %s | %.1f | %d |" % (100 * a.partial_share,
                                                   gb(delta * a.partial_share), apply_part,
                                                   RSS_MIB["partial subscriber"]))
    print()
    egress = full * delta + a.partial_nodes * delta * a.partial_share
    print("bucket egress a step: %s to %d nodes (%s a node on average); behind a CDN the "
          "origin serves each object once per edge: %s a step per edge"
          % (gb(egress), a.nodes, gb(egress / a.nodes), gb(delta)))
    print("bucket ingress a step: %s of deltas + %s of anchor every %d steps (%s a step "
          "averaged)" % (gb(delta), gb(anchor), a.anchor_every,
                          gb(delta + anchor / a.anchor_every)))
    print("without wsync (the full checkpoint to every node): %s a step"
          % gb(a.nodes * W - a.partial_nodes * W * (1 - a.partial_share)))
    print("memory: publisher (each part) %d MiB, subscribers %d / %d MiB: bounded, whatever "
          "the model's size (measured at 8 GB)" % (RSS_MIB["publisher"],
                                                   RSS_MIB["full subscriber"],
                                                   RSS_MIB["partial subscriber"]))


if __name__ == "__main__":
    main()
