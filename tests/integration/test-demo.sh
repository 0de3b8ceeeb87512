#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-demo: scripts/demo.sh, the README's first command, on this build's
# programs and its default model (20M parameters, whose `wsync inspect`
# listing outgrows a pipe: the demo once died of SIGPIPE there). It must
# end with "demo ok" and exit 0: a publisher and a subscriber wsyncd on a
# file:// bucket, every version applied, the folder byte-identical to the
# trainer's.
. "$(dirname "$0")/lib.sh"

build=$(cd "$(dirname "$WSYNC")/.." && pwd)
expect_exit 0 "scripts/demo.sh exits 0" env WSYNC_DEMO_BUILD="$build" WSYNC_DEMO_STEPS=4 \
	TMPDIR="$TMP" timeout 300 "$WSYNC_SOURCE_ROOT/scripts/demo.sh"
out=$OUT
contains "it says every version was published, applied and verified" "$out" \
	"demo ok: every version published, applied and verified"
contains "no file differs" "$out" "files compared, 0 differ"
contains "it shows the newest delta" "$out" "wsync delta version"
tap_done
