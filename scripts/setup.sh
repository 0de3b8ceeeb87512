#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# setup.sh -- install the Debian 12 packages wsync needs to build, test and
# run its demo, if they are missing.  Safe to run again: it only calls apt
# when something is missing.  Needs root (or sudo) for the install.
set -euo pipefail

packages=(
	# build
	meson ninja-build pkg-config gcc
	# libraries (found through pkg-config by meson.build)
	libuv1-dev libzstd-dev libcurl4-openssl-dev libinih-dev libsystemd-dev
	libjansson-dev libxxhash-dev libssl-dev libexpat1-dev
	# fuzzing and sanitizers with clang (libFuzzer lives in libclang-rt)
	clang libclang-rt-14-dev
	# the checkpoint generator (run with /usr/bin/python3)
	python3 python3-numpy
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
	# man pages (daemon/man/*.scd); systemd-analyze verify/security, dpkg-deb and
	# deb-systemd-helper for tests/integration/test-systemd.sh, test-package.sh
	scdoc systemd dpkg-dev init-system-helpers
)
# s3rver runs on node; node 20 and npm usually come from outside Debian's
# archive, so ask apt for them only when they are not there at all
command -v node >/dev/null 2>&1 || packages+=(nodejs)
command -v npm >/dev/null 2>&1 || packages+=(npm)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "setup: installing ${missing[*]}" >&2
	sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	export DEBIAN_FRONTEND=noninteractive
	"${sudo[@]}" apt-get update -qq
	"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# s3rver for the S3 backend tests, pinned by tests/s3rver/package-lock.json:
# `npm ci --prefix tests/s3rver` when it is missing or older than the lock.
# A failure here is not fatal: the tests that need s3rver say it is missing.
s3rver=$(cd "$(dirname "$0")/.." && pwd)/tests/s3rver
if [ ! -f "$s3rver/node_modules/s3rver/bin/s3rver.js" ] ||
	[ "$s3rver/package-lock.json" -nt "$s3rver/node_modules/.package-lock.json" ]; then
	echo "setup: npm ci --prefix tests/s3rver" >&2
	npm ci --prefix "$s3rver" --no-audit --no-fund >/dev/null ||
		echo "setup: npm ci failed; the s3rver tests will fail" >&2
fi
