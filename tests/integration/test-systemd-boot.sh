#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-systemd-boot: the package, the unit and the daemon under a real
# systemd 252, PID 1 of a Debian 12 container booted with systemd-nspawn.
# The other systemd tests only read the unit's text (systemd-analyze); this
# one runs it as an operator would, following systemd/README.md: the .deb
# built from the tree (scripts/package-deb.sh), installed with dpkg -i, a
# publisher and a subscriber on a file:// bucket from the shipped
# wsyncd@.service with the README's drop-ins (ReadWritePaths=,
# LoadCredential= for the signing key), and checks that
#   - both reach active (running) through READY=1 (Type=notify), with a
#     STATUS= line;
#   - the subscriber's target is byte-identical to each checkpoint copied
#     into the publisher's watch_dir;
#   - the journal holds the WSYNC_* fields and MESSAGE_IDs, and
#     journalctl -x the catalog's text;
#   - systemctl reload re-reads the file in the same process, and an
#     invalid file is refused while the daemon runs on;
#   - a bad configuration leaves its unit failed, status 78, no restart,
#     with the CONFIG_INVALID MESSAGE_ID;
#   - after systemctl restart, status.json names the bucket's version
#     within seconds (publisher and subscriber);
#   - with SystemCallErrorNumber= cleared (a seccomp violation kills with
#     SIGSYS) a publish, an apply, the on_apply hook and a reload work;
#   - the watchdog (WatchdogSec=1min) does not fire over two minutes;
#   - dpkg -i of the same package restarts running instances (postinst);
#     dpkg -r stops them, dpkg -P removes the shipped conffiles.
#
# Needs root, systemd-nspawn, debootstrap and nsenter; the Debian root
# (debootstrap bookworm, minbase, the .deb's dependencies, systemd, dbus)
# is cached in $WSYNC_BOOT_CACHE (default /var/cache/wsync-test), keyed
# by a hash of its package list, and each run boots an overlay of it, so
# runs never change the cache.  Skipped (1..0 # SKIP) when it cannot run:
# not root, a tool missing, Debian's archive unreachable with no cached
# root, or a container that does not boot here.  The package's build
# (prefix /usr) is BUILD/boot-deb-build, reused between runs.
. "$(dirname "$0")/lib.sh"
build=$(cd "$(dirname "$WSYNCD")/.." && pwd)
CACHE=${WSYNC_BOOT_CACHE:-/var/cache/wsync-test}
MIRROR=${WSYNC_BOOT_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
skip_all() {
	echo "1..0 # SKIP $1"
	exit 0
}
bail() {
	echo "Bail out! $1"
	exit 1
}
[ "$(id -u)" -eq 0 ] || skip_all "needs root (debootstrap, systemd-nspawn)"
for tool in systemd-nspawn debootstrap nsenter dpkg-deb flock; do
	command -v "$tool" >/dev/null || skip_all "$tool missing (scripts/setup.sh)"
done
[ -d /sys/fs/cgroup ] || skip_all "no cgroup file system: systemd cannot boot in a container here"

NSPAWN=     # the systemd-nspawn process
CPID=       # the container's PID 1, as this host sees it
ROOT=$TMP/root
MOUNTED=0
teardown() {
	if [ -n "$NSPAWN" ] && kill -0 "$NSPAWN" 2>/dev/null; then
		# SIGTERM to nspawn powers the container off
		kill -TERM "$NSPAWN" 2>/dev/null
		for _ in $(seq 150); do
			kill -0 "$NSPAWN" 2>/dev/null || break
			sleep 0.2
		done
		kill -0 "$NSPAWN" 2>/dev/null && { echo "# the container did not power off in 30 s: SIGKILL"; kill -KILL "$NSPAWN"; }
		wait "$NSPAWN" 2>/dev/null
	fi
	[ $MOUNTED -eq 1 ] && { umount "$ROOT" 2>/dev/null || umount -l "$ROOT"; }
	rm -rf "$TMP"
}
trap teardown EXIT
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }

