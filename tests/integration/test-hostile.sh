#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# test-hostile.sh -- hostile or broken input (issue 7), one group per kind:
#  1. bucket content: a flipped byte in an anchor (a fresh node goes round
#     it through an older anchor), a manifest and HEAD, a
#     truncated delta, a delta from a wrong base, a manifest naming a wrong
#     base_version: the subscriber refuses (again on each retry), keeps the
#     old version (bytes and state marker; the versions it applies only
#     ever increase), says so in `wsync status --json` and in the journal
#     (VERIFY_FAILED), and recovers when good data appears;
#  2. path safety: "..", absolute, NUL and overlong paths in manifests and
#     in delta FILE records, symlinks planted in target_dir, and on wsync's
#     own paths (.wsync itself, .wsync/state.json, its temp, the lock):
#     nothing is written outside target_dir (a canary folder keeps its
#     exact listing and bytes);
#  3. resource bombs: petabyte size fields (delta, manifest), zstd bombs,
#     (refused by the header check; and, past it, a frame whose header lies
#     and 256 frames back to back, refused by the decoder's output limit),
#     a 40 MiB manifest of half a million files, a terabyte safetensors
#     header and a million tiny tensors given to the publisher: bounded
#     memory (peak RSS printed) and time, a clear error;
#  4. rollback and freeze: HEADs signed by another key and replayed (also
#     across a restart) refused, a HEAD older than max_head_age reported
#     stale (status, wsync status, journal HEAD_STALE);
#  5. trainer output: a truncated safetensors shard and a shard missing
#     from the index wait (the journal says for what: they may still be
#     being written), a malformed header is rejected (CHECKPOINT_REJECTED
#     naming the trainer's file); the next good step is published;
#  6. local damage with size and mtime kept: repaired from the anchor;
#  7. disk full (a tmpfs: too few bytes, then too few inodes): clean
#     failure, no temp file, applied once space is back (ENOSPC from the
#     Nth write mid-apply: test-crash.sh, with the shim);
#  8. bad configuration: every key of the table, a bad value (wrong type,
#     control character, and one below .min / above .max of each bounded
#     key, taken from config.c) -> FILE:LINE naming the key, exit 78 from
#     --check-config and from wsyncd.
# Overlaps with test-subscriber.sh (flipped delta, "../" in a manifest,
# unsigned HEAD, rollback) are not repeated.  Every wait is bounded.
. "$(dirname "$0")/lib.sh"
src=$WSYNC_SOURCE_ROOT
RECV=$src/tests/integration/journal-recv.py
CRAFT=$src/tests/integration/craft-delta.py

gen_ckpts "$TMP/ck" --params 1M --steps 9 --shards 1 --no-trainer-files
CK="$TMP/ck/checkpoint"
mkdir -p "$TMP/empty"
openssl genpkey -algorithm ed25519 -out "$TMP/key.pem" 2>/dev/null
openssl pkey -in "$TMP/key.pem" -pubout -out "$TMP/key.pub" 2>/dev/null
openssl genpkey -algorithm ed25519 -out "$TMP/other.pem" 2>/dev/null
export KEY="$TMP/key.pem" EMPTY="$TMP/empty" WSYNC

# jstart NAME: start NAME logging to a journal socket whose entries land
# in $TMP/NAME/journal.jsonl (journal-recv.py --serve, as NAME-journal).
jstart() {
	journal_start "$1-journal" "$TMP/$1/j.sock" "$TMP/$1/journal.jsonl"
	start "$1" WSYNC_JOURNAL_SOCKET="$TMP/$1/j.sock"
}
# wait_journal NAME MID TEXT [COUNT]: COUNT (default 1) entries with
# MESSAGE_ID MID (any if "") whose MESSAGE holds TEXT arrive within 20 s
wait_journal() {
	for _ in $(seq 200); do
		"$PYTHON3" -c 'import json, sys
n = 0
for l in open(sys.argv[1]):
    e = json.loads(l)
    if sys.argv[2] in ("", e.get("MESSAGE_ID")) and sys.argv[3] in e.get("MESSAGE", ""):
        n += 1
sys.exit(n < int(sys.argv[4]))' "$TMP/$1/journal.jsonl" "$2" "$3" "${4:-1}" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "# no journal entry $2 with: $3"
	tail -3 "$TMP/$1/journal.jsonl" 2>/dev/null | cut -c1-300 | sed 's/^/# /'
	return 1
}
# only N: run group N (all groups unless HOSTILE_ONLY lists some, for debugging)
only() { [ -z "${HOSTILE_ONLY:-}" ] || [[ " $HOSTILE_ONLY " == *" $1 "* ]]; }
VF=$(mid VERIFY_FAILED)
marker() { cat "$TMP/$1/target/.wsync/state.json" 2>/dev/null; }
# no_temps DIR: no temp file under DIR.  While the subscriber may be
# retrying (every retry makes its temp files and removes them on
# failure) the checks wait for it: none may stay, within 10 s.
no_temps() { ! find "$1" -name '.*.wsync-*' | grep -q .; }
# same_but_temps CK TARGET: TARGET holds CK's files, byte for byte, apart
# from the temp files of a retry in flight (wait_for 10 no_temps checks those);
# check prints what differs.
same_but_temps() { diff -rq -x .wsync -x '.*.wsync-*' "$1" "$2"; }

