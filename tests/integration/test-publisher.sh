#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-publisher.sh -- the publisher role end to end: a real wsyncd with a
# file:// bucket watching a folder that checkpoints appear in.  Proves: the
# first checkpoint becomes version 1 (an anchor), the next version 2 (a
# delta), with manifests and HEAD as BUCKET.md says; anchor + delta applied
# with `wsync apply` give back the checkpoint's shipped files byte for
# byte; optimizer.pt is not shipped; a checkpoint without its marker is not
# published; a checkpoint deleted while being read is dropped cleanly; a
# step going backwards still gets the next version; kill -9 while
# publishing and a restart leave HEAD consistent and numbering going on; a
# truncated shard is rejected with a log line and the next good step
# published; garbage collection keeps keep_anchors anchors.
. "$(dirname "$0")/lib.sh"

W=$TMP/watch
B=$TMP/bucket
S=$TMP/pub/state
R=$TMP/pub/run
SRC=$TMP/src
mkdir -p "$W" "$B" "$S" "$R"

# Six checkpoints of a small model, made once; the test copies them into
# the watch dir file by file, trainer_state.json last, as a trainer would.
gen_ckpts "$SRC" --params 2M --steps 6 --shards 2

cat >"$TMP/pub.ini" <<EOF
[daemon]
role = publisher
state_dir = $S
runtime_dir = $R
threads = 2
log_level = debug
[store]
url = file://$B
retry_attempts = 2
[publisher]
watch_dir = $W
anchor_every = 2
keep_anchors = 1
gc_grace = 0
rescan_interval = 1s
EOF

# The publisher is lib.sh's daemon "pub" under $DAEMONS ($TMP, then each
# scenario's folder), its configuration always $TMP/pub.ini; LOG its log.
LOG=$TMP/pub/log
# put STEP [NAME]: copy checkpoint-STEP in as NAME, marker last (a
# trainer's build folder made and removed beside it first)
put() {
	local name=${2:-checkpoint-$1}
	mkdir -p "$W/$name.tmp-build"
	rm -rf "$W/$name.tmp-build"
	put_ckpt "$SRC/checkpoint-$1" "$W/$name"
}
key() { printf '%s/%012d.%s' "$1" "$2" "$3"; }
mfield() { # mfield VERSION EXPR: a Python expression over m (the manifest)
	"$PYTHON3" - "$B/$(key manifests "$1" json)" "$2" <<'PY'
import json, sys
doc = open(sys.argv[1]).read().split("\nwsync-signature")[0]
m = json.loads(doc)
print(eval(sys.argv[2]))
PY
}
# shipped_equal DIR CKPT: DIR holds exactly CKPT's files minus the trainer-only ones
shipped_equal() {
	local want got
	want=$(cd "$2" && ls | grep -v -E '^(optimizer.*|scheduler\.pt|scaler\.pt|rng_state.*\.pth|training_args\.bin)$' | sort)
	got=$(cd "$1" && ls | sort)
	[ "$want" = "$got" ] || { echo "# files differ: want [$want] got [$got]"; return 1; }
	for f in $want; do cmp "$1/$f" "$2/$f" || return 1; done
}

start -c "$TMP/pub.ini" pub

# 1. the first checkpoint: version 1, an anchor
put 1
check "checkpoint-1 is published as version 1" wait_head "$B" 1
check "version 1 is an anchor" test "$(mfield 1 'm["kind"]')" = anchor
check "version 1 has anchors/000000000001.wsa" test -s "$B/$(key anchors 1 wsa)"
check "version 1's anchor carries its SHA-256 in the manifest" test \
	"$(mfield 1 '[o["sha256"] for o in m["objects"] if o["role"] == "anchor"][0]')" = \
	"$(sha256sum "$B/$(key anchors 1 wsa)" | cut -d" " -f1)"
check "version 1's manifest: format, step, anchors" \
	test "$(mfield 1 '(m["format"], m["format_version"], m["step"], m["anchor_version"], [a["version"] for a in m["anchors"]])')" = "('wsync-manifest', 1, 1, 1, [1])"
