#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-check-config: `wsyncd --check-config` accepts the shipped examples
# (with their folders made where they point), and refuses bad files with
# every error as FILE:LINE and exit 78 (EX_CONFIG), like `nginx -t`: the
# file's own errors, and what it names on this machine that start-up
# would refuse -- a missing watch_dir, a missing key file, a private key
# as verify_key, an include that takes no weight file, all at once; run
# without --config and no default file, it names the file it tried and
# suggests --config.
. "$(dirname "$0")/lib.sh"
src_cfg="$WSYNC_SOURCE_ROOT/config"
cfg=$TMP/examples
mkdir -p "$cfg" "$TMP/ex/checkpoints"
# the examples' folders under /var/lib/wsync, here under $TMP/ex
for f in publisher subscriber; do
	sed "s|/var/lib/wsync|$TMP/ex|g" "$src_cfg/$f.ini" >"$cfg/$f.ini"
done

expect_exit 0 "example publisher.ini is valid" "$WSYNCD" --check-config "$cfg/publisher.ini"
contains "publisher role reported" "$OUT" "role publisher"
expect_exit 0 "example subscriber.ini is valid" "$WSYNCD" --check-config "$cfg/subscriber.ini"
expect_exit 0 "-c FILE --check-config form" "$WSYNCD" -c "$cfg/subscriber.ini" --check-config
case "$OUT" in *warning*) r=1 ;; *) r=0 ;; esac
tap_result $r "... without a warning (the other role's section holds only comments)"

# ---- what the file names on this machine ----
"$WSYNC" keygen "$TMP/k.pem" >/dev/null
printf '[daemon]\nrole = publisher\nstate_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\nsigning_key = %s\ninclude = config.json *.txt\n' \
	"$TMP/st" "$TMP/bucket" "$TMP/no-such-watch" "$TMP/no-such.pem" >"$TMP/pubfs.ini"
expect_exit 78 "publisher: missing watch_dir, key file and weights: exit 78" \
	"$WSYNCD" --check-config "$TMP/pubfs.ini"
contains "... watch_dir: key, path and fix on its line" "$OUT" \
	"pubfs.ini:7: [publisher] watch_dir: $TMP/no-such-watch: no such directory; wsyncd does not create the trainer's folder: create it (mkdir -p $TMP/no-such-watch)"
contains "... signing_key that does not exist" "$OUT" "pubfs.ini:8: [publisher] signing_key: $TMP/no-such.pem: No such file or directory"
contains "... include that takes no weight file" "$OUT" \
	"pubfs.ini:9: [publisher] include: \"config.json *.txt\" takes no weight file"
contains "... all three counted" "$OUT" "(3 errors)"
check "... and the bucket directory not made by the check" test ! -e "$TMP/bucket"
for one in watch_dir signing_key include; do
	mkdir -p "$TMP/w"
	case $one in
	watch_dir) args=("$TMP/no-such-watch" "$TMP/k.pem" '*.safetensors') ;;
	signing_key) args=("$TMP/w" "$TMP/no-such.pem" '*.safetensors') ;;
	include) args=("$TMP/w" "$TMP/k.pem" 'config.json') ;;
	esac
	printf '[daemon]\nrole = publisher\nstate_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\nsigning_key = %s\ninclude = %s\n' \
		"$TMP/st" "$TMP/bucket" "${args[@]}" >"$TMP/one.ini"
	expect_exit 78 "publisher: only $one wrong: --check-config exits 78" "$WSYNCD" --check-config "$TMP/one.ini"
	contains "... naming it" "$OUT" "[publisher] $one:"
done
# a systemd credential (README's two-machine publisher): there only while
# its unit runs, so a shell's check leaves it to the start; the unit's own
# start ($CREDENTIALS_DIRECTORY its folder) checks it
cred=/run/credentials/wsyncd@publisher.service/signing-key
mkdir -p "$TMP/w"
printf '[daemon]\nrole = publisher\nstate_dir = %s\n[store]\nurl = file://%s\n[publisher]\nwatch_dir = %s\nsigning_key = %s\n' \
	"$TMP/st" "$TMP/bucket" "$TMP/w" "$cred" >"$TMP/cred.ini"
