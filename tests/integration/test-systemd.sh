#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-systemd: what `meson install` ships for systemd is correct.  The
# build is installed into a DESTDIR; wsyncd@.service passes
# `systemd-analyze verify` (binaries and man pages resolved inside that
# DESTDIR) and scores an exposure of at most 2.5 in `systemd-analyze
# security --offline=true`; the sysusers.d entry creates the wsync user in
# a scratch root; the example configurations are installed, valid, and
# never overwritten; $STATE_DIRECTORY / $RUNTIME_DIRECTORY lists give the
# first entry; and the man pages cover every option of wsyncd and every
# [section] key the configuration loader accepts.
# A configuration error must leave the unit "failed" with status 78 and no
# restart (issue 25 §3).  Without booting a systemd, what the unit's text
# and the installed wsyncd guarantee of it: the main process checks the
# file (ExecStart=wsyncd --config the instance's file) and exits 78 on a
# bad one, 78 is in RestartPreventExitStatus= (which applies to the main
# process only) and not a success; no ExecStartPre= can fail the start
# (each has the "-" prefix: one exiting 78 would be restarted forever);
# a run-time failure (a watch_dir not there yet) exits with a status
# Restart=on-failure restarts.
. "$(dirname "$0")/lib.sh"
build=$(cd "$(dirname "$WSYNCD")/.." && pwd)
src=$WSYNC_SOURCE_ROOT
dest=$TMP/dest

out=$(DESTDIR=$dest meson install -C "$build" --no-rebuild --quiet 2>&1)
rc=$?
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /' | tail -20
tap_result $rc "meson install into a DESTDIR"

find_one() { find "$dest" -path "*$1" -print -quit; }
unit=$(find_one '/systemd/system/wsyncd@.service')
sbin_wsyncd=$(find_one '/sbin/wsyncd')
check "unit installed in the unit directory" test -f "$unit"
check "sysusers.d entry installed" test -f "$(find_one '/sysusers.d/wsync.conf')"
check "journal catalog installed" test -f "$(find_one '/systemd/catalog/wsync.catalog')"
check "drop-in examples installed" test -f "$(find_one '/examples/10-paths.conf')" -a \
	-f "$(find_one '/examples/20-credentials.conf')"
pub_ini=$(find_one '/wsync/publisher.ini')
sub_ini=$(find_one '/wsync/subscriber.ini')
case "$pub_ini" in */doc/*) pub_ini=$(find "$dest" -path '*/wsync/publisher.ini' -not -path '*/doc/*' -print -quit) ;; esac
case "$sub_ini" in */doc/*) sub_ini=$(find "$dest" -path '*/wsync/subscriber.ini' -not -path '*/doc/*' -print -quit) ;; esac
check "example configurations installed to sysconfdir/wsync" test -f "$pub_ini" -a -f "$sub_ini"
# (their folders under /var/lib/wsync made, here under $TMP: --check-config
# looks at the folders a file names)
mkdir -p "$TMP/ex/checkpoints"
sed "s|/var/lib/wsync|$TMP/ex|g" "$pub_ini" >"$TMP/ex-pub.ini"
sed "s|/var/lib/wsync|$TMP/ex|g" "$sub_ini" >"$TMP/ex-sub.ini"
expect_exit 0 "installed publisher.ini is valid" "$sbin_wsyncd" --check-config "$TMP/ex-pub.ini"
expect_exit 0 "installed subscriber.ini is valid" "$sbin_wsyncd" --check-config "$TMP/ex-sub.ini"

# A second install keeps an edited configuration.
echo "; edited by the operator" >>"$pub_ini"
DESTDIR=$dest meson install -C "$build" --no-rebuild --quiet >/dev/null 2>&1
check "reinstall keeps an edited configuration" grep -q "edited by the operator" "$pub_ini"
check "reinstall restores a missing one" bash -c "rm '$sub_ini' && DESTDIR='$dest' meson install -C '$build' --no-rebuild --quiet >/dev/null 2>&1 && test -f '$sub_ini'"

# The unit, with its programs resolved inside the DESTDIR.
units=$TMP/units
mkdir -p "$units"
sed -E "s#^(ExecStartPre|ExecStart)=([-@:+!]*)(/[^ ]*)#\\1=\\2$dest\\3#" "$unit" >"$units/wsyncd@.service"
for d in Type=notify NotifyAccess=main 'ExecReload=/bin/kill -HUP $MAINPID' \
	Restart=on-failure RestartPreventExitStatus=78 'StateDirectory=wsync/%i' \
	'RuntimeDirectory=wsync/%i' ConfigurationDirectory=wsync User=wsync \
	ProtectSystem=strict ProtectHome=yes PrivateTmp=yes NoNewPrivileges=yes \
	'CapabilityBoundingSet=' 'SystemCallFilter=@system-service mincore' \
	'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' MemoryDenyWriteExecute=yes; do
	check "unit sets $d" grep -qxF -- "$d" "$units/wsyncd@.service"
done
check "unit sets a WatchdogSec=" grep -qE '^WatchdogSec=[1-9]' "$units/wsyncd@.service"

# A bad configuration: failed with 78, not restarted.
u=$units/wsyncd@.service
check "ExecStart runs wsyncd --config on the instance's file (the main process checks it)" \
	bash -c '[[ $(grep -E "^ExecStart=" "$1") =~ ^ExecStart=$2\ --config\ /[^\ ]*/wsync/%i\.ini$ ]]' _ "$u" "$sbin_wsyncd"
