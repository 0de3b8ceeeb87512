#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-subscriber.sh -- the real wsyncd, role subscriber, against a file://
# bucket laid out by hand as common/format/BUCKET.md says (wsync diff for deltas
# and anchors, manifests and HEAD written and Ed25519-signed by a small
# Python writer, tests/integration/bucket-writer.py;
# helpers in lib.sh): a fresh node catches up from an anchor; the next
# version comes as a delta; a flipped byte in a delta is refused (target
# unchanged) and the version is applied once the object is good; a
# locally modified target file is repaired from the anchor; a node lagging
# beyond the retained chain catches up from the newest anchor; a rollback
# HEAD, an unsigned HEAD (with verify_key) and a manifest with a "../"
# path are refused with nothing written outside the target; SIGTERM stops
# it with exit 0; wsync status finds a wsyncd@NAME instance's status from
# NAME.ini; with layout = symlink, repairing the version the link names
# never leaves the link naming a missing or partial directory.  Every wait
# is bounded.
. "$(dirname "$0")/lib.sh"

gen_ckpts "$TMP/ck" --params 2M --steps 7 --shards 1 --no-trainer-files
mkdir -p "$TMP/empty"
openssl genpkey -algorithm ed25519 -out "$TMP/key.pem" 2>/dev/null
openssl pkey -in "$TMP/key.pem" -pubout -out "$TMP/key.pub" 2>/dev/null

export KEY="$TMP/key.pem" EMPTY="$TMP/empty" WSYNC

B="$TMP/bucket"
CK="$TMP/ck/checkpoint"
conf s1 "$B" verify
pub "$B" 1 "$CK-1" --anchor --sign
pub "$B" 2 "$CK-2" --prev "$CK-1" --sign
start s1
check "fresh node reaches version 2 from the anchor" wait_version s1 2
check "fresh node's target equals checkpoint 2" same_tree "$CK-2" "$TMP/s1/target"
contains "the fresh node went through the anchor" "$(cat "$TMP/s1/log")" "applied from anchor anchors/000000000001.wsa"

pub "$B" 3 "$CK-3" --prev "$CK-2" --sign
check "next version applied" wait_version s1 3
contains "it came as a delta" "$(cat "$TMP/s1/log")" "applied from delta deltas/000000000003.wsd"
check "target equals checkpoint 3" same_tree "$CK-3" "$TMP/s1/target"

# A flipped byte in the delta of version 4.
pub "$B" 4 "$CK-4" --prev "$CK-3" --sign --flip
check "a flipped byte in a delta is refused" wait_error s1 "refused"
check "target still equals checkpoint 3" same_tree "$CK-3" "$TMP/s1/target"
contains "status.json's last_error names version 4" "$(field s1 last_error)" "version 4"
mv "$B/deltas/000000000004.wsd.good" "$B/deltas/000000000004.wsd"
check "version 4 applied once the object is good" wait_version s1 4
check "target equals checkpoint 4" same_tree "$CK-4" "$TMP/s1/target"

