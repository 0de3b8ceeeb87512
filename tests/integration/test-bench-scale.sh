#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-bench-scale: scripts/bench-scale.sh --quick runs end to end on this
# build's programs (200M parameters, 4 shards, an anchor and one delta
# step, a full and a partial subscriber on a file:// bucket): it exits 0,
# prints its tables, verified both subscribers at every step (the full one
# byte-identical to the checkpoint, the partial one exactly its files), and
# each daemon peaked under 256 MiB; every latency row is consistent, the
# goal lines give the stages run apart with their figures, the disk was
# measured before the run and each step's floor is given, and the TSV has
# no empty field (a column per header name on every row); and with
# --parts 2 (two publisher instances, one version), the same verification
# and a row per part.
# Speeds here mean nothing and are not checked.
. "$(dirname "$0")/lib.sh"

expect_exit 0 "bench-scale.sh --quick exits 0" env WSYNC="$WSYNC" WSYNCD="$WSYNCD" timeout 300 \
	"$WSYNC_SOURCE_ROOT/scripts/bench-scale.sh" --quick --dir "$TMP/scale"
out=$OUT
contains "the latency table" "$out" "| step | object bytes | → announced | → HEAD (publish) |"
contains "a row for the anchor" "$out" "| 1 (anchor) |"
contains "a row for the delta step" "$out" "| 2 (delta) |"
contains "the bytes table (the publisher's reads per checkpoint byte)" "$out" \
	"publisher rchar ÷ ckpt bytes"
contains "the per-daemon /proc table" "$out" "| 2 | partial s2 |"
contains "it says where the subscribers' files live" "$out" "# subscribers' state and targets: "
n=$(printf '%s\n' "$out" | grep -cE '^step [0-9]+ (full s1|partial s2): ok: ')
check "every step's two subscribers verified (4 lines, $n found)" test "$n" -eq 4
check "no mismatch" bash -c '! grep -q MISMATCH <<<"$1"' _ "$out"
n=$(printf '%s\n' "$out" | grep -c '^ok  *peak RSS ≤ 256 MiB: ')
check "peak RSS under 256 MiB for the 3 daemons ($n ok lines)" test "$n" -eq 3
check "the goal lines name the stages run apart, with figures" \
	bash -c 'grep -qE "^(ok|MISSED) +step 2 \(delta\), one host: marker → applied \(full\) ≤ 1\.5× the slower stage run apart: [0-9.]+ s ÷ max\(diff [0-9.]+ s, apply [0-9.]+ s\) = [0-9.]+×( \(out of reach on this machine: its floor, [0-9.]+ s, is above the 1\.5× line, [0-9.]+ s\))?$" <<<"$1"' _ "$out"
check "every row consistent" bash -c '! grep -q INCONSISTENT <<<"$1" && grep -q "^every row consistent" <<<"$1"' _ "$out"
check "the work dir's disk measured alone before the run" \
	bash -c 'grep -qE "^# the work dir.s disk alone \(2 GiB, O_DIRECT\): write [0-9.]+ GB/s, read [0-9.]+ GB/s$" <<<"$1"' _ "$out"
n=$(printf '%s\n' "$out" | grep -cE '^\(step [12], one host: the daemons used [0-9.]+ s of CPU, [0-9.]+ s on [0-9]+ cores, and wrote [0-9,.]+ MB and read [0-9,.]+ MB of the disk, [0-9.]+ s at its rates alone \(write [0-9.]+ GB/s, read [0-9.]+ GB/s\): so the step needs at least [0-9.]+ s here; the 1\.5× line is [0-9.]+ s\)$')
check "each step's floor on this machine, with its figures (2 lines, $n found)" test "$n" -eq 2
check "no empty field in the TSV" bash -c '! grep -qP "\t\t|\t\$|^\t" "$1"' _ "$TMP/scale/bench-scale.tsv"
check "the TSV's rows have its header's columns" \
	awk -F'\t' 'NR == 1 { n = NF } NF != n { exit 1 }' "$TMP/scale/bench-scale.tsv"
check "the TSV is left in the work dir, a row per step" \
	test "$(wc -l <"$TMP/scale/bench-scale.tsv" 2>/dev/null)" -eq 3
check "no loop device left on the work dir" bash -c '! losetup -a | grep -qF "$1"' _ "$TMP/scale"
check "nothing left mounted there" bash -c '! grep -qF "$1" /proc/mounts' _ "$TMP/scale"
expect_exit 0 "bench-scale.sh --quick --parts 2 exits 0" env WSYNC="$WSYNC" WSYNCD="$WSYNCD" \
	timeout 300 "$WSYNC_SOURCE_ROOT/scripts/bench-scale.sh" --quick --parts 2 --dir "$TMP/scale2"
out=$OUT
contains "it says the versions are made by 2 parts" "$out" "; 2 publisher parts"
n=$(printf '%s\n' "$out" | grep -cE '^step [0-9]+ (full s1|partial s2): ok: ')
check "--parts 2: every step's two subscribers verified (4 lines, $n found)" test "$n" -eq 4
check "--parts 2: no mismatch" bash -c '! grep -q MISMATCH <<<"$1"' _ "$out"
n=$(printf '%s\n' "$out" | grep -c '^ok  *peak RSS ≤ 256 MiB: ')
check "--parts 2: peak RSS under 256 MiB for the 4 daemons ($n ok lines)" test "$n" -eq 4

# the cost model carries those measured rates to a trillion parameters
expect_exit 0 "cost-model.py exits 0" "$PYTHON3" "$WSYNC_SOURCE_ROOT/scripts/cost-model.py"
out=$OUT
publish_s() { printf '%s\n' "$out" | awk -F'|' -v n="$1" '$2 + 0 == n && NF == 7 { print $6 + 0 }'; }
p1=$(publish_s 1) p64=$(publish_s 64)
check "cost model: a publish time for 1 and for 64 parts ($p1 s, $p64 s)" test -n "$p1" -a -n "$p64"
check "cost model: 64 parts publish at least 30x sooner than one ($p1 s against $p64 s)" \
	awk -v a="$p1" -v b="$p64" 'BEGIN { exit !(b > 0 && a >= 30 * b) }'
contains "cost model: egress and memory lines" "$out" "bucket egress a step: "
expect_exit 2 "cost-model.py refuses an unknown option" "$PYTHON3" \
	"$WSYNC_SOURCE_ROOT/scripts/cost-model.py" --no-such-option

tap_done
