#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-bench-smoke: the two benchmark scripts README's figures come from
# still run end to end, on this build's programs and a small model
# (10M parameters): scripts/bench-codec.sh --quick prints its tables, the
# I/O-alone line and goal lines, and its size goals hold (they depend on
# the data, not on the machine: speeds here mean nothing and are not
# checked);
# scripts/bench-e2e.sh --quick on a file:// bucket prints its step table.
. "$(dirname "$0")/lib.sh"

build=$(cd "$(dirname "$WSYNC")/.." && pwd)
expect_exit 0 "bench-codec.sh --quick exits 0" env WSYNC_BENCH_BUILD="$build" timeout 300 \
	"$WSYNC_SOURCE_ROOT/scripts/bench-codec.sh" --quick --params 10M --high-lr 1e-4
out=$OUT
contains "it uses this build" "$out" "using the programs of $build"
contains "a table row for wsync" "$out" "| wsync | 0."
contains "a table row for XOR+zstd -1" "$out" "| XOR+zstd -1 (slime) |"
contains "rows for TRL's two layouts" "$out" "| uint16 gaps + values (TRL) |"
contains "a row for xdelta3" "$out" "| xdelta3 -9 |"
contains "the high-density pair" "$out" "### Pair 3: high density"
contains "the reading and writing alone, for scale" "$out" \
	"Reading and writing alone (bench-peers io, no codec"
contains "... beside each scaling goal line" "$out" "its reading and writing alone"
contains "the goal lines are counted" "$out" "goal checks:"
n=$(printf '%s\n' "$out" | grep -c "PASS B/changed")
check "bytes per changed element <= 1.25 on both RL pairs" test "$n" -eq 2
n=$(printf '%s\n' "$out" | grep -oE "PASS [0-9.]+x smaller than XOR\+zstd -1 \(>= 2x\)" | wc -l)
check "at least 2x smaller than XOR+zstd -1 on both RL pairs" test "$n" -eq 2
contains "not larger than XOR+zstd -1 at 10-50% density" "$out" \
	"PASS not larger than XOR+zstd -1 at 10-50% density"

expect_exit 0 "bench-e2e.sh --quick exits 0" env WSYNC="$WSYNC" WSYNCD="$WSYNCD" timeout 300 \
	"$WSYNC_SOURCE_ROOT/scripts/bench-e2e.sh" --quick --params 10M --steps 2 \
	--backend file --subscribers 1 --dir "$TMP/e2e"
out=$OUT
contains "a row per delta step" "$out" "| 2 |"
contains "the bytes moved against a full copy" "$out" "bytes moved over 2 delta steps"
contains "the daemons' CPU and peak RSS" "$out" "| subscriber s1 |"
tap_done