check "HEAD names manifests/000000000001.json with its size and hash" "$PYTHON3" - "$B" <<'PY'
import json, sys, os, subprocess
b = sys.argv[1]
h = json.loads(open(b + "/HEAD").read())
assert h["format"] == "wsync-head" and h["version"] == 1, h
k = h["manifest"]["key"]
assert k == "manifests/000000000001.json", k
assert os.path.getsize(b + "/" + k) == h["manifest"]["size"]
PY
check "optimizer.pt is not in the files list" test "$(mfield 1 'sorted(f["path"] for f in m["files"])' | grep -c optimizer)" = 0
check "the files list has the model shards" test "$(mfield 1 'len([f for f in m["files"] if f["path"].endswith(".safetensors")])')" = 2

# 2. a half-written checkpoint (no marker) is not published
mkdir -p "$W/checkpoint-2"
for f in "$SRC/checkpoint-2"/*.safetensors; do cp "$f" "$W/checkpoint-2/"; done
sleep 2.5
check "a checkpoint without trainer_state.json is not published" test "$(head_version "$B")" = 1

# 3. the marker arrives: version 2, a delta
for f in "$SRC/checkpoint-2"/*; do
	[ -e "$W/checkpoint-2/$(basename "$f")" ] || [ "$(basename "$f")" = trainer_state.json ] || cp "$f" "$W/checkpoint-2/"
done
cp "$SRC/checkpoint-2/trainer_state.json" "$W/checkpoint-2/"
check "checkpoint-2 is published as version 2" wait_head "$B" 2
check "version 2 is a delta from version 1" \
	test "$(mfield 2 '(m["kind"], m["base_version"], m["step"], m["anchor_version"])')" = "('delta', 1, 2, 1)"
check "the delta object is there with the size the manifest gives" \
	test "$(stat -c %s "$B/$(key deltas 2 wsd)")" = "$(mfield 2 '[o["size"] for o in m["objects"] if o["role"]=="delta"][0]')"
check "version 2's delta carries its SHA-256 in the manifest" test \
	"$(mfield 2 '[o["sha256"] for o in m["objects"] if o["role"] == "delta"][0]')" = \
	"$(sha256sum "$B/$(key deltas 2 wsd)" | cut -d" " -f1)"
check "the delta is much smaller than the anchor" \
	test "$(stat -c %s "$B/$(key deltas 2 wsd)")" -lt "$(( $(stat -c %s "$B/$(key anchors 1 wsa)") / 3 ))"

# 4. anchor + delta reproduce checkpoint-2's shipped files
mkdir -p "$TMP/empty" "$TMP/sub"
check "wsync apply of the anchor gives checkpoint-1" sh -c \
	"'$WSYNC' apply '$TMP/empty' '$B/$(key anchors 1 wsa)' -o '$TMP/v1' >/dev/null"
check "version 1 equals checkpoint-1's shipped files byte for byte" shipped_equal "$TMP/v1" "$SRC/checkpoint-1"
check "wsync apply of the delta gives checkpoint-2" sh -c \
	"'$WSYNC' apply '$TMP/v1' '$B/$(key deltas 2 wsd)' -o '$TMP/v2' >/dev/null"
check "version 2 equals checkpoint-2's shipped files byte for byte" shipped_equal "$TMP/v2" "$SRC/checkpoint-2"
check "status.json says version 2, idle" "$PYTHON3" -c "
import json; s = json.load(open('$R/status.json'))
assert s['role'] == 'publisher' and s['version'] == 2 and s['step'] == 2 and s['store_ok'], s"

# 5. a checkpoint deleted while being read is dropped, the next published.
#    The publisher is restarted with a pause between scan and snapshot
#    (WSYNC_TEST_SNAPSHOT_PAUSE_MS) so the deletion lands inside it.
stop pub
start -c "$TMP/pub.ini" pub WSYNC_TEST_SNAPSHOT_PAUSE_MS=1500
sleep 0.5
put 3
check "checkpoint-3 is being encoded" wait_state pub encoding 30
rm -rf "$W/checkpoint-3"
check "a checkpoint deleted while being read is dropped with a log line" \
	wait_log pub "checkpoint-3 disappeared while being read" 30
stop pub
start -c "$TMP/pub.ini" pub WSYNC_TEST_SNAPSHOT_PAUSE_MS=0
put 4
check "after a deleted checkpoint the next one is published" wait_head "$B" 3
check "version 3 is checkpoint-4" test "$(mfield 3 'm["step"]')" = 4
check "version 3 is an anchor (anchor_every = 2) with a delta too" \
	test "$(mfield 3 '(m["kind"], m["base_version"], sorted(o["role"] for o in m["objects"]))')" = "('anchor', 2, ['anchor', 'delta'])"

# 6. garbage collection: keep_anchors = 1, gc_grace = 0 -> versions 1 and 2 go
gc_done() {
	for _ in $(seq 300); do
		[ ! -e "$B/$(key anchors 1 wsa)" ] && [ ! -e "$B/$(key manifests 1 json)" ] &&
			[ ! -e "$B/$(key deltas 2 wsd)" ] && [ ! -e "$B/$(key manifests 2 json)" ] &&
			return 0
		sleep 0.1
	done
	ls -R "$B" | sed 's/^/# /'
	return 1
}
check "GC deletes what is older than the only kept anchor" gc_done
check "GC keeps HEAD's chain" test -e "$B/$(key anchors 3 wsa)" -a -e "$B/$(key manifests 3 json)"
check "version 3 lists itself as the only retained anchor" test "$(mfield 3 '[a["version"] for a in m["anchors"]]')" = "[3]"

# 7. the step goes backwards: still the next version
put 1 checkpoint-1-resumed
check "a step going backwards is published as the next version" wait_head "$B" 4
check "version 4 carries step 1 and is a delta from 3" \
	test "$(mfield 4 '(m["step"], m["kind"], m["base_version"])')" = "(1, 'delta', 3)"
check "version 4's anchors entry for 3 carries manifest 3's real size" \
	test "$(mfield 4 'm["anchors"][0]["manifest"]["size"]')" = "$(stat -c %s "$B/$(key manifests 3 json)")"

# 8. a truncated shard (marker present) waits -- it may still be being
#    written -- and says so once; a shard longer than its header says is
#    rejected once it has settled, naming the trainer's file; the next
#    good step is published
mkdir -p "$W/checkpoint-5"
for f in "$SRC/checkpoint-5"/*; do
	[ "$(basename "$f")" = trainer_state.json ] || cp "$f" "$W/checkpoint-5/"
done
shard=$(ls "$W/checkpoint-5"/model-*.safetensors | head -1)
truncate -s $(( $(stat -c %s "$shard") / 2 )) "$shard"
cp "$SRC/checkpoint-5/trainer_state.json" "$W/checkpoint-5/"
check "a truncated shard makes its checkpoint wait, with a log line naming it" \
	wait_log pub "checkpoint $W/checkpoint-5 is not complete yet: $shard short" 30
check "status.json says what it waits for" wait_for 30 "$PYTHON3" -c "
import json, sys; s = json.load(open('$R/status.json'))
sys.exit(0 if '$shard short' in s['waiting'] and s['state'] == 'idle' else 1)"
said=$(grep -c "checkpoint-5 is not complete yet" "$LOG")
sleep 2.5
check "the short checkpoint is not published" test "$(head_version "$B")" = 4
check "it is said once, not again at every rescan (rescan_interval 1 s)" \
	test "$(grep -c "checkpoint-5 is not complete yet" "$LOG")" = "$said"
check "waiting is not an error" test "$(grep -c 'checkpoint-5.*rejected' "$LOG")" = 0
cp "$SRC/checkpoint-5/$(basename "$shard")" "$shard"
printf 'tail' >>"$shard"
check "a shard longer than its header says is rejected with a log line" \
	wait_log pub "checkpoint $W/checkpoint-5 rejected: $shard: " 30
check "the rejection names the trainer's file, never the staging copy" \
	sh -c "! grep -q 'rejected: .*/publisher/staging' '$LOG'"