# A file of the target modified by someone else.
f=$(cd "$TMP/s1/target" && ls ./*.safetensors | head -1)
printf 'XXXX' | dd of="$TMP/s1/target/$f" bs=1 seek=5000 conv=notrunc 2>/dev/null
check "the modification is noticed" wait_log s1 "repairing from the newest anchor"
# the status still says idle at version 4 until the repair's cycle starts:
# wait for the repair's own apply (the second one from the anchor)
wait_anchor_applies() {
	for _ in $(seq 200); do
		# (a repair through older versions builds them out of sight)
		[ "$(grep -cE "(applied|built) from anchor" "$TMP/$1/log")" -ge "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
check "the repair applies the anchor again" wait_anchor_applies s1 2
check "a locally modified file is repaired" wait_version s1 4
check "target equals checkpoint 4 again" same_tree "$CK-4" "$TMP/s1/target"

# Stop, fall behind the retained chain, restart.
stop s1
tap_result $? "SIGTERM stops the subscriber with exit 0"
contains "status.json says stopped" "$(field s1 stopped)" "true"
pub "$B" 5 "$CK-5" --prev "$CK-4" --sign
pub "$B" 6 "$CK-6" --prev "$CK-5" --anchor --sign
pub "$B" 7 "$CK-7" --prev "$CK-6" --sign
rm -f "$B/deltas/000000000005.wsd" "$B/manifests/000000000005.json"
start s1
check "lagging node beyond the chain reaches version 7" wait_version s1 7
check "target equals checkpoint 7" same_tree "$CK-7" "$TMP/s1/target"
contains "it went through the newest anchor" "$(cat "$TMP/s1/log")" "applied from anchor anchors/000000000006.wsa"

# Rollback: a validly signed HEAD naming version 2.
pub "$B" 0 x --head-only 2 --sign
check "a rollback HEAD is refused" wait_error s1 "rollback"
check "target still equals checkpoint 7" same_tree "$CK-7" "$TMP/s1/target"
# Unsigned HEAD while verify_key is set.
pub "$B" 0 x --head-only 7
check "an unsigned HEAD is refused" wait_error s1 "not signed"
pub "$B" 0 x --head-only 7 --sign
check "a good HEAD again: healthy" wait_version s1 7
if "$WSYNC" status --help >/dev/null 2>&1; then
	expect_exit 0 "wsync status: healthy exits 0" "$WSYNC" status --config "$TMP/s1.ini"
	contains "wsync status shows the version" "$OUT" "version:        7"
	expect_exit 0 "wsync status --json" "$WSYNC" status --runtime-dir "$TMP/s1/run" --json
	contains "the JSON has the role" "$OUT" '"role": "subscriber"'
	# As wsyncd@subscriber.service lays it out: --config .../subscriber.ini,
	# the status in RUNTIME_DIR/subscriber/ (RuntimeDirectory=wsync/%i).
	mkdir -p "$TMP/inst/run/subscriber"
	cp "$TMP/s1/run/status.json" "$TMP/inst/run/subscriber/"
	sed "s|^runtime_dir = .*|runtime_dir = $TMP/inst/run|" "$TMP/s1.ini" >"$TMP/inst/subscriber.ini"
	expect_exit 0 "wsync status --config NAME.ini finds the wsyncd@NAME instance's status" \
		"$WSYNC" status --config "$TMP/inst/subscriber.ini"
	contains "... and shows its version" "$OUT" "version:        7"
	sed "s|^runtime_dir = .*|runtime_dir = $TMP/inst/run|" "$TMP/s1.ini" >"$TMP/inst/other.ini"
	expect_exit 3 "wsync status --config for another instance: not running" \
		"$WSYNC" status --config "$TMP/inst/other.ini"
fi
stop s1 >/dev/null
if "$WSYNC" status --help >/dev/null 2>&1; then
	expect_exit 3 "wsync status: stopped exits 3" "$WSYNC" status --runtime-dir "$TMP/s1/run"
	expect_exit 3 "wsync status: no status file exits 3" "$WSYNC" status --runtime-dir "$TMP/nothing"
fi

# A manifest with a "../" path (unsigned bucket, no verify key).
B2="$TMP/b2"
conf s2 "$B2"
mkdir -p "$TMP/s2/outside"
pub "$B2" 1 "$CK-1" --anchor --bad-path ../evil.safetensors
start s2
check "a manifest with a ../ path is refused" wait_error s2 "refused"
contains "the refusal names the path" "$(field s2 last_error)" ".."
check "nothing written beside the target" test ! -e "$TMP/s2/evil.safetensors"
check "nothing written in the target" test -z "$(ls -A "$TMP/s2/target" | grep -vx .wsync)"
stop s2
tap_result $? "the refusing subscriber stops with exit 0"

# ---- wsync pull: once to HEAD, exit codes 0 / 1 / 65 ----
B3="$TMP/b3"
conf p1 "$B3" verify
mkdir -p "$B3"
PULL=("$WSYNC" pull --config "$TMP/p1.ini")
expect_exit 1 "wsync pull with no HEAD yet exits 1" timeout 60 "${PULL[@]}"
contains "it says there is no HEAD" "$OUT" "no HEAD"
pub "$B3" 1 "$CK-1" --anchor --sign
pub "$B3" 2 "$CK-2" --prev "$CK-1" --sign
expect_exit 0 "wsync pull brings a fresh target to HEAD" timeout 60 "${PULL[@]}"
contains "it prints the version" "$OUT" "version 2 $TMP/p1/target"
check "the pulled target equals checkpoint 2" same_tree "$CK-2" "$TMP/p1/target"
check "the marker is target_dir/.wsync/state.json" test -f "$TMP/p1/target/.wsync/state.json"
check "no state.json left in state_dir" test ! -e "$TMP/p1/state/subscriber/state.json"
check "pull writes no status file" test ! -e "$TMP/p1/run/status.json"
check "no progress line when stderr is not a TTY" test -z "$(printf '%s' "$OUT" | tr -cd '\r')"
expect_exit 0 "wsync pull at HEAD again exits 0" timeout 60 "${PULL[@]}"
pub "$B3" 3 "$CK-3" --prev "$CK-2" --sign --flip
expect_exit 65 "wsync pull of a flipped delta exits 65" timeout 60 "${PULL[@]}"
check "the target still equals checkpoint 2" same_tree "$CK-2" "$TMP/p1/target"
check "no temp file left in the target" test -z "$(find "$TMP/p1/target" -name '.*.wsync-*')"
mv "$B3/deltas/000000000003.wsd.good" "$B3/deltas/000000000003.wsd"

# ---- hooks: on_apply's environment, notify_url's POST (wsync pull --hooks) ----
cat >"$TMP/notify.py" <<'EOF'
import http.server, sys
out = sys.argv[1]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        with open(out, "ab") as f:
            f.write(self.headers.get("Content-Type", "").encode() + b" " + body + b"\n")
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
open(out + ".port", "w").write(str(s.server_address[1]))
s.serve_forever()
EOF
"$PYTHON3" "$TMP/notify.py" "$TMP/posts" &
PIDS+=($!)
for _ in $(seq 100); do [ -s "$TMP/posts.port" ] && break; sleep 0.1; done
{
	echo "on_apply = echo \"\$WSYNC_VERSION \$WSYNC_STEP \$WSYNC_DIR\" >>$TMP/hook.out"
	echo "notify_url = http://127.0.0.1:$(cat "$TMP/posts.port")/reload"
} >>"$TMP/p1.ini"
expect_exit 0 "wsync pull --hooks applies version 3" timeout 60 "${PULL[@]}" --hooks
check "on_apply ran with WSYNC_VERSION, WSYNC_STEP, WSYNC_DIR" \
	grep -qx "3 30 $TMP/p1/target" "$TMP/hook.out"
contains "notify_url got the JSON POST" "$(cat "$TMP/posts" 2>/dev/null)" \
	"application/json {\"version\":3,\"step\":30,\"dir\":\"$TMP/p1/target\"}"
pub "$B3" 4 "$CK-4" --prev "$CK-3" --sign
expect_exit 0 "wsync pull without --hooks" timeout 60 "${PULL[@]}"
check "no hook ran without --hooks" test "$(wc -l <"$TMP/hook.out")" -eq 1

# ---- the daemon: a hook that fails or hangs is not fatal; the lock ----
sed -i '/^on_apply/d; /^notify_url/d' "$TMP/p1.ini"
{
	echo "on_apply = echo \$\$ >$TMP/hook.pid; sleep 30"
	echo "on_apply_timeout = 500ms"
	echo "notify_url = http://127.0.0.1:1/nothing-listens"
} >>"$TMP/p1.ini"
start p1
check "the daemon takes over the pulled target" wait_version p1 4
expect_exit 1 "wsync pull beside a running wsyncd exits 1" timeout 60 "${PULL[@]}"
contains "it says the target is in use" "$OUT" "in use"
pub "$B3" 5 "$CK-5" --prev "$CK-4" --sign
check "version 5 applied while the hook hangs" wait_version p1 5
check "the hung hook is reported" wait_log p1 "process group was killed"
check "the failed POST is reported" wait_log p1 "POST to notify_url failed"
pg=$(cat "$TMP/hook.pid" 2>/dev/null)
# alive(PGID): a process of that group still running (a zombie is dead:
# a container's PID 1 may never reap the orphaned sleep)
gone() { [ -n "$1" ] && ! ps -e -o pgid=,stat= | awk -v g="$1" '$1 == g && $2 !~ /^Z/' | grep -q .; }
check "the hook's process group is gone" gone "$pg"
check "hook failures are counted in status.json" wait_field p1 hook_failures 2
contains "but the state is idle, no error" "$(field p1 state)/$(field p1 last_error)" "idle/"
pub "$B3" 6 "$CK-6" --prev "$CK-5" --sign
check "and the next version is applied too" wait_version p1 6
stop p1
tap_result $? "the daemon with hooks stops with exit 0"

# ---- .wsync as a symlink is refused ----
conf s3 "$B3"
mkdir -p "$TMP/s3/target" "$TMP/s3/elsewhere"
ln -s "$TMP/s3/elsewhere" "$TMP/s3/target/.wsync"
expect_exit 1 "a target whose .wsync is a symlink is refused" timeout 60 "$WSYNC" pull --config "$TMP/s3.ini"
contains "the refusal says why" "$OUT" "symbolic link"
check "nothing written through the link" test -z "$(ls -A "$TMP/s3/elsewhere")"

# ---- layout = symlink, through wsync pull ----
conf s4 "$B3"
echo "layout = symlink" >>"$TMP/s4.ini"
expect_exit 0 "layout = symlink: wsync pull reaches HEAD" timeout 60 "$WSYNC" pull --config "$TMP/s4.ini"
check "target_dir is a symlink to target.v6" test "$(readlink "$TMP/s4/target")" = target.v6
check "it holds checkpoint 6" same_tree "$CK-6" "$TMP/s4/target"
pub "$B3" 7 "$CK-7" --prev "$CK-6" --sign
expect_exit 0 "layout = symlink: the next version" timeout 60 "$WSYNC" pull --config "$TMP/s4.ini"
check "the link is flipped to target.v7" test "$(readlink "$TMP/s4/target")" = target.v7
check "it holds checkpoint 7" same_tree "$CK-7" "$TMP/s4/target"
check "the previous version directory is intact" same_tree "$CK-6" "$TMP/s4/target.v6"

# ---- layout = symlink: repairing the version the link names ----
# HEAD is an anchor (version 1), applied; a file touched afterwards fails
# the quick check, and the repair rebuilds version 1 from that anchor --
# beside target.v1, which readers keep seeing whole until the exchange.
B5="$TMP/bucket5"
pub "$B5" 1 "$CK-1" --anchor --sign
conf s5 "$B5"
echo "layout = symlink" >>"$TMP/s5.ini"
expect_exit 0 "layout = symlink, HEAD an anchor: wsync pull reaches it" \
	timeout 60 "$WSYNC" pull --config "$TMP/s5.ini"
check "target_dir names target.v1" test "$(readlink "$TMP/s5/target")" = target.v1
big=$(cd "$CK-1" && ls -S | head -1)
touch -d "2001-01-01" "$TMP/s5/target/$big"
WSYNC_TEST_APPLY_PAUSE_MS=3000 timeout 60 "$WSYNC" pull --config "$TMP/s5.ini" \
	>"$TMP/s5/pull.out" 2>&1 &
pull_pid=$!
in_flight() { # the anchor is downloaded: its step starts, then pauses 3 s
	for _ in $(seq 200); do
		[ -n "$(ls -A "$TMP/s5/state/subscriber/downloads" 2>/dev/null)" ] &&
			sleep 1 && return 0
		sleep 0.05
	done
	return 1
}
check "the repair's step is under way" in_flight
check "meanwhile the link still names target.v1" test "$(readlink "$TMP/s5/target")" = target.v1
check "meanwhile target.v1 holds the whole version" same_tree "$CK-1" "$TMP/s5/target"
check "the repair builds beside it" test -d "$TMP/s5/.target.v1.wsync-rebuild"
wait "$pull_pid"
tap_result $? "the repair's wsync pull exits 0"
check "after it the link names target.v1" test "$(readlink "$TMP/s5/target")" = target.v1
check "it holds checkpoint 1" same_tree "$CK-1" "$TMP/s5/target"
check "the rebuilt file has its own mtime again" test "$(stat -c %Y "$TMP/s5/target/$big")" -gt 978307200
check "no rebuild directory is left beside it" test -z "$(ls -A "$TMP/s5" | grep -E "wsync-(rebuild|old)")"
# what a repair killed mid-way leaves is removed at the next start
mkdir -p "$TMP/s5/.target.v1.wsync-rebuild/sub" "$TMP/s5/.target.v1.wsync-old"
echo partial >"$TMP/s5/.target.v1.wsync-rebuild/sub/f"
expect_exit 0 "wsync pull at HEAD after a killed repair" timeout 60 "$WSYNC" pull --config "$TMP/s5.ini"
check "the killed repair's directories are gone" test -z "$(ls -A "$TMP/s5" | grep -E "wsync-(rebuild|old)")"
check "the version is untouched" same_tree "$CK-1" "$TMP/s5/target"

# ---- objects bound to the signed manifest by SHA-256 ----
B6="$TMP/bucket6"
pub "$B6" 1 "$CK-1" --anchor --sign
conf s6 "$B6" verify
expect_exit 0 "sha256: the anchor applies" timeout 60 "$WSYNC" pull --config "$TMP/s6.ini"
contains "sha256: the test manifest gives one" "$(cat "$B6/manifests/000000000001.json")" '"sha256": "'
pub "$B6" 2 "$CK-2" --prev "$CK-1" --sign --bad-sha256
expect_exit 65 "sha256: a delta whose SHA-256 is not the signed manifest's is refused" \
	timeout 60 "$WSYNC" pull --config "$TMP/s6.ini"
contains "sha256: the refusal says why" "$OUT" "SHA-256 is not the manifest's"
check "sha256: the target still holds checkpoint 1" same_tree "$CK-1" "$TMP/s6/target"
pub "$B6" 2 "$CK-2" --prev "$CK-1" --sign
expect_exit 0 "sha256: the right one applies" timeout 60 "$WSYNC" pull --config "$TMP/s6.ini"
check "sha256: checkpoint 2" same_tree "$CK-2" "$TMP/s6/target"
pub "$B6" 3 "$CK-3" --prev "$CK-2" --sign --no-sha256
expect_exit 0 "sha256: a manifest without (an older publisher's) still applies" \
	timeout 60 "$WSYNC" pull --config "$TMP/s6.ini"
check "sha256: checkpoint 3" same_tree "$CK-3" "$TMP/s6/target"

tap_done
