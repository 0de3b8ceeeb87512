#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test-s3-servers: the local S3 servers of s3-servers.sh start, serve a
# real client (awscli: mb, cp up and down, ls, rm, a 20 MiB multipart
# upload) on both s3rver and single-node Swift+s3api, Swift refuses a wrong
# secret with 403, and both stop cleanly (no process left behind).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/s3-servers.sh"
s3servers_trap_exit

for need in have_s3rver have_swift have_awscli; do
	if ! $need; then
		tap_result 1 "requirements: $S3S_WHY"
		tap_done
		exit 1
	fi
done

ms() { echo $(($(date +%s%N) / 1000000)); }
mkdir -p "$TMP/up/dir"
head -c 1000 /dev/urandom >"$TMP/up/dir/small"
head -c $((20 * 1024 * 1024)) /dev/urandom >"$TMP/up/big"

# exercise NAME AWSFUNC ENDPOINT ACCESS SECRET BUCKET: the awscli round
# trip against one server.  An aws call costs ~2.5 s here, so one
# recursive cp puts both objects (the 20 MiB one in 3 parts: threshold
# 5MB, chunks of 8 MiB) and follow-up checks use signed python requests.
exercise() {
	local name=$1 aws=$2 ep=$3 ak=$4 sk=$5 b=$6 out
	check "$name: aws s3 cp --recursive up (1000 B + 20 MiB multipart)" \
		"$aws" s3 cp --only-show-errors --recursive "$TMP/up" "s3://$b/"
	out=$("$aws" s3 ls --recursive "s3://$b/" 2>&1)
	contains "$name: aws s3 ls lists the small object with its size" "$out" "1000 dir/small"
	contains "$name: aws s3 ls lists the big object with its size" "$out" "20971520 big"
	check "$name: aws s3 cp --recursive down" \
		"$aws" s3 cp --only-show-errors --recursive "s3://$b/" "$TMP/down-$name"
	check "$name: round trip byte-identical" diff -r "$TMP/up" "$TMP/down-$name"
	s3_request -D "$TMP/$name.head" HEAD "$ep/$b/big" "$ak" "$sk" >/dev/null
	out=$(grep -i '^etag:' "$TMP/$name.head")
	if [ "$name" = s3rver ]; then # s3rver gives multipart objects a plain MD5 ETag
		check "$name: the big object went up as a multipart upload" \
			grep -q 'big?uploadId=' "$TMP/s3rver/s3rver.log"
	else
		contains "$name: the big object has a 3-part multipart ETag" "$out" '-3"'
	fi
	check "$name: aws s3 rm" "$aws" s3 rm --only-show-errors "s3://$b/dir/small"
	contains "$name: the removed object is gone (404)" \
		"$(s3_request HEAD "$ep/$b/dir/small" "$ak" "$sk")" 404
}

# --- s3rver ----------------------------------------------------------------------
mapfile -t ports < <(free_ports 2)
# Swift boots (~5-10 s) while the s3rver half runs; swift_wait below.
t0=$(ms)
swift_spawn "$TMP/swift" "${ports[1]}"
spawned=$?
echo "# swift spawned in $(($(ms) - t0)) ms"
t0=$(ms)
# (not through `check`: it runs commands in a subshell, and a server
# started there dies with it)
s3rver_start "$TMP/s3rver" "${ports[0]}" wsync-test
tap_result $? "s3rver starts on port ${ports[0]}"
echo "# s3rver up in $(($(ms) - t0)) ms"
if [ -n "$S3RVER_PID" ]; then
	exercise s3rver aws_s3rver "$S3RVER_ENDPOINT" "$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY" wsync-test
	contains "s3rver: ListBuckets with the right key (200)" \
		"$(s3_request GET "$S3RVER_ENDPOINT/" "$S3RVER_ACCESS_KEY" "$S3RVER_SECRET_KEY")" 200
	pid=$S3RVER_PID
	s3rver_stop
	kill -0 "$pid" 2>/dev/null
	tap_result $((!$?)) "s3rver_stop leaves no process"
fi

# --- Swift -------------------------------------------------------------------------
t0=$(ms)
[ $spawned -eq 0 ] && swift_wait
tap_result $? "Swift starts (proxy on port ${ports[1]}; 200 for the right key, 403 for a wrong secret)"
echo "# then swift up after another $(($(ms) - t0)) ms"
if [ ${#SWIFT_PIDS[@]} -gt 0 ]; then
	check "swift: aws s3 mb s3://wsync-test" aws_swift s3 mb s3://wsync-test
	check "swift_make_bucket wsync-test-2" swift_make_bucket wsync-test-2
	exercise swift aws_swift "$SWIFT_ENDPOINT" "$SWIFT_ACCESS_KEY" "$SWIFT_SECRET_KEY" wsync-test
	contains "swift: a wrong secret gets 403 (signed request)" \
		"$(s3_request GET "$SWIFT_ENDPOINT/wsync-test/big" "$SWIFT_ACCESS_KEY" wrong-secret)" 403
	s3_request -o "$TMP/err.xml" GET "$SWIFT_ENDPOINT/wsync-test/big" "$SWIFT_ACCESS_KEY" wrong-secret >/dev/null
	check "swift: ... with SignatureDoesNotMatch" grep -q SignatureDoesNotMatch "$TMP/err.xml"
	contains "swift: an unknown access key gets 403" \
		"$(s3_request GET "$SWIFT_ENDPOINT/wsync-test/big" nobody:nobody "$SWIFT_SECRET_KEY")" 403
	pids=("${SWIFT_PIDS[@]}")
	swift_stop
	left=0
	for p in "${pids[@]}"; do
		kill -0 -- "-$p" 2>/dev/null && left=$((left + 1))
	done
	contains "swift_stop leaves no process of its 4 groups" "$left" 0
	# Swift hashes paths with swift.conf's prefix and suffix: the account
	# database lies where DIR's swift.conf (not /etc/swift's) puts it.
	check "Swift used DIR/etc/swift.conf (account DB placed by its hash prefix)" \
		"$PYTHON3" - "$TMP/swift" <<'PY'
import configparser, hashlib, os, struct, sys
root = sys.argv[1]
c = configparser.ConfigParser()
c.read(os.path.join(root, "etc/swift.conf"))
pre, suf = c["swift-hash"]["swift_hash_path_prefix"], c["swift-hash"]["swift_hash_path_suffix"]
h = hashlib.md5((pre + "/AUTH_test" + suf).encode()).hexdigest()
part = struct.unpack_from(">I", bytes.fromhex(h))[0] >> (32 - 10)
db = os.path.join(root, "srv/node/sdb1/accounts", str(part), h[-3:], h, h + ".db")
assert os.path.exists(db), "no account DB at " + db
PY
fi
tap_done
