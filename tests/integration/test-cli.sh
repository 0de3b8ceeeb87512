#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-cli: what a new user meets on the command line.  Every message of a
# subcommand starts with its full name ("wsync diff: ..."), getopt's own
# (unknown option, missing argument) and a configuration's errors
# included; a usage error says what is wrong before the usage; a
# directory given where a delta file belongs is a usage error (exit 2);
# `wsync pull` with a publisher's configuration, and `wsync publish` with
# a subscriber's, say whose file it is (exit 78); each --help lists its
# exit codes.
. "$(dirname "$0")/lib.sh"

first() { printf '%s\n' "$1" | head -1; }

# ---- unknown options and missing arguments, in every subcommand ----
for cmd in inspect diff apply store keygen status publish pull; do
	expect_exit 2 "$cmd: an unknown option is a usage error" "$WSYNC" "$cmd" --bogus-option
	contains "$cmd: the unknown option is named after \"wsync $cmd:\"" \
		"$(first "$OUT")" "wsync $cmd: unknown option --bogus-option"
	contains "$cmd: the usage follows the reason" "$OUT" "Usage: wsync $cmd"
done
expect_exit 2 "a short unknown option" "$WSYNC" apply -x a b
contains "... named with the prefix" "$(first "$OUT")" "wsync apply: unknown option -x"
expect_exit 2 "-o without its argument" "$WSYNC" diff a b -o
contains "... says -o needs one" "$(first "$OUT")" "wsync diff: option -o needs an argument"
expect_exit 2 "--runtime-dir without its argument" "$WSYNC" status --runtime-dir
contains "... says --runtime-dir needs one" "$(first "$OUT")" \
	"wsync status: option --runtime-dir needs an argument"
expect_exit 2 "--json=1: an argument to a flag" "$WSYNC" inspect --json=1 x
contains "... says --json takes none" "$(first "$OUT")" "wsync inspect: option --json takes no argument"
expect_exit 2 "an ambiguous abbreviation" "$WSYNC" store --e x ls file:///tmp
contains "... says it is ambiguous" "$(first "$OUT")" "wsync store: ambiguous option --e"

# ---- what is missing, said before the usage ----
mkdir -p "$TMP/old" "$TMP/new"
printf 'one\n' >"$TMP/old/a.txt"
printf 'two\n' >"$TMP/new/a.txt"
expect_exit 2 "diff OLD NEW without -o is a usage error" "$WSYNC" diff "$TMP/old" "$TMP/new"
contains "... that says \"missing -o DELTA\"" "$(first "$OUT")" "wsync diff: missing -o DELTA"
contains "... then the usage" "$OUT" "Usage: wsync diff OLD NEW -o DELTA"
expect_exit 2 "diff with one path" "$WSYNC" diff "$TMP/old" -o "$TMP/d.wsd"
contains "... says NEW is missing" "$(first "$OUT")" "wsync diff: missing NEW"
expect_exit 2 "apply with one path" "$WSYNC" apply "$TMP/old"
contains "... says DELTA is missing" "$(first "$OUT")" "wsync apply: missing DELTA"
expect_exit 2 "inspect with two paths" "$WSYNC" inspect "$TMP/old" "$TMP/new"
contains "... names the extra one" "$(first "$OUT")" "wsync inspect: unexpected argument \"$TMP/new\""
expect_exit 2 "publish without --config" "$WSYNC" publish "$TMP/new"
contains "... says --config is missing" "$(first "$OUT")" "wsync publish: missing --config FILE"
expect_exit 2 "pull without --config" "$WSYNC" pull
contains "... says --config is missing" "$(first "$OUT")" "wsync pull: missing --config FILE"
expect_exit 2 "store without a command" "$WSYNC" store
contains "... says the command is missing" "$(first "$OUT")" "wsync store: missing a command"

# ---- a directory where a delta file belongs ----
expect_exit 0 "diff of two directories" "$WSYNC" diff "$TMP/old" "$TMP/new" -o "$TMP/d.wsd"
mkdir "$TMP/deltadir"
expect_exit 2 "apply with a directory as DELTA is a usage error" "$WSYNC" apply "$TMP/old" "$TMP/deltadir"
contains "... that names the directory" "$(first "$OUT")" "wsync apply: $TMP/deltadir is a directory"
expect_exit 2 "apply DELTA TARGET, swapped, is a usage error" "$WSYNC" apply "$TMP/d.wsd" "$TMP/old"
contains "... that says TARGET comes first" "$OUT" "TARGET comes first"
expect_exit 2 "diff -o DIR is a usage error" "$WSYNC" diff "$TMP/old" "$TMP/new" -o "$TMP/deltadir"
contains "... that names the directory" "$(first "$OUT")" "wsync diff: $TMP/deltadir is a directory"
check "... and leaves no temp file in it or beside it" \
	test -z "$(ls -A "$TMP/deltadir")" -a -z "$(ls -A "$TMP" | grep wsync-)"