# ---- 1. bucket content ------------------------------------------------
if only 1; then
B="$TMP/b1"
conf h1 "$B" verify
pub "$B" 1 "$CK-1" --anchor --sign
jstart h1
check "bucket: the subscriber reaches version 1" wait_version h1 1
# After a refusal the subscriber backs off (doubling from poll_interval up
# to a minute): recoveries are given 90 s.
# refused VERSION WHAT [TEXT]: the usual checks after damage to version V
# (TEXT: what last_error and the journal say, default "version V refused")
refused() {
	local before text=${3:-"version $1 refused"}
	before=$(marker h1)
	check "$2: refused (last_error)" wait_error h1 "$text"
	check "$2: VERIFY_FAILED in the journal" wait_journal h1 "$VF" "$text"
	check "$2: refused again on the retry" wait_journal h1 "$VF" "$text" 2
	contains "$2: wsync status --json has it in last_error" \
		"$("$WSYNC" status --runtime-dir "$TMP/h1/run" --json 2>&1)" "\"last_error\": \"$text"
	check "$2: target still holds version $(($1 - 1))" same_tree "$CK-$(($1 - 1))" "$TMP/h1/target"
	check "$2: state marker unchanged" test "$(marker h1)" = "$before"
	check "$2: status still says version $(($1 - 1))" test "$(field h1 version)" = $(($1 - 1))
}
restore() { mv "$B/$1.good" "$B/$1"; }

pub "$B" 2 "$CK-2" --prev "$CK-1" --sign --truncate
refused 2 "truncated delta"
restore deltas/000000000002.wsd
check "truncated delta: version 2 applied once the object is restored" wait_version h1 2 90
check "truncated delta: target equals checkpoint 2" same_tree "$CK-2" "$TMP/h1/target"

pub "$B" 3 "$CK-3" --prev "$CK-2" --sign --flip-manifest
refused 3 "flipped manifest"
restore manifests/000000000003.json
check "flipped manifest: version 3 applied once restored" wait_version h1 3 90

pub "$B" 4 "$CK-4" --prev "$CK-3" --sign --flip-head
refused 4 "flipped HEAD" "refused: HEAD: signature does not verify"
restore HEAD
check "flipped HEAD: version 4 applied once restored" wait_version h1 4 90

# A flipped anchor: a fresh node has nothing to fall back on.
pub "$B" 5 "$CK-5" --prev "$CK-4" --sign --anchor --flip-anchor
check "flipped anchor: the running node takes the delta" wait_version h1 5
conf h1b "$B" verify
jstart h1b
check "flipped anchor: a fresh node refuses it" wait_error h1b "version 5 refused"
check "flipped anchor: VERIFY_FAILED in the fresh node's journal" wait_journal h1b "$VF" "version 5 refused"
# (a refused anchor is gone round: the older anchor HEAD's manifest lists
# and the deltas after it, each verified -- test-heal.sh)
check "flipped anchor: the fresh node goes round it through an older anchor" \
	wait_journal h1b "" "going through the anchor of version 1"
check "flipped anchor: the fresh node reaches version 5" wait_version h1b 5 90
restore anchors/000000000005.wsa
check "flipped anchor: the fresh node equals checkpoint 5" same_tree "$CK-5" "$TMP/h1b/target"
stop h1b >/dev/null

# A manifest naming a wrong base: version 6's delta made from checkpoint 4
# while the manifest says its base is version 5.
pub "$B" 6 "$CK-6" --prev "$CK-4" --sign
refused 6 "delta from a wrong base"
pub "$B" 7 "$CK-7" --prev "$CK-6" --sign --anchor
check "wrong base: recovers at the next version (an anchor)" wait_version h1 7 90
check "wrong base: target equals checkpoint 7" same_tree "$CK-7" "$TMP/h1/target"
# A manifest whose base_version names another version than the one before.
pub "$B" 8 "$CK-8" --prev "$CK-7" --sign --base 6
refused 8 "manifest naming a wrong base_version"
pub "$B" 9 "$CK-9" --prev "$CK-8" --sign --anchor
check "wrong base_version: recovers at the next version (an anchor)" wait_version h1 9 90
check "wrong base_version: target equals checkpoint 9" same_tree "$CK-9" "$TMP/h1/target"
check "bucket: no temp file left in the target" no_temps "$TMP/h1/target"
# At no moment did the target go back: the versions applied (journal
# VERSION_APPLIED) only ever increase.
applied_increasing() {
	"$PYTHON3" -c 'import json, sys
vs = [int(e["WSYNC_VERSION"]) for e in map(json.loads, open(sys.argv[1]))
      if e.get("MESSAGE_ID") == sys.argv[2]]
print("# versions applied:", vs)
sys.exit(not (vs and all(a < b for a, b in zip(vs, vs[1:]))))' "$TMP/$1/journal.jsonl" "$(mid VERSION_APPLIED)"
}
check "bucket: the versions applied only ever increased (no rebuild from an older anchor)" applied_increasing h1
stop h1 >/dev/null
fi

