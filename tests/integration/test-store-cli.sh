#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-store-cli: `wsync store put/get/ls/rm/head` on a file:// bucket:
# round trips (files, stdin, stdout, into a directory), listings in text and
# JSON, how an object URL is split into bucket and key (with and without
# --config), verification failures (exit 65), missing objects and buckets,
# planted symlinks, usage errors (exit 2) and a bad --config (exit 78).
. "$(dirname "$0")/lib.sh"

B="$TMP/bucket"
U="file://$B"
mkdir -p "$B/v"
head -c 300000 /dev/urandom >"$TMP/big.bin"
printf 'hello\n' >"$TMP/hello.txt"

cat >"$TMP/store.ini" <<EOF
[daemon]
role = subscriber
[store]
url = $U
max_concurrency = 4
[subscriber]
target_dir = $TMP/model
EOF

# Without --config the last component is the key, its directory the bucket.
expect_exit 0 "put a file" "$WSYNC" store put "$TMP/big.bin" "$U/v/000001.delta"
check "the object is a plain file where the key says" cmp "$TMP/big.bin" "$B/v/000001.delta"
expect_exit 0 "get it back" "$WSYNC" store get "$U/v/000001.delta" "$TMP/back.bin"
check "got the same bytes" cmp "$TMP/big.bin" "$TMP/back.bin"
expect_exit 0 "get replaces an existing file" "$WSYNC" store get "$U/v/000001.delta" "$TMP/back.bin"
check "still the same bytes" cmp "$TMP/big.bin" "$TMP/back.bin"

# With --config the [store] url is the bucket: keys with directories.
expect_exit 0 "put with --config makes directories" \
	"$WSYNC" store --config "$TMP/store.ini" put "$TMP/hello.txt" "$U/anchors/7/model.bin"
check "nested object written" cmp "$TMP/hello.txt" "$B/anchors/7/model.bin"
expect_exit 0 "put from stdin" \
	sh -c "printf 'from stdin' | '$WSYNC' store put --config '$TMP/store.ini' - '$U/v/stdin.txt'"
expect_exit 0 "get to stdout" "$WSYNC" store get "$U/v/stdin.txt" -
contains "stdout has the object" "$OUT" "from stdin"
mkdir "$TMP/into"
expect_exit 0 "get into a directory" "$WSYNC" store get --config "$TMP/store.ini" \
	"$U/anchors/7/model.bin" "$TMP/into"
check "the key's last component in the directory" cmp "$TMP/hello.txt" "$TMP/into/model.bin"

# Listings: the whole bucket, a prefix, JSON.
expect_exit 0 "ls the bucket" "$WSYNC" store ls "$U"
contains "ls shows size and key" "$OUT" "300000 v/000001.delta"
contains "ls shows nested keys" "$OUT" "anchors/7/model.bin"
first=$(printf '%s\n' "$OUT" | head -1 | awk '{print $2}')
check "ls is sorted" test "$first" = "anchors/7/model.bin"
expect_exit 0 "ls a prefix with --config" "$WSYNC" store ls --config "$TMP/store.ini" "$U/v/"
check "the prefix lists two objects" test "$(printf '%s\n' "$OUT" | wc -l)" -eq 2
expect_exit 0 "ls a partial name with --config" "$WSYNC" store ls --config "$TMP/store.ini" "$U/v/0000"
check "a partial name lists one" test "$(printf '%s\n' "$OUT" | wc -l)" -eq 1
expect_exit 0 "ls --json" "$WSYNC" store ls --json "$U"
printf '%s' "$OUT" >"$TMP/ls.json"
check "ls --json has every object with its size" "$PYTHON3" - "$TMP/ls.json" <<'PY'
import json, sys
entries = json.load(open(sys.argv[1]))
keys = [e["key"] for e in entries]
assert keys == sorted(keys), keys
sizes = {e["key"]: e["size"] for e in entries}
assert sizes == {"anchors/7/model.bin": 6, "v/000001.delta": 300000, "v/stdin.txt": 10}, sizes
assert all(e["etag"].startswith('"') and e["mtime"] > 0 for e in entries)
PY

expect_exit 0 "head" "$WSYNC" store head "$U/v/000001.delta"
contains "head prints the size" "$OUT" "size: 300000"
contains "head prints an etag" "$OUT" 'etag: "'
expect_exit 0 "head --json" "$WSYNC" store head --json "$U/v/000001.delta"
contains "head --json has the size" "$OUT" '"size":300000'

# Verification: exit 65, and the destination is left alone.
printf 'keep' >"$TMP/keep"
expect_exit 65 "a wrong --expect-size is exit 65" \
	"$WSYNC" store get --expect-size 299999 "$U/v/000001.delta" "$TMP/keep"
contains "the size mismatch is explained" "$OUT" "300000 bytes, expected 299999"
check "the destination was not touched" test "$(cat "$TMP/keep")" = keep
expect_exit 65 "a wrong --expect-xxh3 is exit 65" \
	"$WSYNC" store get --expect-xxh3 00112233445566778899aabbccddeeff "$U/v/000001.delta" "$TMP/keep"
contains "the hash mismatch is explained" "$OUT" "content hash"
check "the destination was still not touched" test "$(cat "$TMP/keep")" = keep
expect_exit 0 "the right --expect-size passes" \
	"$WSYNC" store get --expect-size 300000 "$U/v/000001.delta" "$TMP/keep"
check "and writes the object" cmp "$TMP/big.bin" "$TMP/keep"

