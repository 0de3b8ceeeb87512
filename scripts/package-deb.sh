#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# package-deb.sh -- build a Debian package of wsync with Debian's own tools:
# a meson build for /usr (prefix /usr, sysconfdir /etc), installed with
# `meson install --strip` into a staging tree, dependencies from
# dpkg-shlibdeps, then dpkg-deb.  The maintainer scripts do what
# debhelper's would: systemd-sysusers for the wsync user, deb-systemd-helper
# and daemon-reload for the template unit, a restart of running instances
# on upgrade, a stop on removal.  /etc/wsync/*.ini are conffiles, so dpkg
# keeps an operator's edits on upgrade and asks before replacing them.
#
#   scripts/package-deb.sh [--build-dir DIR] [--output DIR]
#
# --build-dir  the meson build to package (default build-deb); created with
#              the options above when it does not exist, rebuilt
#              incrementally when it does; an existing build must have
#              prefix /usr.
# --output     where the .deb goes (default: the current directory).
# Prints the path of the .deb on its last line.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-deb
outdir=$PWD
while [ $# -gt 0 ]; do
	case "$1" in
	--build-dir) build=$2; shift 2 ;;
	--output) outdir=$2; shift 2 ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "package-deb.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
for tool in meson ninja dpkg-deb dpkg-shlibdeps; do
	command -v "$tool" >/dev/null || { echo "package-deb.sh: $tool is missing (scripts/setup.sh)" >&2; exit 1; }
done

if [ ! -f "$build/meson-private/coredata.dat" ]; then
	meson setup "$build" "$root" --prefix=/usr --sysconfdir=/etc \
		--localstatedir=/var --buildtype=release -Dtests=false >/dev/null
fi
prefix=$(meson introspect "$build" --buildoptions |
	python3 -c 'import json, sys; print([o["value"] for o in json.load(sys.stdin) if o["name"] == "prefix"][0])')
if [ "$prefix" != /usr ]; then
	echo "package-deb.sh: $build has prefix $prefix, not /usr" >&2
	exit 1
fi
ninja -C "$build" >/dev/null

version=$(meson introspect "$build" --projectinfo |
	python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
debversion=$version-1
arch=$(dpkg --print-architecture)
work=$(mktemp -d "${TMPDIR:-/tmp}/wsync-deb.XXXXXX")
trap 'rm -rf "$work"' EXIT
stage=$work/stage
mkdir -p "$stage/DEBIAN"

DESTDIR=$stage meson install -C "$build" --no-rebuild --strip --quiet >/dev/null
# Debian policy: compressed man pages, a copyright file, no /usr/local.
find "$stage/usr/share/man" -type f -name '*.[0-9]' -exec gzip -9n {} +
install -D -m 0644 "$root/LICENSE" "$stage/usr/share/doc/wsync/copyright"
if [ -d "$stage/usr/local" ]; then
	echo "package-deb.sh: something installed into /usr/local" >&2
	exit 1
fi

# Library dependencies, as dh_shlibdeps finds them; libcurl is loaded with
# dlopen when first used (common/store/curl_lazy.h), so it is named by hand.
# procps: the unit's ExecReload= runs /bin/kill, which a minimal Debian
# (debootstrap --variant=minbase, container images) does not have, and
# without it `systemctl reload` fails (203/EXEC) and the daemon never re-reads.
mkdir -p "$work/debian"
printf 'Source: wsync\n\nPackage: wsync\nArchitecture: any\n' >"$work/debian/control"
shlibs=$(cd "$work" && dpkg-shlibdeps -O -e"$stage/usr/sbin/wsyncd" -e"$stage/usr/bin/wsync" 2>/dev/null |
	sed -n 's/^shlibs:Depends=//p')

cat >"$stage/DEBIAN/control" <<CONTROL
Package: wsync
Version: $debversion
Architecture: $arch
Maintainer: wsync developers <wsync@localhost>
Section: net
Priority: optional
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $shlibs, libcurl4 (>= 7.88) | libcurl3-gnutls (>= 7.88), procps, systemd | systemd-sysusers
Homepage: https://github.com/wsync/wsync
Description: keep LLM weights in sync across the nodes of a training cluster
 wsyncd ships only what changed between checkpoints: a publisher on the
 trainer node uploads a compact, lossless delta of each new checkpoint to a
 bucket (a shared directory, S3 or a Hugging Face Storage Bucket); a
 subscriber on each worker node verifies it and applies it in place with
 atomic file swaps.  Includes the wsync command-line tool, the
 wsyncd@.service template unit and a journal catalog.
CONTROL

( cd "$stage" && find etc -type f | sed 's|^|/|' | sort ) >"$stage/DEBIAN/conffiles"

cat >"$stage/DEBIAN/postinst" <<'SCRIPT'
#!/bin/sh
set -e
if [ "$1" = configure ]; then
	# the wsync system user (as dh_installsysusers)
	if command -v systemd-sysusers >/dev/null 2>&1; then
		systemd-sysusers ${DPKG_ROOT:+--root="$DPKG_ROOT"} wsync.conf
	fi
fi
# the template unit (as dh_installsystemd): instances are enabled by the
# operator, `systemctl enable --now wsyncd@NAME`
if [ "$1" = configure ] || [ "$1" = abort-upgrade ] || [ "$1" = abort-deconfigure ] ||
	[ "$1" = abort-remove ]; then
	if command -v deb-systemd-helper >/dev/null 2>&1; then
		deb-systemd-helper unmask 'wsyncd@.service' >/dev/null || true
	fi
	if [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		# an upgrade: running instances switch to the new binary
		if [ -n "${2:-}" ]; then
			systemctl try-restart 'wsyncd@*.service' >/dev/null || true
		fi
	fi
fi
exit 0
SCRIPT
cat >"$stage/DEBIAN/prerm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	systemctl stop 'wsyncd@*.service' >/dev/null || true
fi
exit 0
SCRIPT
cat >"$stage/DEBIAN/postrm" <<'SCRIPT'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && [ "$1" = remove ]; then
	systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null 2>&1; then
	deb-systemd-helper purge 'wsyncd@.service' >/dev/null || true
	deb-systemd-helper unmask 'wsyncd@.service' >/dev/null || true
fi
# The wsync user and /var/lib/wsync stay: the state directory may hold a
# model folder (the examples' target_dir), and Debian keeps system users.
exit 0
SCRIPT
chmod 0755 "$stage/DEBIAN/postinst" "$stage/DEBIAN/prerm" "$stage/DEBIAN/postrm"
( cd "$stage" && find . -path ./DEBIAN -prune -o -type f -print | sed 's|^\./||' | sort |
	xargs -d '\n' md5sum ) >"$stage/DEBIAN/md5sums"

mkdir -p "$outdir"
deb=$(cd "$outdir" && pwd)/wsync_${debversion}_$arch.deb
dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" >/dev/null
echo "$deb"