# ---- 2. path safety ---------------------------------------------------
# A canary folder beside the targets: its listing and bytes must never
# change.  wsync pull is the subscriber on a private loop: exit 65 is a
# refusal of bucket data.
mkdir -p "$TMP/canary/sub"
cp "$CK-1/model.safetensors" "$TMP/canary/"
head -c 4096 /dev/urandom >"$TMP/canary/sub/extra.bin"
head -c 4096 /dev/urandom >"$TMP/canary/new.bin"
canary() { (cd "$TMP/canary" && find . -printf '%p %y %s %m\n' | sort && find . -type f -exec sha256sum {} + | sort); }
CANARY=$(canary)
canary_ok() { [ "$(canary)" = "$CANARY" ] && [ ! -e "$TMP/evil" ]; }
pull() { timeout 60 "$WSYNC" pull --config "$TMP/$1.ini"; }
no_model() { test -z "$(ls -A "$TMP/$1/target" 2>/dev/null | grep -vx .wsync)"; }
if only 2; then
# In a manifest (an unsigned bucket: whoever writes it chooses the paths).
long_name=$(printf 'n%.0s' $(seq 300))
long_path=$(for _ in $(seq 500); do printf 'abcdefgh/'; done)z
i=0
for bad in "$TMP/canary/evil" "a\\u0000b" "$long_name" "$long_path"; do
	i=$((i + 1))
	what=$(printf '%s' "$bad" | cut -c1-40)
	conf pm$i "$TMP/bk-pm$i"
	pub "$TMP/bk-pm$i" 1 "$CK-1" --anchor --bad-path "$bad"
	expect_exit 65 "path in a manifest ($what...): refused, exit 65" pull pm$i
	contains "path in a manifest ($what...): the error says so" "$OUT" "refused"
	echo "# $(printf "%s" "$OUT" | tail -1 | cut -c1-200)"
	check "path in a manifest ($what...): no model file written" no_model pm$i
	check "path in a manifest ($what...): canary intact" canary_ok
done

# In a delta's FILE record (craft-delta.py): version 1 from an anchor, then
# version 2 is a crafted delta, refused each time.
PD="$TMP/bk-pd"
conf pd "$PD"
pub "$PD" 1 "$CK-1" --anchor
expect_exit 0 "delta paths: the node pulls version 1" pull pd
for spec in "--path ../../canary/evil" "--path $TMP/canary/evil" "--path-hex 6d6f64656c00657669" \
	"--path $long_name" "--path $long_path"; do
	what=$(printf '%s' "$spec" | cut -c1-46)
	"$PYTHON3" "$CRAFT" "$TMP/crafted.wsd" $spec
	pub "$PD" 2 "$CK-2" --prev "$CK-1" --delta "$TMP/crafted.wsd"
	expect_exit 65 "delta $what...: refused, exit 65" pull pd
	contains "delta $what...: a clear error" "$OUT" "version 2"
	check "delta $what...: target still equals checkpoint 1" same_tree "$CK-1" "$TMP/pd/target"
	check "delta $what...: canary intact" canary_ok
done

# Symlinks planted in target_dir pointing outside: at a file the next
# delta rewrites (the canary holds the same bytes, so hashes match through
# the link), at a directory component of a file it rewrites, and at a file
# it creates.
for v in 1 2; do
	mkdir -p "$TMP/cks-$v/sub"
	cp "$CK-$v/model.safetensors" "$TMP/cks-$v/"
	head -c 4096 /dev/urandom >"$TMP/cks-$v/sub/extra.bin"
done
head -c 4096 /dev/urandom >"$TMP/cks-2/new.bin"
PS="$TMP/bk-ps"
pub "$PS" 1 "$TMP/cks-1" --anchor
for n in 1 2 3; do conf ps$n "$PS"; pull ps$n >/dev/null 2>&1; done
pub "$PS" 2 "$TMP/cks-2" --prev "$TMP/cks-1"
cp "$TMP/cks-1/sub/extra.bin" "$TMP/canary/sub/extra.bin"
CANARY=$(canary)
ln -sf "$TMP/canary/model.safetensors" "$TMP/ps1/target/model.safetensors"
rm -rf "$TMP/ps2/target/sub" && ln -s "$TMP/canary/sub" "$TMP/ps2/target/sub"
ln -s "$TMP/canary/new.bin" "$TMP/ps3/target/new.bin"
for n in 1 2 3; do
	case $n in
	1) what="symlink at a rewritten file" ;;
	2) what="symlink as a directory component" ;;
	3) what="symlink at a created file" ;;
	esac
	OUT=$(pull ps$n 2>&1)
	rc=$?
	echo "# $what: exit $rc: $(printf '%s' "$OUT" | tail -1)"
	check "$what: canary intact" canary_ok
	if [ $rc -eq 0 ]; then
		check "$what: applied, target equals the new version" same_tree "$TMP/cks-2" "$TMP/ps$n/target"
		check "$what: no symlink left in the target" test -z "$(find "$TMP/ps$n/target" -type l)"
	else
		contains "$what: refused with a clear error" "$OUT" "symbolic link on the path (refused"
	fi
done
# Symlinks on wsync's own paths: target_dir/.wsync itself pointing at a
# canary folder, and, in a real .wsync/, state.json, its temp and the lock
# pointing at canary files: refused or replaced, never written through.
for n in 1 2 3 4; do
	conf pw$n "$PS"
	mkdir -p "$TMP/pw$n/target/.wsync"