# ---- --page-cache: around (O_DIRECT where it can) and through build the same ----
mkdir -p "$TMP/big/old"
head -c 5000000 /dev/urandom >"$TMP/big/old/w.bin"
cp -r "$TMP/big/old" "$TMP/big/new"
for at in 4095 1000000 4999990; do
	printf 'changed' | dd of="$TMP/big/new/w.bin" bs=1 seek=$at conv=notrunc 2>/dev/null
done
expect_exit 0 "diff of a 5 MB file" "$WSYNC" diff "$TMP/big/old" "$TMP/big/new" -o "$TMP/big.wsd"
for how in around through; do
	expect_exit 0 "apply --page-cache $how" "$WSYNC" apply --page-cache $how "$TMP/big/old" \
		"$TMP/big.wsd" -o "$TMP/big/out-$how"
	check "... builds the new file" cmp "$TMP/big/new/w.bin" "$TMP/big/out-$how/w.bin"
done
expect_exit 2 "apply --page-cache of another word" "$WSYNC" apply --page-cache off \
	"$TMP/big/old" "$TMP/big.wsd"
contains "... names both words" "$(first "$OUT")" "--page-cache takes around or through"

# ---- each --help lists its exit codes ----
for cmd in diff apply inspect keygen; do
	expect_exit 0 "$cmd --help" "$WSYNC" "$cmd" --help
	contains "$cmd --help lists its exit codes" "$OUT" "Exit codes: 0 ok, 1 failure, 2 usage"
done
expect_exit 0 "diff --help" "$WSYNC" diff --help
contains "diff --help says what 65 means" "$OUT" "65 bad input"

# ---- one role's configuration given to the other's command ----
cat >"$TMP/publisher.ini" <<INI
[daemon]
role = publisher
state_dir = $TMP/pstate
runtime_dir = $TMP/prun
[store]
url = file://$TMP/bucket
[publisher]
watch_dir = $TMP/train
INI
cat >"$TMP/subscriber.ini" <<INI
[daemon]
role = subscriber
state_dir = $TMP/sstate
runtime_dir = $TMP/srun
[store]
url = file://$TMP/bucket
[subscriber]
target_dir = $TMP/model
INI
mkdir -p "$TMP/bucket" "$TMP/train/checkpoint-1"
expect_exit 78 "pull --config publisher.ini exits 78" "$WSYNC" pull --config "$TMP/publisher.ini"
contains "... and says the file is a publisher's" "$(first "$OUT")" \
	"wsync pull: $TMP/publisher.ini is a publisher's configuration"
check "... having made no target" test ! -e "$TMP/model"
expect_exit 78 "publish --config subscriber.ini exits 78" \
	"$WSYNC" publish --config "$TMP/subscriber.ini" "$TMP/train/checkpoint-1"
contains "... and says the file is a subscriber's" "$(first "$OUT")" \
	"wsync publish: $TMP/subscriber.ini is a subscriber's configuration"
check "... having published nothing" test -z "$(ls -A "$TMP/bucket")"

# ---- a configuration's errors carry the prefix too ----
printf '[daemon]\nrole = subscriber\nthreads = lots\n[store]\nurl = file://%s/bucket\n[subscriber]\ntarget_dir = %s/model\n' \
	"$TMP" "$TMP" >"$TMP/bad.ini"
for cmd in pull status; do
	expect_exit 78 "$cmd --config bad.ini exits 78" "$WSYNC" "$cmd" --config "$TMP/bad.ini"
	contains "$cmd: the configuration error has the prefix, file and line" "$(first "$OUT")" \
		"wsync $cmd: $TMP/bad.ini:3: [daemon] threads"
done
expect_exit 78 "store --config bad.ini exits 78" "$WSYNC" store ls "file://$TMP/bucket" --config "$TMP/bad.ini"
contains "store: the configuration error has the prefix" "$(first "$OUT")" \
	"wsync store: $TMP/bad.ini:3: [daemon] threads"

# ---- store's "not modified" is a wsync store message too ----
printf 'x\n' >"$TMP/obj"
expect_exit 0 "store put" "$WSYNC" store put "$TMP/obj" "file://$TMP/bucket/obj"
etag=$("$WSYNC" store head "file://$TMP/bucket/obj" --json | "$PYTHON3" -c 'import json, sys; print(json.load(sys.stdin)["etag"])')
expect_exit 0 "store get --if-none-match the same ETag" \
	"$WSYNC" store get "file://$TMP/bucket/obj" "$TMP/got" --if-none-match "$etag"
contains "... says \"wsync store: not modified\"" "$(first "$OUT")" "wsync store: not modified: obj"
tap_done
