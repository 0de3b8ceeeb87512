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
	libjansson-dev libxxhash-dev libssl-dev
	# fuzzing and sanitizers with clang (libFuzzer lives in libclang-rt)
	clang libclang-rt-14-dev
	# the checkpoint generator (run with /usr/bin/python3)
	python3 python3-numpy
	# /usr/bin/time: peak RSS of diff/apply in test-codec-roundtrip
	time
	# benchmarks (scripts/bench-codec.sh): the CLI peers; /usr/bin/time is above
	zstd xdelta3
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=()
[ "$(id -u)" -eq 0 ] || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