done
rmdir "$TMP/pw1/target/.wsync" && ln -s "$TMP/canary/sub" "$TMP/pw1/target/.wsync"
ln -s "$TMP/canary/new.bin" "$TMP/pw2/target/.wsync/state.json"
ln -s "$TMP/canary/sub/extra.bin" "$TMP/pw3/target/.wsync/state.json.tmp"
ln -s "$TMP/canary/model.safetensors" "$TMP/pw4/target/.wsync/lock"
for n in 1 2 3 4; do
	case $n in
	1) what=".wsync -> a folder outside" ;;
	2) what=".wsync/state.json -> a file outside" ;;
	3) what=".wsync/state.json.tmp -> a file outside" ;;
	4) what=".wsync/lock -> a file outside" ;;
	esac
	OUT=$(pull pw$n 2>&1)
	rc=$?
	echo "# $what: exit $rc: $(printf '%s' "$OUT" | tail -1 | cut -c1-200)"
	check "$what: canary intact (listing and bytes)" canary_ok
	if [ $rc -eq 0 ]; then
		check "$what: applied, target equals the new version" same_tree "$TMP/cks-2" "$TMP/pw$n/target"
		check "$what: the marker is a file of wsync's, naming version 2" \
			test ! -L "$TMP/pw$n/target/.wsync/state.json" -a "$(marker pw$n | tr -d ' ' | grep -c '"version":2,')" = 1
		check "$what: no symlink left in .wsync" test -z "$(find "$TMP/pw$n/target/.wsync" -type l)"
	else
		contains "$what: refused naming the link" "$OUT" "symbolic link"
		check "$what: no model file written" no_model pw$n
	fi
done
fi

# ---- 3. resource bombs -------------------------------------------------
# measured NAME CMD...: run CMD under /usr/bin/time; $OUT its output, $RC
# its exit code, $RSS its peak RSS in KiB, $SECS its wall time
measured() {
	local name=$1
	shift
	OUT=$(/usr/bin/time -f '%M %e' -o "$TMP/time.$name" "$@" 2>&1)
	RC=$?
	read -r RSS SECS < <(tail -1 "$TMP/time.$name")
	echo "# $name: peak RSS $((RSS / 1024)) MiB, $SECS s, exit $RC: $(printf "%s" "$OUT" | tail -1 | cut -c1-160)"
}
bounded() { # bounded MIB SECS: the last measured run stayed under both
	[ "$RC" -lt 124 ] && [ "$RSS" -lt $(($1 * 1024)) ] && awk -v s="$SECS" -v m="$2" 'BEGIN { exit !(s < m) }'
}
if only 3; then
TB=$((1 << 40))
# A delta whose FILE record claims a petabyte.
conf rb "$TMP/bk-rb"
pub "$TMP/bk-rb" 1 "$CK-1" --anchor
pull rb >/dev/null 2>&1
"$PYTHON3" "$CRAFT" "$TMP/crafted.wsd" --size $((1024 * TB))
pub "$TMP/bk-rb" 2 "$CK-2" --prev "$CK-1" --delta "$TMP/crafted.wsd"
measured "delta-petabyte" timeout 60 "$WSYNC" pull --config "$TMP/rb.ini"
tap_result $((RC != 65)) "a delta claiming a petabyte file: refused, exit 65"
contains "the error names the size" "$OUT" "of $((1024 * TB)) bytes"
check "delta petabyte: under 256 MiB and 30 s" bounded 256 30
check "delta petabyte: target still equals checkpoint 1" same_tree "$CK-1" "$TMP/rb/target"
# zstd frames of 256 MiB of zeros (8 KiB each), with and without a declared
# size, as the piece of a 1 MiB file the manifest lists (so the decoder is
# reached): version 1 is an empty checkpoint, version 2 adds model.bin.
mkdir -p "$TMP/zb-2"
head -c $((1 << 20)) /dev/zero >"$TMP/zb-2/model.bin"
head -c $((256 << 20)) /dev/zero | zstd -q --no-check -c >"$TMP/bomb.zst"
head -c $((256 << 20)) /dev/zero | zstd -q --no-check --no-content-size -c >"$TMP/bomb-nosize.zst"
conf zb "$TMP/bk-zb"
pub "$TMP/bk-zb" 1 "$TMP/empty" --anchor
expect_exit 0 "zstd bomb: the node pulls an empty version 1" pull zb
# Past that header check, the decoder's own output limit must refuse: the
# 256 MiB frame whose header lies (declares 1 MiB), and 256 honest 1 MiB
# frames back to back (the first one's header is right).
head -c $((256 << 20)) /dev/zero | zstd -q --no-check --stream-size=$((256 << 20)) -c >"$TMP/bomb-lying.zst"
"$PYTHON3" - "$TMP/bomb-lying.zst" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
# magic, FHD 0x80 (a 4-byte content size, a window byte), the window byte
assert b[:4] == b"\x28\xb5\x2f\xfd" and b[4] == 0x80, b[:6].hex()
assert struct.unpack_from("<I", b, 6)[0] == 256 << 20
struct.pack_into("<I", b, 6, 1 << 20)
open(sys.argv[1], "wb").write(b)
PY
head -c $((1 << 20)) /dev/zero | zstd -q --no-check --stream-size=$((1 << 20)) -c >"$TMP/one.zst"
for _ in $(seq 256); do cat "$TMP/one.zst"; done >"$TMP/bomb-chain.zst"
for frame in bomb bomb-nosize bomb-lying bomb-chain; do
	"$PYTHON3" "$CRAFT" "$TMP/crafted.wsd" --path model.bin --zstd "$TMP/$frame.zst" $((1 << 20)) \
		--hash-of "$TMP/zb-2/model.bin"
	pub "$TMP/bk-zb" 2 "$TMP/zb-2" --prev "$TMP/empty" --delta "$TMP/crafted.wsd"
	measured "$frame" timeout 60 "$WSYNC" pull --config "$TMP/zb.ini"
	tap_result $((RC != 65)) "$frame: a 1 MiB piece expanding to 256 MiB is refused, exit 65"
	case $frame in
	bomb | bomb-nosize) contains "$frame: the header check refuses it" "$OUT" \
		"zstd frame does not declare the piece's 1048576 bytes" ;;
	*) contains "$frame: the decoder's output limit refuses it" "$OUT" "corrupt zstd frame" ;;
	esac
	check "$frame: under 256 MiB and 30 s" bounded 256 30
	check "$frame: no model.bin written" test ! -e "$TMP/zb/target/model.bin"
