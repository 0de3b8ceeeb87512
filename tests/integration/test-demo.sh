#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-demo: scripts/demo.sh, the README's first command, on this build's
# programs and its default model (20M parameters, whose `wsync inspect`
# listing outgrows a pipe: the demo once died of SIGPIPE there). It must
# end with "demo ok" and exit 0: a publisher and a subscriber wsyncd on a
# file:// bucket, every version applied, the folder byte-identical to the
# trainer's.  On the way it prints the two configurations it runs (valid,
# minimal: role, url, watch_dir or target_dir, and its own folders), says
# what "anchor + delta" means and where the programs were built, and ends
# with what to do next.  scripts/setup.sh --demo, what the demo installs,
# asks for the build and the generator only; the full set (no option)
# adds what the tests and the package need.  With another apt holding
# its lock, setup.sh says so, waits (bounded) and goes on.
. "$(dirname "$0")/lib.sh"

build=$(cd "$(dirname "$WSYNC")/.." && pwd)
expect_exit 0 "scripts/demo.sh exits 0" env WSYNC_DEMO_BUILD="$build" WSYNC_DEMO_STEPS=4 WSYNC_DEMO_KEEP=1 \
	TMPDIR="$TMP" timeout 300 "$WSYNC_SOURCE_ROOT/scripts/demo.sh"
out=$OUT
contains "it says every version was published, applied and verified" "$out" \
	"demo ok: every version published, applied and verified"
contains "no file differs" "$out" "files compared, 0 differ"
contains "it shows the newest delta" "$out" "wsync delta, format"
contains "it counts objects, not chunks: one anchor" "$out" "bucket: 1 anchors,"

# ---- what it tells a new user ----
contains "it says where the programs were built" "$out" "(built in $build)"
contains "it explains anchor + delta" "$out" "Anchor + delta: version 1 goes to the bucket as an anchor"
contains "it ends with what to do next" "$out" "Next:"
contains "... the README's section on operating wsync" "$out" "\"Operating wsync\""
contains "... and wsync status" "$out" "wsync status --config FILE"
check "\"Next:\" comes after \"demo ok\"" sh -c \
	'printf "%s\n" "$1" | sed -n "/^demo ok/,\$p" | grep -q "^Next:"' - "$out"

# The two configurations as printed: between "--- DIR/ROLE.ini (...)" and
# the next "---" line.
for role in publisher subscriber; do
	printf '%s\n' "$out" | awk -v f="/$role.ini (" '
		index($0, "--- ") == 1 && index($0, f) { on = 1; next }
		on && /^---/ { exit }
		on { print }' >"$TMP/$role.ini"
	check "it prints the $role's configuration" grep -q "^role = $role\$" "$TMP/$role.ini"
	expect_exit 0 "the printed $role configuration is valid" "$WSYNCD" --check-config "$TMP/$role.ini"
	case $role in
	publisher) key=watch_dir ;;
	subscriber) key=target_dir ;;
	esac
	check "... and minimal: role, url, $key and the demo's own folders" "$PYTHON3" - \
		"$TMP/$role.ini" "$key" <<'PY'
import sys
keys = [l.split("=")[0].strip() for l in open(sys.argv[1])
        if l.strip() and not l.startswith((";", "["))]
assert sorted(keys) == sorted(["role", "url", sys.argv[2], "state_dir", "runtime_dir"]), keys
PY
done

# ---- what scripts/setup.sh installs, in each mode ----
# A dpkg-query that knows no package, and no node or npm on PATH: --dry-run
# names everything the mode would install.
mkdir -p "$TMP/bin"
printf '#!/bin/sh\nexit 1\n' >"$TMP/bin/dpkg-query"
chmod +x "$TMP/bin/dpkg-query"
for tool in bash sh dirname grep sed tr; do
	ln -sf "$(command -v "$tool")" "$TMP/bin/$tool"
done
dry() { env PATH="$TMP/bin" "$TMP/bin/bash" "$WSYNC_SOURCE_ROOT/scripts/setup.sh" "$@"; }
# the packages on the "would install" line, one a line
would() { printf '%s\n' "$1" | sed -n 's/^setup: would install (apt, [a-z]*): //p' | tr ' ' '\n'; }
expect_exit 0 "setup.sh --demo --dry-run" dry --demo --dry-run
demo=$OUT
contains "the demo set: the build and the libraries" "$demo" "meson ninja-build pkg-config gcc libuv1-dev"
contains "... and the checkpoint generator" "$demo" "python3 python3-numpy"
check "... as one list of packages" test "$(would "$demo" | wc -l)" -ge 15
for p in clang swift awscli nodejs npm scdoc dpkg-dev; do
	check "the demo set leaves $p to scripts/test.sh" sh -c '! printf "%s\n" "$1" | grep -qx "$2"' \
		- "$(would "$demo")" "$p"
done
case "$demo" in *"npm ci"*) r=1 ;; *) r=0 ;; esac
tap_result $r "the demo fetches nothing from the npm registry"
expect_exit 0 "setup.sh --dry-run (the full set)" dry --dry-run
full=$(would "$OUT")
for p in meson python3-numpy clang libclang-rt-14-dev swift awscli nodejs npm scdoc dpkg-dev xxhash; do
	check "the full set has $p" sh -c 'printf "%s\n" "$1" | grep -qx "$2"' - "$full" "$p"
done
# Another apt holding the lock: setup.sh says it waits, waits, and goes
# on; held for longer than WSYNC_SETUP_LOCK_WAIT, it gives up, saying why.
for tool in awk sleep id cat; do
	ln -sf "$(command -v "$tool")" "$TMP/bin/$tool"
done
{
	echo "#!$TMP/bin/bash"
	echo "# held for as many calls as lock-calls says"
	echo "n=\$(cat '$TMP/lock-calls')"
	echo "if [ \"\$n\" -gt 0 ]; then"
	echo "	echo \$((n - 1)) >'$TMP/lock-calls'"
	echo "	echo 'E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt)' >&2"
	echo "	exit 100"
	echo "fi"
	echo "echo \"apt-get \$*\" >>'$TMP/apt-calls'"
} >"$TMP/bin/apt-get"
chmod +x "$TMP/bin/apt-get"
setup_locked() { # setup_locked WAIT: setup.sh --demo on the fake apt-get
	env WSYNC_SETUP_LOCK_POLL=0.1 WSYNC_SETUP_LOCK_WAIT="$1" timeout 60 \
		env PATH="$TMP/bin" "$TMP/bin/bash" "$WSYNC_SOURCE_ROOT/scripts/setup.sh" --demo
}
echo 3 >"$TMP/lock-calls"
: >"$TMP/apt-calls"
expect_exit 0 "setup.sh --demo with apt's lock held for a while: exit 0" setup_locked 5
contains "... saying it waits, and for whom" "$OUT" \
	"setup: another apt or dpkg holds the lock (process 4242 (apt)); waiting for it"
check "... then apt-get update and install ran" test "$(grep -c . "$TMP/apt-calls")" -eq 2
echo 1000 >"$TMP/lock-calls"
expect_exit 1 "... held longer than WSYNC_SETUP_LOCK_WAIT: exit 1" setup_locked 1
contains "... saying why" "$OUT" "setup: gave up after 1 s: another apt or dpkg still holds the lock"

# Every package either mode installs is in README's dependency table.
for p in $(dry --list); do
	check "README's dependency table lists $p" grep -qE "^\|.*\`$p\`.*\|" "$WSYNC_SOURCE_ROOT/README.md"
done
tap_done