sleep 2.5
check "the rejected checkpoint is not published" test "$(head_version "$B")" = 4
check "it is rejected once, not again at every rescan" test "$(grep -c 'checkpoint-5 rejected' "$LOG")" = 1
put 6
check "the next good checkpoint is published" wait_head "$B" 5
check "version 5 is step 6" test "$(mfield 5 'm["step"]')" = 6

# 9. kill -9 while publishing, restart: HEAD consistent, numbering goes on
stop pub
start -c "$TMP/pub.ini" pub WSYNC_TEST_SNAPSHOT_PAUSE_MS=1000
put 3 checkpoint-7
check "checkpoint-7 is being encoded when the publisher is killed" wait_state pub encoding 30
kill9 pub
hv=$(head_version "$B")
check "after kill -9 HEAD names a complete version" "$PYTHON3" - "$B" <<'PY'
import json, sys, os
b = sys.argv[1]
h = json.loads(open(b + "/HEAD").read())
m = json.loads(open(b + "/" + h["manifest"]["key"]).read())
assert m["version"] == h["version"]
for o in m["objects"]:
    assert os.path.getsize(b + "/" + o["key"]) == o["size"], o
PY
start -c "$TMP/pub.ini" pub
check "after the restart checkpoint-7 is published" wait_log pub "from checkpoint-7" 30
put 4 checkpoint-8
check "and the next checkpoint gets the next version" wait_log pub "from checkpoint-8" 30
check "checkpoint-7 was published once, checkpoint-8 once" test "$(grep -c 'published version .* from checkpoint-[78]' "$LOG")" = 2
check "versions have no gap and no duplicate" "$PYTHON3" - "$B" <<'PY'
import json, sys, os
b = sys.argv[1]
h = json.loads(open(b + "/HEAD").read())
vs = sorted(int(k[:12]) for k in os.listdir(b + "/manifests"))
assert vs == list(range(vs[0], h["version"] + 1)), (vs, h["version"])
steps = [json.loads(open(b + "/manifests/%012d.json" % v).read())["step"] for v in vs]
assert steps[-1] == 8, steps
PY
latest=$(head_version "$B")
check "HEAD's version rebuilds from its anchor and deltas byte for byte" "$PYTHON3" - "$B" "$WSYNC" "$TMP/chain" "$SRC/checkpoint-4" <<'PY'
import json, sys, os, subprocess, filecmp
b, wsync, out, want = sys.argv[1:5]
h = json.loads(open(b + "/HEAD").read())
m = json.loads(open(b + "/" + h["manifest"]["key"]).read())
a = m["anchor_version"]
os.makedirs(out + "/empty", exist_ok=True)
cur = out + "/empty"
for v in range(a, h["version"] + 1):
    mv = json.loads(open(b + "/manifests/%012d.json" % v).read())
    objs = {o["role"]: o["key"] for o in mv["objects"]}
    key = objs["anchor"] if v == a else objs["delta"]
    nxt = out + "/v%d" % v
    subprocess.run([wsync, "apply", cur, b + "/" + key, "-o", nxt],
                   check=True, stdout=subprocess.DEVNULL)
    cur = nxt