pre=$(grep -E '^ExecStartPre=' "$u" | grep -vE '^ExecStartPre=[@:+!]*-')
[ -z "$pre" ] || printf '# %s\n' "$pre"
tap_result $([ -z "$pre" ]; echo $?) "no ExecStartPre= without \"-\" (its exit 78 would be restarted)"
# the values of every KEY= line, space-separated
values() { sed -nE "s/^($1)=//p" "$u" | tr ' ' '\n' | grep .; }
check "RestartPreventExitStatus= lists 78" bash -c '[[ " $1 " == *" 78 "* ]]' _ "$(values RestartPreventExitStatus | tr '\n' ' ')"
check "78 is not a SuccessExitStatus= (the unit must end failed)" \
	bash -c '! [[ " $1 " == *" 78 "* ]]' _ "$(values SuccessExitStatus | tr '\n' ' ')"
check "Restart=on-failure restarts the other failures" test "$(values Restart)" = on-failure
printf '[daemon]\nrole = publisher\nthreads = lots\n[store]\nurl = file://%s/bucket\n[publisher]\nwatch_dir = %s/ckpt\n' \
	"$TMP" "$TMP" >"$TMP/bad.ini"
expect_exit 78 "installed wsyncd --config on a bad file exits 78" "$sbin_wsyncd" --config "$TMP/bad.ini" --log-target stderr
contains "... after naming the error" "$OUT" "bad.ini:3: [daemon] threads"
printf '[daemon]\nrole = publisher\nstate_dir = %s/state\nruntime_dir = %s/run\n[store]\nurl = file://%s/bucket\n[publisher]\nwatch_dir = %s/not-yet\n' \
	"$TMP" "$TMP" "$TMP" "$TMP" >"$TMP/later.ini"
expect_exit 1 "a watch_dir not there yet exits 1, which the unit restarts" \
	"$sbin_wsyncd" --config "$TMP/later.ini" --log-target stderr
check "1 is neither in RestartPreventExitStatus= nor a success" \
	bash -c '! [[ " $1 " == *" 1 "* ]]' _ "$(values 'RestartPreventExitStatus|SuccessExitStatus' | tr '\n' ' ')"

man_dir=$(dirname "$(find_one '/man8/wsyncd.8')")
if command -v man >/dev/null 2>&1 && [ -d "$man_dir" ]; then
	man_opt=(--man=yes)
	export MANPATH=$(dirname "$man_dir")
else
	echo "# man or the built man pages missing: verify without --man"
	man_opt=(--man=no)
fi
for inst in publisher subscriber; do
	out=$(cd "$units" && systemd-analyze verify "${man_opt[@]}" "$units/wsyncd@$inst.service" 2>&1)
	rc=$?
	[ $rc -eq 0 ] && [ -z "$out" ] || { echo "# exit $rc"; printf '%s\n' "$out" | sed 's/^/# /'; }
	tap_result $([ $rc -eq 0 ] && [ -z "$out" ]; echo $?) "systemd-analyze verify wsyncd@$inst.service is clean"
done
unset MANPATH

