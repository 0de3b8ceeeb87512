#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-check-config: `wsyncd --check-config` accepts the shipped examples,
# and refuses bad files with every error as FILE:LINE and exit 78
# (EX_CONFIG), like `nginx -t`; run without --config and no default
# file, it names the file it tried and suggests --config.
. "$(dirname "$0")/lib.sh"
cfg="$WSYNC_SOURCE_ROOT/config"

expect_exit 0 "example publisher.ini is valid" "$WSYNCD" --check-config "$cfg/publisher.ini"
contains "publisher role reported" "$OUT" "role publisher"
expect_exit 0 "example subscriber.ini is valid" "$WSYNCD" --check-config "$cfg/subscriber.ini"
expect_exit 0 "-c FILE --check-config form" "$WSYNCD" -c "$cfg/subscriber.ini" --check-config

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
