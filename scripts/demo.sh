#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# demo.sh -- see wsync work on this machine in one command: installs what
# is missing, builds, generates a small series of RL-like checkpoints in a
# temp dir, and runs what wsync can do so far on it.
#
#   WSYNC_DEMO_PARAMS=20M   model size of the generated checkpoints
#   WSYNC_DEMO_STEPS=3      number of checkpoints
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
params=${WSYNC_DEMO_PARAMS:-20M}
steps=${WSYNC_DEMO_STEPS:-3}

scripts/setup.sh
if [ ! -d build/meson-private ]; then
	meson setup build -Dbuildtype=release >/dev/null
fi
ninja -C build >/dev/null

work=$(mktemp -d "${TMPDIR:-/tmp}/wsync-demo.XXXXXX")
trap 'rm -rf "$work"' EXIT

echo "== generating $steps checkpoints of a ${params}-parameter model (bf16, 2 shards) in $work"
scripts/gen-checkpoints --params "$params" --steps "$steps" --shards 2 --out "$work/trainer"

last=$(ls -d "$work"/trainer/checkpoint-* | sort -t- -k2 -n | tail -1)
echo
echo "== wsync inspect $(basename "$last")"
build/daemon/wsync inspect "$last"