# ---- the package ---------------------------------------------------------
out=$("$WSYNC_SOURCE_ROOT/scripts/package-deb.sh" --build-dir "$build/boot-deb-build" --output "$TMP" 2>&1)
rc=$?
deb=$(printf '%s\n' "$out" | tail -1)
if [ $rc -ne 0 ] || [ ! -f "$deb" ]; then
	printf '%s\n' "$out" | sed 's/^/# /' | tail -30
	bail "scripts/package-deb.sh failed"
fi
echo "# $deb built in $(elapsed) s"

# ---- the Debian root, cached ----------------------------------------------
# The .deb's dependencies (the first of each alternative, without versions),
# plus what booting and the test need.
depends=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/|.*//; s/(.*)//; s/[[:space:]]//g' | grep -v '^libc6$' | grep .)
packages=$(printf '%s\n' $depends systemd systemd-sysv dbus | sort -u | tr '\n' ',' | sed 's/,$//')
key=$(printf '%s %s minbase %s v1\n' "$SUITE" "$MIRROR" "$packages" | sha256sum | cut -c1-16)
cached=$CACHE/$SUITE-root-$key
mkdir -p "$CACHE"
exec 9>"$CACHE/lock"
flock -w 900 9 || bail "$CACHE/lock held for 15 minutes"
if [ ! -f "$cached/.wsync-complete" ]; then
	# only Debian's archive is reachable from the test machines: ask it
	if ! timeout 20 "$PYTHON3" -c 'import sys, urllib.request
urllib.request.urlopen(sys.argv[1] + "/dists/" + sys.argv[2] + "/Release", timeout=15).read(1)' \
		"$MIRROR" "$SUITE" 2>/dev/null; then
		skip_all "no cached Debian root in $CACHE and $MIRROR unreachable"
	fi
	t=$(date +%s)
	rm -rf "$cached" "$cached.new"
	if ! timeout 1200 debootstrap --variant=minbase --include="$packages" "$SUITE" "$cached.new" "$MIRROR" \
		>"$TMP/debootstrap.log" 2>&1; then
		tail -30 "$TMP/debootstrap.log" | sed 's/^/# /'
		tail -30 "$cached.new/debootstrap/debootstrap.log" 2>/dev/null | sed 's/^/# /'
		rm -rf "$cached.new"
		bail "debootstrap $SUITE from $MIRROR failed"
	fi
	# no login prompt on the console, no network to wait for
	ln -sf /dev/null "$cached.new/etc/systemd/system/console-getty.service"
	ln -sf /dev/null "$cached.new/etc/systemd/system/systemd-networkd-wait-online.service"
	touch "$cached.new/.wsync-complete"
	mv "$cached.new" "$cached"
	# older roots (another package list) go
	for old in "$CACHE/$SUITE"-root-*; do
		[ "$old" = "$cached" ] || rm -rf "$old"
	done
	echo "# debootstrap $SUITE ($packages): $(($(date +%s) - t)) s, cached in $cached"
else
	echo "# cached root $cached ($packages)"
fi
exec 9>&-

# This run's root: an overlay of the cache (a copy where overlayfs fails),
# so nothing the run does reaches the cache.
mkdir -p "$ROOT" "$TMP/upper" "$TMP/work"
if mount -t overlay overlay -o "lowerdir=$cached,upperdir=$TMP/upper,workdir=$TMP/work" "$ROOT" 2>/dev/null; then
	MOUNTED=1
else
	cp -a --reflink=auto "$cached/." "$ROOT/" || bail "cannot copy $cached"
fi
install -m 0644 "$deb" "$ROOT/var/tmp/wsync.deb"
# five tiny checkpoints, made here (the root has no numpy)
"$GEN" --params 1M --steps 5 --shards 1 --quiet --out "$ROOT/srv/src" || bail "gen-checkpoints failed"

# ---- boot -----------------------------------------------------------------
# No machined and no system bus on the host: --register=no --keep-unit.
# A name of its own: nspawn keeps per-machine files in /run/systemd/nspawn/,
# and two runs at once must not share them.
systemd-nspawn -b -D "$ROOT" -M "wsync-boot-$$" --register=no --keep-unit --private-network \
	--console=read-only >"$TMP/console.log" 2>&1 </dev/null &