names = sorted(os.listdir(cur))
assert names == sorted(f["path"] for f in m["files"]), names
for f in m["files"]:
    assert filecmp.cmp(cur + "/" + f["path"], want + "/" + f["path"], shallow=False), f
PY
check "status.json is flat and names the version" "$PYTHON3" -c "
import json; s = json.load(open('$R/status.json'))
assert s['version'] == $latest, s
assert all(not isinstance(v, (dict, list)) for v in s.values()), s"
stop pub
tap_result $? "SIGTERM stops the publisher cleanly (exit 0)"
check "no sanitizer or crash report in the log" sh -c "! grep -q -E 'ERROR: AddressSanitizer|runtime error|Segmentation' '$LOG'"

# ---- the scenarios below each get a fresh watch dir, bucket, state and log
# scenario NAME [INI LINES...]: W B S R LOG under $TMP/NAME; $TMP/pub.ini
# has the [publisher] settings above plus the given lines
scenario() {
	local d=$TMP/$1
	shift
	DAEMONS=$d W=$d/watch B=$d/bucket S=$d/pub/state R=$d/pub/run LOG=$d/pub/log
	mkdir -p "$W" "$B" "$S" "$R"
	{
		printf '[daemon]\nrole = publisher\nstate_dir = %s\nruntime_dir = %s\n' "$S" "$R"
		printf 'threads = 2\nlog_level = debug\n[store]\nurl = file://%s\n' "$B"
		printf 'retry_attempts = 1\n[publisher]\nwatch_dir = %s\n' "$W"
		printf 'rescan_interval = 1s\n'
		for l in "$@"; do printf '%s\n' "$l"; done
	} >"$TMP/pub.ini"
}
LOGS=$LOG
# versions_ok: manifests/ hold 1..HEAD without gap, each object the size
# its manifest gives
versions_ok() {
	"$PYTHON3" - "$B" <<'PY'
import json, sys, os
b = sys.argv[1]
h = json.loads(open(b + "/HEAD").read().split("\nwsync-signature")[0])
vs = sorted(int(k[:12]) for k in os.listdir(b + "/manifests"))
assert vs == list(range(vs[0], h["version"] + 1)), (vs, h["version"])
for v in vs:
    m = json.loads(open(b + "/manifests/%012d.json" % v).read().split("\nwsync-signature")[0])
    for o in m["objects"]:
        assert os.path.getsize(b + "/" + o["key"]) == o["size"], o
PY
}
# rebuilds DIR: HEAD's version, applied from its anchor and deltas, equals
# DIR's shipped files byte for byte
rebuilds() {
	rm -rf "$TMP/chain"
	"$PYTHON3" - "$B" "$WSYNC" "$TMP/chain" "$1" <<'PY'
import json, sys, os, subprocess, filecmp
b, wsync, out, want = sys.argv[1:5]
rd = lambda p: json.loads(open(p).read().split("\nwsync-signature")[0])
h = rd(b + "/HEAD")
m = rd(b + "/" + h["manifest"]["key"])
a = m["anchor_version"]
os.makedirs(out + "/empty", exist_ok=True)
cur = out + "/empty"
for v in range(a, h["version"] + 1):
    mv = rd(b + "/manifests/%012d.json" % v)
    objs = {o["role"]: o["key"] for o in mv["objects"]}
    key = objs["anchor"] if v == a else objs["delta"]
    nxt = out + "/v%d" % v
    subprocess.run([wsync, "apply", cur, b + "/" + key, "-o", nxt],
                   check=True, stdout=subprocess.DEVNULL)
    cur = nxt
got = sorted(os.path.relpath(os.path.join(r, f), cur) for r, _, fs in os.walk(cur) for f in fs)
assert got == sorted(f["path"] for f in m["files"]), got
for f in m["files"]:
    assert filecmp.cmp(cur + "/" + f["path"], want + "/" + f["path"], shallow=False), f
PY
}