done
# A manifest whose file claims a petabyte.
conf rm "$TMP/bk-rm"
pub "$TMP/bk-rm" 1 "$CK-1" --anchor --file-size $((1024 * TB))
measured "manifest-petabyte" timeout 60 "$WSYNC" pull --config "$TMP/rm.ini"
tap_result $((RC != 65)) "a manifest claiming a petabyte file: refused, exit 65 (exit $RC)"
contains "the error says the anchor does not match it" "$OUT" "has another size or hash"
check "manifest petabyte: under 128 MiB and 30 s" bounded 128 30
check "manifest petabyte: no model file written" no_model rm

# A manifest near its 64 MiB limit: half a million files listed (HEAD
# names it with the right hash; the anchor does not have them).
mkdir -p "$TMP/one" && echo hi >"$TMP/one/a.txt"
conf mf "$TMP/bk-mf"
pub "$TMP/bk-mf" 1 "$TMP/one" --anchor
"$PYTHON3" - "$TMP/bk-mf" <<'PY'
import json, os, subprocess, sys
b = sys.argv[1]
p = b + "/manifests/000000000001.json"
m = json.load(open(p))
m["files"] += [{"path": "d%06d/f.bin" % i, "size": 1, "xxh128": "0" * 32} for i in range(500000)]
m["files"].sort(key=lambda f: f["path"].encode())
open(p, "w").write(json.dumps(m))
h = json.load(open(b + "/HEAD"))
h["manifest"]["size"] = os.path.getsize(p)
h["manifest"]["xxh128"] = subprocess.run(["xxh128sum", p], capture_output=True, text=True).stdout.split()[0]
open(b + "/HEAD", "w").write(json.dumps(h) + "\n")
PY
echo "# manifest of $(($(stat -c %s "$TMP/bk-mf/manifests/000000000001.json") >> 20)) MiB"
measured "manifest-500k-files" timeout 60 "$WSYNC" pull --config "$TMP/mf.ini"
tap_result $((RC != 65)) "a manifest of half a million files: parsed, refused against its anchor, exit 65"
contains "... the error names a missing file" "$OUT" "is missing from it"
check "... under 256 MiB and 30 s" bounded 256 30

# The publisher given a safetensors header claiming a terabyte, and one
# with a million one-element tensors (a 75 MB header).
mkdir -p "$TMP/st-tb" "$TMP/st-mil"
cat >"$TMP/mkst.py" <<'PY'
import json, struct, sys
kind, out = sys.argv[1], sys.argv[2]
if kind == "terabyte":
    hdr = {"w": {"dtype": "BF16", "shape": [1 << 39], "data_offsets": [0, 1 << 40]}}
    data = b"\0" * 64
else:
    n = 1000000
    hdr = {"t%07d" % i: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
           for i in range(n)}
    data = b"\0" * (4 * n)
h = json.dumps(hdr, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + data)
PY
"$PYTHON3" "$TMP/mkst.py" terabyte "$TMP/st-tb/model.safetensors"
"$PYTHON3" "$TMP/mkst.py" million "$TMP/st-mil/model.safetensors"
cat >"$TMP/pub3.ini" <<INI
[daemon]
role = publisher
state_dir = $TMP/pub3/state
runtime_dir = $TMP/pub3/run
[store]
url = file://$TMP/bk-pub3
[publisher]
watch_dir = $TMP/pub3/watch
complete_when = quiet
INI
mkdir -p "$TMP/bk-pub3"
measured "safetensors-terabyte" timeout 60 "$WSYNC" publish --config "$TMP/pub3.ini" "$TMP/st-tb"
tap_result $((RC != 65)) "publisher: a header claiming a terabyte is refused, exit 65"
contains "the error names the tensor's offsets" "$OUT" "data_offsets"
check "terabyte header: under 128 MiB and 30 s" bounded 128 30
measured "million-tensors" timeout 60 "$WSYNC" publish --config "$TMP/pub3.ini" "$TMP/st-mil"
tap_result $((RC != 65)) "publisher: a million tiny tensors are refused, exit 65"
contains "the error gives the limit" "$OUT" "more than 262144 tensors"
check "million tensors: under 256 MiB and 30 s" bounded 256 30
check "nothing published" test ! -e "$TMP/bk-pub3/HEAD"
fi