NSPAWN=$!
for _ in $(seq 300); do
	CPID=$(pgrep -P "$NSPAWN" | head -1)
	[ -n "$CPID" ] && [ "$(cat /proc/"$CPID"/comm 2>/dev/null)" = systemd ] && break
	CPID=
	kill -0 "$NSPAWN" 2>/dev/null || break
	sleep 0.1
done
# cin CMD...: run CMD in the container (all its namespaces), a clean
# environment, at most 120 s
cin() {
	timeout 120 nsenter -t "$CPID" -a env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
		LANG=C.UTF-8 SYSTEMD_PAGER= SYSTEMD_COLORS=0 "$@"
}
# systemctl fails until PID 1 listens on its private socket: ask again,
# for at most 90 s, until the boot is over
booted=
if [ -n "$CPID" ]; then
	for _ in $(seq 180); do
		booted=$(timeout 10 nsenter -t "$CPID" -a systemctl is-system-running 2>/dev/null)
		case "$booted" in running | degraded | maintenance | stopping) break ;; esac
		kill -0 "$NSPAWN" 2>/dev/null || break
		sleep 0.5
	done
fi
case "$booted" in
running | degraded) ;;
*)
	tail -20 "$TMP/console.log" | sed 's/^/# /'
	skip_all "the container did not boot here (systemd-nspawn -b: ${booted:-no PID 1}${CPID:+, systemd is PID $CPID})"
	;;
esac
echo "# booted in $(elapsed) s since the start ($booted), PID 1 is $CPID"
[ "$booted" = running ] || cin systemctl --failed --no-legend | sed 's/^/# failed unit: /'

# ---- helpers --------------------------------------------------------------
prop() { cin systemctl show -P "$2" "wsyncd@$1.service"; } # prop NAME PROPERTY
# lib.sh's field, at_version and wait_version read the instances'
# /run/wsync/NAME/status.json inside the container
RUN_DIRS=/proc/$CPID/root/run/wsync
running() { # running NAME: active (running)
	[ "$(prop "$1" ActiveState)/$(prop "$1" SubState)" = active/running ]
}
# journal ARGS...: journalctl in the container, no pager
journal() { cin journalctl --no-pager "$@"; }
# identical V: every file the subscriber's target holds is checkpoint-V's
identical() {
	local t=/proc/$CPID/root/srv/model s=/proc/$CPID/root/srv/src/checkpoint-$1 f n=0
	[ -f "$t/model.safetensors" ] || { echo "# no model.safetensors in the target"; return 1; }
	while IFS= read -r f; do
		cmp -s "$t/$f" "$s/$f" || { echo "# $f differs from checkpoint-$1's"; return 1; }
		n=$((n + 1))
	done < <(cd "$t" && find . -path ./.wsync -prune -o -type f -print)
	echo "# $n files identical to checkpoint-$1"
}
# checkpoint N: the trainer writes checkpoint-N into the watch_dir (a copy,
# then a rename, as a trainer that saves atomically does)
checkpoint() {
	cin cp -r "/srv/src/checkpoint-$1" "/srv/train/.tmp-$1" &&
		cin mv "/srv/train/.tmp-$1" "/srv/train/checkpoint-$1"
}

# ---- install and configure, as systemd/README.md says ---------------------
out=$(cin dpkg -i /var/tmp/wsync.deb </dev/null 2>&1)
rc=$?
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "dpkg -i installs the package in a Debian 12 container"
[ $rc -eq 0 ] || { tap_done; exit 1; }
check "the package made the wsync user" cin getent passwd wsync

