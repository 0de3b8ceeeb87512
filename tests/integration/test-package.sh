#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-package: scripts/package-deb.sh builds a .deb that installs and
# removes cleanly with dpkg: after `dpkg -i` the programs, unit, man pages,
# catalog and example configurations are in place, the wsync user exists,
# `wsyncd --version` runs and the installed /etc/wsync/publisher.ini is
# valid; `dpkg -r` keeps an edited conffile and nothing else, `dpkg
# --purge` leaves no file of the package behind.  Needs root and dpkg; it
# is skipped when a wsync package is already installed on this machine
# (not ours to remove).  The package's build (prefix /usr) lives in
# BUILD/deb-build and is reused, so only the first run compiles.
. "$(dirname "$0")/lib.sh"
build=$(cd "$(dirname "$WSYNCD")/.." && pwd)
skip_all() {
	echo "1..0 # SKIP $1"
	exit 0
}
[ "$(id -u)" -eq 0 ] || skip_all "needs root for dpkg -i"
command -v dpkg-deb >/dev/null || skip_all "dpkg-deb missing"
if dpkg-query -W -f='${Status}' wsync 2>/dev/null | grep -q 'installed\|config-files'; then
	skip_all "a wsync package is already installed here"
fi

# dpkg takes its lock without waiting: retry while another dpkg runs.
dpkg_locked() { # dpkg_locked ARGS...: run dpkg, retrying for up to 60 s on the lock
	local i out rc
	for i in $(seq 30); do
		out=$(dpkg "$@" 2>&1)
		rc=$?
		case "$out" in *"lock"*) [ $rc -ne 0 ] && { sleep 2; continue; } ;; esac
		printf '%s\n' "$out"
		return $rc
	done
	printf '%s\n' "$out"
	return 1
}
installed=0
trap 'if [ $installed -eq 1 ]; then dpkg_locked --purge wsync >/dev/null; fi; rm -rf "$TMP"' EXIT

out=$("$WSYNC_SOURCE_ROOT/scripts/package-deb.sh" --build-dir "$build/deb-build" --output "$TMP" 2>&1)
rc=$?
deb=$(printf '%s\n' "$out" | tail -1)
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /' | tail -30
tap_result $rc "package-deb.sh builds a .deb"
[ $rc -eq 0 ] || { tap_done; exit 1; }
echo "# $deb"
info=$(dpkg-deb -I "$deb")
contains "control names the package" "$info" "Package: wsync"
contains "dependencies come from dpkg-shlibdeps" "$info" "libuv1"
contains "libcurl, loaded when first used, is a dependency too" "$info" "libcurl4 (>= 7.88)"
contains "procps (the unit's ExecReload= runs /bin/kill) is a dependency" "$info" "procps"
check "the programs do not link libcurl (it is loaded when first used)" \
	bash -c "! readelf -d '$build/daemon/wsync' '$build/daemon/wsyncd' | grep -q 'NEEDED.*libcurl'"
contains "/etc/wsync/*.ini are conffiles" "$(dpkg-deb -I "$deb" conffiles)" "/etc/wsync/publisher.ini"
check "nothing under /usr/local" bash -c "! dpkg-deb -c '$deb' | grep -q 'usr/local'"

out=$(dpkg_locked -i "$deb")
rc=$?
[ $rc -eq 0 ] && installed=1
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "dpkg -i installs it"
check "dpkg reports it installed" bash -c "dpkg-query -W -f='\${Status}' wsync | grep -q 'install ok installed'"
expect_exit 0 "wsyncd --version" /usr/sbin/wsyncd --version
check "it prints wsyncd VERSION" bash -c '[[ "$1" =~ ^wsyncd\ [0-9]+\.[0-9]+ ]]' _ "$OUT"
expect_exit 0 "wsync --version" /usr/bin/wsync --version
# (their folders under /var/lib/wsync made, here under $TMP: --check-config
# looks at the folders a file names)
mkdir -p "$TMP/ex/checkpoints"
sed "s|/var/lib/wsync|$TMP/ex|g" /etc/wsync/publisher.ini >"$TMP/ex-pub.ini"
sed "s|/var/lib/wsync|$TMP/ex|g" /etc/wsync/subscriber.ini >"$TMP/ex-sub.ini"
expect_exit 0 "wsyncd --check-config /etc/wsync/publisher.ini" /usr/sbin/wsyncd --check-config "$TMP/ex-pub.ini"
expect_exit 0 "wsyncd --check-config /etc/wsync/subscriber.ini" /usr/sbin/wsyncd --check-config "$TMP/ex-sub.ini"
check "the default configuration path is /etc/wsync" bash -c "/usr/sbin/wsyncd --help | grep -q '/etc/wsync/'"
check "the wsync system user exists" getent passwd wsync
check "unit installed" test -f /lib/systemd/system/wsyncd@.service
check "unit runs /usr/sbin/wsyncd on /etc/wsync/%i.ini" \
	grep -qxF 'ExecStart=/usr/sbin/wsyncd --config /etc/wsync/%i.ini' /lib/systemd/system/wsyncd@.service
check "catalog installed" test -f /usr/lib/systemd/catalog/wsync.catalog
check "man pages installed, compressed" test -f /usr/share/man/man8/wsyncd.8.gz -a \
	-f /usr/share/man/man5/wsyncd.ini.5.gz -a -f /usr/share/man/man1/wsync.1.gz
check "dpkg --verify finds nothing changed" bash -c '[ -z "$(dpkg --verify wsync)" ]'

files=$(dpkg -L wsync | while read -r f; do [ -f "$f" ] && echo "$f"; done)
echo "; edited" >>/etc/wsync/publisher.ini
out=$(dpkg_locked -r wsync)
rc=$?
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "dpkg -r removes it"
left=$(for f in $files; do [ -e "$f" ] && echo "$f"; done)
check "dpkg -r keeps only the conffiles" test "$(printf '%s\n' "$left" | sort | tr '\n' ' ')" = \
	"/etc/wsync/publisher.ini /etc/wsync/subscriber.ini "
check "the edited conffile is kept" grep -q "; edited" /etc/wsync/publisher.ini
out=$(dpkg_locked --purge wsync)
rc=$?
[ $rc -eq 0 ] && installed=0
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "dpkg --purge purges it"
left=$(for f in $files; do [ -e "$f" ] && echo "$f"; done)
[ -z "$left" ] || printf '# left: %s\n' $left
tap_result $([ -z "$left" ]; echo $?) "no file of the package is left"
check "/etc/wsync is gone" test ! -e /etc/wsync
check "dpkg forgot the package" bash -c "! dpkg-query -W -f='\${Status}' wsync 2>/dev/null | grep -q installed"
tap_done