# rm, missing objects, missing buckets.
expect_exit 0 "rm" "$WSYNC" store rm "$U/v/stdin.txt"
check "the object is gone" test ! -e "$B/v/stdin.txt"
expect_exit 0 "rm of a missing object succeeds (as S3)" "$WSYNC" store rm "$U/v/stdin.txt"
expect_exit 1 "head of a missing object is exit 1" "$WSYNC" store head "$U/v/stdin.txt"
contains "and says so" "$OUT" "no such object: stdin.txt"
expect_exit 1 "get of a missing object is exit 1" "$WSYNC" store get "$U/v/nope" "$TMP/nope"
contains "get names the key" "$OUT" "no such object: nope"
check "no file appears for a missing object" test ! -e "$TMP/nope"
expect_exit 1 "put into a missing bucket directory is exit 1" \
	"$WSYNC" store put "$TMP/hello.txt" "file://$TMP/no-such-dir/x"
contains "the bucket directory is named" "$OUT" "$TMP/no-such-dir does not exist"
expect_exit 1 "put of a missing local file is exit 1" \
	"$WSYNC" store put "$TMP/no-such-file" "$U/v/x"
contains "the local file is named" "$OUT" "no-such-file"

# A symlink planted in the bucket is not followed.
mkdir "$TMP/outside"
printf 'secret' >"$TMP/outside/secret"
ln -s "$TMP/outside" "$B/evil"
expect_exit 1 "get through a planted directory symlink fails" \
	"$WSYNC" store get --config "$TMP/store.ini" "$U/evil/secret" "$TMP/stolen"
contains "and says why" "$OUT" "symbolic link"
expect_exit 1 "put through a planted directory symlink fails" \
	"$WSYNC" store put --config "$TMP/store.ini" "$TMP/hello.txt" "$U/evil/planted"
check "nothing was written outside the bucket" test ! -e "$TMP/outside/planted"
expect_exit 0 "ls skips the symlink" "$WSYNC" store ls "$U"
case "$OUT" in *evil*) tap_result 1 "ls does not show the symlink's target" ;;
*) tap_result 0 "ls does not show the symlink's target" ;; esac

check "no temp file stays anywhere" test -z "$(find "$TMP" -name '.wsync-tmp.*')"

# Usage errors: exit 2.
expect_exit 2 "no verb" "$WSYNC" store
expect_exit 2 "unknown verb" "$WSYNC" store copy a b
contains "unknown verb is named" "$OUT" 'unknown command "copy"'
expect_exit 2 "too few arguments" "$WSYNC" store put "$TMP/hello.txt"
expect_exit 2 "a bucket is no object" "$WSYNC" store get s3://my-bucket "$TMP/x"
contains "bucket-only URL is explained" "$OUT" "names a bucket, not an object"
expect_exit 2 "a directory URL is no object" "$WSYNC" store head "$U/v/"
expect_exit 2 "a key with // is refused" "$WSYNC" store head "s3://my-bucket/a//b"
expect_exit 2 "a bad URL is refused" "$WSYNC" store head "ftp://host/x"
contains "the scheme is named" "$OUT" 'unknown scheme "ftp"'
expect_exit 2 "--json with put" "$WSYNC" store put --json "$TMP/hello.txt" "$U/v/x"
expect_exit 2 "--expect-xxh3 needs 32 hex digits" \
	"$WSYNC" store get --expect-xxh3 abc "$U/v/000001.delta" "$TMP/x"
expect_exit 0 "--help" "$WSYNC" store --help
contains "--help shows the verbs" "$OUT" "wsync store put FILE URL"

# A bad --config: every problem listed, exit 78.
printf '[store]\nurl = file:///x\nmax_concurrency = 0\n' >"$TMP/bad.ini"
expect_exit 78 "a bad --config is exit 78" "$WSYNC" store --config "$TMP/bad.ini" ls "$U"
contains "the bad key is named with its line" "$OUT" "bad.ini:3: [store] max_concurrency"

# libcurl is loaded only for s3:// and hf:// buckets (common/store/curl_lazy.c):
# with a libcurl.so.4 that lacks its functions first on the library path,
# those say so clearly, and file:// buckets and the codec need none.
if [ -n "${WSYNC_FAKECURL_DIR:-}" ] && [ -e "$WSYNC_FAKECURL_DIR/libcurl.so.4" ]; then
	fake() { LD_LIBRARY_PATH="$WSYNC_FAKECURL_DIR" "$@"; }
	expect_exit 1 "an s3:// bucket with a broken libcurl fails" \
		fake "$WSYNC" store ls s3://my-bucket/v/ --endpoint http://127.0.0.1:9
	contains "the reason names libcurl and the missing function" "$OUT" \
		"libcurl has no curl_global_init (wsync needs libcurl 7.88 or later)"
	expect_exit 0 "a file:// bucket needs no libcurl" fake "$WSYNC" store ls "$U/v/"
	contains "and lists as before" "$OUT" "000001.delta"
	printf 'one' >"$TMP/d1"
	printf 'two' >"$TMP/d2"
	expect_exit 0 "wsync diff needs no libcurl" fake "$WSYNC" diff "$TMP/d1" "$TMP/d2" -o "$TMP/d.wsd"
	expect_exit 0 "wsync apply needs no libcurl" fake "$WSYNC" apply "$TMP/d1" "$TMP/d.wsd" -o "$TMP/dout"
	check "and the result is right" cmp "$TMP/d2" "$TMP/dout"
else
	tap_result 1 "the fake libcurl is built (WSYNC_FAKECURL_DIR: ${WSYNC_FAKECURL_DIR:-unset})"
fi

tap_done