if [ ! -e "$cred" ]; then
	expect_exit 0 "signing_key a systemd credential: a shell's check passes" "$WSYNCD" --check-config "$TMP/cred.ini"
	expect_exit 78 "... the unit's start checks it" env CREDENTIALS_DIRECTORY="${cred%/*}" \
		"$WSYNCD" --check-config "$TMP/cred.ini"
	contains "... and says it is missing" "$OUT" "[publisher] signing_key: $cred: No such file or directory"
fi
printf '[daemon]\nrole = subscriber\nstate_dir = %s\n[store]\nurl = file://%s\n[subscriber]\ntarget_dir = %s\nverify_key = %s\n' \
	"$TMP/st" "$TMP/bucket" "$TMP/target" "$TMP/k.pem" >"$TMP/subpriv.ini"
expect_exit 78 "subscriber: a private key as verify_key: exit 78" "$WSYNCD" --check-config "$TMP/subpriv.ini"
contains "... saying to give its public half" "$OUT" "subpriv.ini:8: [subscriber] verify_key: $TMP/k.pem: holds a private key"
expect_exit 78 "... and wsyncd refuses it the same way at start" timeout 20 "$WSYNCD" -c "$TMP/subpriv.ini" --log-target stderr
contains "... in the same words" "$OUT" "subpriv.ini:8: [subscriber] verify_key: $TMP/k.pem: holds a private key"
check "... before it made anything" test ! -e "$TMP/target"
sed -i "s|$TMP/k.pem|$TMP/k.pem.pub|" "$TMP/subpriv.ini"
expect_exit 0 "subscriber: its public half passes" "$WSYNCD" --check-config "$TMP/subpriv.ini"
for inc in 'config.json' '*.json *.txt' '*|*.safetensors *.bin *.pt *.pth *.gguf'; do
	printf '[daemon]\nrole = subscriber\nstate_dir = %s\n[store]\nurl = file://%s\n[subscriber]\ntarget_dir = %s\ninclude = %s\nexclude = %s\n' \
		"$TMP/st" "$TMP/bucket" "$TMP/target" "${inc%%|*}" "$(case $inc in *'|'*) echo "${inc#*|}" ;; esac)" >"$TMP/subinc.ini"
	expect_exit 78 "subscriber: include = ${inc%%|*} (exclude ${inc#*|}) takes no weight file: exit 78" \
		"$WSYNCD" --check-config "$TMP/subinc.ini"
	contains "... said so" "$OUT" "[subscriber] include:"
done
for inc in '*' 'model-0000[1-2]-of-00002.safetensors' 'layers/*/w*' 'model*' '?odel.bin'; do
	printf '[daemon]\nrole = subscriber\nstate_dir = %s\n[store]\nurl = file://%s\n[subscriber]\ntarget_dir = %s\ninclude = %s\n' \
		"$TMP/st" "$TMP/bucket" "$TMP/target" "$inc" >"$TMP/subinc.ini"
	expect_exit 0 "subscriber: include = $inc can take a weight file" "$WSYNCD" --check-config "$TMP/subinc.ini"
done
printf '[daemon]\nrole = subscriber\nstate_dir = %s\n[store]\nurl = file://%s\n[subscriber]\ntarget_dir = %s\n[publisher]\nwatch_dir = /x\n' \
	"$TMP/st" "$TMP/bucket" "$TMP/target" >"$TMP/both.ini"
expect_exit 0 "a [publisher] key in a subscriber's file is accepted" "$WSYNCD" --check-config "$TMP/both.ini"
contains "... with a warning that it does nothing" "$OUT" "both.ini:9: [publisher]: this file's role is subscriber: the publisher settings do nothing here"
expect_exit 0 "a subscriber's --dump-config" "$WSYNCD" --check-config --dump-config "$cfg/subscriber.ini"
OUT=$("$WSYNCD" --check-config --dump-config "$cfg/subscriber.ini" 2>/dev/null)
case "$OUT" in *"[publisher]"*) r=1 ;; *) r=0 ;; esac
tap_result $r "... has no [publisher] section"
contains "... but its own" "$OUT" "[subscriber]"

