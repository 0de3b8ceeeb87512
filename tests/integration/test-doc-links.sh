#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-doc-links: every relative link in the tree's Markdown files (the
# README, the documents beside the code: common/*.md and its layers',
# systemd/README.md, tests/README.md, scripts/BENCHMARKS.md, ...) names a
# file or folder that exists, and every #fragment a heading of the page it
# points into -- so moving a document without its links fails here, not in
# a reader's browser.  One TAP line per Markdown file; the checker is
# tests/integration/doc-links.py.  The README's way to read the man
# pages works: each `man -l build/daemon/man/PAGE` names a page this build
# made, and it renders without a troff warning at 80 columns; SIGHUP is
# described once.
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

readme=$WSYNC_SOURCE_ROOT/README.md
built=$(dirname "$WSYNC")/man
pages=$(sed -n 's|^man -l build/daemon/man/\([a-z.0-9]*\)$|\1|p' "$readme")
check "README: how to read the three man pages of a build" test "$(printf '%s\n' $pages | grep -c .)" -eq 3
if command -v scdoc >/dev/null 2>&1 && command -v man >/dev/null 2>&1; then
	for p in $pages; do
		check "$p: built where README says" test -s "$built/$p"
		warn=$(MANWIDTH=80 man --warnings -l "$built/$p" 2>&1 >/dev/null)
		[ -z "$warn" ] || printf '%s\n' "$warn" | sed 's/^/# /'
		tap_result $([ -z "$warn" ]; echo $?) "$p: renders without a troff warning"
	done
else
	tap_result 1 "scdoc and man are installed (scripts/setup.sh installs them)"
fi
n=$(grep -c SIGHUP "$readme")
check "README describes SIGHUP once (found $n)" test "$n" -eq 1
tap_done