cin wsync keygen /etc/wsync/signing.pem >/dev/null
cin install -d -o wsync -g wsync /srv/bucket /srv/model /srv/model-wd /srv/hook
cin install -d /srv/train
cat >"$ROOT/etc/wsync/publisher.ini" <<'EOF'
[daemon]
role = publisher
[store]
url = file:///srv/bucket
[publisher]
watch_dir = /srv/train
signing_key = /run/credentials/wsyncd@publisher.service/signing-key
EOF
cat >"$ROOT/etc/wsync/subscriber.ini" <<'EOF'
[daemon]
role = subscriber
[store]
url = file:///srv/bucket
[subscriber]
target_dir = /srv/model
verify_key = /etc/wsync/signing.pem.pub
poll_interval = 500ms
on_apply = echo "$WSYNC_VERSION $WSYNC_DIR" >/srv/hook/applied
EOF
# a second subscriber that nothing restarts: the watchdog's witness
cat >"$ROOT/etc/wsync/watchdog.ini" <<'EOF'
[daemon]
role = subscriber
[store]
url = file:///srv/bucket
[subscriber]
target_dir = /srv/model-wd
verify_key = /etc/wsync/signing.pem.pub
poll_interval = 1s
EOF
dropin() { # dropin INSTANCE FILE TEXT: /etc/systemd/system/wsyncd@INSTANCE.service.d/FILE
	mkdir -p "$ROOT/etc/systemd/system/wsyncd@$1.service.d"
	printf '[Service]\n%s\n' "$3" >"$ROOT/etc/systemd/system/wsyncd@$1.service.d/$2"
}
dropin publisher 10-paths.conf "ReadWritePaths=/srv/bucket"
dropin publisher 20-credentials.conf "LoadCredential=signing-key:/etc/wsync/signing.pem"
dropin subscriber 10-paths.conf "ReadWritePaths=/srv/model /srv/bucket /srv/hook"
dropin watchdog 10-paths.conf "ReadWritePaths=/srv/model-wd /srv/bucket"
check "wsyncd --check-config accepts publisher.ini" cin wsyncd --check-config /etc/wsync/publisher.ini
check "wsyncd --check-config accepts subscriber.ini" cin wsyncd --check-config /etc/wsync/subscriber.ini
cin systemctl daemon-reload

# ---- 1. READY=1 and STATUS= -------------------------------------------------
check "systemctl enable --now wsyncd@watchdog" cin systemctl enable --now wsyncd@watchdog
WD_START=$(date +%s)
WD_PID=$(prop watchdog MainPID)
check "systemctl enable --now wsyncd@publisher wsyncd@subscriber" \
	cin systemctl enable --now wsyncd@publisher wsyncd@subscriber
for u in publisher subscriber; do
	check "wsyncd@$u is Type=notify" test "$(prop $u Type)" = notify
	check "wsyncd@$u is active (running): READY=1 arrived" running $u
	st=$(prop $u StatusText)
	echo "# wsyncd@$u StatusText: $st"
	check "wsyncd@$u has a STATUS= line" test -n "$st"
	check "wsyncd@$u has the watchdog (WatchdogUSec=1min)" test "$(prop $u WatchdogUSec)" = 1min
done

# ---- 2. checkpoints flow, byte for byte ----------------------------------------
for v in 1 2 3; do
	checkpoint $v
	check "checkpoint-$v: the publisher publishes version $v" wait_version publisher $v 30
	check "checkpoint-$v: the subscriber applies version $v" wait_version subscriber $v 30
	check "checkpoint-$v: the target is byte-identical to it" identical $v
done
check "the on_apply hook ran in the sandbox, for version 3" \
	wait_for 10 grep -q '^3 /srv/model$' "/proc/$CPID/root/srv/hook/applied"
check "STATUS= follows the daemon (subscriber at version 3)" \
	bash -c '[[ "$1" == *3* ]]' _ "$(prop subscriber StatusText)"

