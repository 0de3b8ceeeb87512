#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# setup.sh -- install the Debian 12 packages wsync needs, if they are
# missing.  Safe to run again: it only calls apt (and npm) when something
# is missing.  Needs root (or sudo) for the install.
#
#   scripts/setup.sh            everything: the build, every test of
#                               scripts/test.sh (sanitizers, fuzzing, the S3
#                               servers), scripts/package-deb.sh and the
#                               benchmarks; with s3rver from the npm registry
#   scripts/setup.sh --demo     only what scripts/demo.sh needs: the build
#                               and the checkpoint generator
#   --list                      print the mode's packages, one a line, and
#                               install nothing
#   --dry-run                   say what would be installed, install nothing
#
# Another apt or dpkg holding the lock is waited for (said once, bounded:
# WSYNC_SETUP_LOCK_WAIT seconds, 600).
# README's "Dependencies" says why each package is here.
set -euo pipefail

mode=full
action=install
for arg in "$@"; do
	case $arg in
	--demo) mode=demo ;;
	--list) action=list ;;
	--dry-run) action=dry-run ;;
	-h | --help)
		sed -n '3,18s/^# \{0,1\}//p' "$0"
		exit 0
		;;
	*)
		echo "setup.sh: unknown argument \"$arg\" (--demo, --list, --dry-run)" >&2
		exit 2
		;;
	esac
done

# What scripts/demo.sh needs: the build and the checkpoint generator.
demo_packages=(
	# build
	meson ninja-build pkg-config gcc
	# libraries (found through pkg-config by meson.build)
	libuv1-dev libzstd-dev libcurl4-openssl-dev libinih-dev libsystemd-dev
	libjansson-dev libxxhash-dev libssl-dev libexpat1-dev
	# the checkpoint generator (run with /usr/bin/python3), also the tests'
	python3 python3-numpy
)
# The rest: scripts/test.sh, scripts/package-deb.sh, the benchmarks.
test_packages=(
	# fuzzing and sanitizers with clang (libFuzzer lives in libclang-rt)
	clang libclang-rt-14-dev
	# /usr/bin/time: peak RSS of diff/apply in test-codec-roundtrip
	time
	# benchmarks (scripts/bench-codec.sh): the CLI peers; /usr/bin/time is above
	zstd xdelta3
	# S3 backend tests (tests/integration/s3-servers.sh): Swift with s3api,
	# the AWS CLI as a reference client, the curl CLI for test-faultproxy
	swift swift-proxy swift-account swift-container swift-object python3-swift
	awscli curl
	# xxh128sum: the S3 tests compare object hashes
	xxhash
	# test-loop-fsync: which thread of a daemon fsyncs
	strace
	# the metrics test: promtool checks the files and the alert rules,
	# node_exporter's textfile collector serves them
	prometheus prometheus-node-exporter
	# man pages (daemon/man/*.scd); systemd-analyze verify/security, dpkg-deb and
	# deb-systemd-helper for tests/integration/test-systemd.sh, test-package.sh
	scdoc systemd dpkg-dev init-system-helpers
	# tests/integration/test-systemd-boot.sh: a Debian 12 root, booted
	# under systemd-nspawn
	debootstrap systemd-container
	# s3rver (tests/s3rver) runs on node, installed with npm
	nodejs npm
)

packages=("${demo_packages[@]}")
[ "$mode" = full ] && packages+=("${test_packages[@]}")
if [ "$action" = list ]; then
	printf '%s\n' "${packages[@]}"
	exit 0
fi

missing=()
for p in "${packages[@]}"; do
	# node 20 and npm usually come from outside Debian's archive: ask apt
	# for them only when the commands are not there at all
	case $p in
	nodejs) command -v node >/dev/null 2>&1 && continue ;;
	npm) command -v npm >/dev/null 2>&1 && continue ;;
	esac
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

# s3rver for the S3 backend tests, pinned by tests/s3rver/package-lock.json:
# `npm ci --prefix tests/s3rver` (into tests/s3rver/node_modules, ignored by
# git) when it is missing or older than the lock.
s3rver=$(cd "$(dirname "$0")/.." && pwd)/tests/s3rver
need_s3rver=0
if [ "$mode" = full ] && { [ ! -f "$s3rver/node_modules/s3rver/bin/s3rver.js" ] ||
	[ "$s3rver/package-lock.json" -nt "$s3rver/node_modules/.package-lock.json" ]; }; then
	need_s3rver=1
fi

# apt_waiting COMMAND...: run an apt-get command; while another apt or
# dpkg holds its lock (unattended-upgrades at boot, a second shell), say
# so and try again every WSYNC_SETUP_LOCK_POLL seconds (5), for at most
# WSYNC_SETUP_LOCK_WAIT seconds (600) in all; then give up, saying why.
apt_waiting() {
	local waited=0 poll=${WSYNC_SETUP_LOCK_POLL:-5} limit=${WSYNC_SETUP_LOCK_WAIT:-600} out rc
	while :; do
		rc=0
		out=$("$@" 2>&1) || rc=$?
		case "$out" in
		*"Could not get lock"* | *"Unable to acquire the dpkg frontend lock"* | \
			*"Unable to lock directory"*) ;;
		*)
			[ $rc -eq 0 ] || printf '%s\n' "$out" >&2
			return $rc
			;;
		esac
		if awk -v w="$waited" -v l="$limit" 'BEGIN { exit !(w >= l) }'; then
			printf '%s\n' "$out" >&2
			echo "setup: gave up after ${limit} s: another apt or dpkg still holds the lock" >&2
			return 1
		fi
		[ "$waited" = 0 ] && echo "setup: another apt or dpkg holds the lock (${out##*held by }); waiting for it (at most ${limit} s)" >&2
		sleep "$poll"
		waited=$(awk -v w="$waited" -v p="$poll" 'BEGIN { print w + p }')
	done
}

if [ "$action" = dry-run ]; then
	if [ ${#missing[@]} -gt 0 ]; then
		echo "setup: would install (apt, $mode): ${missing[*]}"
	else
		echo "setup: every package of the $mode set is installed (${#packages[@]} packages)"
	fi
	[ $need_s3rver -eq 1 ] &&
		echo "setup: would run npm ci --prefix tests/s3rver (s3rver from the npm registry)"
	exit 0
fi

if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}" >&2
	sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	export DEBIAN_FRONTEND=noninteractive
	apt_waiting "${sudo[@]}" apt-get update -qq
	apt_waiting "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# A failure here is not fatal: the tests that need s3rver say it is missing.
if [ $need_s3rver -eq 1 ]; then
	echo "setup: npm ci --prefix tests/s3rver" >&2
	npm ci --prefix "$s3rver" --no-audit --no-fund >/dev/null ||
		echo "setup: npm ci failed; the s3rver tests will fail" >&2
fi
exit 0
