#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-first-hour: the README's one-machine files, exactly as the README
# prints them, with the folders it names and the commands it gives and no
# other step, bring a subscriber to a byte-identical copy of the trainer's
# checkpoint -- as root (state under /var/lib/wsync, /run/wsync) and as
# `nobody` with only HOME set (state under ~/.local/state/wsync).  The
# files and the commands are read from README.md, so the test fails when
# the README changes without them working.
#
# Runs in a mount namespace of its own (unshare -m) with empty tmpfs over
# /srv, /var/lib and /run, so the README's absolute paths are used as they
# stand without touching this machine's.  Needs root; without it (or
# without unshare) the script says so and fails rather than passing.
#
# Also: with the trainer's folder missing, --check-config and wsyncd both
# say so in one line naming the key, the path and the fix.
. "$(dirname "$0")/lib.sh"

if [ -z "${WSYNC_FIRST_HOUR_NS:-}" ]; then
	if [ "$(id -u)" -ne 0 ] || ! unshare -m true 2>/dev/null; then
		tap_result 1 "root and unshare -m are needed (run the integration tests as root)"
		tap_done
		exit
	fi
	rm -rf "$TMP"	# the namespace's run makes its own
	WSYNC_FIRST_HOUR_NS=1 exec unshare -m --propagation private bash "$0" "$@"
fi
fresh() { # empty tmpfs over the README's folders and the default state
	local d
	for d in /srv /var/lib /run; do
		mount -t tmpfs -o mode=0755 tmpfs "$d" || { echo "Bail out! cannot mount tmpfs on $d"; exit 1; }
	done
}
fresh
chmod 755 "$TMP"

readme=$WSYNC_SOURCE_ROOT/README.md
# The README's two one-machine files: the table row after "**On one
# machine**", cells "`[daemon]`<br>`role = publisher`" ...
extract() { # extract COLUMN(1|2) > FILE
	awk -v col="$1" '
		/^\*\*On one machine\*\*/ { on = 1 }
		on && /^\| `\[daemon\]`/ { n++ }
		on && /^\| `\[/ { split($0, c, "|"); cell = c[col + 1]
			gsub(/<br>/, "\n", cell); gsub(/`/, "", cell); gsub(/^ +| +$/, "", cell)
			print cell }
		on && /^\*\*On two machines\*\*/ { exit }' "$readme"
}
mkdir -p "$TMP/etc"
extract 1 >"$TMP/etc/publisher.ini"
extract 2 >"$TMP/etc/subscriber.ini"
check "README: the publisher's file has role, url, watch_dir" \
	grep -qx 'watch_dir = /srv/train/run1' "$TMP/etc/publisher.ini"
check "README: the subscriber's file has role, url, target_dir" \
	grep -qx 'target_dir = /srv/models/run1' "$TMP/etc/subscriber.ini"