# ---- 3. journal fields and catalog --------------------------------------------
v=$(journal -o verbose -u wsyncd@subscriber MESSAGE_ID=0cccbef5ea254d2ba239818187cb42be)
contains "journalctl -o verbose: the subscriber's VERSION_APPLIED MESSAGE_ID" "$v" "MESSAGE_ID=0cccbef5ea254d2ba239818187cb42be"
contains "... with WSYNC_VERSION" "$v" "WSYNC_VERSION=3"
contains "... with WSYNC_STEP" "$v" "WSYNC_STEP="
contains "... with CODE_FUNC" "$v" "CODE_FUNC="
v=$(journal -o verbose -u wsyncd@publisher MESSAGE_ID=57908454f0cb428eadc1dcd4fda879f4)
contains "journalctl -o verbose: the publisher's VERSION_PUBLISHED MESSAGE_ID" "$v" "MESSAGE_ID=57908454f0cb428eadc1dcd4fda879f4"
contains "... with WSYNC_VERSION" "$v" "WSYNC_VERSION=2"
contains "... with WSYNC_BYTES" "$v" "WSYNC_BYTES="
contains "journalctl -o verbose: STARTED's MESSAGE_ID" \
	"$(journal -o verbose -u wsyncd@publisher)" "MESSAGE_ID=d9e73e6f243d462191cfed87da146cca"
check "journalctl -u wsyncd@subscriber WSYNC_VERSION=2 finds version 2" \
	bash -c '[ -n "$1" ]' _ "$(journal -u wsyncd@subscriber WSYNC_VERSION=2 -q -o cat)"
contains "journalctl -x: the catalog explains a published version" \
	"$(journal -x -u wsyncd@publisher)" "Subject: wsync version 3 published"
contains "journalctl -x: ... and an applied one" \
	"$(journal -x -u wsyncd@subscriber)" "Subject: wsync version 3 applied"

# ---- 4. reload ----------------------------------------------------------------
pid=$(prop subscriber MainPID)
since=$(cin date '+%Y-%m-%d %H:%M:%S')
sleep 1
check "systemctl reload wsyncd@subscriber" cin systemctl reload wsyncd@subscriber
# reloaded_since NAME SINCE PID: CONFIG_RELOADED logged since SINCE, PID
# still the main process, running
reloaded_since() {
	journal -u "wsyncd@$1" --since "$2" MESSAGE_ID=b1f407a4a20e448b90337e0488203d07 -q -o cat | grep -q . &&
		[ "$(prop "$1" MainPID)" = "$3" ] && running "$1"
}
check "... the daemon says it reloaded (CONFIG_RELOADED)" wait_for 10 reloaded_since subscriber "$since" "$pid"
check "... in the same process (MainPID $pid)" test "$(prop subscriber MainPID)" = "$pid"
check "... and is active (running) again" wait_for 10 running subscriber
cp "$ROOT/etc/wsync/subscriber.ini" "$TMP/subscriber.ini"
printf '[daemon]\nthreads = lots\n' >>"$ROOT/etc/wsync/subscriber.ini"
since=$(cin date '+%Y-%m-%d %H:%M:%S')
sleep 1
cin systemctl reload wsyncd@subscriber
refused() { journal -u wsyncd@subscriber --since "$since" -q -o cat | grep -q 'reload refused'; }
check "a reload of an invalid file is refused, and says why" wait_for 10 refused
journal -u wsyncd@subscriber --since "$since" -q -o cat | sed 's/^/# /'
check "... the daemon runs on (same MainPID)" test "$(prop subscriber MainPID)" = "$pid"
check "... active (running)" wait_for 10 running subscriber
check "... still at version 3 with the old settings" at_version subscriber 3
cp "$TMP/subscriber.ini" "$ROOT/etc/wsync/subscriber.ini"
cin systemctl reload wsyncd@subscriber
wait_for 10 running subscriber

# ---- 5. a bad configuration: failed, 78, no restart loop ------------------------
printf '[daemon]\nrole = subscriber\nthreads = lots\n[store]\nurl = file:///srv/bucket\n[subscriber]\ntarget_dir = /srv/nowhere\n' \
	>"$ROOT/etc/wsync/broken.ini"
