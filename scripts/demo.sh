#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# demo.sh -- see wsync do its job on this machine in one command: installs
# what is missing, builds, then runs a publisher and a subscriber wsyncd
# against a file:// bucket in a temp dir while a simulated RL trainer
# writes checkpoints.  Each checkpoint is published (an anchor first, then
# deltas), the subscriber applies it in place, and the demo checks that the
# subscriber's model folder is byte-identical to what the trainer wrote.
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
	build=$WSYNC_DEMO_BUILD
else
	scripts/setup.sh
	if [ ! -d build/meson-private ]; then
		meson setup build -Dbuildtype=release >/dev/null
	fi
	ninja -C build >/dev/null
	build=$root/build
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

# The embedded default: a directory as the bucket.
cat >"$work/publisher.ini" <<EOF
[daemon]
role = publisher
state_dir = $work/state-pub
runtime_dir = $work/run-pub
[store]
url = file://$work/bucket
[publisher]
watch_dir = $work/trainer
anchor_every = 4
EOF
cat >"$work/subscriber.ini" <<EOF
[daemon]
role = subscriber
state_dir = $work/state-sub
runtime_dir = $work/run-sub
[store]
url = file://$work/bucket
[subscriber]
target_dir = $work/model
poll_interval = 500ms
EOF

echo "== two daemons on one file:// bucket ($work/bucket)"
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
echo "  bucket: $(ls "$work/bucket/anchors" | wc -l) anchors, $(ls "$work/bucket/deltas" | wc -l) deltas" \
	"($shipped bytes of deltas for $((steps - 1)) steps; one checkpoint is $full bytes)"
echo
echo "== inspect the newest delta"
# (into a file first: head closing the pipe early would end the demo
# with SIGPIPE under pipefail)
"$WSYNC" inspect "$(ls "$work"/bucket/deltas/*.wsd | tail -1)" >"$work/inspect.txt"
head -12 "$work/inspect.txt"
[ "$bad" -eq 0 ] && grep -q "version $steps (step" "$work/subscriber.log" || {
	echo "demo FAILED: see the logs (WSYNC_DEMO_KEEP=1 keeps them)" >&2
	exit 1
}
echo
echo "demo ok: every version published, applied and verified"