chmod 644 "$TMP/etc"/*.ini
readme_says() { grep -qxF -- "$1" "$readme"; }
as_root='mkdir -p /srv/train/run1'
as_user='sudo install -d -o "$USER" /srv/train/run1 /srv/wsync /srv/models'
check "README: the folder a root user makes" readme_says "$as_root"
check "README: the folders another user is given" readme_says "$as_user"

gen_ckpts "$TMP/src" --params 1M --steps 2 --shards 1
ckpt=$TMP/src/checkpoint-2

# run WHO PROGRAM ARGS...: as root, or as nobody with only HOME set
run() {
	local who=$1
	shift
	if [ "$who" = root ]; then
		env -i PATH="$PATH" HOME=/root "$@"
	else
		env -i PATH="$PATH" HOME="$TMP/home" \
			setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"
	fi
}

# ---- before the trainer's folder exists ----
expect_exit 78 "no watch_dir: --check-config exits 78" run root "$WSYNCD" --check-config "$TMP/etc/publisher.ini"
contains "... one line naming the key, the path and the fix" "$OUT" \
	"publisher.ini:6: [publisher] watch_dir: /srv/train/run1: no such directory; wsyncd does not create the trainer's folder: create it (mkdir -p /srv/train/run1)"
expect_exit 1 "no watch_dir: wsyncd exits 1 at once (systemd starts it again)" \
	timeout 20 env -i PATH="$PATH" HOME=/root "$WSYNCD" -c "$TMP/etc/publisher.ini" --log-target stderr
contains "... saying the same" "$OUT" "[publisher] watch_dir: /srv/train/run1: no such directory"

# one WHO: the README's steps for WHO, a checkpoint, the copy compared
one() {
	local who=$1 pub sub i f ok
	fresh
	if [ "$who" = root ]; then
		eval "$as_root"
	else
		mkdir -p "$TMP/home" && chown nobody:nogroup "$TMP/home"
		USER=nobody
		eval "${as_user#sudo }"
	fi
	expect_exit 0 "$who: the publisher's file passes --check-config" \
		run "$who" "$WSYNCD" --check-config "$TMP/etc/publisher.ini"
	expect_exit 0 "$who: the subscriber's file passes --check-config" \
		run "$who" "$WSYNCD" --check-config "$TMP/etc/subscriber.ini"
	# one simple command each: env, setpriv and wsyncd exec each other,
	# so $! is the daemon's pid
	if [ "$who" = root ]; then
		env -i PATH="$PATH" HOME=/root \
			"$WSYNCD" -c "$TMP/etc/publisher.ini" --log-target stderr >"$TMP/$who-pub.log" 2>&1 &
		pub=$!
		env -i PATH="$PATH" HOME=/root \
			"$WSYNCD" -c "$TMP/etc/subscriber.ini" --log-target stderr >"$TMP/$who-sub.log" 2>&1 &
		sub=$!
	else
		env -i PATH="$PATH" HOME="$TMP/home" setpriv --reuid=nobody --regid=nogroup --clear-groups \
			"$WSYNCD" -c "$TMP/etc/publisher.ini" --log-target stderr >"$TMP/$who-pub.log" 2>&1 &
		pub=$!
		env -i PATH="$PATH" HOME="$TMP/home" setpriv --reuid=nobody --regid=nogroup --clear-groups \
			"$WSYNCD" -c "$TMP/etc/subscriber.ini" --log-target stderr >"$TMP/$who-sub.log" 2>&1 &
		sub=$!
	fi
	PIDS+=($pub $sub)
	# the trainer: its checkpoint folder, trainer_state.json last
	put_ckpt "$ckpt" /srv/train/run1/checkpoint-2
	ok=1
	for ((i = 0; i < 600; i++)); do
		if [ -f /srv/models/run1/model.safetensors ] &&
			cmp -s "$ckpt/model.safetensors" /srv/models/run1/model.safetensors; then
			ok=0
			break
		fi
		kill -0 $pub 2>/dev/null && kill -0 $sub 2>/dev/null || break
		sleep 0.1
	done
	tap_result $ok "$who: the subscriber's target_dir reaches the trainer's checkpoint"
	ok=0
	for f in model.safetensors config.json tokenizer.json generation_config.json; do
		cmp -s "$ckpt/$f" "/srv/models/run1/$f" || { echo "# $f differs"; ok=1; }
	done
	tap_result $ok "$who: ... byte-identical"
	if [ "$who" = root ]; then
		check "root: state under /var/lib/wsync" test -d /var/lib/wsync/publisher -a -d /var/lib/wsync/subscriber
		check "root: status under /run/wsync" test -f /run/wsync/subscriber/status.json
	else
		check "nobody: state under HOME" test -d "$TMP/home/.local/state/wsync/subscriber"
		check "nobody: the bucket is the user's" test "$(stat -c %U /srv/wsync/bucket)" = nobody
		check "nobody: wsync status finds both daemons" \
			run nobody "$WSYNC" status --config "$TMP/etc/subscriber.ini"
	fi
	kill -TERM $pub $sub 2>/dev/null
	wait $pub $sub 2>/dev/null
	check "$who: both daemons stopped on SIGTERM" bash -c "! kill -0 $pub 2>/dev/null && ! kill -0 $sub 2>/dev/null"
	if [ $ok -ne 0 ]; then
		sed 's/^/# pub: /' "$TMP/$who-pub.log" | tail -20
		sed 's/^/# sub: /' "$TMP/$who-sub.log" | tail -20
	fi
}
one root
one nobody

# nobody without a usable HOME: the default state_dir is named with the fix
printf '[daemon]\nrole = subscriber\n[store]\nurl = file:///srv/wsync/bucket\n[subscriber]\ntarget_dir = /srv/models/run1\n' \
	>"$TMP/etc/nohome.ini"
chmod 644 "$TMP/etc/nohome.ini"
expect_exit 78 "nobody, HOME=/nonexistent: --check-config exits 78" \
	env -i PATH="$PATH" HOME=/nonexistent setpriv --reuid=nobody --regid=nogroup --clear-groups \
	"$WSYNCD" --check-config "$TMP/etc/nohome.ini"
contains "... naming state_dir and how to set it" "$OUT" \
	"[daemon] state_dir: /nonexistent/.local/state/wsync: cannot create it: user nobody may not write in /; this is the default for this user: set [daemon] state_dir"
tap_done