cin systemctl start wsyncd@broken >/dev/null 2>&1
check "systemctl start of a bad configuration fails" test "$(prop broken ActiveState)" = failed
sleep 7 # past RestartSec=5s: a restart would have come by now
check "... the unit stays failed" test "$(prop broken ActiveState)" = failed
check "... with ExecMainStatus=78" test "$(prop broken ExecMainStatus)" = 78
check "... and NRestarts=0" test "$(prop broken NRestarts)" = 0
check "... the journal holds CONFIG_INVALID's MESSAGE_ID" \
	bash -c '[ -n "$1" ]' _ "$(journal -u wsyncd@broken MESSAGE_ID=eeb35c5773a649129688439e73ac5c09 -q -o cat)"
contains "... explained by journalctl -x" "$(journal -x -u wsyncd@broken)" "Subject: wsync configuration is invalid"
cin systemctl reset-failed wsyncd@broken

# ---- 6. the status after a restart names the bucket's version --------------------
for u in publisher subscriber; do
	pid=$(prop $u MainPID)
	check "systemctl restart wsyncd@$u" cin systemctl restart wsyncd@$u
	check "... a new process" test "$(prop $u MainPID)" != "$pid"
	t=$(date +%s%N)
	check "... its status names the bucket's version 3 within 5 s" wait_version $u 3 5
	echo "# $(( ($(date +%s%N) - t) / 1000000 )) ms after systemctl restart returned"
	expect_exit 0 "... wsync status --config /etc/wsync/$u.ini: healthy" cin wsync status --config /etc/wsync/$u.ini
	printf '%s\n' "$OUT" | head -3 | sed 's/^/# /'
	check "... at version 3" bash -c '[[ $1 =~ version:?\ +3([^0-9]|$) ]]' _ "$OUT"
	check "... and so does its STATUS= line" bash -c '[[ $1 =~ version\ 3([^0-9]|$) ]]' _ "$(prop $u StatusText)"
done

# The bucket moves on while both are stopped (the trainer writes
# checkpoint-4): started again, each names the new version within seconds.
cin systemctl stop wsyncd@publisher wsyncd@subscriber
checkpoint 4
check "stopped while checkpoint-4 arrived: systemctl start wsyncd@publisher" cin systemctl start wsyncd@publisher
check "... its status names version 4 (just published) within 10 s" wait_version publisher 4 10
check "systemctl start wsyncd@subscriber after the bucket moved to version 4" cin systemctl start wsyncd@subscriber
check "... its status names version 4 within 5 s" wait_version subscriber 4 5
check "... byte-identical" identical 4

# ---- 7. seccomp violations fatal: everything still works ---------------------------
mkdir -p "$ROOT/etc/systemd/system/wsyncd@.service.d"
printf '[Service]\n# a system call outside the filter kills (SIGSYS) instead of failing\nSystemCallErrorNumber=\n' \
	>"$ROOT/etc/systemd/system/wsyncd@.service.d/90-seccomp-fatal.conf"
cin systemctl daemon-reload
# systemd shows "kill" as SECCOMP_ERROR_NUMBER_KILL (INT_MAX - 1), EPERM as 1
check "SystemCallErrorNumber= cleared by a drop-in (a violation kills)" \
	test "$(prop publisher SystemCallErrorNumber)" = 2147483646
check "restart both with violations fatal" cin systemctl restart wsyncd@publisher wsyncd@subscriber
checkpoint 5
check "violations fatal: the publisher publishes version 5" wait_version publisher 5 30
check "violations fatal: the subscriber applies version 5" wait_version subscriber 5 30
check "... byte-identical" identical 5
check "violations fatal: the on_apply hook runs" wait_for 10 grep -q '^5 ' "/proc/$CPID/root/srv/hook/applied"
for u in publisher subscriber; do
	pid=$(prop $u MainPID)
	since=$(cin date '+%Y-%m-%d %H:%M:%S')
	sleep 1
	cin systemctl reload wsyncd@$u
	check "violations fatal: wsyncd@$u reloads (CONFIG_RELOADED) in the same process" \
		wait_for 10 reloaded_since $u "$since" "$pid"
	check "... wsyncd@$u never restarted (NRestarts=0)" test "$(prop $u NRestarts)" = 0