# 10. wsync publish: one checkpoint, the next version, then exit
scenario oneshot
LOGS="$LOGS $LOG"
check "wsync publish of checkpoint-1 exits 0 and prints version 1" sh -c \
	"'$WSYNC' publish --config '$TMP/pub.ini' '$SRC/checkpoint-1' 2>'$LOG' | grep -qx 'version 1 step 1 $SRC/checkpoint-1'"
check "it published an anchor" test "$(mfield 1 'm["kind"]')" = anchor
check "wsync publish of checkpoint-2 gives version 2, a delta from 1" sh -c \
	"'$WSYNC' publish --config '$TMP/pub.ini' '$SRC/checkpoint-2' 2>>'$LOG' | grep -qx 'version 2 step 2 $SRC/checkpoint-2'"
check "version 2 is a delta from version 1" \
	test "$(mfield 2 '(m["kind"], m["base_version"], m["step"])')" = "('delta', 1, 2)"
check "HEAD's version rebuilds checkpoint-2" rebuilds "$SRC/checkpoint-2"
expect_exit 0 "publishing HEAD's checkpoint again exits 0" \
	"$WSYNC" publish --config "$TMP/pub.ini" "$SRC/checkpoint-2"
contains "... and says it is already published" "$OUT" "(already published)"
check "... without a new version" test "$(head_version "$B")" = 2
mkdir -p "$TMP/half"
cp "$SRC/checkpoint-3"/*.safetensors "$TMP/half/"
expect_exit 65 "a directory without its marker exits 65" \
	"$WSYNC" publish --config "$TMP/pub.ini" "$TMP/half"
contains "... naming what is missing" "$OUT" "trainer_state.json not written yet"
mkdir -p "$TMP/marker-only"
cp "$SRC/checkpoint-3/trainer_state.json" "$TMP/marker-only/"
expect_exit 65 "a directory holding only the marker exits 65" \
	"$WSYNC" publish --config "$TMP/pub.ini" "$TMP/marker-only"
contains "... saying it has no weight file" "$OUT" "no weight file"
cp "$SRC/checkpoint-3"/* "$TMP/marker-only/"
rm "$TMP/marker-only/model-00002-of-00002.safetensors"
expect_exit 65 "a directory missing a shard exits 65" \
	"$WSYNC" publish --config "$TMP/pub.ini" "$TMP/marker-only"
contains "... naming the shard" "$OUT" "$TMP/marker-only/model-00002-of-00002.safetensors missing"
expect_exit 65 "a missing directory exits 65" "$WSYNC" publish --config "$TMP/pub.ini" "$TMP/nonexistent"
check "no progress line when stderr is not a terminal" sh -c "! grep -q \"\$(printf '\\r')\" '$LOG'"
sed -i "s|^url = .*|url = file://$TMP/half/model-00001-of-00002.safetensors/bucket|" "$TMP/pub.ini"
expect_exit 1 "an unreachable bucket exits 1" "$WSYNC" publish --config "$TMP/pub.ini" "$SRC/checkpoint-3"
if command -v script >/dev/null 2>&1; then
	sed -i "s|^url = .*|url = file://$B|" "$TMP/pub.ini"
	script -qec "'$WSYNC' publish --config '$TMP/pub.ini' '$SRC/checkpoint-3'" "$TMP/tty.out" >/dev/null 2>&1
	check "on a terminal a progress line is drawn" grep -q 'encoding version 3' "$TMP/tty.out"
	check "... and the version is published" test "$(head_version "$B")" = 3
fi

# 11. in place: one directory rewritten by the trainer, the step from
#     trainer_state.json's global_step
scenario inplace "step_pattern ="
LOGS="$LOGS $LOG"
start -c "$TMP/pub.ini" pub
"$GEN" --params 2M --steps 3 --shards 2 --save-every 10 --inplace --interval 2 --quiet --out "$W" >/dev/null 2>&1 &
GENPID=$!
check "the first in-place save is published as version 1" wait_head "$B" 1
wait "$GENPID"
check "the last in-place save is published" wait_log pub "(step 30, in place" 30
check "its step is trainer_state.json's global_step" test "$(mfield "$(head_version "$B")" 'm["step"]')" = 30
check "in-place versions have no gap" versions_ok
check "HEAD's version rebuilds the rewritten directory byte for byte" rebuilds "$W"
check "in-place: optimizer.pt and friends are not shipped" \
	test "$(mfield "$(head_version "$B")" 'len([f for f in m["files"] if "optimizer" in f["path"] or "rng_state" in f["path"]])')" = 0
check "wsync status: idle, lag_seconds and bytes_shipped" "$PYTHON3" -c "
import json, subprocess
s = json.loads(subprocess.run(['$WSYNC', 'status', '--config', '$TMP/pub.ini', '--json'], check=True, capture_output=True).stdout)
assert s['state'] == 'idle', s
assert isinstance(s['lag_seconds'], (int, float)) and 0 <= s['lag_seconds'] < 30, s
assert s['bytes_shipped'] > 0, s"
check "wsync status (human) prints the state" sh -c "'$WSYNC' status --config '$TMP/pub.ini' | grep -q '^publisher: idle'"
stop pub
check "after a stop, wsync status says so (exit 3)" sh -c "'$WSYNC' status --config '$TMP/pub.ini' >/dev/null; test \$? = 3"

# 12. complete_when = index: no marker needed, a short shard waits
scenario index "complete_when = index"
LOGS="$LOGS $LOG"
start -c "$TMP/pub.ini" pub
mkdir -p "$W/checkpoint-1"
for f in "$SRC/checkpoint-1"/*; do
	case $f in *model-00002-of-00002.safetensors | */trainer_state.json) ;; *) cp "$f" "$W/checkpoint-1/" ;; esac
