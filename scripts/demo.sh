#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# demo.sh -- see wsync do its job on this machine in one command: installs
# what the demo needs (scripts/setup.sh --demo), builds in build/ (release),
# then runs a publisher and a subscriber wsyncd against a file:// bucket in
# a temp dir while a simulated RL trainer writes checkpoints.  It prints the
# two configurations it runs, each checkpoint is published (an anchor
# first, then deltas), the subscriber applies it in place, and the demo
# checks that the subscriber's model folder is byte-identical to what the
# trainer wrote; it ends with what to do next.
#
#   WSYNC_DEMO_PARAMS=20M   model size of the generated checkpoints
#   WSYNC_DEMO_STEPS=5      number of checkpoints
#   WSYNC_DEMO_KEEP=1       keep the temp dir (bucket, logs) afterwards
#   WSYNC_DEMO_BUILD=DIR    use the programs of this meson build directory
#                           (already built) instead of setting up ./build
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
params=${WSYNC_DEMO_PARAMS:-20M}
steps=${WSYNC_DEMO_STEPS:-5}

if [ -n "${WSYNC_DEMO_BUILD:-}" ]; then
	build=$(cd "$WSYNC_DEMO_BUILD" && pwd)
else
	scripts/setup.sh --demo
	build=$root/build
	echo "== building in $build (release; the first time takes a minute or two)"
	if [ ! -d build/meson-private ]; then
		meson setup build -Dbuildtype=release >/dev/null
	fi
	ninja -C build >/dev/null
fi
WSYNC=$build/daemon/wsync
WSYNCD=$build/daemon/wsyncd
[ -x "$WSYNC" ] && [ -x "$WSYNCD" ] || { echo "demo: no wsync/wsyncd in $build/daemon" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/wsync-demo.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	if [ "${WSYNC_DEMO_KEEP:-0}" = 1 ]; then
		echo "kept $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
mkdir -p "$work"/{bucket,trainer,model,state-pub,state-sub,run-pub,run-sub}

# The two configurations: what a node needs (role, the bucket, the
# folder), plus the demo's own state and runtime folders in the temp dir
# (two daemons on one machine; on a node the defaults, /var/lib/wsync and
# /run/wsync, or systemd's wsyncd@NAME folders, do).  The bucket is the
# simplest kind, a directory.
cat >"$work/publisher.ini" <<EOF
[daemon]
role = publisher
; the demo's own folders (on a node: leave them out)
state_dir = $work/state-pub
runtime_dir = $work/run-pub
[store]
url = file://$work/bucket
[publisher]
watch_dir = $work/trainer
EOF
cat >"$work/subscriber.ini" <<EOF
[daemon]
role = subscriber
; the demo's own folders (on a node: leave them out)
state_dir = $work/state-sub
runtime_dir = $work/run-sub
[store]
url = file://$work/bucket
[subscriber]
target_dir = $work/model
EOF

echo "== the programs: $WSYNCD and $WSYNC (built in $build)"
echo
echo "== two daemons on one file:// bucket, each with one configuration file"
echo "--- $work/publisher.ini (the trainer node: watch_dir is where the trainer saves)"
cat "$work/publisher.ini"
echo "--- $work/subscriber.ini (each worker node: target_dir is the folder it serves)"
cat "$work/subscriber.ini"
echo "---"
echo "Anchor + delta: version 1 goes to the bucket as an anchor (the whole checkpoint,"
echo "compressed); each later version as a delta, only what changed since the version"
echo "before, which the subscriber applies in place to its copy."
echo
"$WSYNCD" --check-config "$work/publisher.ini"
"$WSYNCD" --check-config "$work/subscriber.ini"
"$WSYNCD" -c "$work/publisher.ini" --log-target stderr 2>"$work/publisher.log" &
pids+=($!)
"$WSYNCD" -c "$work/subscriber.ini" --log-target stderr 2>"$work/subscriber.log" &
pids+=($!)

echo "== a trainer writes $steps checkpoints of a ${params}-parameter model (bf16, 2 shards), one every 3 s"
/usr/bin/python3 scripts/gen-checkpoints --params "$params" --steps "$steps" --shards 2 \
	--interval 3 --quiet --out "$work/trainer"

# Wait (bounded) until the subscriber reports the last version.
for _ in $(seq 1 120); do
	if grep -q "version $steps (step" "$work/subscriber.log"; then
		break
	fi
	sleep 0.5
done

echo
echo "== publisher (journal lines; here on stderr)"
sed -n 's/.*info: \(published version.*\) (version=.*/  \1/p' "$work/publisher.log"
echo
echo "== subscriber"
sed -n 's/.*info: \(version [0-9]* (step.*applied.*\) (version=.*/  \1/p' "$work/subscriber.log"
echo
echo "== wsync status (subscriber)"
"$WSYNC" status --config "$work/subscriber.ini" || true

last=$(ls -d "$work"/trainer/checkpoint-* | sort -t- -k2 -n | tail -1)
echo
echo "== the subscriber's model folder against $(basename "$last")"
bad=0
n=0
while IFS= read -r f; do
	case "$f" in optimizer* | scheduler.pt | scaler.pt | rng_state* | training_args.bin) continue ;; esac
	n=$((n + 1))
	if ! cmp -s "$last/$f" "$work/model/$f"; then
		echo "  DIFFERS: $f"
		bad=$((bad + 1))
	fi
done < <(cd "$last" && find . -type f -printf '%P\n' | sort)
full=$(du -sb "$last" | cut -f1)
shipped=$(find "$work/bucket/deltas" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
echo "  $n files compared, $bad differ"
# objects, not the chunks some are stored in (anchors/<V>-<N>.wsa)
objects() { ls "$work/bucket/$1" | sed 's/-[0-9]*\././' | sort -u | wc -l; }
echo "  bucket: $(objects anchors) anchors, $(objects deltas) deltas" \
	"($shipped bytes of deltas for $((steps - 1)) steps; one checkpoint is $full bytes)"
echo
echo "== inspect the newest version: wsync inspect file://$work/bucket --names $work/model"
echo "   (--names: a copy of the model names the tensors the delta codes against the last version)"
# (into a file, then its first 30 lines by one reader of the whole file:
# a head closing a pipe early would end the demo with SIGPIPE under
# pipefail)
"$WSYNC" inspect "file://$work/bucket" --names "$work/model" >"$work/inspect.txt"
awk '!/^    \[/ && ++n <= 30' "$work/inspect.txt"
[ "$bad" -eq 0 ] && grep -q "version $steps (step" "$work/subscriber.log" || {
	echo "demo FAILED: see the logs (WSYNC_DEMO_KEEP=1 keeps them)" >&2
	exit 1
}
echo
echo "demo ok: every version published, applied and verified"
echo
echo "Next:"
echo "  - your own nodes: README.md, \"Operating wsync\": install, then one wsyncd@NAME"
echo "    per configuration under systemd (config/*.ini and man wsyncd.ini list every key)"
echo "  - what a daemon is doing: wsync status --config FILE (--json for scripts)"
echo "  - keep this run's bucket and logs: WSYNC_DEMO_KEEP=1 scripts/demo.sh"