done
sys=$(journal -b -q -o cat | grep -iE 'SIGSYS|status=31|core-dump|dumped core' | head -5)
[ -z "$sys" ] || printf '# %s\n' "$sys"
check "... no process was killed by the filter" test -z "$sys"
rm -f "$ROOT/etc/systemd/system/wsyncd@.service.d/90-seccomp-fatal.conf"
cin systemctl daemon-reload

# ---- 8. the watchdog over two minutes -----------------------------------------------
left=$((WD_START + 125 - $(date +%s)))
if [ $left -gt 0 ]; then
	echo "# waiting ${left} s for wsyncd@watchdog's two minutes"
	sleep $left
fi
check "wsyncd@watchdog follows the bucket (version 5)" wait_version watchdog 5 30
check "after $(($(date +%s) - WD_START)) s wsyncd@watchdog is the same process" test "$(prop watchdog MainPID)" = "$WD_PID"
check "... active (running), NRestarts=0" bash -c '[ "$1" = 0 ]' _ "$(prop watchdog NRestarts)"
check "... running" running watchdog
# WatchdogTimestamp is the last WATCHDOG=1 systemd received: the daemon
# pings (every 30 s, half of WatchdogSec=), not only escapes the timeout
wd_age() {
	local last now
	last=$(prop watchdog WatchdogTimestampMonotonic)
	now=$("$PYTHON3" -c 'import time; print(int(time.monotonic() * 1e6))') # one clock for all namespaces
	echo "# last WATCHDOG=1 $(((now - last) / 1000000)) s ago (WatchdogTimestampMonotonic $last)"
	[ "${last:-0}" -gt 0 ] && [ $((now - last)) -lt 40000000 ]
}
check "... systemd had a WATCHDOG=1 from it in the last 40 s" wd_age
echo "# WatchdogTimestamp: $(prop watchdog WatchdogTimestamp), now $(cin date)"
wd=$(journal -b -q -o cat | grep -i 'watchdog timeout' | head -5)
[ -z "$wd" ] || printf '# %s\n' "$wd"
check "no 'Watchdog timeout' in the journal" test -z "$wd"

# ---- 9. an upgrade restarts running instances ----------------------------------------
declare -A before
for u in publisher subscriber watchdog; do before[$u]=$(prop $u MainPID); done
out=$(cin dpkg -i /var/tmp/wsync.deb </dev/null 2>&1)
rc=$?
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "dpkg -i of the same package again (an upgrade)"
for u in publisher subscriber watchdog; do
	check "... restarted wsyncd@$u (MainPID ${before[$u]} → $(prop $u MainPID))" \
		bash -c '[ "$1" != "$2" ] && [ "$1" != 0 ]' _ "$(prop $u MainPID)" "${before[$u]}"
	check "... wsyncd@$u active (running)" wait_for 10 running $u
done
check "... the subscriber is still at version 5" wait_version subscriber 5 10

# ---- 10. dpkg -r stops them, dpkg -P removes the conffiles -----------------------------
out=$(cin dpkg -r wsync </dev/null 2>&1)
rc=$?
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "dpkg -r wsync"
check "... no wsyncd process is left" bash -c '! pgrep -x wsyncd --ns "$1" >/dev/null' _ "$CPID"
for u in publisher subscriber watchdog; do
	check "... wsyncd@$u stopped" bash -c '[ "$1" != active ] && [ "$1" != activating ]' _ "$(prop $u ActiveState)"
done
check "... the conffiles stay" test -f "$ROOT/etc/wsync/publisher.ini" -a -f "$ROOT/etc/wsync/subscriber.ini"
out=$(cin dpkg -P wsync </dev/null 2>&1)
rc=$?
[ $rc -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
tap_result $rc "dpkg -P wsync"
check "... removes /etc/wsync/publisher.ini and subscriber.ini" \
	test ! -e "$ROOT/etc/wsync/publisher.ini" -a ! -e "$ROOT/etc/wsync/subscriber.ini"
check "... dpkg forgot the package" bash -c "! nsenter -t $CPID -a dpkg-query -W -f='\${Status}' wsync 2>/dev/null | grep -q installed"
echo "# $(elapsed) s in all"
tap_done