# ---- 4. rollback and freeze (verify_key set) -------------------------
# 6. local damage, on the same node ------------------------------------
if only 4 || only 6; then
B4="$TMP/bk-rf"
conf rf "$B4" verify
echo "max_head_age = 1h" >>"$TMP/rf.ini"
pub "$B4" 1 "$CK-1" --anchor --sign
cp "$B4/HEAD" "$TMP/HEAD-1"
pub "$B4" 2 "$CK-2" --prev "$CK-1" --sign
jstart rf
check "rollback: the node reaches version 2" wait_version rf 2
contains "a fresh HEAD is not stale" "$(field rf stale)" "false"
fi
if only 4; then
pub "$B4" 0 x --head-only 2 --sign --key "$TMP/other.pem"
check "a HEAD signed by another key is refused" wait_error rf "not by the configured key"
check "... with VERIFY_FAILED in the journal" wait_journal rf "$VF" "not by the configured key"
check "... target still equals checkpoint 2" same_tree "$CK-2" "$TMP/rf/target"
cp "$TMP/HEAD-1" "$B4/HEAD.tmp" && mv "$B4/HEAD.tmp" "$B4/HEAD"
check "a replayed older HEAD (validly signed) is refused" wait_error rf "rollback" 90
check "... with VERIFY_FAILED in the journal" wait_journal rf "$VF" "rollback"
check "... target still equals checkpoint 2" same_tree "$CK-2" "$TMP/rf/target"
stop rf >/dev/null
jstart rf
check "after a restart the replayed HEAD is still refused" wait_error rf "rollback"
check "... target still equals checkpoint 2" same_tree "$CK-2" "$TMP/rf/target"
# A HEAD written two hours ago, with max_head_age = 1h.
pub "$B4" 3 "$CK-3" --prev "$CK-2" --sign --created "$(date -u -d '-2 hours' +%Y-%m-%dT%H:%M:%SZ)"
check "an old HEAD is still applied" wait_version rf 3
check "... and reported stale in status.json" wait_field rf stale true 10
expect_exit 1 "wsync status exits 1 on a stale HEAD" "$WSYNC" status --runtime-dir "$TMP/rf/run"
contains "wsync status says it is stale" "$OUT" "stale"
check "... and in the journal (HEAD_STALE)" wait_journal rf "$(mid HEAD_STALE)" "longer ago than max_head_age"
pub "$B4" 4 "$CK-4" --prev "$CK-3" --sign
check "a new HEAD: version 4" wait_version rf 4 90
check "... no longer stale" wait_field rf stale false 10
fi
if only 6; then
[ "$(field rf version)" = 2 ] && { pub "$B4" 3 "$CK-3" --prev "$CK-2" --sign; wait_version rf 3; }
v=$(field rf version)
f=$TMP/rf/target/model.safetensors
cp -p "$f" "$TMP/ref-mtime"
size=$(stat -c %s "$f")
# With the daemon stopped: it looks at the target's sizes and mtimes on
# every poll, and would see (and rightly repair) the damage in the moment
# between the write and the mtime put back -- not what this group tests.
stop rf >/dev/null
printf 'ZZZZZZZZ' | dd of="$f" bs=1 seek=$((size / 2)) conv=notrunc 2>/dev/null
touch -r "$TMP/ref-mtime" "$f"
jstart rf
check "local damage: same size and mtime as before" \
	test "$(stat -c '%s %Y' "$f")" = "$(stat -c '%s %Y' "$TMP/ref-mtime")"
check "local damage: the bytes differ" bash -c '! cmp -s "$1" "$2"' _ "$f" "$CK-$v/model.safetensors"
pub "$B4" $((v + 1)) "$CK-$((v + 1))" --prev "$CK-$v" --sign
check "local damage: version $((v + 1)) applied" wait_version rf $((v + 1)) 90
check "local damage: the base hash check before the apply finds it" \
	wait_journal rf "$VF" "model.safetensors: base does not match the delta"
check "local damage: repaired from the anchor" wait_journal rf "" "version $v -> $((v + 1)): from the anchor"
check "local damage: target equals checkpoint $((v + 1))" same_tree "$CK-$((v + 1))" "$TMP/rf/target"
fi
if only 4 || only 6; then stop rf >/dev/null; fi

# ---- 5. trainer output: the publisher rejects, logs, keeps watching ---
if only 5; then
"$GEN" --params 1M --steps 5 --shards 2 --quiet --out "$TMP/src5" >/dev/null
W5=$TMP/pubd/watch
mkdir -p "$W5" "$TMP/bk-pubd"
cat >"$TMP/pubd.ini" <<INI
[daemon]
role = publisher
state_dir = $TMP/pubd/state
runtime_dir = $TMP/pubd/run
threads = 2
[store]
url = file://$TMP/bk-pubd
[publisher]
watch_dir = $W5
anchor_every = 2
rescan_interval = 1s
INI
# put STEP DAMAGE: checkpoint-STEP into the watch dir, damaged, marker last
put() {
	local d=$W5/checkpoint-$1 s1=model-00001-of-00002.safetensors
	mkdir -p "$d"
	(cd "$TMP/src5/checkpoint-$1" && cp $(ls | grep -vx trainer_state.json) "$d/")
	case $2 in
	truncated) truncate -s $(($(stat -c %s "$d/$s1") / 2)) "$d/$s1" ;;
	header) printf '{"x": nonsense' | dd of="$d/$s1" bs=1 seek=8 conv=notrunc 2>/dev/null ;;
	missing) rm "$d/model-00002-of-00002.safetensors" ;;
	esac
	cp "$TMP/src5/checkpoint-$1/trainer_state.json" "$d/"
}
REJ=$(mid CHECKPOINT_REJECTED)
jstart pubd
put 1 good
check "trainer output: checkpoint-1 published as version 1" wait_head "$TMP/bk-pubd" 1 60
step=1
for damage in truncated header missing; do
	step=$((step + 1))
	case $damage in
	truncated) what="a truncated shard" file=model-00001-of-00002.safetensors
		why="$file short" ;;
	header) what="a malformed header" file=model-00001-of-00002.safetensors ;;
	missing) what="a shard missing from the index" file=model-00002-of-00002.safetensors
		why="$file missing (named by model.safetensors.index.json)" ;;
	esac
	put $step $damage
	if [ "$damage" = header ]; then
		# broken whatever is written next: rejected once it has settled
		check "$what: CHECKPOINT_REJECTED in the journal, naming checkpoint-$step" \
			wait_journal pubd "$REJ" "checkpoint-$step"
		contains "$what: the message names $file" \
			"$(grep -F "checkpoint-$step" "$TMP/pubd/journal.jsonl" | grep -F "$REJ")" \
			"$W5/checkpoint-$step/$file"
	else
		# it may still be being written: it waits, saying for what
		check "$what: the journal says checkpoint-$step waits for $file" \
			wait_journal pubd "" "checkpoint $W5/checkpoint-$step is not complete yet: $W5/checkpoint-$step/$why"
		sleep 2.5	# past settle_time
		check "$what: ... and it is not rejected" \
			sh -c "! grep -F 'checkpoint-$step' '$TMP/pubd/journal.jsonl' | grep -qF '$REJ'"
	fi
	check "$what: HEAD still names version 1" test "$(head_version "$TMP/bk-pubd")" = 1