done
sleep 2.5
check "index: a checkpoint missing a shard is not published" test "$(head_version "$B")" = 0
cp "$SRC/checkpoint-1/model-00002-of-00002.safetensors" "$W/checkpoint-1/"
check "index: once every shard is whole it is published, marker or not" wait_head "$B" 1
stop pub

# 13. complete_when = quiet with watch_mode = poll (no inotify)
scenario quiet "complete_when = quiet" "quiet_period = 2s" "watch_mode = poll"
LOGS="$LOGS $LOG"
start -c "$TMP/pub.ini" pub
sleep 0.5
put 1
t0=$(date +%s.%N)
check "quiet + poll: published with no inotify" wait_head "$B" 1
check "quiet: not before quiet_period has passed" "$PYTHON3" -c "import sys, os, time; sys.exit(0 if os.path.getmtime('$B/HEAD') - $t0 >= 1.8 else 1)"
check "poll: the log says it is polling" grep -q "polling" "$LOG"
put 2
check "quiet + poll: the next one too" wait_head "$B" 2
stop pub

# 14. signing: manifests and HEAD end with a signature line OpenSSL accepts
scenario signed "signing_key = $TMP/signed/wsync.key"
LOGS="$LOGS $LOG"
"$WSYNC" keygen "$TMP/signed/wsync.key" >/dev/null
start -c "$TMP/pub.ini" pub
put 1
check "signed: version 1 published" wait_head "$B" 1
put 2
check "signed: version 2 published" wait_head "$B" 2
verify_sig() { # verify_sig FILE: its last line is a valid wsync-signature
	local f=$1 body=$TMP/body sigline id sig want
	sigline=$(tail -n 1 "$f")
	head -n -1 "$f" >"$body"
	set -- $sigline
	[ "$1" = wsync-signature ] && [ "$2" = ed25519 ] && [ $# = 4 ] || { echo "bad line: $sigline"; return 1; }
	want=$(openssl pkey -pubin -in "$TMP/signed/wsync.key.pub" -outform DER | tail -c 32 | sha256sum | cut -c1-16)
	[ "$3" = "$want" ] || { echo "key id $3, want $want"; return 1; }
	printf '%s' "$4" | base64 -d >"$TMP/sig.bin"
	openssl pkeyutl -verify -pubin -inkey "$TMP/signed/wsync.key.pub" -rawin -in "$body" -sigfile "$TMP/sig.bin"
}
check "signed: HEAD ends with a signature line OpenSSL verifies" verify_sig "$B/HEAD"
check "signed: manifest 1 too" verify_sig "$B/$(key manifests 1 json)"
check "signed: manifest 2 too" verify_sig "$B/$(key manifests 2 json)"
cp "$B/HEAD" "$TMP/head.bad"
sed -i 's/"version"/"versioN"/' "$TMP/head.bad"
if verify_sig "$TMP/head.bad" >/dev/null 2>&1; then tap_result 1 "signed: a changed byte fails verification"; else tap_result 0 "signed: a changed byte fails verification"; fi
expect_exit 1 "wsync publish beside a running publisher on its state_dir is refused" \
	"$WSYNC" publish --config "$TMP/pub.ini" "$SRC/checkpoint-3"
contains "... naming the running daemon: its pid and configuration" "$OUT" \
	"state_dir $S: in use by wsyncd (pid ${DPID[pub]}, $TMP/pub.ini)"
check "... and nothing is published" test "$(head_version "$B")" = 2
stop pub
check "signed: wsync publish signs too" sh -c "'$WSYNC' publish --config '$TMP/pub.ini' '$SRC/checkpoint-3' >/dev/null 2>&1"
check "signed: the HEAD wsync publish wrote verifies" verify_sig "$B/HEAD"

# 15. store outage: the bucket becomes unreachable (its path a file), the
#     publisher backs off and logs it once, then publishes when it is back
scenario outage
LOGS="$LOGS $LOG"
start -c "$TMP/pub.ini" pub
put 1
check "outage: version 1 published" wait_head "$B" 1
mv "$B" "$B.away"
touch "$B"
put 2
check "outage: the failure is logged" wait_log pub "retrying with backoff" 30
check "outage: status.json says error, store_ok false" wait_state pub error 30
check "outage: wsync status exits 1" sh -c "'$WSYNC' status --config '$TMP/pub.ini' >/dev/null; test \$? = 1"
sleep 3
rm -f "$B"
mv "$B.away" "$B"
check "outage: published once the bucket is back" wait_head "$B" 2
check "outage: the outage was logged once" test "$(grep -c 'retrying with backoff' "$LOG")" = 1
check "outage: and its end" grep -q "reachable again" "$LOG"
check "outage: versions consistent" versions_ok
check "outage: HEAD's version rebuilds checkpoint-2" rebuilds "$SRC/checkpoint-2"
stop pub

# 16. kill -9 between HEAD and the base swap: the restart recognises the
#     staged snapshot as HEAD's and goes on with a delta, no duplicate or gap
scenario swap "anchor_every = 20"
LOGS="$LOGS $LOG"
start -c "$TMP/pub.ini" pub
put 1
check "swap: version 1 published" wait_head "$B" 1
stop pub
start -c "$TMP/pub.ini" pub WSYNC_TEST_COMMIT_PAUSE_MS=5000
put 2
check "swap: HEAD names version 2" wait_head "$B" 2
sleep 0.3
kill9 pub
check "swap: killed before the swap (state.json still says version 1)" \
	grep -q '"version": 1,' "$S/publisher/state.json"
start -c "$TMP/pub.ini" pub
check "swap: the restart finds the staged snapshot is version 2" wait_log pub "staged snapshot matches version 2" 30
put 3
check "swap: the next checkpoint is version 3" wait_head "$B" 3
check "swap: version 3 is a delta from 2, not a fresh anchor" \
	test "$(mfield 3 '(m["kind"], m["base_version"], m["step"])')" = "('delta', 2, 3)"
check "swap: checkpoint-2 published once" test "$(grep -c 'published version .* from checkpoint-2' "$LOG")" = 1
check "swap: no gap, no duplicate" versions_ok
check "swap: HEAD's version rebuilds checkpoint-3" rebuilds "$SRC/checkpoint-3"
stop pub

# 17. skip-ahead: checkpoints arriving while one is being published are
#     skipped for the newest, and the log says which
scenario skip
LOGS="$LOGS $LOG"
start -c "$TMP/pub.ini" pub WSYNC_TEST_SNAPSHOT_PAUSE_MS=6000	# long enough for three checkpoints to land on a busy machine
put 1
check "skip: checkpoint-1 is being encoded" wait_state pub encoding 30
put 2
put 3
put 4
check "skip: version 1 published" wait_head "$B" 1
check "skip: then the newest, checkpoint-4, as version 2" wait_head "$B" 2
check "skip: version 2 is step 4" test "$(mfield 2 'm["step"]')" = 4
check "skip: the log names the skipped steps" grep -qE "skipping checkpoints checkpoint-[23], checkpoint-[23]: checkpoint-4 is newer" "$LOG"
check "skip: status.json counts them" "$PYTHON3" -c "
import json; s = json.load(open('$R/status.json')); assert s['skipped_steps'] == 2, s"
sleep 1.5
check "skip: nothing older is published after" test "$(head_version "$B")" = 2
stop pub
tap_result $? "the last publisher stops cleanly (exit 0)"
check "no sanitizer or crash report in any log" sh -c "! grep -q -E 'ERROR: AddressSanitizer|runtime error|Segmentation' $LOGS"
tap_done