out=$(systemd-analyze security --offline=true "$units/wsyncd@subscriber.service" 2>&1)
level=$(printf '%s\n' "$out" | sed -nE 's/.*Overall exposure level for [^:]*: ([0-9.]+).*/\1/p')
echo "# exposure level: ${level:-none}"
ok=$(awk -v l="${level:-99}" 'BEGIN { print (l + 0 <= 2.5) ? 0 : 1 }')
[ "$ok" -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /' | grep -v '✓'
tap_result "$ok" "systemd-analyze security exposure ${level:-?} <= 2.5"

# sysusers.d: the entry parses and creates wsync in a scratch root.
mkdir -p "$TMP/root/etc"
out=$(systemd-sysusers --root="$TMP/root" "$(find_one '/sysusers.d/wsync.conf')" 2>&1)
rc=$?
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "systemd-sysusers accepts wsync.conf"
check "sysusers creates the wsync system user" grep -qE '^wsync:x:[0-9]+:[0-9]+:wsync daemon:/var/lib/wsync:' "$TMP/root/etc/passwd"

# StateDirectory=a b gives STATE_DIRECTORY=/var/lib/a:/var/lib/b.
out=$(STATE_DIRECTORY=/var/lib/wsync/sub:/var/lib/other RUNTIME_DIRECTORY=/run/wsync/sub:/run/x \
	"$WSYNCD" --check-config --dump-config "$src/config/subscriber.ini" 2>&1)
contains "state_dir is the first entry of \$STATE_DIRECTORY" "$out" "state_dir = /var/lib/wsync/sub
"
contains "runtime_dir is the first entry of \$RUNTIME_DIRECTORY" "$out" "runtime_dir = /run/wsync/sub
"

# Man pages: every key the loader accepts (its --dump-config lists them all,
# set or not) is documented under its section in wsyncd.ini(5).
# (each role's dump holds its own section: the two together hold them all)
keys=$(for f in "$TMP/ex-pub.ini" "$TMP/ex-sub.ini"; do "$WSYNCD" --check-config --dump-config "$f"; done |
	awk '/^\[/ { gsub(/[][]/, ""); s = $0; next }
	     /^;? *[a-z_]+ = / { sub(/^; */, ""); print s, $1 }' | sort -u)
n_keys=$(printf '%s\n' "$keys" | grep -c .)
echo "# $n_keys keys from --dump-config"
check "the loader lists 30 or more keys" test "$n_keys" -ge 30
documented=$(awk '/^# \[[a-z]+\] SECTION/ { s = substr($2, 2, length($2) - 2); next }
	/^# / { s = "" }
	s != "" && /^\*[a-z_]+\* =/ { k = $1; gsub(/\*/, "", k); print s, k }' "$src/daemon/man/wsyncd.ini.5.scd")
missing=$(comm -23 <(printf '%s\n' "$keys" | sort) <(printf '%s\n' "$documented" | sort))
[ -z "$missing" ] || printf '# undocumented: %s\n' $missing
tap_result $([ -z "$missing" ]; echo $?) "every [section] key is documented in wsyncd.ini(5)"
extra=$(comm -13 <(printf '%s\n' "$keys" | sort) <(printf '%s\n' "$documented" | sort))
[ -z "$extra" ] || printf '# documented but unknown: %s\n' $extra
tap_result $([ -z "$extra" ]; echo $?) "wsyncd.ini(5) documents no key the loader refuses"

opts=$("$WSYNCD" --help | grep -oE -- '--[a-z][a-z-]+' | sort -u)
missing=$(for o in $opts; do grep -qF -- "*$o*" "$src/daemon/man/wsyncd.8.scd" || echo "$o"; done)
[ -z "$missing" ] || printf '# undocumented: %s\n' $missing
tap_result $([ -z "$missing" ]; echo $?) "every wsyncd option is in wsyncd(8)"
cmds=$("$WSYNC" --help | sed -nE 's/^  ([a-z]+) .*/\1/p' | sort -u)
missing=$(for c in $cmds; do grep -qE -- "^\\*$c( |\\*)" "$src/daemon/man/wsync.1.scd" || echo "$c"; done)
[ -z "$missing" ] || printf '# undocumented: %s\n' $missing
tap_result $([ -z "$missing" ]; echo $?) "every wsync command is in wsync(1)"
if command -v scdoc >/dev/null 2>&1; then
	for p in wsyncd.8 wsync.1 wsyncd.ini.5; do
		check "man page $p installed" test -s "$(find_one "/man${p##*.}/$p")"
		if command -v man >/dev/null 2>&1; then
			warn=$(MANWIDTH=80 man --warnings -l "$(find_one "/man${p##*.}/$p")" 2>&1 >/dev/null)
			[ -z "$warn" ] || printf '%s\n' "$warn" | sed 's/^/# /'
			tap_result $([ -z "$warn" ]; echo $?) "... it renders without a troff warning (MANWIDTH=80)"
		fi
	done
else
	echo "ok - # SKIP scdoc missing: man pages not built"
fi

tap_done