done
put 5 good
check "trainer output: the next good step is published as version 2" wait_head "$TMP/bk-pubd" 2 60
check "... it is checkpoint-5 (step 5)" grep -q '"step": 5' "$TMP/bk-pubd/manifests/000000000002.json"
stop pubd >/dev/null
fi


# ---- 7. disk full on the subscriber (a 64 MiB tmpfs; needs root) ------
# Twice: too few free bytes (refused by the free-space check before the
# download), then too few inodes (ENOSPC while the new files are written,
# past every check).  Each time: target and marker unchanged, no temp
# file left, the daemon keeps running and applies the version once space
# is back.
if only 7; then
mkdir -p "$TMP/mnt"
if [ "$(id -u)" = 0 ] && mount -t tmpfs -o size=64m tmpfs "$TMP/mnt" 2>/dev/null; then
	trap 'daemons_kill_all; umount -l "$TMP/mnt"; rm -rf "$TMP"' EXIT
	B7="$TMP/bk-df"
	conf df "$B7"
	sed -i "s|^target_dir = .*|target_dir = $TMP/mnt/target|" "$TMP/df.ini"
	pub "$B7" 1 "$CK-1" --anchor
	jstart df
	check "disk full: version 1 fits" wait_version df 1
	# full WHAT VERSION TEXT: version V fails with TEXT in last_error
	full() {
		local before
		before=$(cat "$TMP/mnt/target/.wsync/state.json")
		pub "$B7" "$2" "$CK-$2" --prev "$CK-$(($2 - 1))"
		check "$1: version $2 fails, saying so" wait_error df "$3"
		echo "# last_error: $(field df last_error)"
		# The daemon retries each poll (200 ms): a retry may be writing.
		check "$1: target still equals checkpoint $(($2 - 1))" \
			same_but_temps "$CK-$(($2 - 1))" "$TMP/mnt/target"
		check "$1: state marker unchanged" test "$(cat "$TMP/mnt/target/.wsync/state.json")" = "$before"
		check "$1: no temp file left" wait_for 10 no_temps "$TMP/mnt/target"
		check "$1: the daemon keeps running" kill -0 "${DPID[df]}"
	}
	free=$(df -B1 --output=avail "$TMP/mnt" | tail -1)
	head -c $((free - 4 * 1024 * 1024)) /dev/zero >"$TMP/mnt/filler" 2>/dev/null
	full "too few bytes" 2 "not enough free space"
	rm -f "$TMP/mnt/filler"
	check "too few bytes: once space is back, version 2 is applied" wait_version df 2 90
	check "too few bytes: target equals checkpoint 2" same_tree "$CK-2" "$TMP/mnt/target"
	used=$(df --output=iused "$TMP/mnt" | tail -1)
	mount -o remount,nr_inodes=$((used + 1)) "$TMP/mnt"
	full "no inode left (ENOSPC)" 3 "No space left on device"
	mount -o remount,nr_inodes=100000 "$TMP/mnt"
	check "ENOSPC: once space is back, version 3 is applied" wait_version df 3 90
	check "ENOSPC: target equals checkpoint 3" same_tree "$CK-3" "$TMP/mnt/target"
	stop df >/dev/null
else
	tap_result 0 "# SKIP disk full: no tmpfs mount (not root?)"
fi
fi

# ---- 8. bad configuration: every key of the table -------------------
# The keys come from `wsyncd --dump-config` (every row of config/config.c's
# table, set or not), so a new key is covered without touching this test.
# Each key gets a value with a control character (no key may take one),
# and a value of the wrong type when its default shows the type (a number,
# a duration, a size, an absolute path).  The case is the dumped
# configuration (made valid with paths in $TMP) with that one line
# replaced; --check-config and wsyncd itself must both exit 78 with
# "FILE:LINE: [section] key".
if only 8; then
# (the examples' folders made, here under $TMP/ex: --check-config looks at
# them; each dump holds its role's section, the cases take both)
mkdir -p "$TMP/ex/checkpoints"
for role in subscriber publisher; do
	sed "s|/var/lib/wsync|$TMP/ex|g" "$src/config/$role.ini" >"$TMP/ex-$role.ini"
