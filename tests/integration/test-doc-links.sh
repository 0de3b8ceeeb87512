#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-doc-links: every relative link in the tree's Markdown files (the
# README, the documents beside the code: common/*.md and its layers',
# systemd/README.md, tests/README.md, scripts/BENCHMARKS.md, ...) names a
# file or folder that exists, and every #fragment a heading of the page it
# points into -- so moving a document without its links fails here, not in
# a reader's browser.  One TAP line per Markdown file; the checker is
# tests/integration/doc-links.py.
. "$(dirname "$0")/lib.sh"

out=$("$PYTHON3" "$WSYNC_SOURCE_ROOT/tests/integration/doc-links.py" "$WSYNC_SOURCE_ROOT")
rc=$?
n=0
while IFS= read -r line; do
	case $line in
	"ok "*)
		n=$((n + 1))
		tap_result 0 "links resolve in ${line#ok }"
		;;
	"FAIL "*)
		n=$((n + 1))
		file=${line#FAIL }
		printf '%s\n' "$out" | grep -F "  ${file% (*}:" | sed 's/^ */# /'
		tap_result 1 "links resolve in $file"
		;;
	esac
done <<<"$out"
check "the README and the documents beside the code were found" test "$n" -ge 6
tap_result $((rc > 1)) "the checker ran (exit $rc)"
tap_done