cat >"$TMP/bad.ini" <<'INI'
[daemon]
role = publisher
threads = lots

[store]
url = ftp://example.com/x

[publisher]
watch_dir = /srv/ckpt
anchor_every = 0
colour = blue
INI
expect_exit 78 "bad file exits 78" "$WSYNCD" --check-config "$TMP/bad.ini"
contains "threads error has file:line and key" "$OUT" "bad.ini:3: [daemon] threads"
contains "url error has file:line and key" "$OUT" "bad.ini:6: [store] url"
contains "anchor_every error has file:line" "$OUT" "bad.ini:10: [publisher] anchor_every"
contains "unknown key named" "$OUT" "bad.ini:11: [publisher] colour"

printf '[daemon]\nrole = subscriber\n[mystery]\nx = 1\n' >"$TMP/section.ini"
expect_exit 78 "unknown section exits 78" "$WSYNCD" --check-config "$TMP/section.ini"
contains "unknown section named" "$OUT" "mystery"

printf '[daemon]\nrole = subscriber\n' >"$TMP/missing.ini"
expect_exit 78 "missing url and target_dir exits 78" "$WSYNCD" --check-config "$TMP/missing.ini"
contains "missing url reported" "$OUT" "url"
contains "missing target_dir reported" "$OUT" "target_dir"

expect_exit 78 "nonexistent file exits 78" "$WSYNCD" --check-config "$TMP/nope.ini"
contains "nonexistent file named" "$OUT" "nope.ini"

long_prefix=$(printf 'p%.0s' $(seq 1 700))
printf '[daemon]\nrole = subscriber\n[store]\nurl = s3://my-bucket/%s\nendpoint = http://127.0.0.1:9000\n[subscriber]\ntarget_dir = /srv/model\n' \
	"$long_prefix" >"$TMP/long.ini"
expect_exit 0 "a 700-character URL line parses" "$WSYNCD" --check-config "$TMP/long.ini"
sed -i "s|/$long_prefix|/$long_prefix$long_prefix|" "$TMP/long.ini"
expect_exit 78 "a prefix over 768 bytes is refused" "$WSYNCD" --check-config "$TMP/long.ini"
contains "over-long prefix: says why" "$OUT" "more than 768"

expect_exit 0 "--dump-config prints the effective settings" \
	"$WSYNCD" --check-config --dump-config "$cfg/subscriber.ini"
printf '%s\n' "$OUT" >"$TMP/dumped.ini"
contains "dump has poll_interval" "$OUT" "poll_interval"
expect_exit 0 "the dump is itself a valid config" "$WSYNCD" --check-config "$TMP/dumped.ini"

# Without --config, the default file: when it does not exist, wsyncd names
# it and suggests --config.
default=$("$WSYNCD" --help | sed -n 's/.*configuration (default \(.*\))$/\1/p')
if [ -n "$default" ] && [ ! -e "$default" ]; then
	expect_exit 78 "no --config and no default file exits 78" "$WSYNCD" --log-target stderr
	contains "no default file: it is named" "$OUT" "$default, the default configuration file, does not exist"
	contains "no default file: --config FILE is suggested" "$OUT" "name yours with --config FILE"
	ex=$(printf '%s\n' "$OUT" | sed -n 's/.*commented examples: \([^ ]*\) and subscriber.ini.*/\1/p')
	check "... with examples that exist here (${ex:-none named})" test -n "$ex" -a -f "$ex" -a \
		-f "$(dirname "${ex:-/}")/subscriber.ini"
	expect_exit 78 "--check-config without a file, no default file: 78" "$WSYNCD" --check-config
	contains "... with the same suggestion" "$OUT" "with --config FILE"
	expect_exit 78 "--config of a missing file exits 78" "$WSYNCD" --config "$TMP/nope.ini"
	case "$OUT" in *"the default configuration file"*) r=1 ;; *) r=0 ;; esac
	tap_result $r "... without calling it the default"
else
	echo "# skipped: the default configuration ${default:-?} exists here"
fi

expect_exit 0 "wsyncd --version" "$WSYNCD" --version
expect_exit 2 "unknown option is a usage error" "$WSYNCD" --frobnicate
tap_done