done
"$WSYNCD" --check-config --dump-config "$TMP/ex-subscriber.ini" >"$TMP/dump-sub.ini"
"$WSYNCD" --check-config --dump-config "$TMP/ex-publisher.ini" >"$TMP/dump-pub.ini"
"$PYTHON3" - "$TMP" "$src/config/config.c" <<'PY' >"$TMP/cases"
import re, sys
tmp = sys.argv[1]
lines = open(tmp + "/dump-sub.ini").read().splitlines()
pub = open(tmp + "/dump-pub.ini").read().split("\n[publisher]\n")[1].split("\n[")[0]
lines += ["", "[publisher]"] + pub.splitlines()
defaults = {}
for f in ("dump-pub.ini", "dump-sub.ini"):
    sec = None
    for l in open(tmp + "/" + f).read().splitlines():
        m = re.match(r"\[(\w+)\]$", l)
        if m:
            sec = m.group(1)
        m = re.match(r"(\w+) = (.*)$", l)
        if m:
            defaults[(sec, m.group(1))] = m.group(2)
# Out of range: one below .min and one above .max of each row of
# config.c's table (numbers, durations in ms, sizes in bytes; strings one
# byte over their .max), the macros evaluated from its #defines.
src = open(sys.argv[2]).read()
defs = {}
for m in re.finditer(r"^#define (\w+) +(\(?[\w *()]+\)?)", src, re.M):
    defs[m.group(1)] = m.group(2)
def ev(e):
    e = re.sub(r"(\d+)[uU]?[lL]*\b", r"\1", e)
    for _ in range(5):
        e = re.sub(r"\b([A-Za-z_]\w*)\b", lambda m: "(%s)" % defs[m.group(1)], e)
    return int(eval(re.sub(r"(\d+)[uU]?[lL]*\b", r"\1", e), {}))
limits, n_limited = {}, 0
for row in re.findall(r'\bKEY\(("\w.*?)\),\s*$', src, re.M | re.S):
    row = " ".join(row.split())
    key, parser = re.match(r'"\w+", "(\w+)", (\w+)', row).groups()
    lo = re.search(r"\.min = ([^,]+)", row)
    hi = re.search(r"\.max = ([^,]+)", row)
    lo, hi = (ev(lo.group(1)) if lo else None), (ev(hi.group(1)) if hi else None)
    unit = {"parse_uint32": "", "parse_size": "", "parse_duration": "ms"}.get(parser)
    vals = []
    if unit is not None:
        if lo:
            vals.append("%d%s" % (lo - 1, unit))
        if hi is not None:
            vals.append("%d%s" % (hi + 1, unit))
    elif hi is not None:
        vals.append("a" * (hi + 1))
    if vals:
        n_limited += 1
        limits[key] = vals
open(tmp + "/n_limited", "w").write("%d\n" % n_limited)
safe = {"state_dir": tmp + "/cfg/state", "runtime_dir": tmp + "/cfg/run",
        "target_dir": tmp + "/cfg/target", "url": "file://" + tmp + "/cfg/bucket"}
base, keys, sec = [], [], None
for l in lines:
    m = re.match(r"\[(\w+)\]$", l)
    if m:
        sec = m.group(1)
    m = re.match(r"(?:; )?(\w+) = (.*)$", l)
    if m and sec:
        keys.append((sec, m.group(1), len(base)))
        if m.group(1) in safe:
            l = "%s = %s" % (m.group(1), safe[m.group(1)])
    base.append(l)
n = 0
for sec, key, i in keys:
    d = defaults.get((sec, key), "")
    bad = ["x\x01y"]
    if re.fullmatch(r"\d+", d):
        bad += ["lots", "99999999999999999999999"]
    elif re.fullmatch(r"\d+(ms|s|min|h|d)", d):
        bad += ["soon", "99999999d"]
    elif re.fullmatch(r"\d+(KiB|MiB|GiB|TiB)", d):
        bad += ["huge", "9999TiB"]
    elif d.startswith("/"):
        bad += ["relative/path"]
    for v in bad + limits.get(key, []):
        n += 1
        f = "%s/cfg-%03d.ini" % (tmp, n)
        body = list(base)
        body[i] = "%s = %s" % (key, v)
        open(f, "w").write("\n".join(body) + "\n")
        shown = "'%s' x %d" % (v[0], len(v)) if len(v) > 40 else repr(v)
        print("%s\t%s\t%d\t%s\t%s" % (f, sec, i + 1, key, shown))
PY
n_keys=$(cut -f2,4 "$TMP/cases" | sort -u | wc -l)
n_max=$(grep -c '\.max = ' "$src/config/config.c")
echo "# bad config: $(wc -l <"$TMP/cases") cases, out-of-range values for $(cat "$TMP/n_limited") keys"
check "bad config: out-of-range values for every key with bounds ($(cat "$TMP/n_limited") of $n_max)" \
	test "$(cat "$TMP/n_limited")" = "$n_max"
n_table=$(grep -cE '^\s*(ENUM_)?KEY\("' "$src/config/config.c")
check "bad config: every key of config.c's table is covered ($n_keys of $n_table)" test "$n_keys" = "$n_table"
while IFS=$'\t' read -r f sec line key v; do
	expect_exit 78 "bad config: [$sec] $key = $v: --check-config exits 78" timeout 20 "$WSYNCD" --check-config "$f"
	contains "bad config: [$sec] $key = $v: FILE:LINE names the key" "$OUT" "$f:$line: [$sec] $key"
	expect_exit 78 "bad config: [$sec] $key = $v: wsyncd exits 78" timeout 20 "$WSYNCD" -c "$f" --log-target stderr
done <"$TMP/cases"
fi

[ -n "${HOSTILE_KEEP:-}" ] && cp -r "$TMP" "$HOSTILE_KEEP"
# Journal receivers and daemons still running end on SIGTERM, within 15 s
# (then SIGKILL: the wait never hangs).
stop_all

tap_done
