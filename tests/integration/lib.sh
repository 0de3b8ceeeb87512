# SPDX-License-Identifier: Apache-2.0
# lib.sh -- TAP helpers for the integration scripts (sourced, not run).
#
#   . "$(dirname "$0")/lib.sh"
#   check "inspect lists every tensor" grep -q model.norm.weight out.txt
#   expect_exit 78 "bad key exits 78" "$WSYNCD" --check-config bad.ini
#   tap_done
#
# Every script gets a private scratch dir in $TMP, removed on exit, and
# the paths of the built programs in $WSYNC / $WSYNCD (set by meson; the
# defaults below let a script run by hand from the source tree).

set -u
TAP_N=0
TAP_FAILED=0
: "${WSYNC_SOURCE_ROOT:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${WSYNC:=$WSYNC_SOURCE_ROOT/build/daemon/wsync}"
: "${WSYNCD:=$WSYNC_SOURCE_ROOT/build/daemon/wsyncd}"
: "${PYTHON3:=/usr/bin/python3}"
GEN="$WSYNC_SOURCE_ROOT/scripts/gen-checkpoints"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/wsync-test.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

tap_result() { # tap_result STATUS DESCRIPTION
	TAP_N=$((TAP_N + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $TAP_N - $2"
	else
		echo "not ok $TAP_N - $2"
		TAP_FAILED=$((TAP_FAILED + 1))
	fi
}

# check DESCRIPTION COMMAND...: passes when COMMAND exits 0.
check() {
	local desc=$1
	shift
	local out
	out=$("$@" 2>&1)
	local rc=$?
	[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /' | head -40
	tap_result $rc "$desc"
}

# expect_exit CODE DESCRIPTION COMMAND...: passes when COMMAND exits CODE;
# its combined output is left in $OUT for further checks.
expect_exit() {
	local want=$1 desc=$2
	shift 2
	OUT=$("$@" 2>&1)
	local rc=$?
	if [ $rc -ne "$want" ]; then
		echo "# exit $rc, expected $want; output:"
		printf '%s\n' "$OUT" | sed 's/^/# /' | head -40
	fi
	tap_result $((rc != want)) "$desc"
}

# contains DESCRIPTION HAYSTACK NEEDLE: passes when NEEDLE is in HAYSTACK.
contains() {
	case "$2" in
	*"$3"*) tap_result 0 "$1" ;;
	*)
		echo "# expected to find: $3"
		printf '%s\n' "$2" | sed 's/^/# /' | head -40
		tap_result 1 "$1"
		;;
	esac
}

tap_done() {
	echo "1..$TAP_N"
	[ "$TAP_FAILED" -eq 0 ]
}
